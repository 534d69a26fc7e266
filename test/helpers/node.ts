// Shared by the e2e, fault, churn and soak tests: one namespace with the agent in it, its config file,
// and what can be read from outside: the kernel table, HTTP, and the process's fds and memory.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  agentWithParts,
  generationOf,
  httpGet,
  listTable,
  metricValue,
  startAgent,
  waitFor,
  type RunningAgent,
} from '../../harness/agent.js';
import { inNetns, makeNetns, type TapTest } from '../../harness/netns.js';

export interface Node {
  ns: string;
  dir: string;
  configFile: string;
  port: number;
}

/** A namespace with lo up (the agent listens on 127.0.0.1) and a config directory, removed at teardown. */
export async function makeNode(t: TapTest, prefix: string): Promise<Node> {
  const ns = await makeNetns(t, prefix);
  await inNetns(ns, 'ip', ['link', 'set', 'lo', 'up']);
  const dir = mkdtempSync(join(tmpdir(), `ipmasq-${prefix}-`));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return { ns, dir, configFile: join(dir, 'ip-masq-agent'), port: 9410 };
}

export function agentArgs(node: Node): string[] {
  return ['--config', node.configFile, '--listen', `127.0.0.1:${node.port}`];
}

/** Rename-write, as editors and config management do; returns the time of the rename. */
export function writeConfig(node: Node, text: string): number {
  writeFileSync(`${node.configFile}.tmp`, text);
  renameSync(`${node.configFile}.tmp`, node.configFile);
  return Date.now();
}

export async function generation(node: Node): Promise<number | undefined> {
  return generationOf(await listTable(node.ns, 'ip'));
}

export function untilGeneration(node: Node, n: number, timeoutMs = 5_000): Promise<true> {
  return waitFor(
    `generation ${n}`,
    async () => ((await generation(node)) === n ? true : undefined),
    timeoutMs,
    20,
  );
}

/** Elements of one of our sets as the kernel holds them (JSON listing: no text parsing of nft output). */
export async function setElements(node: Node, set: string): Promise<string[]> {
  const { stdout } = await inNetns(node.ns, 'nft', ['-j', 'list', 'set', 'ip', 'ipmasq', set], {
    timeoutMs: 60_000,
  });
  const parsed = JSON.parse(stdout) as { nftables: Array<{ set?: { elem?: unknown[] } }> };
  const elems = parsed.nftables.find((item) => item.set)?.set?.elem ?? [];
  return elems.map((e) => {
    if (typeof e === 'string') return `${e}/32`;
    const prefix = (e as { prefix?: { addr: string; len: number } }).prefix;
    return prefix ? `${prefix.addr}/${prefix.len}` : JSON.stringify(e);
  });
}

export async function metrics(node: Node): Promise<string> {
  return (await httpGet(node.ns, node.port, '/metrics')).body;
}

export async function metric(node: Node, series: string): Promise<number | undefined> {
  return metricValue(await metrics(node), series);
}

/** Waits for /healthz to answer; a failure names the last HTTP error and the agent's last log lines. */
export async function untilUp(node: Node, agent?: RunningAgent): Promise<number> {
  let lastError = '';
  return waitFor(
    'the HTTP server',
    async () =>
      (
        await httpGet(node.ns, node.port, '/healthz').catch((err: Error) => {
          lastError = err.message.slice(-200);
          return undefined;
        })
      )?.status,
    10_000,
    100,
  ).catch((err: Error) => {
    const logs = agent ? `; agent log: ${JSON.stringify(agent.logs.slice(-3))}` : '';
    throw new Error(`${err.message}: ${lastError}${logs}`);
  });
}

export interface ProcessStats {
  rssKiB: number;
  /** The part of RSS that pages of files make up (the program's code, libraries). */
  rssFileKiB: number;
  fds: number;
}

