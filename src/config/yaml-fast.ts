// The fast path for the commonest large config: block lists of CIDRs one per line beside a few plain
// keys. Those lists are cut out and read by hand, in one pass, when the whole document is made of
// single-line constructs only; the rest goes to the full parser (slow on long lists: docs/bench.md). Every scanner here is linear in the line it reads.
import { nestingProblem } from './bounds.js';
import { parseYamlFull, type ParsedText } from './yaml-full.js';

/** A column-0 key line: the key, and its single-line plain scalar value if it has one. */
interface KeyLine {
  readonly key: string;
  readonly value?: string;
}

/** Characters a plain scalar may not start with (beside whitespace): quotes, flow and node indicators. */
const NOT_PLAIN_START = new Set([...`"'[]{}|>&*!%@\`#`].map((c) => c.charCodeAt(0)));
const isKeyStart = (c: number) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
const isKeyChar = (c: number) => isKeyStart(c) || (c >= 48 && c <= 57) || c === 95 || c === 45;

/**
 * A line `key:`, `key: value` or either with a ` # comment`, where the key is a plain identifier
 * and the value a plain scalar without "#"; null for any other line. One pass over the line: this
 * runs on the agent's own thread for every line of a small config, so it must stay linear in the
 * line (a regex with a lazy value and optional trailing spaces was quadratic: docs/hardening.md).
 */
export function keyLine(line: string): KeyLine | null {
  if (!isKeyStart(line.charCodeAt(0))) return null;
  let i = 1;
  while (i < line.length && isKeyChar(line.charCodeAt(i))) i++;
  if (line.charCodeAt(i) !== 58 /* : */) return null;
  const key = line.slice(0, i);
  i++;
  if (i === line.length) return { key };
  if (line.charCodeAt(i) !== 32) return null;
  while (i < line.length && line.charCodeAt(i) === 32) i++;
  if (i === line.length || line.charCodeAt(i) === 35 /* # after a space: a comment */)
    return { key };
  const first = line.charCodeAt(i);
  if (NOT_PLAIN_START.has(first) || /\s/.test(line.charAt(i))) return null;
  const hash = line.indexOf('#', i);
  if (hash >= 0 && line.charCodeAt(hash - 1) !== 32) return null; // "a#b": not a comment
  let end = hash >= 0 ? hash : line.length;
  while (line.charCodeAt(end - 1) === 32) end--;
  return { key, value: line.slice(i, end) };
}

/**
 * A line `key: VALUE` (and an optional ` # comment`) whose value is a flow collection or a quoted
 * scalar closed on the same line: `sourceCIDRs: [10.244.0.0/16]`, `egressInterfaces: [eth0, "ens*"]`.
 * The fast path leaves such a line to the full parser as it is (with the other keys), which reads it
 * alone since nothing of it continues on the next line. One pass over the line.
 */
