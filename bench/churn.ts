// Memory and event-loop stalls after churn (docs/hardening.md, round 3, items 7 and 9): one agent
// taken through a sequence of writes — small, 100 000, back, and again — measured as it goes, not
// fresh at each size: RSS after each write, the longest event-loop stall during it (prom-client's
// nodejs_eventloop_lag_max_seconds, reset at every scrape), and how far RSS comes back once small.
// The agent runs from its own copy of node, as in its container: the kernel does not reclaim pages
// that another process (this bench's node) maps too.
import { AgentSession } from './agent-session.js';
import { copyOfNode } from '../harness/agent.js';
import { sleep, tempDir, withScope } from './harness.js';
import { configText } from './scripts.js';

export interface ChurnStep {
  cidrs: number;
  variant: 0 | 1;
  writeMs: number;
  /** The longest event-loop stall from the swap until the write was in the kernel, and 2 s after. */
  stallMs: number;
  rssMiB: number;
  heapTotalMiB: number;
  heapUsedMiB: number;
  externalMiB: number;
}

export interface ChurnResult {
  idleRssMiB: number;
  steps: ChurnStep[];
  maxRssMiB: number;
  /** RSS at each 10 s mark after the sequence ended on the small config. */
  settleRssMiB: number[];
}

const SEQUENCE: Array<[number, 0 | 1]> = [
  [100_000, 0],
  [64, 0],
  [100_000, 1],
  [10_000, 0],
  [100_000, 0],
  [100_000, 1],
  [64, 1],
];
const AFTER_MS = 2_000;

export async function benchChurn(sequence = SEQUENCE, settleMarks = 6): Promise<ChurnResult> {
  return withScope(async (scope) => {
    // The agent's own defaults (auto layout, udp flush), as an operator runs it, and from its own
    // copy of node, as in its container (the only process that maps its program).
    const node = copyOfNode(await tempDir(scope));
    const args = ['--set-layout', 'auto'];
    const session = await AgentSession.start(scope, 64, args, undefined, undefined, node);
    await sleep(3_000);
    const idleRssMiB = session.rssKiB().total / 1024;
    const steps: ChurnStep[] = [];
    let maxRssMiB = idleRssMiB;
    for (const [cidrs, variant] of sequence) {
      await session.metrics(); // resets the lag histogram's max
      const swap = await session.swapText(configText(cidrs, variant));
      await sleep(AFTER_MS);
      const value = await session.metrics();
      const stallMs = value('nodejs_eventloop_lag_max_seconds') * 1000;
      const rssMiB = session.rssKiB().total / 1024;
      const mib = (series: string) => value(series) / 2 ** 20;
      maxRssMiB = Math.max(maxRssMiB, rssMiB);
      const step = {
        cidrs,
        variant,
        writeMs: swap.ms,
        stallMs,
        rssMiB,
        heapTotalMiB: mib('nodejs_heap_size_total_bytes'),
        heapUsedMiB: mib('nodejs_heap_size_used_bytes'),
        externalMiB: mib('nodejs_external_memory_bytes'),
      };
      steps.push(step);
    }
    const settleRssMiB: number[] = [];
    for (let i = 0; i < settleMarks; i++) {
      await sleep(10_000);
      settleRssMiB.push(session.rssKiB().total / 1024);
    }
    return { idleRssMiB, steps, maxRssMiB, settleRssMiB };
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const result = await benchChurn();
  console.log(JSON.stringify(result, null, 2));
}