/** VmRSS, its file-backed part and the number of open file descriptors of a live process. */
export function processStats(pid: number): ProcessStats {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status)?.[1]);
  return {
    rssKiB: kib('VmRSS'),
    rssFileKiB: kib('RssFile'),
    fds: readdirSync(`/proc/${pid}/fd`).length,
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `count` non-adjacent /24s (so nothing merges), from 20.0.0.0 on, as a plain block list. */
export function manyCidrsConfig(count: number, resyncInterval = '60s'): string {
  const lines = ['nonMasqueradeCIDRs:'];
  for (let i = 0; i < count; i++) {
    const n = i * 2;
    lines.push(`  - ${20 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}.0/24`);
  }
  lines.push(`cidrLimit: ${count}`, `resyncInterval: ${resyncInterval}`, '');
  return lines.join('\n');
}

/** The process and its children: libnftables runs in a child the addon forks for each call. */
export function processAndChildren(pid: number): number[] {
  const pids = [pid];
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const children = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
      if (children) pids.push(...children.split(/\s+/).map(Number));
    }
  } catch {
    // exited meanwhile
  }
  return pids;
}

/** The bits of these signal masks of /proc/PID/status ORed (SigCgt, SigPnd, …); undefined once pid is gone. */
function signalMask(pid: number, fields: readonly string[]): bigint | undefined {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return undefined;
  }
  let mask = 0n;
  for (const m of status.matchAll(/^(\w+):\s+([0-9a-f]+)$/gm)) {
    if (fields.includes(m[1] ?? '')) mask |= BigInt(`0x${m[2]}`);
  }
  return mask;
}

const signalBits = (signals: readonly number[]) =>
  signals.reduce((mask, n) => mask | (1n << BigInt(n - 1)), 0n);