export function closedFlowLine(line: string): boolean {
  if (!isKeyStart(line.charCodeAt(0))) return false;
  let i = 1;
  while (i < line.length && isKeyChar(line.charCodeAt(i))) i++;
  if (line.charCodeAt(i) !== 58 /* : */ || line.charCodeAt(i + 1) !== 32) return false;
  i += 2;
  while (line.charCodeAt(i) === 32) i++;
  const first = line.charAt(i);
  if (!'[{"\''.includes(first) || first === '') return false;
  let depth = 0;
  for (; i < line.length; i++) {
    const c = line.charAt(i);
    if (c === '"') {
      for (i++; i < line.length && line.charAt(i) !== '"'; i++) if (line.charAt(i) === '\\') i++;
      if (i >= line.length) return false;
    } else if (c === "'") {
      for (i++; i < line.length; i++) {
        if (line.charAt(i) !== "'") continue;
        if (line.charAt(i + 1) !== "'") break;
        i++; // '' is a quote inside
      }
      if (i >= line.length) return false;
    } else if (c === '[' || c === '{') {
      depth++;
    } else if (c === ']' || c === '}') {
      depth--;
      if (depth < 0) return false;
    } else if (c === '#' && line.charAt(i - 1) === ' ') {
      return false; // a comment inside a collection, or before it is closed
    }
    if (depth === 0) break;
  }
  // Closed: only spaces and a comment may follow.
  const rest = line.slice(i + 1);
  return /^ *(?: #.*)?$/.test(rest);
}

// A list item that YAML 1.1 can only read as this exact string: CIDR characters including a "/".
const ITEM_LINE =
  /^( *)- +(?:([0-9A-Fa-f.:]*\/[0-9A-Fa-f.:/]*)|"([0-9A-Fa-f.:/]*)"|'([0-9A-Fa-f.:/]*)')[ ]*(?:[ ]#.*)?$/;
const BLANK_OR_COMMENT = /^[ ]*(?:#.*)?$/;
const LIST_KEYS = new Set(['nonmasqueradecidrs', 'masqueradecidrs']);

function lineEnd(text: string, from: number): number {
  const newline = text.indexOf('\n', from);
  return newline < 0 ? text.length : newline;
}

/** Whether a char code is one ITEM_LINE allows unquoted: hex digits, ".", ":" and "/". */
function isCidrChar(c: number): boolean {
  return (
    (c >= 48 && c <= 58) /* 0-9 : */ ||
    (c >= 65 && c <= 70) /* A-F */ ||
    (c >= 97 && c <= 102) /* a-f */ ||
    c === 46 /* . */ ||
    c === 47 /* / */
  );
}

/**
 * The commonest list item, `<spaces>- <CIDR characters with a "/">` and nothing after, read in place
 * (what ITEM_LINE's first form matches, without a match array): its indent, or -1 when the line
 * [start, end) needs ITEM_LINE.
 */
function plainItemIndent(text: string, start: number, end: number): number {
  let i = start;
  while (i < end && text.charCodeAt(i) === 32) i++;
  if (text.charCodeAt(i) !== 45 /* - */ || text.charCodeAt(i + 1) !== 32) return -1;
  const valueStart = itemValueStart(text, i + 1);
  if (valueStart >= end) return -1;
  let slash = false;
  for (let j = valueStart; j < end; j++) {
    const c = text.charCodeAt(j);
    if (!isCidrChar(c)) return -1;
    if (c === 47) slash = true;
  }
  return slash ? i - start : -1;
}

/** The first non-space after the dash at `afterDash - 1`. */
function itemValueStart(text: string, afterDash: number): number {
  let i = afterDash;
  while (text.charCodeAt(i) === 32) i++;
  return i;
}

/** How the fast path reads one line inside a list: an item, a blank or comment line, the end of the list, or a line it leaves to the full parser. */
export type ListLine =
  { readonly indent: number; readonly value: string } | 'blank' | 'end' | 'unsupported';

/** The line [start, end) of `text` read as a line under a list key. */
export function listLine(text: string, start: number, end: number): ListLine {
  const plain = plainItemIndent(text, start, end);
  if (plain >= 0) {
    const value = text.slice(itemValueStart(text, start + plain + 1), end);
    return value.endsWith(':') ? 'unsupported' : { indent: plain, value };
  }
  const line = text.slice(start, end);
  const item = ITEM_LINE.exec(line);
  if (item === null) return BLANK_OR_COMMENT.test(line) ? 'blank' : 'end';
  const value = (item[2] ?? item[3] ?? item[4]) as string;
  if (item[2] !== undefined && value.endsWith(':')) return 'unsupported';
  return { indent: (item[1] as string).length, value };
}

/**
 * Where a list the fast path read lies in the text: from the line after its key's to the line that
 * ended it (or the text's end), every line in between an item or blank or a comment.
 */
export interface ListRegion {
  /** The key as written. */
  readonly key: string;
  readonly start: number;
  readonly end: number;
  readonly indent: number;
  /** How many items. */
  readonly count: number;
}

/**
 * Returns undefined when the document is not in the simple shape the fast path handles exactly, or
 * when what is left for the full parser (the other keys) is longer than restMaxBytes. Where it reads
 * the text, `regions` gets where each list lies.
 */
export function parseYamlFast(
  text: string,
  restMaxBytes = Infinity,
  regions?: ListRegion[],
): ParsedText | undefined {
  if (text.includes('\r') || text.includes('\t')) return undefined;
  const kept: string[] = [];
  const lists = new Map<string, string[]>();
  const found: ListRegion[] = [];
  // Lines as text.split('\n') gives them, walked by offset: a list item's line is never copied.
  let start = 0;
  let end = lineEnd(text, 0);
  const advance = () => {
    start = end + 1;
    end = start <= text.length ? lineEnd(text, start) : -1;
  };
  while (end >= 0) {
    const line = text.slice(start, end);
    const key = keyLine(line);
    if (key === null) {
      if (!BLANK_OR_COMMENT.test(line) && !closedFlowLine(line)) return undefined;
      kept.push(line);
      advance();
      continue;
    }
    advance();
    const items: string[] = [];
    const listStart = start;
    let indent = -1;
    for (; end >= 0; advance()) {
      const read = listLine(text, start, end);
      if (read === 'unsupported') return undefined;
      if (read === 'blank') continue;
      if (read === 'end') break;
      if (key.value !== undefined) return undefined; // items under "key: value" would be a multi-line scalar
      if (indent >= 0 && read.indent !== indent) return undefined;
      indent = read.indent;
      items.push(read.value);
    }
    if (items.length > 0) {
      const listEnd = end >= 0 ? start : text.length;
      found.push({ key: key.key, start: listStart, end: listEnd, indent, count: items.length });
    }
    if (items.length === 0) {
      kept.push(line);
    } else if (!LIST_KEYS.has(key.key.toLowerCase())) {
      return undefined; // other keys may resolve to non-strings (YAML 1.1 "yes:"), leave them to the parser
    } else {
      kept.push(`${key.key}: []`);
      lists.set(key.key, items);
    }
  }
  if (lists.size === 0) return undefined;
  const restText = kept.join('\n');
  if (restText.length > restMaxBytes) return undefined;
  // Errors, a nesting problem too, are reported from the whole file so that line numbers match it.
  if (nestingProblem(restText, true) !== undefined) return undefined;
  const rest = parseYamlFull(restText);
  if (!rest.ok || !(rest.value instanceof Map)) return undefined;
  for (const [key, items] of lists) rest.value.set(key, items);
  regions?.push(...found);
  return rest;
}
