// Existing flows follow a config change (docs/writes.md, "Existing flows"): after a write that
// changes the decision for some flows, the conntrack entries of exactly those flows are deleted, so
// that each one's next packet is decided by the new rules; every other entry stays. Never fatal to
// the write.
import { protocolText, UDP, UDPLITE } from '../protocols.js';
import type { Logger } from 'pino';
import {
  inRanges,
  normalise,
  parseAddress,
  parseCidr,
  type Range,
  subtract,
  familyOf,
  managedFamilies,
} from '../cidr/index.js';
import type { AddressFamily, Config } from '../config/types.js';
import {
  type Decision,
  decisionOf,
  JUDGED_ORDER,
  setRanges,
  type Decisive,
  type JudgedSlot,
  type ListStep,
  type TranslationFlags,
} from '../decision.js';
import { LATE_REPLIES_SET, LATE_REPLIES_SIZE } from '../nftables/objects.js';
import type { FlowPlan, FlowPolicy } from '../kernel/conntrack.js';
import type { CommitStep } from '../nftables/types.js';
import type { ConntrackPort } from '../kernel/ports.js';
import { decisionChangesOffThread, type DecisionChange } from './changed-ranges.js';
import type { AgentMetrics } from './metrics.js';

import type { ConntrackFlushMode } from './flush-modes.js';

export type { ConntrackFlushMode } from './flush-modes.js';

/**
 * How long a translated UDP flow still waiting for its first reply (a query in flight) keeps its
 * entry after a change that flips it: its answer comes back through the translation it was sent
 * with, then the entry goes and the flow's next packet is decided anew.
 */
export const IN_FLIGHT_GRACE_MS = 2_000;

export interface ConntrackDeps {
  readonly kernel: ConntrackPort;
  readonly mode: ConntrackFlushMode;
  readonly enableIPv6: boolean;
  /** --random-fully and --to-ports: the translations the decisions judged carry. */
  readonly flags: TranslationFlags;
  /** Our table's name: its late-replies set holds the replies let through during a flush. */
  readonly table: string;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  /** Told of each commit of ours besides the writes (the generation ids around it). */
  readonly onCommit?: (step: CommitStep) => void;
  /** Waits before the entries in flight go (tests pass a shorter one). */
  readonly graceMs?: number;
}

/**
 * What a config decides for a family's flows beside their destination, as the flush judges them:
 * the policy steps of its decision (decision.ts), each in FlowPolicy's slot its row names, and its
 * translation. The native judge evaluates the slots in JUDGED_ORDER, each policy step taking the
 * flows its list does not hold (skipped), then the destination's outcome; a decision it would judge
 * otherwise is refused here.
 */
export function flowPolicy(
  config: Decisive,
  family: AddressFamily,
  flags: TranslationFlags,
): FlowPolicy {
  return judgedPolicy(decisionOf(config, family, flags));
}

/** A decision's FlowPolicy (flowPolicy); throws for a decision the native judge would judge otherwise. */
export function judgedPolicy(decision: Decision): FlowPolicy {
  const { family } = decision;
  const slots: Partial<Record<JudgedSlot, ListStep>> = {};
  let last = 0;
  for (const step of decision.steps) {
    if (step.field === undefined) break;
    const at = JUDGED_ORDER.indexOf(step.slot);
    const policy = step.slot !== 'destination';
    if (
      at < last ||
      (policy && (slots[step.slot] || step.takes !== 'unlisted' || step.outcome !== 'skipped'))
    )
      throw new Error(`the flush cannot judge the ${step.key} step where the decision has it`);
    last = at;
    if (policy) slots[step.slot] = step;
  }
  const address = (text: string) => parseAddress(text).addr;
  const { snat } = decision.translation;
  return {
    sources: slots.sources ? setRanges(slots.sources.list, family) : null,
    interfaces: slots.interfaces ? slots.interfaces.list : null,
    snat: snat ? ([address(snat.first), address(snat.last)] as Range) : null,
  };
}

/** Whether two policies decide alike for every flow (all of their parts in normal form). */
export function samePolicy(a: FlowPolicy, b: FlowPolicy): boolean {
  const same = (x: readonly unknown[] | null, y: readonly unknown[] | null) =>
    x === y || (x !== null && y !== null && JSON.stringify(x, big) === JSON.stringify(y, big));
  return (
    same(a.sources as readonly unknown[] | null, b.sources as readonly unknown[] | null) &&
    same(a.interfaces, b.interfaces) &&
    same(a.snat, b.snat)
  );
}

