// Changes of a table of ours in place (docs/writes.md, "When it writes"; docs/design.md, "Writes on
// the wire"): which shape each set's change takes, as measured, and the transactions for each
// shape.
import { listWindow } from '../cidr/index.js';
import type { TransientObjects } from './listing.js';
import { STAND_IN_COMMENT, standInName } from './ownership.js';
import {
  counterBlock,
  elementList,
  renderChain,
  renderTable,
  setBlock,
  validateTable,
} from './render.js';
import {
  frozenElements,
  NO_ELEMENTS,
  type Chain,
  type CounterValue,
  type Elements,
  type NamedSet,
  type SetFill,
  type Table,
  type TableElementEdit,
} from './types.js';

/** The names of a table's sets that a change keeps or makes: all but the transient ones. */
function keyedNames(table: Table): string[] {
  return table.sets.filter((set) => !set.transient).map((set) => set.name);
}

/** The sets the kernel holds: those of `old` where it is known, else taken to be `next`'s. */
function presentSets(next: Table, old: Table | undefined, present?: ReadonlySet<string>) {
  return present ?? new Set(keyedNames(old ?? next));
}

/**
 * The change from `old` (what the kernel holds, exactly) to `next`, keeping the table, its chains
 * and its sets in place: element deletions and additions, the decision chain's rules only where
 * they differ, and the jump rule with the new write's mark. With `old` unknown (a table of ours
 * whose content is not known, of the same structure), every set is flushed and refilled and every
 * chain's rules rewritten: measured to open no window either (docs/design.md, "Writes on the
 * wire"). Additions are written inside a set block, which keeps nft's cache fill away.
 *
 * `present` names the sets the kernel holds (by default `old`'s, or else `next`'s). A set `next`
 * adds (the egress policy's, when its key first appears) is made, filled, in a transaction of its
 * own before the rest, since a rule may not refer to a set made in its own transaction without a
 * few new flows slipping past it; a set `next` drops is deleted last, once no rule refers to it.
 * Returns the transactions in order: one, or two when a set is made.
 */
export function renderInPlace(
  next: Table,
  old?: Table,
  present?: ReadonlySet<string>,
  remake?: TransientObjects,
): string[] {
  validateTable(next);
  const { family, name } = next;
  const held = presentSets(next, old, present);
  const made = next.sets.filter((set) => !set.transient && !held.has(set.name));
  const chains = chainChanges(next, old);
  // A set whose declaration changed (its comment: a pod policy's file) is made anew too, once the
  // chain that refers to it is gone, with all its elements.
  const remadeSets = next.sets.filter((set) => {
    const before = old?.sets.find((s) => s.name === set.name);
    return (
      !set.transient &&
      held.has(set.name) &&
      before !== undefined &&
      declared(before, family) !== declared(set, family)
    );
  });
  const { lines, additions } = elementChanges(next, old, held, remadeSets, chains.remade);
  // A verdict map the config no longer has is emptied first: its elements go to chains deleted
  // below (the map itself is deleted last, with the other sets).
  const wanted = new Set(next.sets.map((set) => set.name));
  for (const set of old?.sets ?? [])
    if (set.map && held.has(set.name) && !wanted.has(set.name))
      lines.push(`flush map ${family} ${name} ${set.name}`);
  // Chains the config no longer has, and those whose declaration changed (a pod policy's file in
  // another place: its comment), emptied and deleted once no map element goes to them; the
  // latter declared again, empty, before the elements that go to them.
  for (const chain of [...chains.gone, ...chains.remade])
    lines.push(`flush chain ${family} ${name} ${chain}`, `delete chain ${family} ${name} ${chain}`);
  for (const set of remadeSets)
    lines.push(`delete ${set.map ? 'map' : 'set'} ${family} ${name} ${set.name}`);
  const remadeDeclared = [
    ...next.chains
      .filter((chain) => chains.remade.includes(chain.name))
      .flatMap((chain) => renderChain({ ...chain, rules: [] })),
    ...remadeSets.flatMap((set) => setBlock(set, family)),
  ];
  // Counters the kernel may not hold yet (a table of a release before them): declaring one that
  // exists changes nothing, so where the old table is not known, all are declared.
  const counters = (next.counters ?? []).filter((counter) => !old?.counters?.includes(counter));
  additions.unshift(...remadeDeclared, ...counters.flatMap((counter) => counterBlock(counter)));
  if (additions.length > 0) lines.push(`table ${family} ${name} {`, ...additions, '}');
  lines.push(...ruleChanges(next, old, chains.remade, remake !== undefined));
  // Counters the config no longer has (a pod policy's), once no rule counts into them.
  for (const counter of old?.counters ?? [])
    if (!next.counters?.includes(counter))
      lines.push(`delete counter ${family} ${name} ${counter}`);
  for (const gone of [...held].filter((set) => !wanted.has(set)).sort()) {
    const map = old?.sets.find((set) => set.name === gone)?.map;
    lines.push(`delete ${map ? 'map' : 'set'} ${family} ${name} ${gone}`);
  }
  if (remake) lines.push(...remakeTransient(next, remake));
  const main = lines.join('\n') + '\n';
  // New sets and new chains (empty: their rules follow in the main transaction) come first, in a
  // transaction of their own.
  const first = [
    ...made.flatMap((set) => setBlock(set, family)),
    ...chains.added.flatMap((chain) => renderChain({ ...chain, rules: [] })),
  ];
  return first.length > 0
    ? [[`table ${family} ${name} {`, ...first, '}'].join('\n') + '\n', main]
    : [main];
}

