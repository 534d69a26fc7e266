// The window prober of the "atomic on the wire" tests (docs/design.md, "Writes on the wire"): fresh
// UDP flows from the pod to one destination while something rewrites the node's ruleset, counted by
// source address on the remote by nftables counters (the kernel counts every datagram; nothing
// is lost to a slow receiver), and the translated conntrack entries to it on the node at the end.
// The remote drops the probes: no reply, no ICMP, nothing but the probe's own conntrack entry.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inNetns, type TapTest } from '../../harness/netns.js';
import {
  NODE_IPV4,
  NODE_IPV6,
  POD_IPV4,
  POD_IPV6,
  python,
  type Topology,
} from '../../harness/topology.js';

const proberScript = join(dirname(fileURLToPath(import.meta.url)), 'window.py');
const COUNTERS = 'ipmasq_window';

/** Probes that reached the remote, by the source they arrived with. */
export interface WindowCount {
  pod: number;
  node: number;
}

export interface WindowProber {
  /** Stops the prober; resolves with how many it sent and what the remote counted. */
  stop(): Promise<{ sent: number; seen: WindowCount }>;
}

function family(dst: string): 'ip' | 'ip6' {
  return dst.includes(':') ? 'ip6' : 'ip';
}

/** Counters on the remote for probes to dst, from the pod's address and from the node's. */
async function installCounters(topo: Topology, dst: string): Promise<void> {
  const f = family(dst);
  const [pod, node] = f === 'ip' ? [POD_IPV4, NODE_IPV4] : [POD_IPV6, NODE_IPV6];
  // Made anew: the counters start from zero.
  const script = [
    `add table inet ${COUNTERS}`,
    `delete table inet ${COUNTERS}`,
    `table inet ${COUNTERS} {`,
    '  counter pod {}',
    '  counter node {}',
    '  chain input {',
    '    type filter hook prerouting priority raw; policy accept;',
    `    ${f} daddr ${dst} udp dport 30000-59999 ${f} saddr ${pod} counter name pod drop`,
    `    ${f} daddr ${dst} udp dport 30000-59999 ${f} saddr ${node} counter name node drop`,
    '  }',
    '}',
  ].join('\n');
  await inNetns(topo.remote, 'nft', ['-f', '-'], { input: `${script}\n` });
}

async function readCounters(topo: Topology): Promise<WindowCount> {
  const { stdout } = await inNetns(topo.remote, 'nft', [
    '-j',
    'list',
    'counters',
    'table',
    'inet',
    COUNTERS,
  ]);
  const counts: WindowCount = { pod: 0, node: 0 };
  for (const item of (JSON.parse(stdout) as { nftables: Array<Record<string, unknown>> })
    .nftables) {
    const counter = item.counter as { name?: string; packets?: number } | undefined;
    if (counter?.name === 'pod' || counter?.name === 'node')
      counts[counter.name] = counter.packets ?? 0;
  }
  return counts;
}

/**
 * Starts probing dst from the pod at `rate` probes a second (at most `seconds`); resolves once the
 * prober is sending. Stopped at teardown if the test does not stop it.
 */
export async function startWindowProber(
  t: TapTest,
  topo: Topology,
  dst: string,
  { rate = 4_000, seconds = 120 }: { rate?: number; seconds?: number } = {},
): Promise<WindowProber> {
  await installCounters(topo, dst);
  const child = spawn(
    'ip',
    [
      'netns',
      'exec',
      topo.pod,
      python,
      proberScript,
      dst,
      String(seconds),
      '10000000',
      String(rate),
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let out = '';
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('ready')) resolve();
    });
    child.once('exit', (code) =>
      reject(new Error(`window prober exited (${code}) before it was ready`)),
    );
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await ready;
  return {
    async stop() {
      child.stdin.end();
      await exited;
      const sent = Number(/sent (\d+)/.exec(out)?.[1] ?? NaN);
      return { sent, seen: await readCounters(topo) };
    },
  };
}

/** Conntrack entries on the node to dst whose reply goes to the node's address: translated flows. */
export async function translatedEntries(topo: Topology, dst: string): Promise<number> {
  const f = family(dst);
  const nodeAddress = f === 'ip' ? NODE_IPV4 : NODE_IPV6;
  const { stdout } = await inNetns(
    topo.node,
    'conntrack',
    ['-L', '-f', f === 'ip' ? 'ipv4' : 'ipv6', '-p', 'udp', '-d', dst, '--reply-dst', nodeAddress],
    { timeoutMs: 60_000 },
  );
  return stdout.split('\n').filter((line) => line.trim() !== '').length;
}
