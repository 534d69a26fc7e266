// Reading our tables back from the kernel, and comparing them with what we would write. Reading
// changes nothing: what the caller does with the generation found is its own, explicit step.
import { LATE_REPLIES_SET, type CompileOptions } from '../compile.js';
import { tableOwner, type TableOwner } from '../nftables/ownership.js';
import { normaliseListing, renderTable, withoutTableComment } from '../nftables/render.js';
import type { Table, TableFamily, TableRef } from '../nftables/types.js';
import type { Kernel } from './kernel.js';

export interface KernelTables {
  readonly listings: ReadonlyMap<TableFamily, string | null>;
  /** Tables of ours the config no longer wants (ip6 with IPv6 off): deleted with the next write. */
  readonly stale: readonly TableRef[];
  /** Who wrote our ip table, by its comment. */
  readonly ip: TableOwner | undefined;
  readonly owners: ReadonlyMap<TableFamily, TableOwner>;
}

/**
 * Lists our tables (ip6 too with IPv6 off: a table of ours left there is deleted). A same-named
 * table that is not ours is an error and left untouched, unless this process created it
 * (`written`: ours even if its comment was changed).
 */
export async function readTables(
  kernel: Kernel,
  options: CompileOptions,
  written: ReadonlySet<TableFamily>,
  onRead: () => void,
): Promise<KernelTables> {
  const listings = new Map<TableFamily, string | null>();
  const owners = new Map<TableFamily, TableOwner>();
  for (const family of ['ip', 'ip6'] as const) {
    onRead();
    const listing = await kernel.listTable({ family, name: options.table });
    listings.set(family, listing);
    if (listing !== null) owners.set(family, tableOwner(listing));
  }
  const managed: readonly TableFamily[] = options.enableIPv6 ? ['ip', 'ip6'] : ['ip'];
  for (const family of managed) {
    if (owners.get(family)?.kind === 'foreign' && !written.has(family)) {
      throw new Error(
        `table ${family} ${options.table} exists and is not ipmasq-agent's (no ` +
          '"ipmasq-agent generation" comment): left untouched; choose another --table',
      );
    }
  }
  const ip6 = owners.get('ip6');
  const stale: TableRef[] =
    !options.enableIPv6 && ip6 && (ip6.kind !== 'foreign' || written.has('ip6'))
      ? [{ family: 'ip6', name: options.table }]
      : [];
  return { listings, stale, ip: owners.get('ip'), owners };
}

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

/**
 * The objects of a table and the sets' keys, in any order (a set made anew lists after the ones
 * kept): what an in-place write relies on finding.
 */
function structure(listing: string): string {
  const objects: string[][] = [];
  for (const line of listing.split('\n')) {
    if (/^\t(set|chain) [A-Za-z0-9_-]+ \{$/.test(line)) objects.push([line.trim()]);
    else if (/^\t\t(typeof|flags|type) /.test(line)) objects.at(-1)?.push(line.trim());
  }
  return objects
    .map((lines) => lines.join('\n'))
    .sort()
    .join('\n');
}

/**
 * How a table of ours in the kernel relates to the one wanted: `same` objects (an in-place write can
 * change it), the same objects but another `key` for the sets (the layout switch), or `other`.
 */
export function compareStructure(listing: string, table: Table): 'same' | 'key' | 'other' {
  const found = structure(listing);
  // Rendered without elements: only the objects' declarations are compared.
  const skeleton = { ...table, sets: table.sets.map((set) => ({ ...set, elements: [] })) };
  const wanted = structure(renderTable(skeleton));
  if (found === wanted) return 'same';
  const withoutKeys = (text: string) => text.replace(/^typeof .*$/gm, '');
  return withoutKeys(found) === withoutKeys(wanted) ? 'key' : 'other';
}

/** Whether the listings are exactly the rendering of `tables` (but for the tables' own comments). */
export function holds(found: KernelTables, tables: readonly Table[]): boolean {
  if (found.stale.length > 0) return false;
  return tables.every((table) => {
    const listing = found.listings.get(table.family);
    return listing ? listingIs(listing, table) : false;
  });
}
