// The Kubernetes API against a real kube-apiserver and etcd (scripts/control-plane.sh), beside
// client-go as the reference (test/control-plane/cmd/listwatch: a shared informer on Nodes). For
// 1 000 and 5 000 Nodes of 100 KiB each: the time from being allowed to list (the shipped RBAC
// applied while the agent waits refused) to every Node's pod CIDR in the kernel, RSS waiting, at
// most and settled, and the CPU each Node event costs (a label patched on every Node). Runs with
// `npm run bench -- --only kubernetes-real`.
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { agentWithParts, httpGet, metricValue, startAgent, waitFor } from '../harness/agent.js';
import {
  refusedAgentKubeconfig,
  startControlPlane,
  type ControlPlane,
} from '../harness/control-plane.js';
import { inNetns, packageRoot } from '../harness/netns.js';
import { nonMasqCovers } from '../test/helpers/nonmasq.js';
import { CLOCK_TICKS, netns, sleep, tempDir, timedIn, withScope, type Scope } from './harness.js';
import { processStats } from '../test/helpers/node.js';

export interface RealApiSide {
  /** Allowed to list (agent) or started (client-go) → every Node known, in s. */
  firstListS: number;
  /** RSS before the list (the agent waiting refused; client-go: at its start). */
  beforeMiB: number;
  peakMiB: number;
  /** 5 s after the list. */
  settledMiB: number;
  /** CPU per Node event (a label patched), in ms. */
  cpuMsPerEvent: number;
}

export interface RealApiRow {
  nodes: number;
  padKiB: number;
  events: number;
  agent: RealApiSide;
  clientGo: RealApiSide;
}

const PAD_BYTES = 100 * 1024;
const TIMINGS = JSON.stringify({ backoffBaseMs: 100, backoffMaxMs: 500, idleMs: 60_000 });

const rssMiB = (pid: number) => processStats(pid).rssKiB / 1024;

function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/** create-nodes.ts in the namespace: `create` FIRST COUNT, or `label` them all with VALUE. */
async function nodes(ns: string, plane: ControlPlane, args: string[]): Promise<void> {
  await inNetns(
    ns,
    process.execPath,
    ['--import', 'tsx', join(packageRoot, 'harness/create-nodes.ts'), plane.kubeconfig, ...args],
    { timeoutMs: 1_800_000 },
  );
}

async function agentSide(
  scope: Scope,
  ns: string,
  plane: ControlPlane,
  count: number,
): Promise<RealApiSide> {
  const { kubeconfig, allow } = await refusedAgentKubeconfig(scope, plane);
  const dir = await tempDir(scope);
  const config = join(dir, 'ip-masq-agent');
  writeFileSync(config, 'nonMasqueradeCIDRs: [192.168.0.0/16]\nnonMasqueradeNodePodCIDRs: true\n');
  const agent = startAgent(
    scope,
    ns,
    [
      '--config',
      config,
      '--listen',
      '127.0.0.1:9410',
      '--kubeconfig',
      kubeconfig,
      '--node-name',
      'scale-0',
    ],
    [],
    undefined,
    agentWithParts({ kubernetesTimings: JSON.parse(TIMINGS) }),
  );
  const metric = async (series: string) =>
    metricValue((await httpGet(ns, 9410, '/metrics')).body, series);
  await waitFor(
    'refused a few times',
    async () =>
      ((await metric('ipmasq_kubernetes_errors_total{op="list"}').catch(() => 0)) ?? 0) >= 3
        ? true
        : undefined,
    60_000,
  );
  const pid = agent.child.pid!;
  await sleep(1_000);
  const beforeMiB = rssMiB(pid);
  await allow();
  const allowed = performance.now();
  let peakMiB = beforeMiB;
  const sampler = setInterval(() => (peakMiB = Math.max(peakMiB, rssMiB(pid))), 25);
  const last = count - 1;
  try {
    await waitFor(
      'every Node in the kernel',
      async () => ((await nonMasqCovers(ns, `10.${last >> 8}.${last & 255}.1`)) ? true : undefined),
      300_000,
      50,
    );
  } finally {
    clearInterval(sampler);
  }
  const firstListS = (performance.now() - allowed) / 1000;
  await sleep(5_000);
  const settledMiB = rssMiB(pid);
  const ticks = cpuTicks(pid);
  await nodes(ns, plane, ['label', '0', String(count), 'agent']);
  await sleep(3_000);
  const cpuMsPerEvent = (((cpuTicks(pid) - ticks) / CLOCK_TICKS) * 1000) / count;
  agent.child.kill('SIGTERM');
  return {
    firstListS,
    beforeMiB,
    peakMiB: Math.max(peakMiB, settledMiB),
    settledMiB,
    cpuMsPerEvent,
  };
}

async function clientGoSide(ns: string, plane: ControlPlane, count: number): Promise<RealApiSide> {
  const child = spawn('ip', [
    'netns',
    'exec',
    ns,
    join(plane.bin, 'listwatch'),
    '--kubeconfig',
    plane.kubeconfig,
  ]);
  const started = performance.now();
  const lines = createInterface({ input: child.stdout });
  const next = () =>
    new Promise<Record<string, number>>((resolve) =>
      lines.once('line', (line: string) => resolve(JSON.parse(line) as Record<string, number>)),
    );
  // `ip netns exec` execs the command: the child is listwatch itself.
  const pid = child.pid!;
  const beforeMiB = rssMiB(pid);
  await next(); // the informer has synced: its first line
  const firstListS = (performance.now() - started) / 1000;
  await sleep(5_000);
  const settledMiB = rssMiB(pid);
  const ticks = cpuTicks(pid);
  await nodes(ns, plane, ['label', '0', String(count), 'client-go']);
  await sleep(3_000);
  const cpuMsPerEvent = (((cpuTicks(pid) - ticks) / CLOCK_TICKS) * 1000) / count;
  child.stdin.end();
  const done = await next();
  child.kill();
  return {
    firstListS,
    beforeMiB,
    peakMiB: Math.max(done.peakMiB ?? 0, settledMiB),
    settledMiB,
    cpuMsPerEvent,
  };
}

export async function benchKubernetesReal(sizes = [1_000, 5_000]): Promise<RealApiRow[]> {
  const rows: RealApiRow[] = [];
  for (const count of sizes) {
    rows.push(
      await withScope(async (scope) => {
        const ns = await netns(scope, 'bench-kube');
        await timedIn(ns, 'ip', ['link', 'set', 'lo', 'up']);
        const plane = await startControlPlane(scope, ns);
        await nodes(ns, plane, ['create', '0', String(count), String(PAD_BYTES)]);
        const agent = await agentSide(scope, ns, plane, count);
        const clientGo = await clientGoSide(ns, plane, count);
        console.error(`bench: kubernetes-real ${count}: done`);
        return { nodes: count, padKiB: PAD_BYTES / 1024, events: count, agent, clientGo };
      }),
    );
  }
  return rows;
}