/** Polls `done` every millisecond for at most timeoutMs. */
async function everyMs(done: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting ${what}`);
    await sleep(1);
  }
}

/**
 * Resolves once pid catches every one of `signals` (its SigCgt mask in /proc: a listener is installed),
 * polling every millisecond for at most timeoutMs; rejects if the process ends first.
 */
export async function untilCaught(
  pid: number,
  signals: number[],
  timeoutMs = 30_000,
): Promise<void> {
  const wanted = signalBits(signals);
  await everyMs(
    () => {
      const caught = signalMask(pid, ['SigCgt']);
      if (caught === undefined || !isRunning(pid))
        throw new Error(`process ${pid} ended before it caught signals ${signals.join(', ')}`);
      return (caught & wanted) === wanted;
    },
    timeoutMs,
    `for ${pid} to catch its signals`,
  );
}

/** Resolves once `signal` is no longer pending for pid (delivered, or the process is gone). */
/**
 * Until pid has a child: a launcher (native/launch.c) forks only once it holds its signals. (Its
 * SigBlk cannot tell: while it waits for a signal the kernel shows the waited ones unblocked.)
 */
export async function untilForked(pid: number, timeoutMs = 30_000): Promise<void> {
  await everyMs(
    () => {
      try {
        return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim() !== '';
      } catch {
        throw new Error(`process ${pid} ended before it forked`);
      }
    },
    timeoutMs,
    `for ${pid} to fork`,
  );
}

export async function untilDelivered(
  pid: number,
  signal: number,
  timeoutMs = 30_000,
): Promise<void> {
  const bit = signalBits([signal]);
  await everyMs(
    () => ((signalMask(pid, ['SigPnd', 'ShdPnd']) ?? 0n) & bit) === 0n,
    timeoutMs,
    `for signal ${signal} to be delivered to ${pid}`,
  );
}

/** Whether pid runs: not gone, and not a zombie waiting for its new parent to reap it. */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^[ZX]/.test(stat.slice(stat.lastIndexOf(')') + 2));
  } catch {
    return false;
  }
}

/**
 * The agent in a packet topology's node namespace on config `first` (with `args`), up and written;
 * write() renames a config in and resolves with the time of the rename once the kernel holds it.
 */
export async function agentInTopology(
  t: TapTest,
  topo: { node: string },
  first: string,
  args: string[] = [],
  entry?: readonly string[],
) {
  const dir = mkdtempSync(join(tmpdir(), 'ipmasq-topology-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const node: Node = { ns: topo.node, dir, configFile: join(dir, 'ip-masq-agent'), port: 9410 };
  writeFileSync(node.configFile, first);
  const agent = startAgent(t, topo.node, [...agentArgs(node), ...args], [], undefined, entry);
  t.teardown(async () => {
    agent.child.kill('SIGKILL');
    await agent.exited;
  });
  await untilUp(node, agent);
  const generationNow = async () => (await generation(node)) ?? 0;
  await waitFor('generation 1', async () => ((await generationNow()) >= 1 ? true : undefined));
  let written = await generationNow();
  const write = async (text: string, timeoutMs = 5_000) => {
    const at = writeConfig(node, text);
    written++;
    await waitFor(
      `generation ${written}`,
      async () => ((await generationNow()) >= written ? true : undefined),
      timeoutMs,
      5,
    );
    return at;
  };
  return { agent, node, write };
}

/**
 * The agent in namespace `ns` on a config directory of these files, reading its cluster with
 * `kubeconfig` as node `nodeName` (`timings`: the agent's kubernetesTimings, JSON); put() renames a file in,
 * as a ConfigMap update does.
 */
export function agentOnApi(
  t: TapTest,
  ns: string,
  files: Record<string, string>,
  api: { kubeconfig: string; nodeName: string; timings: string },
) {
  const dir = mkdtempSync(join(tmpdir(), 'ipmasq-api-agent-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const put = (name: string, text: string) => {
    writeFileSync(join(dir, `.${name}.tmp`), text);
    renameSync(join(dir, `.${name}.tmp`), join(dir, name));
  };
  for (const [name, text] of Object.entries(files)) put(name, text);
  const args = ['--config', dir, '--listen', '127.0.0.1:9410'];
  const agent = startAgent(
    t,
    ns,
    [...args, '--kubeconfig', api.kubeconfig, '--node-name', api.nodeName],
    [],
    undefined,
    agentWithParts({ kubernetesTimings: JSON.parse(api.timings) }),
  );
  return { agent, dir, put };
}

/** A generation mark as the kernel announced it, and when this process heard of it. */
export interface MarkSeen {
  generation: number;
  at: number;
}

/**
 * `nft monitor rules` in ns: every jump rule with our mark that a commit adds, with the moment its
 * event arrived. It tells when a commit happened without listing the table (a listing waits on
 * the CPU and on the size of every set in it). Ready once a rule of a throwaway table was seen;
 * call it before the agent starts, as that commit would otherwise count as another writer's.
 */
export async function watchMarks(t: TapTest, ns: string): Promise<{ seen: MarkSeen[] }> {
  const monitor = spawn('ip', ['netns', 'exec', ns, 'nft', 'monitor', 'rules'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => {
    monitor.kill('SIGKILL');
  });
  const seen: MarkSeen[] = [];
  let ready = false;
  let pending = '';
  monitor.stdout.setEncoding('utf8');
  monitor.stdout.on('data', (chunk: string) => {
    const at = Date.now();
    const lines = (pending + chunk).split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      if (line.includes('ipmasq-monitor-ready')) ready = true;
      const mark = /ipmasq-agent generation (\d+) /.exec(line);
      if (mark) seen.push({ generation: Number(mark[1]), at });
    }
  });
  const probe = 'table ip ipmasq-monitor-ready';
  await waitFor(
    'nft monitor listening',
    async () => {
      await inNetns(ns, 'nft', ['-f', '-'], {
        input: `add ${probe}\nadd chain ip ipmasq-monitor-ready c\nadd rule ip ipmasq-monitor-ready c counter comment "ipmasq-monitor-ready"\ndelete ${probe}\n`,
      });
      return ready ? true : undefined;
    },
    10_000,
    100,
  );
  return { seen };
}
