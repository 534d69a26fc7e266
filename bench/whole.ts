// A whole change with the agent's defaults (every CIDR replaced; `--set-layout auto`: the interval
// set up to 2 000 elements, the concatenated sets above, made anew), from the rename to `/healthz`
// showing the new generation, against bare `nft -f` of a fresh table of the same content in a
// namespace of its own. The two are measured in turn (A, B, A, B), so that load drifting over the
// run weighs on both. No agent is alive during a bare run: while any process on the host listens to
// nf_tables' notifications (the agent's commit monitor, in whatever namespace), the kernel makes a
// notification of every element of every commit in every namespace (its listener bitmap is one for
// the host), which made bare `nft -f` of 100 000 elements 1.5–2.7× slower beside a running agent. So
// each run starts an agent of its own, measures its whole change, and stops it before bare `nft -f`.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AgentSession } from './agent-session.js';
import { netns, sleep, tempDir, timedIn, timedInside, withScope } from './harness.js';
import { renderScript } from './scripts.js';

export interface WholeRow {
  cidrs: number;
  /** Rename → /healthz, each run. */
  agentMs: number[];
  /** Of which the write (the log's applyMs) and the config's load (loadMs), each run. */
  applyMs: number[];
  loadMs: number[];
  /** Bare `nft -f` of the same table into an empty namespace, each run, between the agent's. */
  bareMs: number[];
}

/** Quiet time before each swap: the agent starts syncs at least 100 ms apart. */
const SWAP_GAP_MS = 250;

export async function benchWhole(
  sizes: readonly number[] = [64, 1_000, 100_000],
  runs = 5,
): Promise<WholeRow[]> {
  return withScope(async (scope) => {
    const ns = await netns(scope, 'bench-whole');
    const dir = await tempDir(scope);
    const rows: WholeRow[] = [];
    for (const count of sizes) {
      const files = [join(dir, `${count}-0.nft`), join(dir, `${count}-1.nft`)] as const;
      await writeFile(files[0], renderScript(count, 0, 'auto'));
      await writeFile(files[1], renderScript(count, 1, 'auto'));
      const row: WholeRow = { cidrs: count, agentMs: [], applyMs: [], loadMs: [], bareMs: [] };
      // One run more than counted: the first warms the page cache and the kernel's slabs for both.
      for (let run = -1; run < runs; run++) {
        // The agent starts on variant 0 (its first write makes the table); the change is to 1.
        const session = await AgentSession.start(
          scope,
          count,
          ['--conntrack-flush=none', '--set-layout', 'auto'],
          120_000,
        );
        await sleep(SWAP_GAP_MS);
        const result = await session.swapConfig(count, 1);
        await session.stop();
        await timedIn(ns, 'nft', ['flush', 'ruleset']);
        const bareMs = await timedInside(ns, 'nft', ['-f', files[1]]);
        if (run < 0) continue;
        row.agentMs.push(result.ms);
        row.applyMs.push(session.writeLogMs(result.generation, 'applyMs') ?? NaN);
        row.loadMs.push(session.writeLogMs(result.generation, 'loadMs') ?? NaN);
        row.bareMs.push(bareMs);
      }
      console.error(
        `bench: whole change at ${count}: agent ${row.agentMs.map(Math.round).join(' ')} ms, bare nft -f fresh ${row.bareMs.map(Math.round).join(' ')} ms`,
      );
      rows.push(row);
    }
    return rows;
  });
}
