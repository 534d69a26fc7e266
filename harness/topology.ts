// The packet-test topology: pod ── node ── remote, three namespaces joined by two veth pairs, and
// an echo on the remote that tells which source address a probe arrived with (masqueraded: the
// node's address; not: the pod's). Every destination tests use is an address on the remote's lo,
// so probes never leave the namespaces the test created (the remote has no default route, and the
// pod and node route only toward it). Re-exported by ./netns.ts, which this module imports in
// turn: use netns.ts's exports only inside functions, never at module load.
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inNetns, makeNetns, type TapTest } from './netns.js';

export const POD_IPV4 = '10.244.1.2';
export const POD_GATEWAY_IPV4 = '10.244.1.1';
export const NODE_IPV4 = '192.0.2.1';
export const REMOTE_IPV4 = '192.0.2.2';
export const POD_IPV6 = 'fd00:10:244::2';
export const POD_GATEWAY_IPV6 = 'fd00:10:244::1';
export const NODE_IPV6 = '2001:db8:1::1';
export const REMOTE_IPV6 = '2001:db8:1::2';
export const ECHO_PORT = 9999;

/** IPv4 destinations that exist only on the remote's lo, named by the range they fall in. */
export const REMOTE_TARGETS_IPV4 = {
  private10: '10.9.0.1',
  private10Other: '10.200.0.1',
  private172: '172.20.0.1',
  private192: '192.168.5.1',
  linkLocal: '169.254.10.1',
  sharedCgnat: '100.64.0.1', // 100.64.0.0/10
  ietfProtocol: '192.0.0.9', // 192.0.0.0/24
  testNet1: REMOTE_IPV4, // 192.0.2.0/24: the remote's own veth address
  relay6to4: '192.88.99.1', // 192.88.99.0/24
  benchmarking: '198.18.0.1', // 198.18.0.0/15
  testNet2: '198.51.100.7', // 198.51.100.0/24
  testNet3: '203.0.113.9', // 203.0.113.0/24
  classE: '240.0.0.1', // 240.0.0.0/4
  // Not exempt by the default list (only --nomasq-all-reserved-ranges exempts 198.18.0.0/15):
  // "an address nothing exempts" without ever naming a public host, even inside a namespace.
  outsideDefaultsA: '198.19.0.4',
  outsideDefaultsB: '198.18.255.1',
  // Probed only by the --to-ports test: no earlier flow's conntrack entry can be reused for it.
  outsideDefaultsPorts: '198.19.7.7',
} as const;

/** IPv6 destinations on the remote's lo (link-local fe80::/10 does not route, so none here). */
export const REMOTE_TARGETS_IPV6 = {
  uniqueLocal: 'fd12::1',
  documentation: '2001:db8:ff::1',
  remoteLink: REMOTE_IPV6,
  uniqueLocalOther: 'fd34::1', // not exempt: no IPv6 CIDR in the default list
} as const;

/** A raw packet the remote's echo saw: protocol number, the probe's tag, its source address. */
export interface RawSeen {
  proto: number;
  tag: number;
  address: string;
}

export interface Topology {
  pod: string;
  node: string;
  remote: string;
  ipv6: boolean;
  /** Every raw SCTP / protocol-253 packet the remote received so far. */
  rawSeen: RawSeen[];
}

export interface TopologyOptions {
  /** Configure IPv6 too (default true). */
  ipv6?: boolean;
  /** Upper bound on the echo server's life, in seconds (default 300). */
  echoLifetimeSeconds?: number;
}

const echoScript = join(dirname(fileURLToPath(import.meta.url)), 'echo.py');
// The distribution's interpreter when present: version-manager shims on PATH take ~1 s to start.
export const python = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

