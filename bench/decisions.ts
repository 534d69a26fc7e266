// Decisions counted in the kernel (docs/observability.md, "What the node's NAT does"): the cost per
// new flow with the counting statements beside the same table without them, and the cost of reading
// the counts (what a scrape does) at 64 and 100 000 CIDRs.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { inNetns, packageRoot } from '../harness/netns.js';
import { benchDataPath, OURS, UNCOUNTED, type FlowRow } from './dataplane.js';
import { netns, tempDir, withScope } from './harness.js';
import { renderScript } from './scripts.js';

export interface DecisionsResult {
  readonly flows: FlowRow[];
  readonly reads: Array<{ cidrs: number; readUs: number }>;
}

/**
 * The counters' read (exported for a look at it alone), in a namespace holding our table of `count`
 * CIDRs: median of `times`.
 */
export async function readCost(count: number, times: number): Promise<number> {
  return withScope(async (scope) => {
    const ns = await netns(scope, 'counters');
    const dir = await tempDir(scope);
    const file = join(dir, 'ours.nft');
    await writeFile(file, renderScript(count));
    await inNetns(ns, 'nft', ['-f', file], { timeoutMs: 300_000 });
    const probe =
      `const a = require(${JSON.stringify(join(packageRoot, 'build/Release/nftables_napi.node'))});` +
      `(async () => { const t = []; for (let i = 0; i < ${times}; i++) {` +
      ` const s = process.hrtime.bigint(); const c = await a.listCounters('ip', 'ipmasq');` +
      ` if (c.length !== 3) throw new Error('counters: ' + c.length);` +
      ` t.push(Number(process.hrtime.bigint() - s) / 1000); }` +
      ` t.sort((x, y) => x - y); console.log(t[Math.floor(t.length / 2)]); })();`;
    const { stdout } = await inNetns(ns, process.execPath, ['-e', probe]);
    return Number(stdout.trim());
  });
}

export async function benchDecisions(
  sizes: readonly number[] = [64, 100_000],
  batches = 7,
  batchMs = 300,
): Promise<DecisionsResult> {
  const { rows } = await benchDataPath(sizes, batches, batchMs, [OURS, UNCOUNTED]);
  const reads = [];
  for (const cidrs of sizes) reads.push({ cidrs, readUs: await readCost(cidrs, 200) });
  return { flows: rows, reads };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  benchDecisions().then(
    (result) => console.log(JSON.stringify(result, null, 2)),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
