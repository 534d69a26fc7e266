// Existing flows follow a config change (README, "Existing flows"): after a write that flips the
// decision for some destinations, the conntrack entries of flows to them are deleted, so each
// flow's next packet is decided by the new rules. Never fatal to the write.
import type { Logger } from 'pino';
import { lateRepliesSet } from '../nftables/objects.js';
import { symmetricDifference, type Range, type RangeList } from '../cidr/index.js';
import { snatText } from '../config/egress.js';
import type { AddressFamily, Config } from '../config/types.js';
import { setRanges } from '../decisions.js';
import type { FlowSelection } from '../nftables/addon.js';
import { renderLateReplies } from '../nftables/render.js';
import type { CommitStep, TableFamily } from '../nftables/types.js';
import { changedRangesOffThread } from './changed-ranges.js';
import type { Kernel } from '../nftables/kernel.js';
import type { AgentMetrics } from './metrics.js';

export const conntrackFlushModes = ['udp', 'all', 'none'] as const;
/** `udp`: UDP and UDP-Lite entries only; `all`: every protocol (resets TCP); `none`: keep them. */
export type ConntrackFlushMode = (typeof conntrackFlushModes)[number];

const UDP = 17;
const UDPLITE = 136;
const protocolNames = new Map([
  [1, 'icmp'],
  [6, 'tcp'],
  [UDP, 'udp'],
  [58, 'icmpv6'],
  [132, 'sctp'],
  [UDPLITE, 'udplite'],
]);

export function protocolName(protocol: number): string {
  return protocolNames.get(protocol) ?? String(protocol);
}

/**
 * How long the replies of a deleted UDP flow that still go to the pod's own address are dropped:
 * longer than the deletion itself takes plus a slow peer's round trip. A reply that arrived in that
 * time with its flow's entry gone would start an entry the other way round, without NAT, which the
 * pod's next datagrams match as replies: the flow would stay on its old decision while it lasts.
 * The next flush ends them at once (its flows are decided anew).
 */
export const LATE_REPLY_TIMEOUT_S = 3;

export interface ConntrackDeps {
  readonly kernel: Kernel;
  readonly mode: ConntrackFlushMode;
  readonly enableIPv6: boolean;
  /** Our table's name: its late-replies set holds the replies dropped during a flush. */
  readonly table: string;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  /** Told of each commit of ours besides the writes (the generation ids around it). */
  readonly onCommit?: (step: CommitStep) => void;
}

/** One flush of a family's entries: those to `ranges`, narrowed by `selection`. */
interface FlushPart {
  readonly family: 4 | 6;
  readonly ranges: RangeList;
  readonly selection?: FlowSelection;
}

const EVERY: Record<4 | 6, Range[]> = {
  4: [[0n, 2n ** 32n - 1n]],
  6: [[0n, 2n ** 128n - 1n]],
};

/**
 * The flushes an egress policy change needs (README, "Egress policy"), beside those of destinations
 * whose decision flipped: a changed egressInterfaces, every flow of the family (conntrack does not
 * record the interface a flow leaves through); a changed sourceCIDRs, the flows of the senders that
 * joined or left it; a changed snatAddress, every translated flow, so that it is translated anew.
 */
export function policyFlushes(
  before: Config,
  after: Config,
  families: readonly AddressFamily[],
): FlushPart[] {
  const parts: FlushPart[] = [];
  for (const name of families) {
    const family = name === 'ipv4' ? 4 : 6;
    const interfaces = (c: Config) => (c.egress?.egressInterfaces ?? []).join();
    if (interfaces(before) !== interfaces(after)) {
      parts.push({ family, ranges: EVERY[family] });
      continue;
    }
    // Without sourceCIDRs every sender is considered.
    const senders = (c: Config) => {
      const listed = c.egress?.sourceCIDRs;
      return listed ? setRanges(listed[name], name) : EVERY[family];
    };
    const changed = symmetricDifference(senders(before), senders(after));
    if (changed.length > 0)
      parts.push({ family, ranges: EVERY[family], selection: { sources: changed } });
    const snat = (c: Config) => {
      const target = c.egress?.snat?.[name];
      return target ? snatText(target) : '';
    };
    if (snat(before) !== snat(after))
      parts.push({ family, ranges: EVERY[family], selection: { translatedOnly: true } });
  }
  return parts;
}

export class ConntrackFlush {
  private readonly deps: ConntrackDeps;