/** Builds pod ── node ── remote with routes and an echo on the remote; all removed at teardown. */
export async function makeTopology(t: TapTest, opts: TopologyOptions = {}): Promise<Topology> {
  const ipv6 = opts.ipv6 ?? true;
  const [pod, node, remote] = await Promise.all([
    makeNetns(t, 'pod'),
    makeNetns(t, 'node'),
    makeNetns(t, 'remote'),
  ]);
  const topo: Topology = { pod, node, remote, ipv6, rawSeen: [] };
  // Before any link exists: without this, first IPv6 packets are lost to tentative addresses.
  await Promise.all(
    [pod, node, remote].map((ns) => {
      const forwarding = ns === node ? 1 : 0;
      return inNetns(ns, 'sysctl', [
        '-q',
        '-w',
        `net.ipv4.ip_forward=${forwarding}`,
        `net.ipv6.conf.all.forwarding=${forwarding}`,
        'net.ipv6.conf.all.accept_dad=0',
        'net.ipv6.conf.default.accept_dad=0',
        `net.ipv6.conf.all.disable_ipv6=${ipv6 ? 0 : 1}`,
        `net.ipv6.conf.default.disable_ipv6=${ipv6 ? 0 : 1}`,
      ]);
    }),
  );
  await inNetns(pod, 'ip', `link add eth0 type veth peer name pod0 netns ${node}`.split(' '));
  await inNetns(node, 'ip', `link add eth0 type veth peer name eth0 netns ${remote}`.split(' '));
  await Promise.all(
    Object.entries(addressesAndRoutes(topo)).map(([ns, lines]) =>
      inNetns(ns, 'ip', ['-batch', '-'], { input: lines.join('\n') + '\n' }),
    ),
  );
  await startEcho(t, topo, opts.echoLifetimeSeconds ?? 300);
  return topo;
}

/** `ip -batch` lines per namespace. */
function addressesAndRoutes({ pod, node, remote, ipv6 }: Topology): Record<string, string[]> {
  const v6 = (lines: string[]) => (ipv6 ? lines : []);
  const remoteLo = [
    ...Object.values(REMOTE_TARGETS_IPV4).filter((a) => a !== REMOTE_IPV4),
    ...v6(Object.values(REMOTE_TARGETS_IPV6).filter((a) => a !== REMOTE_IPV6)),
  ];
  return {
    [pod]: [
      'link set lo up',
      'link set eth0 up',
      `address add ${POD_IPV4}/24 dev eth0`,
      `route add default via ${POD_GATEWAY_IPV4}`,
      ...v6([
        `address add ${POD_IPV6}/64 dev eth0 nodad`,
        `route add ::/0 via ${POD_GATEWAY_IPV6}`,
      ]),
    ],
    [node]: [
      'link set lo up',
      'link set pod0 up',
      'link set eth0 up',
      `address add ${POD_GATEWAY_IPV4}/24 dev pod0`,
      `address add ${NODE_IPV4}/24 dev eth0`,
      `route add default via ${REMOTE_IPV4}`,
      ...v6([
        `address add ${POD_GATEWAY_IPV6}/64 dev pod0 nodad`,
        `address add ${NODE_IPV6}/64 dev eth0 nodad`,
        `route add ::/0 via ${REMOTE_IPV6}`,
      ]),
    ],
    [remote]: [
      'link set lo up',
      'link set eth0 up',
      `address add ${REMOTE_IPV4}/24 dev eth0`,
      `route add 10.244.0.0/16 via ${NODE_IPV4}`,
      ...v6([
        `address add ${REMOTE_IPV6}/64 dev eth0 nodad`,
        `route add fd00:10:244::/48 via ${NODE_IPV6}`,
      ]),
      ...remoteLo.map((address) =>
        address.includes(':')
          ? `address add ${address}/128 dev lo nodad`
          : `address add ${address}/32 dev lo`,
      ),
    ],
  };
}

async function startEcho(t: TapTest, topo: Topology, lifetimeSeconds: number): Promise<void> {
  const addresses = [
    ...Object.values(REMOTE_TARGETS_IPV4),
    ...(topo.ipv6 ? Object.values(REMOTE_TARGETS_IPV6) : []),
  ];
  const echo = await startEchoOn(t, topo.remote, addresses, lifetimeSeconds);
  let pending = '';
  echo.stdout?.on('data', (chunk: Buffer) => {
    const lines = (pending + chunk.toString()).split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      const m = /^seen (\d+) (\d+) (\S+)$/.exec(line);
      if (m) topo.rawSeen.push({ proto: Number(m[1]), tag: Number(m[2]), address: m[3]! });
    }
  });
}

/**
 * The echo on ECHO_PORT in namespace `ns`, answering on `addresses` (a second remote's, for tests
 * that build more of the topology); resolves once it is ready, killed at teardown.
 */
export async function startEchoOn(
  t: TapTest,
  ns: string,
  addresses: readonly string[],
  lifetimeSeconds = 300,
): Promise<ChildProcess> {
  const args = [echoScript, 'serve', String(ECHO_PORT), String(lifetimeSeconds), ...addresses];
  const echo = spawn('ip', ['netns', 'exec', ns, python, ...args]);
  t.teardown(() => echo.kill('SIGKILL'));
  await waitForReady(echo, 5_000);
  return echo;
}

/** The port of startSlowEcho's peer. */
export const SLOW_ECHO_PORT = 9998;

