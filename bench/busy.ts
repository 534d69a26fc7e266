// Beside a busy node (docs/writes.md, "Beside a busy node"): another tool commits to its own table
// 100 times a second (or in kube-proxy's shape: a table of 300 rules and a set rewritten by `nft
// -f` every second), and the agent is probed and edited meanwhile. Per size: the share of /readyz
// probes answered 200, /healthz answers other than 200, one-CIDR edits from rename to /healthz
// (the bench's poller), and the agent's CPU beside the writer against the same agent idle.
import { spawn } from 'node:child_process';
import { AgentSession } from './agent-session.js';
import { inNetns } from '../harness/netns.js';
import { median, sleep, withScope } from './harness.js';
import { configText, ONE_CIDR_EDIT } from './scripts.js';

export interface BusyRow {
  cidrs: number;
  neighbour: '100 commits/s' | 'kube-proxy';
  commitsPerSecond: number;
  probes: number;
  readyShare: number;
  unhealthy: number;
  editMs: number[];
  idleCpuMsPerS: number;
  busyCpuMsPerS: number;
}

// Long enough for kube-proxy's shape (one commit a second) to make fifteen commits; the CPU is read
// to the nanosecond (AgentSession.cpuMs).
const WINDOW_S = 15;
const EDITS = 10;
const SETTLE_MS = 15_000;

function kubeProxyTable(round: number): string {
  const rules = Array.from(
    { length: 300 },
    (_, i) => `\t\tip daddr 10.96.${i >> 8}.${i & 255} tcp dport ${80 + (round % 10)} accept`,
  );
  return [
    'table ip kube-proxy',
    'delete table ip kube-proxy',
    'table ip kube-proxy {',
    '\tset cluster-ips {',
    '\t\ttype ipv4_addr',
    `\t\telements = { 10.96.0.${(round % 250) + 1} }`,
    '\t}',
    '\tchain services {',
    ...rules,
    '\t}',
    '}',
    '',
  ].join('\n');
}

/** Starts the neighbour in `ns`; returns how many commits it made so far, and how to stop it. */
async function startNeighbour(ns: string, shape: BusyRow['neighbour']) {
  let commits = 0;
  let running = true;
  if (shape === 'kube-proxy') {
    const loop = (async () => {
      while (running) {
        await inNetns(ns, 'nft', ['-f', '-'], {
          input: kubeProxyTable(commits),
          timeoutMs: 60_000,
        });
        commits++;
        await sleep(1_000);
      }
    })();
    return {
      commits: () => commits,
      stop: async () => {
        running = false;
        await loop;
      },
    };
  }
  await inNetns(ns, 'nft', ['-f', '-'], {
    input: 'table ip busy {\n set s {\n type ipv4_addr\n }\n}\n',
  });
  const writer = spawn('ip', ['netns', 'exec', ns, 'nft', '-i'], {
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  writer.stdin.on('error', () => undefined);
  const ticker = setInterval(() => {
    const n = commits++;
    writer.stdin.write(
      `add element ip busy s { 10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255} }\n`,
    );
  }, 10);
  return {
    commits: () => commits,
    stop: async () => {
      clearInterval(ticker);
      writer.kill('SIGKILL');
    },
  };
}

async function measureBusy(count: number, shape: BusyRow['neighbour']): Promise<BusyRow> {
  return withScope(async (scope) => {
    const session = await AgentSession.start(scope, count, ['--set-layout', 'auto'], 300_000);
    // The agent's first ten seconds (it looks for an inspector every 20 ms then, src/signals.ts;
    // its start's garbage is collected) are neither idle nor busy: both windows start after a
    // settle, the idle one after the neighbour stopped and the edits' own audits ended.
    await sleep(SETTLE_MS);
    const neighbour = await startNeighbour(session.ns, shape);
    scope.teardown(() => neighbour.stop());
    await sleep(1_000);
    const cpuPerSecond = async () => {
      const cpu = session.cpuMs();
      const started = performance.now();
      await sleep(WINDOW_S * 1000);
      const seconds = (performance.now() - started) / 1000;
      return { msPerS: (session.cpuMs() - cpu) / seconds, seconds };
    };
    const before = neighbour.commits();
    const busy = await cpuPerSecond();
    const commitsPerSecond = (neighbour.commits() - before) / busy.seconds;
    // Probed throughout the edits, as the kubelet would.
    const probing = session.probe(EDITS * 0.6 + 2, 100, ['/readyz', '/healthz']);
    const editMs: number[] = [];
    for (let i = 1; i <= EDITS; i++) {
      const extra = i % 2 === 1 ? [ONE_CIDR_EDIT] : [];
      editMs.push((await session.swapText(configText(count, 0, '3600s', extra))).ms);
      await sleep(500);
    }
    const samples = await probing;
    await neighbour.stop();
    await sleep(SETTLE_MS);
    const idle = await cpuPerSecond();
    const idleCpuMsPerS = idle.msPerS;
    const busyCpuMsPerS = busy.msPerS;
    const ready = samples.filter(([path]) => path === '/readyz');
    const row: BusyRow = {
      cidrs: count,
      neighbour: shape,
      commitsPerSecond,
      probes: ready.length,
      readyShare: ready.filter(([, status]) => status === 200).length / Math.max(ready.length, 1),
      unhealthy: samples.filter(([path, status]) => path === '/healthz' && status !== 200).length,
      editMs,
      idleCpuMsPerS,
      busyCpuMsPerS,
    };
    console.error(
      `bench: busy ${count} ${shape}: ${JSON.stringify({ ...row, editMedian: median(editMs) })}`,
    );
    return row;
  });
}

export async function benchBusy(
  sizes: readonly number[] = [64, 4_500, 100_000],
): Promise<BusyRow[]> {
  const rows: BusyRow[] = [];
  for (const count of sizes) rows.push(await measureBusy(count, '100 commits/s'));
  rows.push(await measureBusy(4_500, 'kube-proxy'));
  return rows;
}
