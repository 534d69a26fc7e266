// Renders typed tables into nft script text. The nested block form is also what `nft list table`
// prints, so the same text serves as the write and as the expectation a read-back is compared with.
import { channel } from 'node:diagnostics_channel';
import { formatAddress, parseCidr, prefixRange, type Prefix } from '../cidr/index.js';
import { nameProblem } from './names.js';
import type {
  Chain,
  CounterValue,
  Elements,
  TableFamily,
  NamedSet,
  Table,
  TableRef,
} from './types.js';

/** Throws unless every name is a plain identifier and the comment cannot break out of its quotes. */
export function validateTable(table: Table): void {
  const names = [
    table.name,
    ...(table.counters ?? []),
    ...table.sets.map((s) => s.name),
    ...table.chains.map((c) => c.name),
  ];
  for (const name of names) {
    const problem = nameProblem(name);
    if (problem) throw new Error(`invalid nftables name ${JSON.stringify(name)}: ${problem}`);
  }
  for (const comment of [
    table.comment,
    ...table.sets.map((s) => s.comment),
    ...table.chains.map((c) => c.comment),
  ]) {
    if (comment !== undefined && !COMMENT.test(comment))
      throw new Error(`invalid comment ${JSON.stringify(comment)}`);
  }
}

/** What an object's comment may hold: nothing that could close its quotes or break a line. */
const COMMENT = /^[A-Za-z0-9 .:_/+=@-]{0,128}$/;

/**
 * Text made fit for an object's comment: characters outside COMMENT become `_`, and a long text
 * keeps its end (a file's name is at the end of its path), 128 characters at most.
 */
export function safeComment(text: string): string {
  const safe = text.replace(/[^A-Za-z0-9 .:_/+=@-]/g, '_');
  return safe.length <= 128 ? safe : `...${safe.slice(-125)}`;
}

function integer(n: number): string {
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`not a non-negative integer: ${n}`);
  return String(n);
}

/** nft prints a full-length prefix as a bare address; write it the same way. */
function elementText(element: string, family: TableFamily): string {
  const full = family === 'ip' ? '/32' : '/128';
  return element.endsWith(full) ? element.slice(0, -full.length) : element;
}

/**
 * Interface names as nft strings. The config checked each (config/egress.ts); checked here again,
 * whatever produced them, so that no element can close its quotes: printable ASCII without quotes,
 * backslashes, white space, "/" or ":", `*` only last (nft's wildcard).
 */