/**
 * A UDP echo on the remote, on every target address, that answers `delayS` seconds late (a peer
 * across a WAN): streams to it always have a reply in flight. Killed at teardown.
 */
export async function startSlowEcho(t: TapTest, topo: Topology, delayS: number): Promise<void> {
  const addresses = [
    ...Object.values(REMOTE_TARGETS_IPV4),
    ...(topo.ipv6 ? Object.values(REMOTE_TARGETS_IPV6) : []),
  ];
  const args = [echoScript, 'slow', String(SLOW_ECHO_PORT), String(delayS), '300', ...addresses];
  const echo = spawn('ip', ['netns', 'exec', topo.remote, python, ...args]);
  t.teardown(() => echo.kill('SIGKILL'));
  await waitForReady(echo, 5_000);
}

/** The port of startJitterEcho's peer. */
export const JITTER_ECHO_PORT = 9997;

/**
 * A UDP echo on the remote, on every target address, that answers each datagram after a delay
 * drawn evenly from 0 to maxDelayS, as a resolver's answers come. Killed at teardown.
 */
export async function startJitterEcho(
  t: TapTest,
  topo: Topology,
  maxDelayS: number,
): Promise<void> {
  const addresses = [
    ...Object.values(REMOTE_TARGETS_IPV4),
    ...(topo.ipv6 ? Object.values(REMOTE_TARGETS_IPV6) : []),
  ];
  const args = [
    echoScript,
    'jitter',
    String(JITTER_ECHO_PORT),
    String(maxDelayS),
    '300',
    ...addresses,
  ];
  const echo = spawn('ip', ['netns', 'exec', topo.remote, python, ...args]);
  t.teardown(() => echo.kill('SIGKILL'));
  await waitForReady(echo, 5_000);
}

/** What a DNS-like load saw: queries sent and answered, the answers' sources, when lost ones were sent. */
export interface QueryLoad {
  sent: number;
  answered: number;
  sources: Record<string, number>;
  lost: number[];
}

/**
 * A DNS-like load from the pod (or `ns`) to dst: `rate` queries a second for durationS, each from a
 * new socket, each waiting timeoutS for its one answer. Resolves when the last has answered or
 * given up.
 */
export async function runQueries(
  topo: Topology,
  dst: string,
  opts: { rate: number; durationS: number; timeoutS: number; port?: number; ns?: string },
): Promise<QueryLoad> {
  const args = [
    echoScript,
    'queries',
    String(opts.port ?? JITTER_ECHO_PORT),
    String(opts.rate),
    String(opts.durationS),
    String(opts.timeoutS),
    dst,
  ];
  const budgetMs = (opts.durationS + opts.timeoutS) * 1000 + 30_000;
  const { stdout } = await inNetns(opts.ns ?? topo.pod, python, args, { timeoutMs: budgetMs });
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as QueryLoad;
}

/** One datagram from one socket of the pod to each of `count` ports of dst: `count` flows at once. */
export async function blastFlows(topo: Topology, dst: string, firstPort: number, count: number) {
  const args = [echoScript, 'blast', String(firstPort), String(count), dst];
  await inNetns(topo.pod, python, args, { timeoutMs: 60_000 });
}

function waitForReady(child: ChildProcess, timeoutMs: number): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    let stderr = '';
    const fail = (why: string) => {
      clearTimeout(timer);
      reject(new Error(`echo server: ${why}${stderr ? `: ${stderr.trim()}` : ''}`));
    };
    const timer = setTimeout(() => fail(`not ready after ${timeoutMs} ms`), timeoutMs);
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout?.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('ready')) {
        clearTimeout(timer);
        resolvePromise();
      }
    });
    child.once('exit', (code) => fail(`exited with ${code}`));
  });
}

export type ProbeProtocol = 'udp' | 'tcp';

export interface SeenSource {
  address: string;
  port: number;
}

export interface ProbeOptions {
  /** Per attempt, in ms (default 2000). */
  timeoutMs?: number;
  /** Attempts per destination, each from a new socket (default 3). */
  attempts?: number;
  /** Bind each probe to this local address of the namespace first (a second source). */
  from?: string;
  /** The namespace to send from (default the pod's). */
  ns?: string;
}

interface ProbeLine {
  dst: string;
  address?: string;
  port?: number;
  error?: string;
}

/**
 * Sends one probe per destination from the pod, each from a new socket (so a new conntrack entry
 * and a fresh NAT decision), all in one python process; resolves with the source the remote saw,
 * in the order given. Rejects if any destination did not answer.
 */
