// Other tables' nat postrouting chains (docs/observability.md, "Other NAT on the node"): found from
// the kernel's chain and rule dumps, which carry no set's elements and need no libnftables; their
// rules printed by libnftables only when the chains' rules changed since the last look, and only
// when the kernel's expressions show one of them translating. A chain libnftables cannot print is
// reported as unreadable, from what the expressions show.
import type { OthersPort, TablesPort } from '../kernel/ports.js';
import { parseRuleListing } from '../nftables/listing.js';
import { nameProblem } from '../nftables/names.js';
import type { ChainInfo, ChainRules, ListedRule, RuleShape } from '../nftables/types.js';

/** The priority of our nat postrouting chains (`srcnat`), as the kernel numbers it. */
export const OUR_NAT_PRIORITY = 100;

/** Where another chain stands against ours: it decides first, after, or in no defined order. */
export type NatPosition = 'before' | 'after' | 'same';

export function positionOf(priority: number): NatPosition {
  return priority < OUR_NAT_PRIORITY ? 'before' : priority > OUR_NAT_PRIORITY ? 'after' : 'same';
}

/** Another table's base chain hooked at nat postrouting, with the chains it reaches. */
export interface NatChain {
  readonly family: string;
  readonly table: string;
  readonly chain: string;
  readonly priority: number;
  /** The base chain's and every reached chain's rules, printed; undefined when unreadable. */
  readonly rules: ChainRules | undefined;
  /** Why libnftables could not print them. */
  readonly unreadable?: string;
  /** Rules the kernel's expressions show translating, among all reached (marked or not). */
  readonly translating: number;
}

/** What a look found, and what a later look may reuse. */
export interface NatScan {
  readonly chains: readonly NatChain[];
  /** Every chain of the namespace (the original agent's leftover chain is looked for here). */
  readonly all: readonly ChainInfo[];
  /**
   * The look stopped at its budget (LOOK_CHAINS_MAX, LOOK_RULES_MAX, LOOK_TIME_MS): beyond was not
   * read.
   */
  readonly truncated: boolean;
  /**
   * The namespace's generation id read before the look: unchanged, the next look reuses this one.
   */
  readonly generation?: number;
}

const SCANNED_FAMILIES = new Set(['ip', 'ip6', 'inet']);

/**
 * The look's budget (docs/observability.md, "Other NAT on the node"): at most this many chains'
 * rules read per look (one netlink dump each), over all the base chains; the jumps beyond are not
 * followed.
 */
export const LOOK_CHAINS_MAX = 1_000;
/** At most this many rules read per look (over all the chains followed). */
export const LOOK_RULES_MAX = 20_000;
/**
 * At most this long spent following chains in one look (the prints that follow are not counted).
 */
export const LOOK_TIME_MS = 2_000;

interface Printed {
  readonly rules?: readonly ListedRule[];
  readonly unreadable?: string;
}

/**
 * What the last look printed, by chain (`FAMILY TABLE CHAIN`), with the rule handles it was printed
 * for: printed again only when they change (a changed rule has a new handle).
 */
export type ListingCache = Map<string, { readonly handles: string; readonly printed: Printed }>;

export interface ScanOptions {
  /**
   * Awaited before each print with libnftables: the agent's writes go first
   * (reconcile/reconciler.ts).
   */
  readonly beforePrint?: () => Promise<void>;
  /**
   * The last look: returned as it is while nobody committed since (the generation id unchanged).
   */
  readonly last?: NatScan;
  readonly now?: () => number;
}

/** A base chain of another table at nat postrouting, the chains its rules reach, and how many translate. */
interface Walked {
  readonly base: ChainInfo;
  readonly reached: Map<string, RuleShape[]>;
  readonly translating: number;
}

type NatKernel = OthersPort & Pick<TablesPort, 'generationId'>;

/**
 * Finds the base chains of tables other than ours hooked at nat postrouting, follows their jumps
 * and gotos (at most LOOK_CHAINS_MAX chains), and prints the rules of the chains that reach a
 * translating rule: each chain once per distinct content (libnftables downloads the table's sets
 * for each print, docs/observability.md, "Other NAT on the node"), none while as the last look
 * printed them.
 */
export async function scanNatChains(
  kernel: NatKernel,
  ours: (family: string, table: string) => boolean,
  cache: ListingCache = new Map(),
  options: ScanOptions = {},
): Promise<NatScan> {
  // Nobody committed since the last look: nothing to read again (an idle look is this one read).
  const generation = await (async () => kernel.generationId())().catch(() => undefined);
  if (generation !== undefined && options.last?.generation === generation) return options.last;
  const all = await kernel.chains();
  const { walked, truncated } = await walkBaseChains(kernel, all, ours, options.now ?? Date.now);
  await printChanged(kernel, walked, cache, options.beforePrint);
  return {
    chains: walked.map((w) => chainOf(w, cache)),
    all,
    truncated,
    ...(generation !== undefined ? { generation } : {}),
  };
}