  /** Flushes run one after another, beside the syncs: a sync never waits for one. */
  private queue: Promise<void> = Promise.resolve();
  /** Until when (performance.now()) late replies written by a flush may still be held, per family. */
  private readonly heldUntil = new Map<4 | 6, number>();

  constructor(deps: ConntrackDeps) {
    this.deps = deps;
  }

  /**
   * Called once `after` is committed. `before` is what the kernel held until then, undefined when
   * not known (the first write of this process): then nothing is deleted. Returns at once; the
   * flush follows the ones queued before it. Deleting an entry is safe whatever was committed since:
   * its flow's next packet is decided by the rules in place then.
   */
  afterWrite(before: Config | undefined, after: Config, generation: number): void {
    if (this.deps.mode === 'none' || before === undefined) return;
    this.queue = this.queue.then(() => this.flush(before, after, generation));
  }

  /** Resolves when every flush asked for so far has ended. */
  settled(): Promise<void> {
    return this.queue;
  }

  private async flush(before: Config, after: Config, generation: number): Promise<void> {
    const { kernel, mode, logger, metrics } = this.deps;
    const started = performance.now();
    const families = this.deps.enableIPv6 ? (['ipv4', 'ipv6'] as const) : (['ipv4'] as const);
    const changes = await changedRangesOffThread(before, after, families).catch((err: unknown) => {
      metrics.incConntrackFlushFailures();
      logger.error(
        { err, generation },
        'could not work out which destinations changed; no conntrack entry deleted',
      );
      return [];
    });
    const parts: FlushPart[] = [...changes, ...policyFlushes(before, after, families)];
    if (parts.length === 0) return;
    const protocols = mode === 'udp' ? [UDP, UDPLITE] : [];
    const deleted: Record<string, Record<string, number>> = {};
    let guarded = 0;
    for (const { family, ranges, selection } of parts) {
      const label = family === 4 ? ('ipv4' as const) : ('ipv6' as const);
      try {
        guarded += await this.dropLateReplies(family, ranges, generation, selection);
        const result = await kernel.flushConntrack(family, protocols, ranges, selection);
        deleted[label] ??= {};
        for (const [protocol, count] of result.deleted) {
          const name = protocolName(protocol);
          deleted[label][name] = (deleted[label][name] ?? 0) + count;
          metrics.addConntrackFlushed(label, name, count);
        }
        if (result.error !== undefined) throw new Error(result.error);
      } catch (err) {
        metrics.incConntrackFlushFailures();
        logger.error(
          { err, family: label, generation },
          'could not delete the conntrack entries of flows whose decision changed; they keep the old one until they end',
        );
      }
    }
    logger.info(
      {
        generation,
        deleted,
        lateRepliesDropped: guarded,
        durationMs: Math.round(performance.now() - started),
      },
      'deleted the conntrack entries of flows whose masquerade decision changed',
    );
  }

  /**
   * Before the entries go: the replies of their UDP flows that come back to the pod's own address
   * are dropped for LATE_REPLY_TIMEOUT_S, through our table's late-replies set. Returns how many
   * flows were so guarded; a failure to write them is logged and the flush goes on without.
   */
  private async dropLateReplies(
    family: 4 | 6,
    ranges: RangeList,
    generation: number,
    selection?: FlowSelection,
  ): Promise<number> {
    const { kernel, logger, table } = this.deps;
    const tableFamily: TableFamily = family === 4 ? 'ip' : 'ip6';
    // A translated flow's replies go to the node's address, never the pod's: nothing to hold.
    if (selection?.translatedOnly) return 0;
    try {
      const replies = await kernel.conntrackReplies(family, ranges, selection);
      // The replies held back by an earlier flush go first: their flows may be exempt again now.
      const held = (this.heldUntil.get(family) ?? 0) > performance.now();
      if (replies.length === 0 && !held) return 0;
      const script = renderLateReplies(
        tableFamily,
        table,
        lateRepliesSet(tableFamily),
        replies,
        LATE_REPLY_TIMEOUT_S,
      );
      const step = await kernel.apply(script);
      this.deps.onCommit?.(step);
      const until = replies.length > 0 ? performance.now() + LATE_REPLY_TIMEOUT_S * 1000 : 0;
      this.heldUntil.set(family, until);
      return replies.length;
    } catch (err) {
      logger.warn(
        { err, family: tableFamily, generation },
        'could not hold back late replies during the conntrack flush; a flow to a slow peer may keep its old decision',
      );
      return 0;
    }
  }
}
