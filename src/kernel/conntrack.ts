// Conntrack's records, as the agent asks the kernel about them and is answered (docs/writes.md,
// "Existing flows"; docs/observability.md, "What the node's NAT does"): what the flush judges and
// deletes, and what a NAT sample counts. The room that answers is ConntrackPort (ports.ts).
import type { Range, RangeList } from '../cidr/index.js';

/**
 * What one config decides for a family's flows beside their destination, as the conntrack flush
 * judges each entry by it (docs/writes.md, "Existing flows"): the senders it considers (null: every
 * one), the egress interfaces (null: every one; a trailing `*` a prefix), and the SNAT range it
 * translates to (null: masquerade). Ranges in normal form.
 */
export interface FlowPolicy {
  readonly sources: RangeList | null;
  readonly interfaces: readonly string[] | null;
  readonly snat: Range | null;
}

/** Which entries of a family a config change may flip, for the flush to judge one by one. */
export interface FlowJudgement {
  readonly family: 4 | 6;
  /** Protocol numbers looked at; empty: every one. */
  readonly protocols: readonly number[];
  /** Destinations exempt before the change only, and after it only. */
  readonly lost: RangeList;
  readonly gained: RangeList;
  /**
   * Every destination exempt after the change, given when the policies differ (then any may flip).
   */
  readonly exemptAfter: RangeList | null;
  readonly before: FlowPolicy;
  readonly after: FlowPolicy;
  /** At most this many replies held. */
  readonly holdMax: number;
}

/** The entries a judgement found to delete, kept by the kernel side until deleted. */
export interface FlowPlan {
  readonly family: 4 | 6;
  /** Entries of the family seen, and those whose egress interface the routing could not tell. */
  readonly seen: number;
  readonly unjudged: number;
  /** Entries deleted at once, and UDP ones with a query in flight deleted after a grace. */
  readonly now: number;
  readonly later: number;
  /** Replies of the untranslated UDP flows among `now`, to let through untracked for a moment. */
  readonly hold: number;
  /** The kernel side's own handle on the entries. */
  readonly handle: unknown;
}

/** What a deletion did: entries deleted by protocol number, and what failed. */
export interface DeletedFlows {
  readonly deleted: ReadonlyMap<number, number>;
  readonly error: string | undefined;
}

/** What a NAT sample asks for (addon.ts, natSample). */
export interface NatSampleRequest {
  readonly family: 4 | 6;
  /** The dump stops once its thread has used this much CPU. */
  readonly cpuBudgetS: number;
  /** Keep the flows by source and destination (--flows). */
  readonly bySource: boolean;
  /**
   * Only these original sources, and destinations (after DNAT), each list sorted and disjoint;
   * absent: all.
   */
  readonly from?: readonly Range[];
  readonly to?: readonly Range[];
}

/**
 * --flows' records (native/nat-stats.h, FlowRecords): one per (source, translated address,
 * destination, port, protocol), `stride` bytes each in `data`, in the order they are shown: by
 * their source's flows, then each source's destinations by flows.
 */
export interface NatRecords {
  readonly width: 4 | 16;
  readonly stride: number;
  readonly count: number;
  readonly data: Buffer;
}

/** A NAT sample: whether it ended within its budget, and its figures. */
export interface NatSample {
  readonly complete: boolean;
  readonly seen: number;
  readonly translated: number;
  readonly cpuS: number;
  /** [protocol number, translated flows, the busiest (address, destination, port)'s flows]. */
  readonly protocols: ReadonlyArray<readonly [number, number, number]>;
  /** With `bySource` only. */
  readonly records?: NatRecords;
}