/**
 * The element commands of renderInPlace for the sets kept in place: a set refilled, or its removed
 * elements deleted (`lines`) and its added ones declared in the table block (`additions`). A verdict
 * map's elements that go to a chain made anew go with it: deleted before it is, and added again once
 * it is back (each element names its chain by name).
 */
function elementChanges(
  next: Table,
  old: Table | undefined,
  held: ReadonlySet<string>,
  remadeSets: readonly NamedSet[],
  remadeChains: readonly string[],
): { lines: string[]; additions: string[] } {
  const { family, name } = next;
  const toRemade = (element: string) =>
    remadeChains.some((chain) => element.endsWith(` goto ${chain}`));
  const lines: string[] = [];
  const additions: string[] = [];
  for (const set of next.sets) {
    if (set.transient || !held.has(set.name) || remadeSets.includes(set)) continue;
    const before = old?.sets.find((s) => s.name === set.name);
    if (!before || setChange(set, before) === 'refill') {
      lines.push(`flush ${set.map ? 'map' : 'set'} ${family} ${name} ${set.name}`);
      if (set.elements.length > 0) additions.push(...setBlock(set, family));
      continue;
    }
    let { removed, added } = elementDiff(before.elements, set.elements);
    if (set.map && remadeChains.length > 0) {
      removed = frozenElements([
        ...removed,
        ...before.elements.filter((e) => toRemade(e) && !removed.includes(e)),
      ]);
      added = frozenElements([
        ...added,
        ...set.elements.filter((e) => toRemade(e) && !added.includes(e)),
      ]);
    }
    if (removed.length > 0) {
      lines.push(
        `delete element ${family} ${name} ${set.name} { ${elementList(set, removed, family)} }`,
      );
    }
    if (added.length > 0) additions.push(...setBlock(set, family, added));
  }
  return { lines, additions };
}

/**
 * The chains whose rules renderInPlace rewrites: those whose rules changed, or that are made anew
 * (the transient ones left out when they are remade apart). The jump rule carries the write's mark,
 * so its chain is rewritten at every write.
 */