function nameList(set: NamedSet, names: readonly string[]): string {
  for (const name of names) {
    if (!/^[!#-&()+-.0-9;-[\]-~]{1,15}\*?$/.test(name)) {
      throw new Error(`set ${set.name}: ${JSON.stringify(name)} is not a checked interface name`);
    }
  }
  return names.map((name) => `"${name}"`).join(', ');
}

/**
 * The diagnostics channel told of every element list rendered in one piece, with its length
 * (`{ elements }`): the largest is what holds the event loop longest in a write. Nothing listens in
 * the agent; the test of the stall bound does (test/unit/reconcile/converge.stall-bound.test.ts).
 */
export const RENDERED_IN_ONE_PIECE = 'ipmasq:render:one-piece';
const renders = channel(RENDERED_IN_ONE_PIECE);

/** Address elements as nft text, each with the suffix; throws on anything but address characters. */
function addressList(
  set: NamedSet,
  elements: readonly string[],
  family: TableFamily,
  suffix: string,
): string {
  if (renders.hasSubscribers) renders.publish({ elements: elements.length });
  const text = elements.map((e) => elementText(e, family)).join(`${suffix}, `) + suffix;
  // One pass over the joined text (not one regex test per element): nothing but address characters,
  // so no element can carry nft syntax, whatever produced it.
  const stray = /[^0-9a-f.:/, -]/.exec(text);
  if (stray) {
    throw new Error(
      `set ${set.name}: ${JSON.stringify(stray[0])} in its elements: not a formatted prefix`,
    );
  }
  return text;
}

/**
 * A verdict map's elements (`PREFIX : goto CHAIN`) as nft text: each prefix checked as addressList
 * checks one, each chain as a name.
 */
function verdictList(set: NamedSet, elements: readonly string[], family: TableFamily): string {
  return elements
    .map((element) => {
      const at = element.indexOf(' : goto ');
      const chain = at < 0 ? '' : element.slice(at + 8);
      if (at < 0 || nameProblem(chain))
        throw new Error(`map ${set.name}: ${JSON.stringify(element)} is not PREFIX : goto CHAIN`);
      return `${addressList(set, [element.slice(0, at)], family, '')} : goto ${chain}`;
    })
    .join(', ');
}

/** The elements as nft text, each with the set's suffix; throws on anything but address characters. */
export function elementList(set: NamedSet, elements: Elements, family: TableFamily): string {
  if (set.key.elements === 'names') return nameList(set, elements);
  if (set.map === 'verdict') return verdictList(set, elements, family);
  return (
    renderedAhead(set, elements, family) ??
    addressList(set, elements, family, set.key.elementSuffix)
  );
}

/** The text the set carries for exactly these elements, this family and its suffix, if any. */
function renderedAhead(set: NamedSet, elements: Elements, family: TableFamily): string | undefined {
  const ahead = set.rendered;
  if (!ahead || ahead.family !== family || ahead.suffix !== set.key.elementSuffix) return undefined;
  if (ahead.elements === elements) return ahead.text;
  if (ahead.elements.length !== elements.length) return undefined;
  for (let i = 0; i < elements.length; i++) if (ahead.elements[i] !== elements[i]) return undefined;
  return ahead.text;
}

/** Elements rendered per slice by prerenderElements: a few milliseconds of the agent's thread. */
export const PRERENDER_SLICE = 10_000;

/**
 * The set carrying `elements` (all of its own by default, or what a write adds to it) rendered a
 * slice at a time, awaiting `pause` between slices, so that rendering 100 000 of them does not hold
 * the event loop in one go (docs/hardening.md, round 3); elementList then takes the text as
 * rendered. A set of names, or of few elements, comes back as it is.
 */
export async function prerenderElements(
  set: NamedSet,
  family: TableFamily,
  pause: () => Promise<void>,
  elements: Elements = set.elements,
): Promise<NamedSet> {
  if (set.key.elements === 'names' || set.map || elements.length <= PRERENDER_SLICE) return set;
  const suffix = set.key.elementSuffix;
  const parts: string[] = [];
  for (let start = 0; start < elements.length; start += PRERENDER_SLICE) {
    const slice = elements.slice(start, start + PRERENDER_SLICE);
    parts.push(addressList(set, slice, family, suffix));
    await pause();
  }
  return { ...set, rendered: { family, suffix, elements, text: parts.join(', ') } };
}

/** A set as a block of a table block; `elements` (all of the set's by default) inside it. */
export function setBlock(
  set: NamedSet,
  family: TableFamily,
  elements: Elements = set.elements,
): string[] {
  const lines = set.map
    ? [`\tmap ${set.name} {`, `\t\ttypeof ${set.key.expression} : ${set.map}`]
    : [`\tset ${set.name} {`, `\t\ttypeof ${set.key.expression}`];
  // In the order nft lists them (1.0.6 and 1.1.x alike); a timeout implies its flag.
  if (set.size !== undefined) lines.push(`\t\tsize ${integer(set.size)}`);
  if (set.flags.length > 0) lines.push(`\t\tflags ${set.flags.join(',')}`);
  if (set.timeoutS !== undefined) lines.push(`\t\ttimeout ${integer(set.timeoutS)}s`);
  if (set.comment !== undefined) lines.push(`\t\tcomment "${set.comment}"`);
  if (elements.length > 0) lines.push(`\t\telements = { ${elementList(set, elements, family)} }`);
  lines.push('\t}');
  return lines;
}

export function renderChain(chain: Chain): string[] {
  const lines = [`\tchain ${chain.name} {`];
  if (chain.base) {
    const { type, hook, priority, policy } = chain.base;
    lines.push(`\t\ttype ${type} hook ${hook} priority ${priority}; policy ${policy};`);
  }
  if (chain.comment !== undefined) lines.push(`\t\tcomment "${chain.comment}"`);
  for (const rule of chain.rules) lines.push(`\t\t${rule}`);
  lines.push('\t}');
  return lines;
}

/**
 * A named counter's declaration; with `value`, it starts from those counts (a table written whole
 * keeps its counters' counts: reconcile/converge.ts). Declaring one that exists changes nothing.
 */
export function counterBlock(name: string, value?: CounterValue): string[] {
  const counts = value
    ? [`\t\tpackets ${integer(value.packets)} bytes ${integer(value.bytes)}`]
    : [];
  return [`\tcounter ${name} {`, ...counts, '\t}'];
}

/**
 * The table as one nested block: elements inside the set block, which keeps nft's cache fill away.
 * `counts`: where its counters start (by name), when the table is written whole over one that had them.
 */
export function renderTable(table: Table, counts?: readonly CounterValue[]): string {
  validateTable(table);
  const body = [
    `\tcomment "${table.comment}"`,
    ...(table.counters ?? []).flatMap((name) =>
      counterBlock(
        name,
        counts?.find((count) => count.name === name),
      ),
    ),
    ...table.sets.flatMap((set) => setBlock(set, table.family)),
    ...table.chains.flatMap(renderChain),
  ];
  return [`table ${table.family} ${table.name} {`, ...body, '}'].join('\n') + '\n';
}

/**
 * One transaction that replaces each table whole (add makes the delete safe when it is absent)
 * and deletes the stale ones: a packet sees the old ruleset or the new one, never a mix.
 */
export function renderReplace(
  tables: readonly Table[],
  stale: readonly TableRef[] = [],
  counts?: ReadonlyMap<TableFamily, readonly CounterValue[]>,
): string {
  const parts: string[] = [];
  for (const table of tables) {
    parts.push(`add table ${table.family} ${table.name}`);
    parts.push(`delete table ${table.family} ${table.name}`);
    parts.push(renderTable(table, counts?.get(table.family)));
  }
  return parts.join('\n') + '\n' + renderDelete(stale);
}

/** One transaction deleting these tables. */
export function renderDelete(refs: readonly TableRef[]): string {
  return refs.map((ref) => `delete table ${ref.family} ${ref.name}\n`).join('');
}

/**
 * Whitespace-insensitive form of a table listing, for comparing a read-back with a rendering. nft
 * prints a SNAT range that is exactly a prefix as that prefix — before a port range too
 * (`2001:db8::10/124:1024-2000`), which it cannot read back — so such a prefix is written back as
 * the range the agent renders (measured alike with nft 1.0.6 and 1.1.3).
 */
export function normaliseListing(text: string): string {
  return (
    text
      .replace(/\s+/g, ' ')
      .trim()
      // A named counter's counts are the kernel's: the declaration is what is compared.
      .replace(/(counter [A-Za-z0-9_-]+ \{) packets \d+ bytes \d+ \}/g, '$1 }')
      .replace(
        /snat to ([0-9a-f.:]+)\/(\d{1,3})(:\d+(?:-\d+)?)?/g,
        (written, address: string, length: string, ports = '') => {
          let prefix: Prefix;
          try {
            prefix = parseCidr(`${address}/${length}`);
          } catch {
            return written;
          }
          const [first, last] = prefixRange(prefix).map((a) => formatAddress(prefix.family, a));
          const bracket = (a: string) => (prefix.family === 6 && ports !== '' ? `[${a}]` : a);
          const range = first === last ? bracket(first!) : `${bracket(first!)}-${bracket(last!)}`;
          return `snat to ${range}${ports}`;
        },
      )
  );
}

/** The table's listing without its own comment line, which nftables never changes once written. */
export function withoutTableComment(listing: string): string {
  return listing.replace(/^\tcomment "[^"\n]*"\n/m, '');
}
