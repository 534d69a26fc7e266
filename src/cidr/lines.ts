// A list of printed prefixes and the same text one prefix per line, kept together while the list
// lives: a 100 000-entry set crosses to another thread as one string (the config worker's reply, the
// changed-ranges worker's job), so the text it was split from is kept rather than joined again.

const LINES = new WeakMap<readonly string[], string>();

/** The list of `lines` (one prefix per line; '' is none), frozen, its text kept for listLines. */
function linesList(lines: string): readonly string[] {
  const list = Object.freeze(lines === '' ? [] : lines.split('\n'));
  LINES.set(list, lines);
  return list;
}

/** The list one entry per line: the text linesList made it from, else joined. */
function listLines(list: readonly string[]): string {
  return LINES.get(list) ?? list.join('\n');
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
