// Config write → kernel through the running agent, against bare
// `nft -f` of the same script and the original agent's iptables-nft-restore; /healthz latency
// while the largest transaction applies.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AgentSession } from './agent-session.js';
import { median, netns, tempDir, timedIn, timedInside, withScope } from './harness.js';
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
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function agentWrites(sizes: readonly number[], runs: number) {
  return withScope(async (scope) => {
    // Back-to-back swaps that flip every CIDR: with the default flush, each write would share the
    // CPU with the previous one's conntrack flush. The flush is measured on its own (conntrack.ts).
    const session = await AgentSession.start(scope, 64, ['--conntrack-flush=none'], 5000);
    const idleLatencies = await session.sampleHealth(300, 2);
    const perSize = new Map<
      number,
      { ms: number[]; sync: number[]; apply: number[]; latencies: number[] }
    >();
    // The agent started on variant 0; alternating variants makes every write replace every element.
    let writes = 0;
    const nextVariant = (): 0 | 1 => (++writes % 2 === 1 ? 1 : 0);
    for (const count of sizes) {
      const entry = {
        ms: [] as number[],
        sync: [] as number[],
        apply: [] as number[],
        latencies: [] as number[],
      };
      await session.swapConfig(count, nextVariant()); // warm-up: the first write at a size is not counted
      for (let run = 0; run < runs; run++) {
        await pause(SWAP_GAP_MS);
        const result = await session.swapConfig(count, nextVariant());
        entry.ms.push(result.ms);
        entry.latencies.push(...result.latencies);
        const sync = session.writeLogMs(result.generation, 'durationMs');
        const apply = session.writeLogMs(result.generation, 'applyMs');
        if (sync !== undefined) entry.sync.push(sync);
        if (apply !== undefined) entry.apply.push(apply);
      }
      perSize.set(count, entry);
      console.error(`bench: agent write ${count}: ${entry.ms.map(Math.round).join(' ')} ms`);
    }
    return { perSize, idleLatencies };
  });
}

async function bareWrites(count: number, runs: number) {
  return withScope(async (scope) => {
    const dir = await tempDir(scope);
    const files = [join(dir, 'a.nft'), join(dir, 'b.nft'), join(dir, 'linear.rules')];
    await writeFile(files[0] as string, renderScript(count, 0));
    await writeFile(files[1] as string, renderScript(count, 1));
    await writeFile(files[2] as string, linearChainScript(count));
    const ns = await netns(scope, 'bench-bare');
    const fresh: number[] = [];
    const replace: number[] = [];
    const iptables: number[] = [];
    for (let run = 0; run < runs; run++) {
      await timedIn(ns, 'nft', ['flush', 'ruleset']);
      fresh.push(await timedInside(ns, 'nft', ['-f', files[0] as string]));
      replace.push(await timedInside(ns, 'nft', ['-f', files[1] as string]));
      await timedIn(ns, 'nft', ['flush', 'ruleset']);
      iptables.push(await timedInside(ns, 'iptables-nft-restore', [files[2] as string]));
    }
    return { fresh: median(fresh), replace: median(replace), iptables: median(iptables) };
  });
}

export async function benchWrites(sizes: readonly number[], runs: number): Promise<WriteResults> {
  const { perSize, idleLatencies } = await agentWrites(sizes, runs);
  const rows: WriteRow[] = [];
  for (const count of sizes) {
    const bare = await bareWrites(count, runs);
    const agent = perSize.get(count);
    rows.push({
      cidrs: count,
      agentMs: median(agent?.ms ?? []),
      agentSyncMs: median(agent?.sync ?? []),
      agentApplyMs: median(agent?.apply ?? []),
      nftFreshMs: bare.fresh,
      nftReplaceMs: bare.replace,
      iptablesMs: bare.iptables,
    });
    console.error(`bench: bare write ${count}: ${JSON.stringify(bare)}`);
  }
  const busyCidrs = Math.max(...sizes);
  return { rows, busyLatencies: perSize.get(busyCidrs)?.latencies ?? [], busyCidrs, idleLatencies };
}
