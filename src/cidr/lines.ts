// A list of printed prefixes that carries the same text one prefix per line: a 100 000-entry set
// crosses to another thread as one string (the config worker's reply, the changed-ranges worker's
// job), so the text it was split from goes with it rather than being joined again. A list spliced
// from another (an edit of a large config) carries where it differs from that one.

const TEXT = Symbol('text');
const MADE = Symbol('made');
const TOKEN = Symbol('token');

/**
 * A frozen list of printed prefixes, carrying a token of its own (a value no other list has), and
 * the text it was split from (linesList) or the token of the list it was made from with the splice
 * (splicedList). They ride as non-enumerable symbol properties: not an element, not cloned to
 * another thread, not seen by a comparison of lists. A list refers to no other list.
 */
type PrefixList = readonly string[] & {
  readonly [TOKEN]?: symbol;
  readonly [TEXT]?: string;
  readonly [MADE]?: { readonly base: symbol; readonly splice: Splice };
};

/** `list` frozen, with a token of its own and carrying `key`'s value. */
function carrying<K extends typeof TEXT | typeof MADE>(
  list: string[],
  key: K,
  value: NonNullable<PrefixList[K]>,
): PrefixList {
  Object.defineProperty(list, TOKEN, { value: Symbol('list') });
  Object.defineProperty(list, key, { value });
  return Object.freeze(list);
}

/** The list of `lines` (one prefix per line; '' is none), frozen, carrying its text for listLines. */
function linesList(lines: string): readonly string[] {
  return carrying(lines === '' ? [] : lines.split('\n'), TEXT, lines);
}

/** The list one entry per line: the text linesList made it from, else joined. */
function listLines(list: PrefixList): string {
  return list[TEXT] ?? list.join('\n');
}

/** A set of both families as lists of printed prefixes (a Config's CidrSets). */
export interface FamilyLists {
  readonly ipv4: readonly string[];
  readonly ipv6: readonly string[];
}

/** The same set with each family as its text, one prefix per line: what crosses to a thread. */
export interface FamilyLines {
  readonly ipv4: string;
  readonly ipv6: string;
}

export function familyLines(sets: FamilyLists): FamilyLines {
  return { ipv4: listLines(sets.ipv4), ipv6: listLines(sets.ipv6) };
}

/** familyLines undone, frozen. */
export function familyLists(lines: FamilyLines): FamilyLists {
  return Object.freeze({ ipv4: linesList(lines.ipv4), ipv6: linesList(lines.ipv6) });
}

/** A change of one list: [at, at + deleteCount) became `inserted`. */
export interface Splice {
  readonly at: number;
  readonly deleteCount: number;
  readonly inserted: readonly string[];
}

/**
 * The list with the splice made, frozen; the strings it keeps are the same strings, and where the
 * two lists differ is known without comparing them (listWindow): the new list carries the splice
 * and the token of the list it was made from, not that list: held, each list would keep the one
 * before it alive, and that one the one before, so that every list of every edit since start
 * stayed in memory (~8 MiB an edit at 100 000 CIDRs: docs/writes.md, "The everyday edit"). A list
 * lines.ts did not make has no token, and is compared (listWindow walks it).
 */
export function splicedList(list: PrefixList, splice: Splice): readonly string[] {
  const { at, deleteCount, inserted } = splice;
  if (deleteCount === 0 && inserted.length === 0) return list;
  // Copied by hand: slice and concat read a frozen array element by element on a slow path (4x).
  const out = new Array<string>(list.length - deleteCount + inserted.length);
  for (let i = 0; i < at; i++) out[i] = list[i] as string;
  for (let i = 0; i < inserted.length; i++) out[at + i] = inserted[i] as string;
  const shift = inserted.length - deleteCount;
  for (let i = at + deleteCount; i < list.length; i++) out[i + shift] = list[i] as string;
  const base = list[TOKEN];
  if (base === undefined) return Object.freeze(out);
  return carrying(out, MADE, { base, splice });
}

/**
 * Where two lists differ: the common head's length and, past it, the ends of what lies before their
 * common tail. Indices only. For a list splicedList made from the other, found from the splice and
 * a look at its edges, not by walking both lists: the same answer.
 */
export function listWindow(before: PrefixList, after: PrefixList) {
  if (before === after)
    return { head: before.length, endBefore: before.length, endAfter: before.length };
  const made = after[MADE];
  let head = 0;
  let endBefore = before.length;
  let endAfter = after.length;
  if (made !== undefined && made.base === before[TOKEN]) {
    // Equal up to the splice and past it, element for element.
    head = made.splice.at;
    endBefore = made.splice.at + made.splice.deleteCount;
    endAfter = made.splice.at + made.splice.inserted.length;
  }
  while (head < endBefore && head < endAfter && before[head] === after[head]) head++;
  while (endBefore > head && endAfter > head && before[endBefore - 1] === after[endAfter - 1]) {
    endBefore--;
    endAfter--;
  }
  return { head, endBefore, endAfter };
}
