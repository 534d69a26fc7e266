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
import {
  configText,
  inPlaceScripts,
  linearChainScript,
  ONE_CIDR_EDIT,
  renderScript,
} from './scripts.js';

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
  /** `nft -f` of the same-size script replacing a table already there (what the agent did). */
  nftReplaceMs: number;
  /** `nft -f` of the in-place change the agent writes for the same swap (every element replaced). */
  nftInPlaceMs: number;
  /**
   * File rename → /healthz shows the new generation, for a one-CIDR edit of this config with the
   * default layout (`auto`), median of the additions and removals together, and of each.
   */
  agentOneCidrMs: number;
  agentOneCidrAddMs: number;
  agentOneCidrRemoveMs: number;
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
  inPlace: number[];
  iptables: number[];
}

/** Bare `nft -f` (fresh, replace) and iptables-nft-restore of one size, one run each time it is called. */
async function bareRunner(scope: Scope, count: number) {
  const dir = await tempDir(scope);
  const files = [
    join(dir, 'a.nft'),
    join(dir, 'b.nft'),
    join(dir, 'linear.rules'),
    join(dir, 'agent-a.nft'),
  ] as const;
  const [agentFresh, agentChange] = inPlaceScripts(count, 0, 1);
  const changeFiles = agentChange.map((_, i) => join(dir, `agent-a-to-b-${i}.nft`));
  await writeFile(files[0], renderScript(count, 0));
  await writeFile(files[1], renderScript(count, 1));
  await writeFile(files[2], linearChainScript(count));
  await writeFile(files[3], agentFresh);
  for (const [i, script] of agentChange.entries()) await writeFile(changeFiles[i] ?? '', script);
  const ns = await netns(scope, 'bench-bare');
  const bare: Bare = { fresh: [], replace: [], inPlace: [], iptables: [] };
  const run = async () => {
    await timedIn(ns, 'nft', ['flush', 'ruleset']);
    bare.fresh.push(await timedInside(ns, 'nft', ['-f', files[0]]));
    bare.replace.push(await timedInside(ns, 'nft', ['-f', files[1]]));
    await timedIn(ns, 'nft', ['flush', 'ruleset']);
    await timedInside(ns, 'nft', ['-f', files[3]]);
    let inPlace = 0;
    for (const file of changeFiles) inPlace += await timedInside(ns, 'nft', ['-f', file]);
    bare.inPlace.push(inPlace);
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
    // One CIDR short of the first size, so that the first swap to it is a write.
    const edits = await AgentSession.start(
      scope,
      Math.min(...sizes) - 1,
      ['--conntrack-flush=none', '--set-layout', 'auto'],
      5000,
    );
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
      // The everyday edit: one CIDR added to, then removed from, the config the kernel holds, on
      // an agent with the default layout (the session above writes the interval one, which bare
      // `nft -f` is compared with).
      await edits.swapText(configText(count, 0));
      const added: number[] = [];
      const removed: number[] = [];
      for (let run = 0; run < runs; run++) {
        await sleep(SWAP_GAP_MS);
        const extra = run % 2 === 0 ? [ONE_CIDR_EDIT] : [];
        const { ms: editMs } = await edits.swapText(configText(count, 0, '3600s', extra));
        (run % 2 === 0 ? added : removed).push(editMs);
      }
      if (runs % 2 === 1) {
        await sleep(SWAP_GAP_MS);
        removed.push((await edits.swapText(configText(count, 0))).ms);
      }
      const oneCidr = [...added, ...removed];
      rows.push({
        cidrs: count,
        agentMs: median(ms),
        agentSyncMs: median(sync),
        agentApplyMs: median(apply),
        nftFreshMs: median(bare.fresh),
        nftReplaceMs: median(bare.replace),
        nftInPlaceMs: median(bare.inPlace),
        agentOneCidrMs: median(oneCidr),
        agentOneCidrAddMs: median(added),
        agentOneCidrRemoveMs: median(removed),
        iptablesMs: median(bare.iptables),
      });
      console.error(
        `bench: write ${count}: agent ${ms.map(Math.round).join(' ')} ms, bare in place ${bare.inPlace.map(Math.round).join(' ')} ms, one CIDR (auto) added ${added.map(Math.round).join(' ')} ms, removed ${removed.map(Math.round).join(' ')} ms`,
      );
    }
    return { rows, busyLatencies, busyCidrs: Math.max(...sizes), idleLatencies };
  });
}
