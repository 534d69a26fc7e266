// Other tables' nat postrouting chains (README, "Other NAT on the node"): found from the kernel's
// chain and rule dumps, which carry no set's elements and need no libnftables; their rules printed
// by libnftables only when the chains' rules changed since the last look, and only when the kernel's
// expressions show one of them translating. A chain libnftables cannot print is reported as
// unreadable, from what the expressions show.
import type { Kernel } from './kernel.js';
import { parseRuleListing } from './listing.js';
import { nameProblem } from './names.js';
import type { ChainInfo, ChainRules, ListedRule, RuleShape } from './types.js';

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
}

const SCANNED_FAMILIES = new Set(['ip', 'ip6', 'inet']);

interface Printed {
  readonly rules?: ChainRules;
  readonly unreadable?: string;
}

/**
 * What the last look printed, by table, with the reached chains' rule handles it was printed for:
 * printed again only when they change (a changed rule has a new handle).
 */
export type ListingCache = Map<string, { readonly fingerprint: string; readonly printed: Printed }>;

/**
 * Finds the base chains of tables other than ours hooked at nat postrouting, follows their jumps and
 * gotos, and prints the rules of those that translate anything: one print per table for all the
 * chains its base chains reach (libnftables downloads the table's sets for each print, README,
 * "Other NAT on the node"), and none while they are as the last look printed them.
 */
export async function scanNatChains(
  kernel: Kernel,
  ours: (family: string, table: string) => boolean,
  cache: ListingCache = new Map(),
): Promise<NatScan> {
  const all = await kernel.chains();
  const bases: Array<{ base: ChainInfo; reached: Map<string, RuleShape[]>; translating: number }> =
    [];
  for (const base of all) {
    const hook = base.hook;
    if (!hook || hook.type !== 'nat' || hook.name !== 'postrouting') continue;
    if (!SCANNED_FAMILIES.has(base.family) || ours(base.family, base.table)) continue;
    const reached = new Map<string, RuleShape[]>();
    const pending = [base.name];
    while (pending.length > 0) {
      const name = pending.shift()!;
      if (reached.has(name)) continue;
      const shapes = await kernel.ruleShapes(base.family, base.table, name).catch(() => []);
      reached.set(name, shapes);
      for (const shape of shapes) pending.push(...shape.jumps);
    }
    const translating = [...reached.values()].flat().filter((shape) => shape.translates).length;
    bases.push({ base, reached, translating });
  }
  // Per table, every chain reached from a base chain that translates: printed together, once.
  const byTable = new Map<string, { base: ChainInfo; reached: Map<string, RuleShape[]> }>();
  for (const { base, reached, translating } of bases) {
    if (translating === 0) continue;
    const key = `${base.family} ${base.table}`;
    const union = byTable.get(key) ?? { base, reached: new Map<string, RuleShape[]>() };
    for (const [name, shapes] of reached) union.reached.set(name, shapes);
    byTable.set(key, union);
  }
  const printedByTable = new Map<string, Printed>();
  for (const [key, { base, reached }] of byTable) {
    const names = [...reached.keys()].sort();
    const fingerprint = names.map((name) => `${name}:${handles(reached.get(name)!)}`).join(' ');
    let printed = cache.get(key)?.fingerprint === fingerprint ? cache.get(key)!.printed : undefined;
    if (!printed) {
      printed = await printRules(
        kernel,
        base,
        new Map(names.map((name) => [name, reached.get(name)!])),
      );
      cache.set(key, { fingerprint, printed });
    }
    printedByTable.set(key, printed);
  }
  for (const key of cache.keys()) if (!byTable.has(key)) cache.delete(key);
  const found: NatChain[] = bases.map(({ base, reached, translating }) => {
    const printed = printedByTable.get(`${base.family} ${base.table}`);
    if (translating === 0 || !printed) return { ...where(base), rules: new Map(), translating };
    // This base chain's own reach, out of its table's print.
    const rules =
      printed.rules &&
      new Map([...reached.keys()].map((name) => [name, printed.rules!.get(name) ?? []]));
    return {
      ...where(base),
      rules,
      ...(printed.unreadable !== undefined ? { unreadable: printed.unreadable } : {}),
      translating,
    };
  });
  return { chains: found, all };
}

function where(base: ChainInfo): Pick<NatChain, 'family' | 'table' | 'chain' | 'priority'> {
  return {
    family: base.family,
    table: base.table,
    chain: base.name,
    priority: base.hook!.priority,
  };
}

const handles = (shapes: readonly RuleShape[]) => shapes.map((shape) => shape.handle).join(',');

/** The reached chains' rules as nft prints them, paired with the kernel's shapes by handle. */
async function printRules(
  kernel: Kernel,
  base: ChainInfo,
  reached: ReadonlyMap<string, readonly RuleShape[]>,
): Promise<Printed> {
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
