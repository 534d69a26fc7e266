// Renders typed tables into nft script text. The nested block form is also what `nft list table`
// prints, so the same text serves as the write and as the expectation a read-back is compared with.
import { nameProblem } from './names.js';
import type { Chain, TableFamily, NamedSet, Table, TableRef } from './types.js';

/** Throws unless every name is a plain identifier and the comment cannot break out of its quotes. */
export function validateTable(table: Table): void {
  const names = [table.name, ...table.sets.map((s) => s.name), ...table.chains.map((c) => c.name)];
  for (const name of names) {
    const problem = nameProblem(name);
    if (problem) throw new Error(`invalid nftables name ${JSON.stringify(name)}: ${problem}`);
  }
  if (!/^[A-Za-z0-9 .:_-]{0,128}$/.test(table.comment)) {
    throw new Error(`invalid table comment ${JSON.stringify(table.comment)}`);
  }
}

/** nft prints a full-length prefix as a bare address; write it the same way. */
function elementText(element: string, family: TableFamily): string {
  const full = family === 'ip' ? '/32' : '/128';
  return element.endsWith(full) ? element.slice(0, -full.length) : element;
}

function renderSet(set: NamedSet, family: TableFamily): string[] {
  const lines = [`\tset ${set.name} {`, `\t\ttypeof ${set.key.expression}`];
  if (set.flags.length > 0) lines.push(`\t\tflags ${set.flags.join(',')}`);
  if (set.elements.length > 0) {
    const { elementSuffix } = set.key;
    const addresses = set.elements.map((e) => elementText(e, family)).join(`${elementSuffix}, `);
    const elements = addresses + elementSuffix;
    // One pass over the joined text (100 000 regex tests cost ~30 ms on the JS thread): nothing but
    // address characters, so no element can carry nft syntax, whatever produced it.
    const stray = /[^0-9a-f.:/, -]/.exec(elements);
    if (stray) {
      throw new Error(
        `set ${set.name}: ${JSON.stringify(stray[0])} in its elements: not a formatted prefix`,
      );
    }
    lines.push(`\t\telements = { ${elements} }`);
  }
  lines.push('\t}');
  return lines;
}

function renderChain(chain: Chain): string[] {
  const lines = [`\tchain ${chain.name} {`];
  if (chain.base) {
    const { type, hook, priority, policy } = chain.base;
    lines.push(`\t\ttype ${type} hook ${hook} priority ${priority}; policy ${policy};`);
  }
  for (const rule of chain.rules) lines.push(`\t\t${rule}`);
  lines.push('\t}');
  return lines;
}

/** The table as one nested block: elements inside the set block, which keeps nft's cache fill away. */
export function renderTable(table: Table): string {
  validateTable(table);
  const body = [
    `\tcomment "${table.comment}"`,
    ...table.sets.flatMap((set) => renderSet(set, table.family)),
    ...table.chains.flatMap(renderChain),
  ];
  return [`table ${table.family} ${table.name} {`, ...body, '}'].join('\n') + '\n';
}

/**
 * One transaction that replaces each table whole (add makes the delete safe when it is absent)
 * and deletes the stale ones: a packet sees the old ruleset or the new one, never a mix.
 */
export function renderReplace(tables: readonly Table[], stale: readonly TableRef[] = []): string {
  const parts: string[] = [];
  for (const table of tables) {
    parts.push(`add table ${table.family} ${table.name}`);
    parts.push(`delete table ${table.family} ${table.name}`);
    parts.push(renderTable(table));
  }
  return parts.join('\n') + '\n' + renderDelete(stale);
}

/** One transaction deleting these tables. */
export function renderDelete(refs: readonly TableRef[]): string {
  return refs.map((ref) => `delete table ${ref.family} ${ref.name}\n`).join('');
}

/** Whitespace-insensitive form of a table listing, for comparing a read-back with a rendering. */
export function normaliseListing(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}