function ruleChanges(
  next: Table,
  old: Table | undefined,
  remadeChains: readonly string[],
  transientApart: boolean,
): string[] {
  const { family, name } = next;
  const lines: string[] = [];
  for (const chain of next.chains) {
    if (transientApart && chain.transient) continue;
    const before = remadeChains.includes(chain.name)
      ? undefined
      : old?.chains.find((c) => c.name === chain.name);
    const same =
      before !== undefined &&
      before.rules.length === chain.rules.length &&
      before.rules.every((rule, i) => rule === chain.rules[i]);
    if (same) continue;
    lines.push(`flush chain ${family} ${name} ${chain.name}`);
    for (const rule of chain.rules) lines.push(`add rule ${family} ${name} ${chain.name} ${rule}`);
  }
  return lines;
}

/** A set's declaration without its elements: what cannot change in place. */
function declared(set: NamedSet, family: Table['family']): string {
  return setBlock({ ...set, elements: NO_ELEMENTS }, family).join('\n');
}

/**
 * The chains a change from `old` adds, deletes, or makes anew under the same name (a declaration
 * — its comment, its hook — cannot change in place), by name; none where `old` is not known (the
 * structure was compared instead: reconcile/converge.ts). The transient ones are made anew apart.
 */
export function chainChanges(
  next: Table,
  old: Table | undefined,
): { added: Chain[]; gone: string[]; remade: string[] } {
  if (!old) return { added: [], gone: [], remade: [] };
  const declaration = (chain: Chain) => JSON.stringify([chain.base ?? null, chain.comment ?? null]);
  const kept = next.chains.filter((chain) => !chain.transient);
  const before = new Map(old.chains.filter((c) => !c.transient).map((c) => [c.name, c]));
  const names = new Set(kept.map((chain) => chain.name));
  return {
    added: kept.filter((chain) => !before.has(chain.name)),
    gone: [...before.keys()].filter((chain) => !names.has(chain)),
    remade: kept
      .filter((chain) => {
        const was = before.get(chain.name);
        return was !== undefined && declaration(was) !== declaration(chain);
      })
      .map((chain) => chain.name),
  };
}

/**
 * The transient objects (the late replies' set and chain) made anew: those the kernel holds
 * deleted — a chain emptied first, a set once no rule refers to it — and the table's declared
 * again. They take no part in the decision, so no new flow is decided otherwise meanwhile.
 */
function remakeTransient(next: Table, remake: TransientObjects): string[] {
  const { family, name } = next;
  const lines: string[] = [];
  for (const chain of remake.chains) {
    lines.push(`flush chain ${family} ${name} ${chain}`, `delete chain ${family} ${name} ${chain}`);
  }
  for (const set of remake.sets) lines.push(`delete set ${family} ${name} ${set}`);
  const sets = next.sets.filter((set) => set.transient).flatMap((set) => setBlock(set, family));
  const chains = next.chains.filter((chain) => chain.transient).flatMap(renderChain);
  return [...lines, `table ${family} ${name} {`, ...sets, ...chains, '}'];
}

/**
 * How a set is best changed from `before`, by the costs docs/design.md ("Writes on the wire")
 * measured: an interval set takes deletions badly and a flush and refill well, a concatenated set
 * the other way round, so a large change of one is made on new sets (`rebuild`, the steps of
 * renderKeyChange). Additions alone are cheap in both.
 */
