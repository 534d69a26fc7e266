// The neighbour side: what our table costs another nftables user — a
// kube-proxy-like transaction with one flat `add element` — by set size and set layout.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { median, netns, tempDir, timedIn, timedInside, withScope } from './harness.js';
import { CONCAT_LAYOUTS, NEIGHBOUR_SCRIPT, renderScript } from './scripts.js';
import { concatName, OURS } from './dataplane.js';

export const NONE = 'no table of ours';

export interface NeighbourRow {
  layout: string;
  cidrs: number;
  /** The neighbour's transaction, median. */
  neighbourMs: number;
  /** The same transaction in an empty namespace, interleaved run for run with the above, median. */
  noneMs: number;
  /** Loading our table in this layout (nft -f, table absent). */
  loadMs: number;
  /** `nft list table ip ipmasq`: what a drift check by listing would pay. */
  listMs: number;
}

export interface NeighbourResults {
  rows: NeighbourRow[];
  /** The first lines `nft list set ip ipmasq nonmasq` prints per layout, at the smallest size. */
  listings: Map<string, string>;
}

interface Variant {
  name: string;
  sizes: readonly number[];
  layout: 'interval' | 'concat';
}

export async function benchNeighbour(
  oursSizes: readonly number[],
  concatSizes: readonly number[],
  runs: number,
): Promise<NeighbourResults> {
  return withScope(async (scope) => {
    const dir = await tempDir(scope);
    const ns = await netns(scope, 'bench-nbr');
    const empty = await netns(scope, 'bench-nbr0');
    const neighbourFile = join(dir, 'neighbour.nft');
    await writeFile(neighbourFile, NEIGHBOUR_SCRIPT);
    // Interleaved with and without our table, so load that drifts over the run hits both alike.
    const neighbour = async () => {
      const withTable: number[] = [];
      const without: number[] = [];
      for (let run = 0; run < runs; run++) {
        without.push(await timedInside(empty, 'nft', ['-f', neighbourFile]));
        withTable.push(await timedInside(ns, 'nft', ['-f', neighbourFile]));
      }
      return { neighbourMs: median(withTable), noneMs: median(without) };
    };

    const alone = await neighbour();
    const rows: NeighbourRow[] = [
      {
        layout: NONE,
        cidrs: 0,
        neighbourMs: alone.noneMs,
        noneMs: alone.noneMs,
        loadMs: 0,
        listMs: 0,
      },
    ];
    const listings = new Map<string, string>();
    const variants: Variant[] = [
      { name: OURS, sizes: oursSizes, layout: 'interval' },
      ...CONCAT_LAYOUTS.map((layout) => ({
        name: concatName(layout.name),
        sizes: concatSizes,
        layout: 'concat' as const,
      })),
    ];
    for (const variant of variants) {
      for (const count of variant.sizes) {
        const file = join(dir, 'table.nft');
        await writeFile(file, renderScript(count, 0, variant.layout));
        await timedIn(ns, 'nft', ['flush', 'ruleset']);
        const loadMs = await timedInside(ns, 'nft', ['-f', file], 600_000);
        const listMs = await timedInside(ns, 'nft', ['list', 'table', 'ip', 'ipmasq'], 600_000);
        if (!listings.has(variant.name)) {
          const { stdout } = await timedIn(ns, 'nft', ['list', 'set', 'ip', 'ipmasq', 'nonmasq']);
          listings.set(variant.name, stdout.split('\n').slice(0, 8).join('\n'));
        }
        const row = { layout: variant.name, cidrs: count, ...(await neighbour()), loadMs, listMs };
        rows.push(row);
        console.error(`bench: neighbour ${variant.name} ${count}: ${JSON.stringify(row)}`);
      }
    }
    await timedIn(ns, 'nft', ['flush', 'ruleset']);
    return { rows, listings };
  });
}
