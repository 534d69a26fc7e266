// Config write → kernel through the running agent, against bare
// `nft -f` of the same script and the original agent's iptables-nft-restore; /healthz latency
// while the largest transaction applies.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AgentSession } from './agent-session.js';
import {
  median,
  netns,
  type Scope,
  sleep,
  tempDir,
  timedIn,
  timedInside,
  withScope,
} from './harness.js';
import { linearChainScript, renderScript } from './scripts.js';

export interface WriteRow {
  cidrs: number;
  /** File rename → /healthz shows the new generation, median. */
  agentMs: number;
  /** The agent's own sync duration (config read, compile, transaction), median. */
  agentSyncMs: number;
  /** Of which the libnftables transaction (the log's applyMs), median; NaN if not logged. */
  agentApplyMs: number;
  /** `nft -f` of the --render script into a namespace without the table. */
  nftFreshMs: number;
  /** `nft -f` of the same-size script replacing a table already there (what the agent does). */
  nftReplaceMs: number;
  iptablesMs: number;
}

export interface WriteResults {
  rows: WriteRow[];
  /** /healthz request latencies while the largest config was applied. */
  busyLatencies: number[];
  busyCidrs: number;
  idleLatencies: number[];
}

/**
 * Quiet time before each swap. The agent starts syncs at least 100 ms apart (src/reconcile/runner.ts),
 * so a swap right after the previous write would wait that out: this measures one config change.
 */
const SWAP_GAP_MS = 250;

interface Bare {
  fresh: number[];
  replace: number[];
  iptables: number[];
}

/** Bare `nft -f` (fresh, replace) and iptables-nft-restore of one size, one run each time it is called. */
async function bareRunner(scope: Scope, count: number) {
  const dir = await tempDir(scope);
  const files = [join(dir, 'a.nft'), join(dir, 'b.nft'), join(dir, 'linear.rules')] as const;
  await writeFile(files[0], renderScript(count, 0));
  await writeFile(files[1], renderScript(count, 1));
  await writeFile(files[2], linearChainScript(count));
  const ns = await netns(scope, 'bench-bare');
  const bare: Bare = { fresh: [], replace: [], iptables: [] };
  const run = async () => {
    await timedIn(ns, 'nft', ['flush', 'ruleset']);
    bare.fresh.push(await timedInside(ns, 'nft', ['-f', files[0]]));
    bare.replace.push(await timedInside(ns, 'nft', ['-f', files[1]]));
    await timedIn(ns, 'nft', ['flush', 'ruleset']);
    bare.iptables.push(await timedInside(ns, 'iptables-nft-restore', [files[2]]));
  };
  return { bare, run };
}

export async function benchWrites(sizes: readonly number[], runs: number): Promise<WriteResults> {
  return withScope(async (scope) => {
    // Each swap flips every CIDR: with the default flush, each write would share the CPU with the
    // previous one's conntrack flush. The flush is measured on its own (conntrack.ts).
    const session = await AgentSession.start(scope, 64, ['--conntrack-flush=none'], 5000);
    const idleLatencies = await session.sampleHealth(300, 2);
    const rows: WriteRow[] = [];
    let busyLatencies: number[] = [];
    // The agent started on variant 0; alternating variants makes every write replace every element.
    let writes = 0;
    const nextVariant = (): 0 | 1 => (++writes % 2 === 1 ? 1 : 0);
    for (const count of sizes) {
      const { bare, run: bareRun } = await bareRunner(scope, count);
      const ms: number[] = [];
      const sync: number[] = [];
      const apply: number[] = [];
      const latencies: number[] = [];
      await session.swapConfig(count, nextVariant()); // warm-up: the first write at a size is not counted
      // The agent's swaps and the bare runs alternate, so load that drifts over the run hits both.
      for (let run = 0; run < runs; run++) {
        await sleep(SWAP_GAP_MS);
        const result = await session.swapConfig(count, nextVariant());
        ms.push(result.ms);
        latencies.push(...result.latencies);
        const syncMs = session.writeLogMs(result.generation, 'durationMs');
        const applyMs = session.writeLogMs(result.generation, 'applyMs');
        if (syncMs !== undefined) sync.push(syncMs);
        if (applyMs !== undefined) apply.push(applyMs);
        await bareRun();
      }
      if (count === Math.max(...sizes)) busyLatencies = latencies;
      rows.push({
        cidrs: count,
        agentMs: median(ms),
        agentSyncMs: median(sync),
        agentApplyMs: median(apply),
        nftFreshMs: median(bare.fresh),
        nftReplaceMs: median(bare.replace),
        iptablesMs: median(bare.iptables),
      });
      console.error(
        `bench: write ${count}: agent ${ms.map(Math.round).join(' ')} ms, bare ${bare.fresh.map(Math.round).join(' ')} ms`,
      );
    }
    return { rows, busyLatencies, busyCidrs: Math.max(...sizes), idleLatencies };
  });
}