export function setChange(
  set: NamedSet,
  before: NamedSet | undefined,
): 'delta' | 'refill' | 'rebuild' {
  // nft 1.0.6 cannot delete a wildcard interface name ("element does not exist"): names are few,
  // and a flush and refill opens no window either.
  if (set.key.elements === 'names') return 'refill';
  // The pod policies' verdict map: pods come and go a few at a time, each an element edit.
  if (set.map) return before ? 'delta' : 'refill';
  const concat = set.key.elementSuffix !== '';
  const size = set.elements.length;
  if (!before) return concat && size > REFILL_CONCAT_MAX ? 'rebuild' : 'refill';
  // Only what lies between the common head and tail can differ; its length bounds the deletions.
  const { head, endBefore } = listWindow(before.elements, set.elements);
  const window = endBefore - head;
  if (window === 0) return 'delta';
  if (concat) {
    const allowed = Math.max(DELETE_CONCAT_MIN, size / 10);
    if (window <= allowed) return 'delta';
    // A large window is not compared element by element on the agent's thread: new sets.
    if (window > COMPARED_MAX) return 'rebuild';
    return elementDiff(before.elements, set.elements).removed.length > allowed
      ? 'rebuild'
      : 'delta';
  }
  if (size > DELETE_INTERVAL_SIZE) return 'refill';
  const removed = elementDiff(before.elements, set.elements).removed.length;
  return removed <= DELETE_INTERVAL_MAX ? 'delta' : 'refill';
}

type ElementDiff = { readonly removed: Elements; readonly added: Elements };

/**
 * The elements only `before` has and only `after` has. Both lists come sorted from the merge, and
 * an everyday edit changes a few in the middle: the common head and tail are skipped by comparing
 * in order, and only what lies between is compared as sets.
 */
export function elementDiff(before: Elements, after: Elements): ElementDiff {
  const { head, endBefore, endAfter } = listWindow(before, after);
  const was = before.slice(head, endBefore);
  const is = after.slice(head, endAfter);
  let diff: { removed: string[]; added: string[] };
  if (was.length === 0 || is.length === 0) {
    diff = { removed: was, added: is };
  } else {
    const had = new Set(was);
    const wanted = new Set(is);
    diff = { removed: was.filter((e) => !wanted.has(e)), added: is.filter((e) => !had.has(e)) };
  }
  return Object.freeze({
    removed: frozenElements(Object.freeze(diff.removed)),
    added: frozenElements(Object.freeze(diff.added)),
  });
}

const REFILL_CONCAT_MAX = 1_000;
const COMPARED_MAX = 10_000;
const DELETE_CONCAT_MIN = 100;
const DELETE_INTERVAL_MAX = 10;
const DELETE_INTERVAL_SIZE = 5_000;

/**
 * Whether changing `old` into `next` needs new sets (renderKeyChange) rather than renderInPlace. A
 * set the kernel does not hold yet (`present`, as renderInPlace takes it) is made anew either way.
 */
export function needsNewSets(
  next: Table,
  old: Table | undefined,
  present?: ReadonlySet<string>,
): boolean {
  const held = presentSets(next, old, present);
  return next.sets.some(
    (set) =>
      !set.transient &&
      held.has(set.name) &&
      setChange(
        set,
        old?.sets.find((s) => s.name === set.name),
      ) === 'rebuild',
  );
}

/** The temporary name of a set during a change of its key (the layout switch). */
export function nextSetName(name: string): string {
  return `${name}-next`;
}

/**
 * A change of the sets' key (the `auto` layout switch) as four transactions, each measured to open
 * no window (docs/design.md, "Writes on the wire"): rules may not reference a set created in their
 * own transaction without a few new flows slipping past it. 1: the new sets under temporary names,
 * filled; 2: the rules moved to them, the old sets deleted; 3: the new sets under their own names,
 * filled; 4: the rules moved back, the write's mark, the temporary sets deleted. Between steps the
 * decision is the old config's (1) or the new one's (2-4).
 */
