// A table's listing, as nft prints it, compared with the agent's rendering of a table: exactly (the
// converger's "does the kernel hold it"), by its objects' declarations (whether an in-place write
// can change it), or object by object (what --explain --live calls drift). Pure text functions.
import { LATE_REPLIES_SET } from './objects.js';
import { normaliseListing, renderTable, withoutTableComment } from './render.js';
import type { Table } from './types.js';

/**
 * Whether a listing is exactly the rendering of `table`, but for the table's own comment: nftables
 * keeps the one the table was created with (the latest write's mark is on the jump rule).
 */
export function listingIs(listing: string, table: Table): boolean {
  return listingShape(listing) === listingShape(renderTable(table));
}

/**
 * A listing in a form that compares equal whatever order the sets, the chains and the elements are
 * in: a concatenated set lists its elements in the order they were added, in-place writes add them
 * in any order, and a set made anew (the layout switch) lists after the ones kept.
 */
function listingShape(text: string): string {
  const flat = normaliseListing(withoutTableComment(text))
    .replace(new RegExp(`(set ${LATE_REPLIES_SET} \\{[^{}]*?) elements = \\{[^}]*\\}`), '$1')
    .replace(
      /elements = \{ ([^}]*) \}/g,
      (_, items: string) => `elements = { ${items.split(', ').sort().join(', ')} }`,
    );
  const open = flat.indexOf('{');
  return `${flat.slice(0, open + 1)} ${objectsOf(flat).sort().join(' ')} }`;
}

/** A flattened table's objects (brace depth 1 to 2), each `set NAME { … }` or `chain NAME { … }`. */
function objectsOf(flat: string): string[] {
  const open = flat.indexOf('{');
  const objects: string[] = [];
  let depth = 0;
  let start = -1;
  for (let i = open + 1; i < flat.length; i++) {
    const c = flat[i];
    if (c === '{') depth++;
    else if (c === '}') {
      if (depth === 0) break;
      depth--;
      if (depth === 0 && start >= 0) {
        objects.push(flat.slice(start, i + 1).trim());
        start = -1;
      }
    } else if (depth === 0 && start < 0 && c !== ' ') start = i;
  }
  return objects;
}

/** Each object of a listing by `set NAME` / `chain NAME`, without elements and comments. */
function declarations(listing: string): Map<string, string> {
  const flat = normaliseListing(withoutTableComment(listing))
    .replace(/ elements = \{[^}]*\}/g, '')
    .replace(/ comment "[^"]*"/g, '');
  const byName = new Map<string, string>();
  for (const object of objectsOf(flat)) {
    const name = /^(set|chain) \S+/.exec(object)?.[0];
    if (name) byName.set(name, object);
  }
  return byName;
}

/**
 * The sets and chains of a table of ours whose declarations or rules differ from what the agent
 * writes for `table` (elements and comments aside), and those missing or extra: what makes a set
 * lookup no answer to what a packet sees (--explain --live).
 */
export function objectDrift(listing: string, table: Table): string[] {
  const found = declarations(listing);
  const skeleton = { ...table, sets: table.sets.map((set) => ({ ...set, elements: [] })) };
  const wanted = declarations(renderTable(skeleton));
  const names = new Set([...wanted.keys(), ...found.keys()]);
  return [...names].filter((name) => found.get(name) !== wanted.get(name)).sort();
}

/** Each set and chain of a listing by `set NAME` / `chain NAME`: its header and declarations. */
function structure(listing: string): Map<string, string> {
  const objects = new Map<string, string[]>();
  let current: string[] | undefined;
  for (const line of listing.split('\n')) {
    const header = /^\t((?:set|chain) [A-Za-z0-9_-]+) \{$/.exec(line);
    if (header) objects.set(header[1]!, (current = [line.trim()]));
    else if (/^\t\t(typeof|flags|type) /.test(line)) current?.push(line.trim());
  }
  return new Map([...objects].map(([name, lines]) => [name, lines.join('\n')]));
}

/** The names of the sets a listing of one of our tables holds. */
export function listedSetNames(listing: string): Set<string> {
  const names = new Set<string>();
  for (const match of listing.matchAll(/^\tset ([A-Za-z0-9_-]+) \{$/gm)) names.add(match[1]!);
  return names;
}

/**
 * How a table of ours in the kernel relates to the one wanted: `same` objects (an in-place write can
 * change it), the same objects but another `key` for the sets (the layout switch), or `other`. Sets
 * only one side has do not count, but for the transient ones: an in-place write makes or deletes
 * them (nftables/change.ts).
 */
export function compareStructure(listing: string, table: Table): 'same' | 'key' | 'other' {
  const found = structure(listing);
  // Rendered without elements: only the objects' declarations are compared.
  const skeleton = { ...table, sets: table.sets.map((set) => ({ ...set, elements: [] })) };
  const wanted = structure(renderTable(skeleton));
  const names = new Set([...found.keys(), ...wanted.keys()]);
  // A transient set is never made by an in-place write: one missing makes the table another's.
  const transient = new Set(table.sets.filter((set) => set.transient).map((s) => `set ${s.name}`));
  const compared = [...names].filter(
    (name) =>
      !name.startsWith('set ') || transient.has(name) || (found.has(name) && wanted.has(name)),
  );
  const differ = (strip: (text: string) => string) =>
    compared.some((name) => strip(found.get(name) ?? '') !== strip(wanted.get(name) ?? ''));
  if (!differ((text) => text)) return 'same';
  return differ((text) => text.replace(/^typeof .*$/gm, '')) ? 'other' : 'key';
}
