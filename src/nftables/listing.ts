// A table's listing, as nft prints it, compared with the agent's rendering of a table: exactly (the
// converger's "does the kernel hold it"), by its objects' declarations (whether an in-place write
// can change it), or object by object (what --explain --live calls drift). Pure text functions.
import { LATE_REPLIES_SET } from './objects.js';
import { normaliseListing, renderTable, withoutTableComment } from './render.js';
import { NO_ELEMENTS, type ListedRule, type Table } from './types.js';

/**
 * Whether a listing is exactly the rendering of `table`, but for the table's own comment: nftables
 * keeps the one the table was created with (the latest write's mark is on the jump rule).
 */
export function listingIs(listing: string, table: Table): boolean {
  return listingShape(listing) === listingShape(renderTable(table));
}

/** Whether a listing is exactly the rendering of `table` but for its transient objects. */
export function listingIsApartFromTransient(listing: string, table: Table): boolean {
  const drop = transientNames(table);
  const without = (text: string) => {
    const shape = listingShape(text);
    const open = shape.indexOf('{');
    const kept = objectsOf(shape).filter(
      (object) => !drop.has(/^(set|chain) \S+/.exec(object)?.[0] ?? ''),
    );
    return `${shape.slice(0, open + 1)} ${kept.join(' ')} }`;
  };
  return without(listing) === without(renderTable(table));
}

/**
 * A listing in a form that compares equal whatever order the sets, the chains and the elements are
 * in: a concatenated set lists its elements in the order they were added, in-place writes add them
 * in any order, and a set made anew (the layout switch) lists after the ones kept.
 */
function listingShape(text: string): string {
  const flat = normaliseListing(withoutTableComment(withoutHeldReplies(text)))
    .replace(
      new RegExp(`(set ${LATE_REPLIES_SET} \\{[^{}]*?) elements = \\{([^}]*)\\}`),
      (_, head: string, items: string) => head + plantedReplies(items),
    )
    .replace(
      /elements = \{ ([^}]*) \}/g,
      (_, items: string) => `elements = { ${items.split(', ').sort().join(', ')} }`,
    );
  const open = flat.indexOf('{');
  return `${flat.slice(0, open + 1)} ${objectsOf(flat).sort().join(' ')} }`;
}

/**
 * The listing without the held replies' elements when none carries a timeout of its own (none is
 * compared then, plantedReplies): cut by position, before any pass over the text, since the set
 * may hold 16 384 of them and the compare runs on the agent's thread (/healthz waits for it).
 */
function withoutHeldReplies(text: string): string {
  const at = text.indexOf(`set ${LATE_REPLIES_SET} {`);
  if (at < 0) return text;
  const open = text.indexOf('elements = {', at);
  const close = text.indexOf('}', at + LATE_REPLIES_SET.length + 6);
  if (open < 0 || close < 0 || open > close) return text;
  const items = text.slice(open, close);
  if (items.includes('timeout')) return text; // one planted to stay: the slow path compares it
  return text.slice(0, open) + text.slice(close + 1);
}

/**
 * The held replies' elements come and go with the set's own timeout and are never compared, but
 * for those that carry a timeout of their own: the agent never writes one, so such an element was
 * put there by someone else, to stay (docs/writes.md, "Existing flows").
 */
function plantedReplies(items: string): string {
  const planted = items
    .split(',')
    .map((item) => item.trim())
    .filter((item) => / timeout /.test(` ${item} `));
  return planted.length > 0 ? ` elements = { ${planted.sort().join(', ')} }` : '';
}

/**
 * A flattened table's objects (brace depth 1 to 2), each `set NAME { … }` or `chain NAME { … }`.
 */
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
    .replace(/ comment "[^"]*"/g, '')
    .replace(/ packets \d+ bytes \d+/g, '');
  const byName = new Map<string, string>();
  for (const object of objectsOf(flat)) {
    const name = /^(set|map|chain|counter) \S+/.exec(object)?.[0];
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
  const skeleton = { ...table, sets: table.sets.map((set) => ({ ...set, elements: NO_ELEMENTS })) };
  const wanted = declarations(renderTable(skeleton));
  const names = new Set([...wanted.keys(), ...found.keys()]);
  return [...names].filter((name) => found.get(name) !== wanted.get(name)).sort();
}

/**
 * Each object of a listing by `set NAME`, `chain NAME`, `counter NAME` (or whatever else another
 * tool put in our table): its header and declarations.
 */