export function renderKeyChange(
  next: Table,
  present?: ReadonlySet<string>,
  remake?: TransientObjects,
): string[] {
  validateTable(next);
  const { family, name } = next;
  // The pod policies' verdict map is keyed by source address whatever the layout: it stays.
  const keyed = next.sets.filter((set) => !set.transient && !set.map);
  // Every set of ours the kernel holds goes in step 2: those `next` keeps come back in step 3.
  const kept = new Set(next.sets.filter((set) => set.transient || set.map).map((set) => set.name));
  const held = [...presentSets(next, undefined, present)].filter((set) => !kept.has(set));
  const temporary = keyed.map((set) => ({ ...set, name: nextSetName(set.name) }));
  const toTemporary = (rule: string) =>
    keyed.reduce(
      (moved, set) => moved.replaceAll(`@${set.name} `, `@${nextSetName(set.name)} `),
      rule,
    );
  const moved: Table = {
    ...next,
    chains: next.chains.map((chain) =>
      chain.base ? chain : { ...chain, rules: chain.rules.map(toTemporary) },
    ),
  };
  // The counters the rules of step 2 count in, declared with the sets of step 1 (a no-op when
  // held).
  const block = (sets: readonly NamedSet[]) =>
    [
      `table ${family} ${name} {`,
      ...(next.counters ?? []).flatMap((counter) => counterBlock(counter)),
      ...sets.flatMap((set) => setBlock(set, family)),
      '}',
    ].join('\n') + '\n';
  const decisionRules = moved.chains
    .filter((chain) => !chain.base)
    .flatMap((chain) => [
      `flush chain ${family} ${name} ${chain.name}`,
      ...chain.rules.map((rule) => `add rule ${family} ${name} ${chain.name} ${rule}`),
    ]);
  // The elements are rendered once: the temporary sets' block differs only in the sets' names.
  const ownNames = block(keyed);
  const temporaryNames = keyed.reduce(
    (text, set) => text.replace(`\tset ${set.name} {\n`, `\tset ${nextSetName(set.name)} {\n`),
    ownNames,
  );
  return [
    temporaryNames,
    [...decisionRules, ...held.sort().map((set) => `delete set ${family} ${name} ${set}`)].join(
      '\n',
    ) + '\n',
    ownNames,
    // From the table of step 3, whose base chains are as before: their rules are rewritten too
    // (the jump rule takes this write's mark). A verdict map stayed through the steps with the
    // elements it had, not known here: flushed and filled in this same transaction.
    renderInPlace(
      next,
      {
        ...moved,
        sets: moved.sets.filter((set) => !set.map),
        chains: moved.chains.filter((chain) => !chain.base),
      },
      new Set(next.sets.filter((set) => !set.transient).map((set) => set.name)),
      remake,
    ).join('') + temporary.map((s) => `delete set ${family} ${name} ${s.name}\n`).join(''),
  ];
}

/**
 * renderKeyChange's four transactions with the large sets (filledApart) made empty in the first
 * and third, each filled over netlink right after (SetFill): a set no rule refers to yet, so no
 * packet sees it part filled, and a failure between leaves a table of ours whose structure the next
 * write reads back and changes on new sets again. Six steps, or renderKeyChange's four when no set
 * is that large.
 */
export function renderKeyChangeApart(
  next: Table,
  present?: ReadonlySet<string>,
  remake?: TransientObjects,
): Array<string | SetFill> {
  const apart = next.sets.filter(filledApart);
  if (apart.length === 0) return renderKeyChange(next, present, remake);
  const emptied: Table = {
    ...next,
    sets: next.sets.map((set) => (apart.includes(set) ? { ...set, elements: NO_ELEMENTS } : set)),
  };
  const [temporary, moved, own, rest] = renderKeyChange(emptied, present, remake) as [
    string,
    string,
    string,
    string,
  ];
  const fill = (name: (set: string) => string): SetFill => ({
    tables: [
      {
        family: next.family,
        table: next.name,
        sets: apart.map((set) => ({ ...set, name: name(set.name) })),
      },
    ],
  });
  return [temporary, fill(nextSetName), moved, own, fill((set) => set), rest];
}