/** Each base chain of another table at nat postrouting walked, within the look's budget. */
async function walkBaseChains(
  kernel: NatKernel,
  all: readonly ChainInfo[],
  ours: (family: string, table: string) => boolean,
  now: () => number,
): Promise<{ walked: Walked[]; truncated: boolean }> {
  const started = now();
  const walked: Walked[] = [];
  let followed = 0;
  let rulesRead = 0;
  let truncated = false;
  for (const base of all) {
    const hook = base.hook;
    if (!hook || hook.type !== 'nat' || hook.name !== 'postrouting') continue;
    if (!SCANNED_FAMILIES.has(base.family) || ours(base.family, base.table)) continue;
    const reached = new Map<string, RuleShape[]>();
    const pending = [base.name];
    while (pending.length > 0) {
      const name = pending.shift()!;
      if (reached.has(name)) continue;
      if (
        followed >= LOOK_CHAINS_MAX ||
        rulesRead >= LOOK_RULES_MAX ||
        now() - started >= LOOK_TIME_MS
      ) {
        truncated = true;
        break;
      }
      followed++;
      const shapes = await kernel.ruleShapes(base.family, base.table, name).catch(() => []);
      rulesRead += shapes.length;
      reached.set(name, shapes);
      for (const shape of shapes) pending.push(...shape.jumps, ...(shape.mapJumps ?? []));
    }
    const translating = [...reached.values()].flat().filter((shape) => shape.translates).length;
    walked.push({ base, reached, translating });
  }
  return { walked, truncated };
}

const cacheKey = (base: ChainInfo, chain: string) => `${base.family} ${base.table} ${chain}`;

/**
 * Per table, every chain reached from a base chain that translates, printed where it changed; the
 * cache left holding those chains alone.
 */
async function printChanged(
  kernel: NatKernel,
  walked: readonly Walked[],
  cache: ListingCache,
  beforePrint: (() => Promise<void>) | undefined,
): Promise<void> {
  const byTable = new Map<string, { base: ChainInfo; reached: Map<string, RuleShape[]> }>();
  for (const { base, reached, translating } of walked) {
    if (translating === 0) continue;
    const key = `${base.family} ${base.table}`;
    const union = byTable.get(key) ?? { base, reached: new Map<string, RuleShape[]>() };
    for (const [name, shapes] of reached) union.reached.set(name, shapes);
    byTable.set(key, union);
  }
  const wanted = new Set<string>();
  for (const { base, reached } of byTable.values()) {
    const stale = [...reached]
      .filter(([name, shapes]) => cache.get(cacheKey(base, name))?.handles !== handles(shapes))
      .map(([name]) => name)
      .sort();
    for (const name of reached.keys()) wanted.add(cacheKey(base, name));
    if (stale.length === 0) continue;
    await beforePrint?.();
    const printed = await printRules(
      kernel,
      base,
      new Map(stale.map((name) => [name, reached.get(name)!])),
    );
    for (const name of stale) {
      const rules = printed.rules?.get(name);
      cache.set(cacheKey(base, name), {
        handles: handles(reached.get(name)!),
        printed: rules ? { rules } : { unreadable: printed.unreadable ?? '' },
      });
    }
  }
  for (const key of cache.keys()) if (!wanted.has(key)) cache.delete(key);
}

/** One walked base chain as the look reports it, its rules from the cache's prints. */
function chainOf({ base, reached, translating }: Walked, cache: ListingCache): NatChain {
  if (translating === 0) return { ...where(base), rules: new Map(), translating };
  const printed = [...reached.keys()].map(
    (name) => [name, cache.get(cacheKey(base, name))!.printed] as const,
  );
  const unreadable = printed.find(([, p]) => p.unreadable !== undefined)?.[1].unreadable;
  if (unreadable !== undefined)
    return { ...where(base), rules: undefined, unreadable, translating };
  // This base chain's own reach, out of the table's prints; where verdict maps lead as the kernel
  // says now (a named map's elements change without a new handle, and need no new print).
  const rules = new Map(
    printed.map(([name, p]) => [name, withBranches(p.rules ?? [], reached.get(name)!)]),
  );
  return { ...where(base), rules, translating };
}

function where(base: ChainInfo): Pick<NatChain, 'family' | 'table' | 'chain' | 'priority'> {
  return {
    family: base.family,
    table: base.table,
    chain: base.name,
    priority: base.hook!.priority,
  };
}

function withBranches(rules: readonly ListedRule[], shapes: readonly RuleShape[]): ListedRule[] {
  const branches = new Map(shapes.map((shape) => [shape.handle, shape.mapJumps ?? []]));
  return rules.map((rule) => {
    const to = branches.get(rule.handle);
    return to?.length ? { ...rule, branches: to } : rule;
  });
}

const handles = (shapes: readonly RuleShape[]) => shapes.map((shape) => shape.handle).join(',');

/** The reached chains' rules as nft prints them, paired with the kernel's shapes by handle. */
async function printRules(
  kernel: NatKernel,
  base: ChainInfo,
  reached: ReadonlyMap<string, readonly RuleShape[]>,
): Promise<{ rules?: ChainRules; unreadable?: string }> {
  // Names come from the kernel: only those nft can take go into a command.
  for (const name of [base.family, base.table, ...reached.keys()]) {
    if (nameProblem(name) && !/^(ip|ip6|inet)$/.test(name))
      return { unreadable: `its name ${JSON.stringify(name)} cannot be given to nft` };
  }
  let text: string;
  try {
    text = await kernel.listRules(
      [...reached.keys()].map((chain) => ({ family: base.family, table: base.table, chain })),
    );
  } catch (err) {
    return { unreadable: err instanceof Error ? err.message.split('\n')[0]! : String(err) };
  }
  const printed = parseRuleListing(text);
  const rules = new Map<string, ListedRule[]>();
  for (const [chain, shapes] of reached) {
    const byHandle = new Map((printed.get(chain) ?? []).map((rule) => [rule.handle, rule]));
    rules.set(
      chain,
      shapes.map((shape) => ({
        chain,
        handle: shape.handle,
        // A rule added between the dump and the listing is not printed: it stays a bare shape.
        text: byHandle.get(shape.handle)?.text ?? `(${shape.expressions.join(' ')})`,
        translates: shape.translates,
      })),
    );
  }
  return { rules };
}
