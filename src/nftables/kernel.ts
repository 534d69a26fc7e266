// The agent's one view of the kernel, all through the addon: nothing else in src/ runs nftables
// commands. Tests wrap it to count reads or stand in a fake (test/helpers/fake-kernel.ts).
import {
  auditSet,
  deleteFlows,
  holdReplies,
  judgeFlows,
  NftError,
  natSample,
  nftChains,
  nftCounters,
  nftGenerationId,
  nftRuleShapes,
  nftTableNames,
  commitNft,
  editElements,
  readNft,
  ruleComments,
  runNft,
} from './addon.js';
import type {
  ChainInfo,
  CommitStep,
  CounterValue,
  DeletedFlows,
  ElementEdit,
  Elements,
  FlowJudgement,
  FlowPlan,
  NatSample,
  NatSampleRequest,
  NamedSet,
  RuleShape,
  SetAudit,
  TableRef,
  WriteOptions,
} from './types.js';

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

/**
 * Everyone else's tables, only looked at (the look at other NAT, the original agent's chain, which
 * the agent may remove when asked).
 */
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
 * Which of these names are chains of iptables-nft's `ip nat` in a chain dump (the original agent's,
 * docs/migration.md).
 */
export function legacyChainsIn(chains: readonly ChainInfo[], names: readonly string[]): string[] {
  return names.filter((name) =>
    chains.some((c) => c.family === 'ip' && c.table === 'nat' && c.name === name),
  );
}

/**
 * Everything that touches the kernel, for reconcile and the CLI alike; a module that needs one
 * room of it takes that port.
 */
export interface Kernel extends TablesPort, OthersPort, ConntrackPort {}

export { NftError };
export { libnftablesVersion } from './addon.js';

const NAT_TABLE = 'ip nat';
const POSTROUTING = 'POSTROUTING';

interface JsonRule {
  rule?: { handle?: number; expr?: Array<Record<string, unknown>> };
}

async function natChainExists(name: string): Promise<boolean> {
  try {
    await runNft(`list chain ${NAT_TABLE} ${name}`);
    return true;
  } catch (err) {
    if (err instanceof NftError && err.isNotFound()) return false;
    throw err;
  }
}

/** Handles of POSTROUTING rules in `ip nat` that jump to `chain`. */
async function jumpRuleHandles(chain: string): Promise<number[]> {
  if (!(await natChainExists(POSTROUTING))) return [];
  const listing = JSON.parse(
    await runNft(`list chain ${NAT_TABLE} ${POSTROUTING}`, { json: true }),
  ) as { nftables: JsonRule[] };
  return listing.nftables.flatMap((item) => {
    const jumps = item.rule?.expr?.some(
      (expr) => (expr.jump as { target?: string } | undefined)?.target === chain,
    );
    return jumps && typeof item.rule?.handle === 'number' ? [item.rule.handle] : [];
  });
}

const PROBE_FAMILY = /^(ip|ip6|inet|arp|bridge|netdev)$/;
const PROBE_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,255}$/;

export const nftKernel: Kernel = {
  async listTable(ref, timeoutMs) {
    try {
      return await runNft(
        `list table ${ref.family} ${ref.name}`,
        timeoutMs === undefined ? {} : { timeoutMs },
      );
    } catch (err) {
      if (err instanceof NftError && err.isNotFound()) return null;
      throw err;
    }
  },
  apply: commitNft,
  edit: editElements,
  auditSet,
  ruleComments,
  generationId: nftGenerationId,
  tableNames: nftTableNames,
  chains: nftChains,
  ruleShapes: nftRuleShapes,
  async counters(ref) {
    try {
      return await nftCounters(ref.family, ref.name);
    } catch (err) {
      if (err instanceof NftError && err.isNotFound()) return [];
      throw err;
    }
  },
  async listRules(chains) {
    // A call per chain: libnftables 1.0.6 fills its cache for the last of several `list chain`
    // commands only, and fails the others. Names are checked by the caller (nat-chains.ts).
    // Reads only, beside our writes: never queued before one (docs/observability.md, "Other NAT on
    // the node").
    let text = '';
    for (const c of chains)
      text += await readNft(`list chain ${c.family} ${c.table} ${c.chain}`, { listing: true });
    return text;
  },
  async readable(ref) {
    // Names come from the kernel's dump, not from us: only a plain identifier goes into a command
    // (nft accepts no quoted table names); any other name is not probed.
    if (!PROBE_FAMILY.test(ref.family) || !PROBE_NAME.test(ref.name)) return true;
    try {
      await runNft(`list table ${ref.family} ${ref.name}`);
      return true;
    } catch (err) {
      return !(err instanceof NftError && (err.kind === 'crash' || err.kind === 'timeout'));
    }
  },
  async legacyChains(names) {
    // From the chain dump the look at other NAT makes too (reconcile/other-nat.ts).
    return legacyChainsIn(await nftChains(), names);
  },
  async removeLegacyChain(chain) {
    const handles = await jumpRuleHandles(chain);
    await commitNft(
      [
        ...handles.map((handle) => `delete rule ${NAT_TABLE} ${POSTROUTING} handle ${handle}`),
        `flush chain ${NAT_TABLE} ${chain}`,
        `delete chain ${NAT_TABLE} ${chain}`,
      ].join('\n'),
    );
    return handles.length;
  },
  async setHas(ref, set, element) {
    try {
      await runNft(`get element ${ref.family} ${ref.name} ${set} { ${element} }`);
      return true;
    } catch (err) {
      if (err instanceof NftError && err.isNotFound()) return false;
      throw err;
    }
  },
  judgeFlows,
  natSample,
  holdReplies,
  deleteFlows,
};