function structure(listing: string): Map<string, string> {
  const objects = new Map<string, string[]>();
  let current: string[] | undefined;
  for (const line of listing.split('\n')) {
    const header = /^\t(\S.*) \{$/.exec(line);
    if (header) objects.set(header[1]!, (current = [line.trim()]));
    else if (/^\t\t(typeof|flags|type) /.test(line)) current?.push(line.trim());
  }
  return new Map([...objects].map(([name, lines]) => [name, lines.join('\n')]));
}

/** The names of the sets a listing of one of our tables holds. */
export function listedSetNames(listing: string): Set<string> {
  const names = new Set<string>();
  for (const match of listing.matchAll(/^\t(?:set|map) ([A-Za-z0-9_-]+) \{$/gm))
    names.add(match[1]!);
  return names;
}

/**
 * How a table of ours in the kernel relates to the one wanted: `same` objects (an in-place write
 * can change it), the same objects but another `key` for the sets (the layout switch), or `other`.
 * Sets only one side has do not count, but for the transient ones: an in-place write makes or
 * deletes them (nftables/change.ts); nor counters only the wanted table has (an in-place write adds
 * them). An object only the kernel has and no in-place write removes (another tool's counter) is
 * `other`: the table is written whole, its counters given back (docs/observability.md, "What the
 * node's NAT does").
 */
export function compareStructure(listing: string, table: Table): 'same' | 'key' | 'other' {
  const found = structure(listing);
  // Rendered without elements: only the objects' declarations are compared.
  const skeleton = { ...table, sets: table.sets.map((set) => ({ ...set, elements: NO_ELEMENTS })) };
  const wanted = structure(renderTable(skeleton));
  const names = new Set([...found.keys(), ...wanted.keys()]);
  // The transient objects are made anew by an in-place write wherever they differ (transientDrift).
  const transient = transientNames(table);
  const compared = [...names].filter(
    (name) =>
      !transient.has(name) &&
      (!/^(set|map) /.test(name) || (found.has(name) && wanted.has(name))) &&
      (!/^counter /.test(name) || found.has(name)),
  );
  const differ = (strip: (text: string) => string) =>
    compared.some((name) => strip(found.get(name) ?? '') !== strip(wanted.get(name) ?? ''));
  if (!differ((text) => text)) return 'same';
  return differ((text) => text.replace(/^typeof .*$/gm, '')) ? 'other' : 'key';
}

/** `set NAME` / `chain NAME` of a table's transient objects (the late replies' set and chain). */
function transientNames(table: Table): Set<string> {
  return new Set([
    ...table.sets.filter((set) => set.transient).map((set) => `set ${set.name}`),
    ...table.chains.filter((chain) => chain.transient).map((chain) => `chain ${chain.name}`),
  ]);
}

/**
 * The transient objects a table of ours in the kernel holds, by kind, to delete before remaking
 * them.
 */
export interface TransientObjects {
  readonly sets: readonly string[];
  readonly chains: readonly string[];
}

/**
 * The transient objects of the listing to make anew because some differ from what the agent
 * writes for `table` (their declarations or rules; an older release's shape, or someone's edit,
 * or an element planted to stay), or undefined when they are as written.
 */
export function transientDrift(listing: string, table: Table): TransientObjects | undefined {
  const names = transientNames(table);
  const found = declarations(listing);
  const skeleton = { ...table, sets: table.sets.map((set) => ({ ...set, elements: NO_ELEMENTS })) };
  const wanted = declarations(renderTable(skeleton));
  const differ = [...names].some((name) => found.get(name) !== wanted.get(name));
  const planted = plantedReplies(
    new RegExp(`\\tset ${LATE_REPLIES_SET} \\{[^}]*?elements = \\{([^}]*)\\}`).exec(listing)?.[1] ??
      '',
  );
  if (!differ && planted === '') return undefined;
  const present = [...names].filter((name) => found.has(name));
  return {
    sets: present.filter((name) => name.startsWith('set ')).map((name) => name.slice(4)),
    chains: present.filter((name) => name.startsWith('chain ')).map((name) => name.slice(6)),
  };
}

/** Whether a line leaves a quoted string open (nft prints a comment as it is, unescaped). */
const opensQuote = (text: string) => (text.split('"').length - 1) % 2 === 1;

/**
 * `nft -a -s list chain …` output, each chain's rules in order (the text without its handle). Lines
 * that are not rules — the chain's hook line, braces — have no handle and are left out. A rule
 * whose string holds a newline (a comment written over netlink) is printed over several lines: they
 * are read as one, up to the line that closes the string and ends with the handle.
 */
export function parseRuleListing(text: string): Map<string, ListedRule[]> {
  const chains = new Map<string, ListedRule[]>();
  let chain: string | undefined;
  let pending: string | undefined;
  for (const raw of text.split('\n')) {
    const line = pending === undefined ? raw : `${pending}\n${raw}`;
    if (opensQuote(line)) {
      pending = line;
      continue;
    }
    pending = undefined;
    const head = /^\s*chain (\S+|"[^"]*") \{/.exec(line);
    if (head) {
      chain = head[1]!.replace(/^"|"$/g, '');
      if (!chains.has(chain)) chains.set(chain, []);
      continue;
    }
    const rule = /^\s*([^]*?)\s*# handle (\d+)\s*$/.exec(line);
    // Lines joined past another rule's handle (a quote inside a string): which text is whose is not
    // known, so none is taken; those rules are judged from the kernel's expressions alone.
    const ambiguous = rule !== null && /# handle \d+\s*\n/.test(rule[1]!);
    if (chain !== undefined && rule && !ambiguous) {
      chains.get(chain)!.push({ chain, handle: Number(rule[2]), text: rule[1]! });
    }
  }
  return chains;
}
