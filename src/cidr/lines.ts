// A list of printed prefixes and the same text one prefix per line, kept together while the list
// lives: a 100 000-entry set crosses to another thread as one string (the config worker's reply, the
// changed-ranges worker's job), so the text it was split from is kept rather than joined again.

const LINES = new WeakMap<readonly string[], string>();

/** The list of `lines` (one prefix per line; '' is none), frozen, its text kept for listLines. */
export function linesList(lines: string): readonly string[] {
  const list = Object.freeze(lines === '' ? [] : lines.split('\n'));
  LINES.set(list, lines);
  return list;
}

/** The list one entry per line: the text linesList made it from, else joined. */
export function listLines(list: readonly string[]): string {
  return LINES.get(list) ?? list.join('\n');
}