/**
 * An older release's table made anew (README, "Reading `nft list table ip ipmasq`": its comment
 * holds a mark that can no longer change) with a table deciding alike in place at every moment:
 * a stand-in made, the old table deleted, the new one made, the stand-in deleted. A table is
 * always made without the rules of its base chains, which come in a transaction of their own:
 * made together with the sets they look up, they let a few new flows through undecided (measured:
 * 2 in 40 makings, 0 so; deleting a whole table let none through). The last transaction carries
 * the mark. `leftover`: a stand-in of an interrupted upgrade is there, and is made anew.
 */
export function renderUpgrade(
  table: Table,
  leftover: boolean,
  counts?: readonly CounterValue[],
): string[] {
  const { family } = table;
  const standIn: Table = { ...table, name: standInName(table.name), comment: STAND_IN_COMMENT };
  const unhooked = (t: Table, from?: readonly CounterValue[]) =>
    renderTable({ ...t, chains: t.chains.map((c) => (c.base ? { ...c, rules: [] } : c)) }, from);
  const hooks = (t: Table) =>
    t.chains
      .filter((c) => c.base)
      .flatMap((c) => c.rules.map((rule) => `add rule ${family} ${t.name} ${c.name} ${rule}\n`))
      .join('');
  const remove = (t: Table) => `delete table ${family} ${t.name}\n`;
  return [
    (leftover ? remove(standIn) : '') + unhooked(standIn),
    hooks(standIn),
    remove(table),
    // The new table's counters go on from the old one's (what the stand-in counted meanwhile is
    // lost).
    unhooked(table, counts),
    hooks(table) + remove(standIn),
  ];
}

/** A table's marked rule: the one rule of a base chain that carries a comment, and that comment. */
export function markedRule(
  table: Table,
): { chain: string; rule: string; mark: string } | undefined {
  for (const chain of table.chains) {
    if (!chain.base) continue;
    for (const rule of chain.rules) {
      const comment = splitComment(rule)?.comment;
      if (comment !== undefined) return { chain: chain.name, rule, mark: comment };
    }
  }
  return undefined;
}

/** The comment a rule ends with, and the rule without it. */
function splitComment(rule: string): { body: string; comment: string } | undefined {
  const match = / comment "([^"]*)"$/.exec(rule);
  return match ? { body: rule.slice(0, match.index), comment: match[1] as string } : undefined;
}

const sameList = <T>(a: readonly T[] | undefined, b: readonly T[] | undefined) =>
  (a ?? []).length === (b ?? []).length && (a ?? []).every((x, i) => x === (b ?? [])[i]);

/**
 * The change from `old` (what the kernel holds, exactly) to `next` as element additions and
 * deletions of address sets and the mark's move, when that is all it is: same sets (keys, flags,
 * size, timeout), chains and counters, every set changed by a delta (setChange) or, a plain
 * interval set, refilled, and one rule differing only in its comment, in a base chain. Undefined
 * for any other change, which renderInPlace writes through libnftables; so is a plain interval set
 * emptied or filled from empty (docs/writes.md, "The everyday edit").
 */