export async function probeSources(
  topo: Topology,
  destinations: readonly string[],
  proto: ProbeProtocol = 'udp',
  opts: ProbeOptions = {},
): Promise<SeenSource[]> {
  const timeoutMs = opts.timeoutMs ?? 2_000;
  const attempts = opts.attempts ?? 3;
  const budgetMs = destinations.length * attempts * timeoutMs + 5_000;
  const args = [
    echoScript,
    'probe',
    proto,
    String(ECHO_PORT),
    String(timeoutMs / 1000),
    String(attempts),
    ...(opts.from === undefined ? [] : ['--from', opts.from]),
    ...destinations,
  ];
  const { stdout } = await inNetns(opts.ns ?? topo.pod, python, args, { timeoutMs: budgetMs });
  const lines = stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as ProbeLine);
  const answered = lines.filter(
    (line): line is ProbeLine & SeenSource => line.address !== undefined && line.port !== undefined,
  );
  if (answered.length !== destinations.length) {
    throw new Error(`${proto} probes failed: ${stdout.trim() || 'no output'}`);
  }
  return answered.map(({ address, port }) => ({ address, port }));
}

/** One answer of a stream, with the time (Date.now()) it arrived. */
export interface StreamAnswer {
  at: number;
  address?: string;
  port?: number;
  error?: string;
}

export interface Stream {
  readonly answers: StreamAnswer[];
  /** The first answer at or after `since` for which `match` holds, waiting up to timeoutMs. */
  until(
    since: number,
    match: (a: StreamAnswer) => boolean,
    timeoutMs: number,
  ): Promise<StreamAnswer>;
}

/**
 * A long-lived flow from the pod: one UDP socket (or one TCP connection) sending every intervalS
 * seconds for durationS; each answer says which source the remote saw. Killed at teardown.
 */
export function startStream(
  t: TapTest,
  topo: Topology,
  proto: 'udp' | 'tcp',
  dst: string,
  intervalS: number,
  durationS: number,
  port = ECHO_PORT,
  opts: { ns?: string; bind?: string } = {},
): Stream {
  const args = [
    echoScript,
    'stream',
    proto,
    String(port),
    String(intervalS),
    String(durationS),
    dst,
    ...(opts.bind === undefined ? [] : [opts.bind]),
  ];
  const child = spawn('ip', ['netns', 'exec', opts.ns ?? topo.pod, python, ...args]);
  t.teardown(() => child.kill('SIGKILL'));
  const answers: StreamAnswer[] = [];
  let pending = '';
  child.stdout.on('data', (chunk: Buffer) => {
    const lines = (pending + chunk.toString()).split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) if (line) answers.push({ at: Date.now(), ...JSON.parse(line) });
  });
  return {
    answers,
    async until(since, match, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = answers.find((a) => a.at >= since && match(a));
        if (found) return found;
        if (Date.now() > deadline) {
          const recent = JSON.stringify(answers.slice(-3));
          throw new Error(
            `${proto} stream to ${dst}: no matching answer in ${timeoutMs} ms: ${recent}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
  };
}

export type RawProtocol = 'sctp' | '253';
let nextRawTag = 1 + Math.floor(Math.random() * 1e6);

/**
 * Sends one raw packet per destination from the pod — an SCTP INIT, or protocol 253, which has no
 * ports — and resolves with the source address the remote saw for each, in order. Rejects if one
 * did not arrive within timeoutMs.
 */
export async function probeRawSources(
  topo: Topology,
  destinations: readonly string[],
  proto: RawProtocol,
  timeoutMs = 3_000,
): Promise<string[]> {
  const tag = nextRawTag;
  nextRawTag += destinations.length;
  const number = proto === 'sctp' ? 132 : 253;
  const args = [echoScript, 'rawprobe', proto, String(ECHO_PORT), String(tag), ...destinations];
  await inNetns(topo.pod, python, args, { timeoutMs });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const seen = destinations.map(
      (_, i) => topo.rawSeen.find((s) => s.proto === number && s.tag === tag + i)?.address,
    );
    if (seen.every((address) => address !== undefined)) return seen as string[];
    if (Date.now() > deadline) {
      throw new Error(`${proto} probes not seen by the remote: ${JSON.stringify(seen)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The source address:port the remote saw for one new flow from the pod to dst. */
export async function probeSource(
  topo: Topology,
  dst: string,
  proto: ProbeProtocol = 'udp',
  opts: ProbeOptions = {},
): Promise<SeenSource> {
  const [seen] = await probeSources(topo, [dst], proto, opts);
  if (!seen) throw new Error(`no probe result for ${dst}`);
  return seen;
}
