// The Kernel port: what the agent asks of the kernel, in four rooms, each its own interface
// (docs/design.md, "Data flow"). A module takes the rooms it uses; the adapter over the addon is
// kernel.ts, and tests stand a fake in its place (test/helpers/fake-kernel.ts).
import type {
  ChainInfo,
  CommitStep,
  CounterValue,
  ElementEdit,
  Elements,
  NamedSet,
  RuleShape,
  SetAudit,
  SetFill,
  TableRef,
  WriteOptions,
} from '../nftables/types.js';
import type {
  DeletedFlows,
  FlowJudgement,
  FlowPlan,
  NatSample,
  NatSampleRequest,
} from './conntrack.js';

/** A table of any family, as the kernel names it (`inet`, `bridge`, … as well as ours). */
export interface AnyTableRef {
  readonly family: string;
  readonly name: string;
}

/**
 * Our tables, as the agent writes, reads back and audits them: through libnftables for scripts
 * and listings, plain netlink for element writes, audits, comments, counters and the generation id.
 */
export interface TablesPort {
  /**
   * The table's listing as nft prints it, or null when it does not exist; `timeoutMs` bounds the
   * call (an NftError of kind `timeout` past it).
   */
  listTable(ref: TableRef, timeoutMs?: number): Promise<string | null>;
  /**
   * Runs one script as one transaction; the generation ids around it tell whether others committed.
   */
  apply(script: string, options?: WriteOptions): Promise<CommitStep>;
  /**
   * An element-only change as one transaction over netlink, without libnftables
   * (nftables/change.ts).
   */
  edit(edit: ElementEdit, options?: WriteOptions): Promise<CommitStep>;
  /** Sets no rule refers to yet filled as one transaction over netlink (SetFill). */
  fill(fill: SetFill, options?: WriteOptions): Promise<CommitStep>;
  /**
   * A set of ours read back over netlink and compared with these elements (the element-write
   * audit).
   */
  auditSet(ref: TableRef, set: NamedSet, elements: Elements): Promise<SetAudit>;
  /** The comments of a chain's rules in order, over netlink ("" for a rule without one). */
  ruleComments(ref: TableRef, chain: string): Promise<string[]>;
  /** The namespace's nftables generation id (moves on every commit by anyone). */
  generationId(): Promise<number>;
  /**
   * A table's named counters and their counts, from plain netlink ([] when the table is absent).
   */
  counters(ref: TableRef): Promise<CounterValue[]>;
  /** Whether the kernel's set holds `element` (for an interval set, a range containing it). */
  setHas(ref: TableRef, set: string, element: string): Promise<boolean>;
}

/** Everyone else's tables, only looked at (the look at other NAT on the node). */
export interface OthersPort {
  /**
   * Every table in the namespace, from plain netlink: works where libnftables cannot parse them.
   */
  tableNames(): Promise<AnyTableRef[]>;
  /**
   * Every chain in the namespace with its hook, from plain netlink (no libnftables, no set
   * elements).
   */
  chains(): Promise<ChainInfo[]>;
  /** One chain's rules as their expressions show them, from plain netlink. */
  ruleShapes(family: string, table: string, chain: string): Promise<RuleShape[]>;
  /**
   * These chains' rules as nft prints them, with handles and counters without values (`nft -a -s`).
   */
  listRules(
    chains: ReadonlyArray<{ family: string; table: string; chain: string }>,
  ): Promise<string>;
  /**
   * Whether libnftables can list this table (false when listing it crashes or hangs libnftables).
   */
  readable(ref: AnyTableRef): Promise<boolean>;
}

/**
 * The original agent's chain in iptables-nft's `ip nat` (docs/migration.md): found, and removed when
 * asked.
 */
export interface LegacyPort {
  /**
   * Which of these chains exist in iptables-nft's `ip nat` (the original agent's,
   * docs/migration.md).
   */
  legacyChains(names: readonly string[]): Promise<string[]>;
  /**
   * Deletes that chain and the POSTROUTING rules jumping to it, in one transaction: the rules
   * deleted.
   */
  removeLegacyChain(chain: string): Promise<number>;
}

/** Conntrack: the entries a change must delete, and the NAT figures, from plain netlink. */
export interface ConntrackPort {
  /**
   * The conntrack entries a config change must delete, judged one by one (docs/writes.md, "Existing
   * flows").
   */
  judgeFlows(request: FlowJudgement): Promise<FlowPlan>;
  /** Lets the plan's late replies through untracked for a moment: one commit to our table's set. */
  holdReplies(plan: FlowPlan, table: string, set: string): Promise<CommitStep>;
  /**
   * The family's source-translated conntrack entries, aggregated (docs/observability.md, "What the
   * node's NAT does").
   */
  natSample(request: NatSampleRequest): Promise<NatSample>;
  /** Deletes the plan's entries, at once (`now`) or those in flight after their grace (`later`). */
  deleteFlows(plan: FlowPlan, which: 'now' | 'later'): Promise<DeletedFlows>;
}

/**
 * Everything that touches the kernel, for reconcile and the CLI alike; a module that needs one
 * room of it takes that port.
 */
export interface Kernel extends TablesPort, OthersPort, LegacyPort, ConntrackPort {}