export function elementEdit(next: Table, old: Table): TableElementEdit | undefined {
  validateTable(next);
  if (next.family !== old.family || next.name !== old.name || next.comment !== old.comment)
    return undefined;
  if (!sameList(next.counters, old.counters)) return undefined;
  if (next.sets.length !== old.sets.length || next.chains.length !== old.chains.length)
    return undefined;
  const sets: Array<TableElementEdit['sets'][number]> = [];
  for (const [i, set] of next.sets.entries()) {
    const before = old.sets[i] as NamedSet;
    const sameShape =
      set.name === before.name &&
      set.key.expression === before.key.expression &&
      set.key.elementSuffix === before.key.elementSuffix &&
      set.key.elements === before.key.elements &&
      sameList(set.flags, before.flags) &&
      set.size === before.size &&
      set.timeoutS === before.timeoutS &&
      set.transient === before.transient;
    if (!sameShape) return undefined;
    if (set.transient) continue; // its elements are the flush's, never the config's
    if (Boolean(set.map) !== Boolean(before.map)) return undefined;
    const { head, endBefore, endAfter } = listWindow(before.elements, set.elements);
    if (head === endBefore && head === endAfter) continue;
    // Names, and a verdict map's elements, are written by libnftables.
    if (set.key.elements === 'names' || set.map) return undefined;
    // A plain set: interval sets of prefixes (start and end elements, netlink.h), never emptied or
    // filled from empty (libnftables puts a marker element in an empty interval set).
    if (set.key.elementSuffix === '') {
      if (!set.flags.includes('interval')) return undefined;
      if (set.elements.length === 0 || before.elements.length === 0) return undefined;
    }
    const how = setChange(set, before);
    // A plain interval set's large change: flushed and refilled in the same batch, as libnftables
    // would write it (its marker element included: the addon's editElements).
    if (how === 'refill' && set.key.elementSuffix === '') {
      sets.push({ set, removed: NO_ELEMENTS, added: set.elements, refill: true });
      continue;
    }
    if (how !== 'delta') return undefined;
    const { removed, added } = elementDiff(before.elements, set.elements);
    if (removed.length + added.length > 0) sets.push({ set, removed, added });
  }
  let marked: Omit<TableElementEdit, 'family' | 'table' | 'sets'> | undefined;
  for (const [i, chain] of next.chains.entries()) {
    const before = old.chains[i] as (typeof old.chains)[number];
    if (chain.name !== before.name || chain.transient !== before.transient) return undefined;
    if (JSON.stringify(chain.base) !== JSON.stringify(before.base)) return undefined;
    if (chain.rules.length !== before.rules.length) return undefined;
    for (const [r, rule] of chain.rules.entries()) {
      const was = before.rules[r] as string;
      if (rule === was) continue;
      const now = splitComment(rule);
      const then = splitComment(was);
      if (!chain.base || marked || !now || !then || now.body !== then.body) return undefined;
      marked = { chain: chain.name, wasRule: was, rule, wasMark: then.comment, mark: now.comment };
    }
  }
  // Every write moves the mark: a change without a new one is not this kind of change.
  if (!marked) return undefined;
  return { family: next.family, table: next.name, sets, ...marked };
}

/**
 * The sets of a change made on new sets (renderKeyChange) whose elements are written apart, over
 * netlink, once the set is made empty (SetFill): concatenated range sets of at least this many
 * elements. libnftables parses a large concatenated set's elements at about the kernel's own cost
 * again (docs/design.md, "Writes on the wire"); a small one costs less inside the transaction that
 * makes it than as a transaction of its own.
 */
export const FILL_APART_MIN = 2_000;

/** Whether a change made on new sets writes this set's elements apart (FILL_APART_MIN). */
export function filledApart(set: NamedSet): boolean {
  return (
    !set.transient &&
    !set.map &&
    set.key.elements !== 'names' &&
    set.key.elementSuffix !== '' &&
    set.elements.length >= FILL_APART_MIN
  );
}

/**
 * The same change as an nft script (what libnftables would be given): for tests and the fake
 * kernel.
 */
export function renderElementEdit(edits: readonly TableElementEdit[]): string {
  const lines: string[] = [];
  for (const edit of edits) {
    const { family, table } = edit;
    for (const { set, removed, refill } of edit.sets) {
      if (refill) lines.push(`flush set ${family} ${table} ${set.name}`);
      if (removed.length > 0)
        lines.push(
          `delete element ${family} ${table} ${set.name} { ${elementList(set, removed, family)} }`,
        );
    }
    const additions = edit.sets.flatMap(({ set, added }) =>
      added.length > 0 ? setBlock(set, family, added) : [],
    );
    if (additions.length > 0) lines.push(`table ${family} ${table} {`, ...additions, '}');
    lines.push(`flush chain ${family} ${table} ${edit.chain}`);
    lines.push(`add rule ${family} ${table} ${edit.chain} ${edit.rule}`);
  }
  return lines.join('\n') + '\n';
}
