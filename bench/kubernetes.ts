// The opt-in Kubernetes API at scale (docs/kubernetes.md, "Kubernetes API (opt-in)"): 5 000 Nodes
// of realistic size (~16 KiB each, mostly status.images) listed in chunks, then 200 watch events a
// second; the agent's RSS beside the same agent without the feature, its CPU under the event
// stream, and the time from an API change to the kernel. Runs alone with `node --import=tsx
// bench/kubernetes.ts`.
import { AgentSession } from './agent-session.js';
import { CLOCK_TICKS, median, sleep, withScope, type Scope } from './harness.js';
import { configText } from './scripts.js';
import { startFakeApiServerInNetns, type RemoteFake } from '../harness/fake-apiserver-remote.js';

export interface KubernetesRow {
  nodes: number;
  /** The same agent and file (64 CIDRs), without --kubeconfig: the baseline. */
  withoutRssMiB: number;
  /** With --kubeconfig, watching this Node only (no file asks for pod CIDRs). */
  ownNodeRssMiB: number;
  /** 3 s after nonMasqueradeNodePodCIDRs: true, every Node listed and written. */
  listedRssMiB: number;
  /** 15 s after, every Node watched. */
  allNodesRssMiB: number;
  /** The same after the event stream. */
  afterEventsRssMiB: number;
  /** The file switched to nonMasqueradeNodePodCIDRs → the Nodes listed in chunks and written. */
  listToKernelMs: number;
  eventsPerSecond: number;
  eventSeconds: number;
  /** Agent CPU while the events arrive, in percent of one core. */
  eventsCpuPercent: number;
  /** A Node added (while the events arrive) → its pod CIDR in the kernel; median of the samples. */
  addToKernelMs: number;
  addSamples: number[];
}

const NODES = 5_000;
const RATE = 200;
const SETTLE_MS = 3_000;
const LATER_MS = 15_000;

async function rssMiB(session: AgentSession): Promise<number> {
  return session.rssKiB().total / 1024;
}

async function withFake(
  scope: Scope,
  seed: number,
): Promise<{ session: AgentSession; fake: RemoteFake }> {
  let fake: RemoteFake | undefined;
  const session = await AgentSession.start(
    scope,
    64,
    ['--node-name', 'node-0'],
    180_000,
    async (ns) => {
      fake = await startFakeApiServerInNetns(scope, ns);
      if (seed > 0) await fake.call('seedPodNodes', seed);
      return ['--kubeconfig', fake.kubeconfig];
    },
  );
  return { session, fake: fake! };
}

export async function benchKubernetes(nodes = NODES, eventSeconds = 20): Promise<KubernetesRow> {
  const withoutRssMiB = await withScope(async (scope) => {
    const session = await AgentSession.start(scope, 64);
    await sleep(SETTLE_MS);
    return rssMiB(session);
  });
  return withScope(async (scope) => {
    const { session, fake } = await withFake(scope, nodes);
    await sleep(SETTLE_MS);
    const ownNodeRssMiB = await rssMiB(session);

    const swap = await session.swapText(
      `${configText(64)}nonMasqueradeNodePodCIDRs: true\n`,
      180_000,
    );
    const listToKernelMs = swap.ms;
    await sleep(SETTLE_MS);
    const listedRssMiB = await rssMiB(session);
    // V8's memory reducer returns the list's pages some seconds after allocation calms down.
    await sleep(LATER_MS - SETTLE_MS);
    const allNodesRssMiB = await rssMiB(session);

    const cpuBefore = session.cpuTicks();
    const began = Date.now();
    const stream = fake.call('churn', RATE, eventSeconds);
    const addSamples: number[] = [];
    for (let i = 0; i < 5; i++) {
      await sleep((eventSeconds * 1000) / 7);
      const generation = await session.generation();
      const added = Date.now();
      // Outside 10.128.0.0/9, so that it is a new element, not merged into the others.
      await fake.call('setNode', `added-${i}`, { podCIDRs: [`100.64.${i}.0/24`] });
      await session.waitForGeneration(generation + 1, 30_000);
      addSamples.push(Date.now() - added);
    }
    const events = await stream;
    const seconds = (Date.now() - began) / 1000;
    const cpuMs = ((session.cpuTicks() - cpuBefore) * 1000) / CLOCK_TICKS;
    await sleep(SETTLE_MS);
    return {
      nodes,
      withoutRssMiB,
      ownNodeRssMiB,
      listedRssMiB,
      allNodesRssMiB,
      afterEventsRssMiB: await rssMiB(session),
      listToKernelMs,
      eventsPerSecond: events / eventSeconds,
      eventSeconds,
      eventsCpuPercent: cpuMs / 10 / seconds,
      addToKernelMs: median(addSamples),
      addSamples,
    };
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  benchKubernetes().then(
    (row) => console.log(JSON.stringify(row, null, 2)),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