/**
 * Sources judged alike by one decision before a change and one after (docs/egress-policy.md, "Pod
 * policies"): the node-wide config's, or a pod policy's. `only`: just these addresses; `except`:
 * every address but these; absent: every source (a config without pod policies, before and after).
 */
export interface SourceGroup {
  readonly before: Decisive;
  readonly after: Decisive;
  readonly only?: readonly bigint[];
  readonly except?: readonly bigint[];
}

/**
 * A family's sources grouped by which decision had them before a change and which has them after:
 * each address a pod policy decides before or after in a group of its own pair of deciders, and
 * every other address in the node-wide group.
 */
export function sourceGroups(before: Config, after: Config, family: AddressFamily): SourceGroup[] {
  const deciders = (config: Config) => {
    const byAddress = new Map<string, number>();
    config.podPolicies?.forEach((policy, index) => {
      for (const member of policy.members?.[family] ?? []) byAddress.set(member, index);
    });
    return byAddress;
  };
  const was = deciders(before);
  const now = deciders(after);
  if (was.size === 0 && now.size === 0) return [{ before, after }];
  const pairs = new Map<string, { x: number; y: number; addresses: bigint[] }>();
  const all: bigint[] = [];
  for (const member of new Set([...was.keys(), ...now.keys()])) {
    const x = was.get(member) ?? -1;
    const y = now.get(member) ?? -1;
    const address = parseCidr(member).addr;
    all.push(address);
    const key = `${x},${y}`;
    const pair = pairs.get(key) ?? { x, y, addresses: [] };
    pair.addresses.push(address);
    pairs.set(key, pair);
  }
  const decider = (config: Config, index: number): Decisive =>
    index < 0 ? config : config.podPolicies![index]!;
  return [
    { before, after, except: all },
    ...[...pairs.values()].map(({ x, y, addresses }) => ({
      before: decider(before, x),
      after: decider(after, y),
      only: addresses,
    })),
  ];
}

/** A policy whose sources are cut to a group's (only those, or all but those). */
export function restricted(
  policy: FlowPolicy,
  family: AddressFamily,
  group: Pick<SourceGroup, 'only' | 'except'>,
): FlowPolicy {
  if (!group.only && !group.except) return policy;
  const max = (1n << (family === 'ipv4' ? 32n : 128n)) - 1n;
  const base = (policy.sources as readonly Range[] | null) ?? [[0n, max] as Range];
  const points = (addresses: readonly bigint[]) => normalise(addresses.map((a) => [a, a] as Range));
  const sources = group.only
    ? points(group.only.filter((a) => inRanges(base, a)))
    : subtract(base, points(group.except ?? []));
  return { ...policy, sources };
}

