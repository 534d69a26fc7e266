// A whole change with the agent's defaults (every CIDR replaced; `--set-layout auto`: the interval
// set up to 2 000 elements, the concatenated sets above, made anew), from the rename to `/healthz`
// showing the new generation, against bare `nft -f` of a fresh table of the same content in a
// namespace of its own. The two are measured in turn (A, B, A, B), so that load drifting over the
// run weighs on both.
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
    const first = Math.min(...sizes);
    const session = await AgentSession.start(
      scope,
      first,
      ['--conntrack-flush=none', '--set-layout', 'auto'],
      5000,
    );
    const ns = await netns(scope, 'bench-whole');
    const dir = await tempDir(scope);
    const rows: WholeRow[] = [];
    // The agent started on variant 0; alternating variants makes every write replace every CIDR.
    let variant: 0 | 1 = 0;
    const swap = async (count: number) => {
      variant = variant === 0 ? 1 : 0;
      return session.swapConfig(count, variant);
    };
    for (const count of sizes) {
      const files = [join(dir, `${count}-0.nft`), join(dir, `${count}-1.nft`)] as const;
      await writeFile(files[0], renderScript(count, 0, 'auto'));
      await writeFile(files[1], renderScript(count, 1, 'auto'));
      // Warm-up: the first write at a size (its layout switch, the worker's growth) not counted.
      await sleep(SWAP_GAP_MS);
      await swap(count);
      const row: WholeRow = { cidrs: count, agentMs: [], applyMs: [], loadMs: [], bareMs: [] };
      for (let run = 0; run < runs; run++) {
        await sleep(SWAP_GAP_MS);
        const result = await swap(count);
        row.agentMs.push(result.ms);
        row.applyMs.push(session.writeLogMs(result.generation, 'applyMs') ?? NaN);
        row.loadMs.push(session.writeLogMs(result.generation, 'loadMs') ?? NaN);
        await timedIn(ns, 'nft', ['flush', 'ruleset']);
        row.bareMs.push(await timedInside(ns, 'nft', ['-f', files[variant]]));
      }
      console.error(
        `bench: whole change at ${count}: agent ${row.agentMs.map(Math.round).join(' ')} ms, bare nft -f fresh ${row.bareMs.map(Math.round).join(' ')} ms`,
      );
      rows.push(row);
    }
    return rows;
  });
}