const big = (_key: string, value: unknown) => (typeof value === 'bigint' ? String(value) : value);

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class ConntrackFlush {
  private readonly deps: ConntrackDeps;

  /** Flushes run one after another, beside the syncs: a sync never waits for one. */
  private queue: Promise<void> = Promise.resolve();
  /** Deletions of entries in flight, after their grace. */
  private later: Promise<void> = Promise.resolve();

  constructor(deps: ConntrackDeps) {
    this.deps = deps;
  }

  /**
   * Called once `after` is committed. `before` is what the kernel held until then. Returns at
   * once; the flush follows the ones queued before it. Deleting an entry is safe whatever was
   * committed since: its flow's next packet is decided by the rules in place then.
   */
  afterWrite(before: Config, after: Config, generation: number): void {
    if (this.deps.mode === 'none') return;
    this.queue = this.queue.then(() => this.flush(before, after, generation));
  }

  /** Resolves when every flush asked for so far has ended, its deletions after a grace too. */
  async settled(): Promise<void> {
    await this.queue;
    await this.later;
  }

  private async flush(before: Config, after: Config, generation: number): Promise<void> {
    const { logger } = this.deps;
    const started = performance.now();
    const families = managedFamilies(this.deps.enableIPv6).map((f) => f.name);
    const deleted: Record<string, Record<string, number>> = {};
    const summary = { lateRepliesHeld: 0, inFlight: 0, unjudged: 0 };
    // Each group of sources by what decided them before and after (pod policies,
    // docs/egress-policy.md "Pod policies"); without pod policies, one group of every source per
    // family, as before them.
    for (const family of families) {
      for (const group of sourceGroups(before, after, family)) {
        await this.flushGroup(family, group, generation, deleted, summary);
      }
    }
    logger.info(
      { generation, deleted, ...summary, durationMs: Math.round(performance.now() - started) },
      'deleted the conntrack entries of flows whose masquerade decision changed',
    );
  }

  private async flushGroup(
    label: AddressFamily,
    group: SourceGroup,
    generation: number,
    deleted: Record<string, Record<string, number>>,
    summary: { lateRepliesHeld: number; inFlight: number; unjudged: number },
  ): Promise<void> {
    const { logger, metrics } = this.deps;
    const { flags } = this.deps;
    const old = restricted(flowPolicy(group.before, label, flags), label, group);
    const now = restricted(flowPolicy(group.after, label, flags), label, group);
    const policyChanged = samePolicy(old, now) ? [] : [label];
    const changes = await decisionChangesOffThread(
      group.before,
      group.after,
      [label],
      policyChanged,
    ).catch((err: unknown) => {
      metrics.incConntrackFlushFailures();
      logger.error(
        { err, generation },
        'could not work out which flows changed their decision; no conntrack entry deleted',
      );
      return [] as DecisionChange[];
    });
    for (const change of changes) {
      if (change.exemptAfter === null && change.lost.length === 0 && change.gained.length === 0)
        continue;
      try {
        const plan = await this.deps.kernel.judgeFlows({
          family: change.family,
          protocols: this.deps.mode === 'udp' ? [UDP, UDPLITE] : [],
          lost: change.lost,
          gained: change.gained,
          exemptAfter: change.exemptAfter,
          before: old,
          after: now,
          // As many as the set holds, the most recently active flows first.
          holdMax: LATE_REPLIES_SIZE,
        });
        summary.unjudged += plan.unjudged;
        summary.lateRepliesHeld += await this.hold(plan, generation);
        this.count(deleted, label, await this.deps.kernel.deleteFlows(plan, 'now'));
        if (plan.later > 0) {
          summary.inFlight += plan.later;
          this.deleteLater(plan, label, generation);
        }
      } catch (err) {
        metrics.incConntrackFlushFailures();
        logger.error(
          { err, family: label, generation },
          'could not delete the conntrack entries of flows whose decision changed; they keep the old one until they end',
        );
      }
    }
  }

  /** Counts a deletion's entries in `into` and the metrics; a failure is thrown once counted. */
  private count(
    into: Record<string, Record<string, number>>,
    family: AddressFamily,
    result: Awaited<ReturnType<ConntrackPort['deleteFlows']>>,
  ): void {
    into[family] ??= {};
    for (const [protocol, count] of result.deleted) {
      const name = protocolText(protocol);
      into[family][name] = (into[family][name] ?? 0) + count;
      this.deps.metrics.addConntrackFlushed(family, name, count);
    }
    if (result.error !== undefined) throw new Error(result.error);
  }

  /**
   * Before the entries go: the replies of their untranslated UDP flows, still on their way to the
   * pod's own address, are let through untracked for a moment (our table's late-replies set, before
   * conntrack), so that none starts an entry the other way round. Returns how many; a failure is
   * logged and the flush goes on without.
   */
  private async hold(plan: FlowPlan, generation: number): Promise<number> {
    if (plan.hold === 0) return 0;
    try {
      this.deps.onCommit?.(
        await this.deps.kernel.holdReplies(plan, this.deps.table, LATE_REPLIES_SET),
      );
      return plan.hold;
    } catch (err) {
      this.deps.logger.warn(
        { err, family: familyOf(plan.family).table, generation },
        'could not let late replies through during the conntrack flush; a flow to a slow peer may keep its old decision',
      );
      return 0;
    }
  }

  /** The entries in flight go after their grace, beside later flushes. */
  private deleteLater(plan: FlowPlan, family: AddressFamily, generation: number): void {
    const { logger, metrics } = this.deps;
    const grace = this.deps.graceMs ?? IN_FLIGHT_GRACE_MS;
    this.later = Promise.all([this.later, sleep(grace)]).then(async () => {
      const deleted: Record<string, Record<string, number>> = {};
      try {
        this.count(deleted, family, await this.deps.kernel.deleteFlows(plan, 'later'));
        logger.info(
          { generation, deleted },
          'deleted the conntrack entries of flows that had a query in flight at the change',
        );
      } catch (err) {
        metrics.incConntrackFlushFailures();
        logger.error(
          { err, family, generation },
          'could not delete the conntrack entries of flows in flight at the change; they keep the old decision until they end',
        );
      }
    });
  }
}
