// YAML 1.1 / JSON text -> top-level mapping. The `yaml` package needs ~1.5 s for 100 000 list items,
// so plain block lists of CIDR-looking items are cut out and parsed by hand when the whole document
// is made of single-line constructs only; anything else goes to the full parser unchanged.
// Over 200 lines: the fast path, the nesting pre-scan and the error wording belong together, since
// each guards the same parse.
import { parseDocument } from 'yaml';
import { escapeUnprintable, quote } from '../cidr/index.js';

/** A parser's message may quote the input: keep it printable and short. */
function reasonText(message: string): string {
  return escapeUnprintable(message.length > 300 ? `${message.slice(0, 300)}…` : message);
}

/**
 * yaml's first line holds the reason and position; the rest is a source excerpt. A stack overflow's
 * position depends on how deep the stack happened to be: reported without it, so that the same file
 * gives the same error (and one log line) every time.
 */
function yamlReason(message: string): string {
  const first = (message.split('\n')[0] as string).replace(/:$/, '');
  if (/Maximum call stack size exceeded/.test(first)) return 'nested too deeply for the parser';
  return reasonText(first);
}

/**
 * V8's JSON errors quote an excerpt of the input ("Unexpected token 'S', "{"a": SECRETVALU"... is
 * not valid JSON"): the excerpt is dropped, the one-character token kept.
 */
function jsonReason(message: string): string {
  return reasonText(
    message.replace(/, ".*" is not valid JSON$|, ".*"\.\.\. is not valid JSON$/s, ''),
  );
}

/**
 * The first key given twice in the top-level object of valid JSON text: JSON.parse keeps the last
 * silently, while YAML refuses duplicates, so JSON is held to the same rule. Only the top level
 * matters: a config's values are lists and scalars.
 */
export function duplicateTopLevelKey(text: string): string | undefined {
  const seen = new Set<string>();
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 34) {
      const start = i;
      for (i++; i < text.length && text.charCodeAt(i) !== 34; i++)
        if (text.charCodeAt(i) === 92) i++;
      if (depth !== 1) continue;
      let next = i + 1;
      while (next < text.length && /\s/.test(text.charAt(next))) next++;
      if (text.charCodeAt(next) !== 58) continue; // a value, not a key
      const key = JSON.parse(text.slice(start, i + 1)) as string;
      if (seen.has(key)) return key;
      seen.add(key);
    } else if (c === 91 || c === 123) {
      depth++;
    } else if (c === 93 || c === 125) {
      depth--;
    }
  }
  return undefined;
}

export type ParsedText = { ok: true; value: unknown } | { ok: false; message: string };

/**
 * How much parsing the calling thread can afford (the agent's event loop, config/loader.ts): text
 * longer than maxBytes, or needing the full `yaml` parser (whose slow paths docs/hardening.md lists)
 * beyond fullParserMaxBytes, is not parsed but deferred with ParseDeferred. Everything else is
 * linear in the text's length.
 */
export interface ParseBudget {
  readonly maxBytes: number;
  readonly fullParserMaxBytes: number;
}

/** Thrown when a parse exceeds its ParseBudget: not a verdict on the text, which goes elsewhere. */
export class ParseDeferred extends Error {
  override name = 'ParseDeferred';
}

/** Deeper than this, `[`/`{` nesting is refused before parsing: a config needs two levels. */
export const MAX_NESTING = 64;
/** Longer than this, a line's block indentation (spaces and `- ? :` indicators) is refused. */
export const MAX_INDENT = 512;

/**
 * Bounds nesting in one linear pass before any parser sees the text: the parsers recurse per level,
 * and thousands of `[` overflow their stack and can take the whole process down with them (a fatal
 * V8 error, not an exception). Quoted scalars and comments are skipped; `#` starts a comment only
 * in YAML. The message names the line only, so the same file always gives the same error.
 */
export function nestingProblem(text: string, yaml: boolean): string | undefined {
  let depth = 0;
  let line = 1;
  let lineStart = true;
  let indent = 0;
  let quote = 0; // the open quote's char code, or 0
  let previous = 10; // "\n"
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10) {
      line++;
      lineStart = true;
      indent = 0;
      previous = c;
      continue;
    }
    if (lineStart) {
      // spaces, and the block indicators "- ", "? ", ": " that open a nested node on the same line
      if (c === 32 || ((c === 45 || c === 63 || c === 58) && text.charCodeAt(i + 1) === 32)) {
        if (++indent > MAX_INDENT)
          return `indented more than ${MAX_INDENT} columns at line ${line}`;
        previous = c;
        continue;
      }
      lineStart = false;
    }
    if (quote !== 0) {
      if (c === 92 && quote === 34)
        i++; // an escape in a double-quoted scalar
      else if (c === quote) quote = 0;
    } else if (c === 34 || c === 39) {
      quote = c;
    } else if (yaml && c === 35 && (previous === 32 || previous === 9 || previous === 10)) {
      const end = text.indexOf('\n', i);
      if (end < 0) break;
      i = end - 1;
    } else if (c === 91 || c === 123) {
      if (++depth > MAX_NESTING)
        return `nested more than ${MAX_NESTING} levels deep at line ${line}`;
    } else if ((c === 93 || c === 125) && depth > 0) {
      depth--;
    }
    previous = c;
  }
  return undefined;
}

// A column-0 key whose value is a single-line plain scalar or nothing, then an optional comment.
const KEY_LINE = /^([A-Za-z][A-Za-z0-9_-]*):(?:[ ]+([^\s"'[\]{}|>&*!%@`#][^#]*?))?[ ]*(?:[ ]#.*)?$/;
// A list item that YAML 1.1 can only read as this exact string: CIDR characters including a "/".
const ITEM_LINE =
  /^( *)- +(?:([0-9A-Fa-f.:]*\/[0-9A-Fa-f.:/]*)|"([0-9A-Fa-f.:/]*)"|'([0-9A-Fa-f.:/]*)')[ ]*(?:[ ]#.*)?$/;
const BLANK_OR_COMMENT = /^[ ]*(?:#.*)?$/;
const LIST_KEYS = new Set(['nonmasqueradecidrs', 'masqueradecidrs']);

export function parseYamlFull(text: string): ParsedText {
  const doc = parseDocument(text, { version: '1.1', uniqueKeys: true });
  const firstError = doc.errors[0];
  if (firstError !== undefined) {
    return { ok: false, message: `invalid YAML: ${yamlReason(firstError.message)}` };
  }
  try {
    return { ok: true, value: doc.toJS({ mapAsMap: true, maxAliasCount: 100 }) };
  } catch (err) {
    return { ok: false, message: `invalid YAML: ${yamlReason((err as Error).message)}` };
  }
}

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

/**
 * Returns undefined when the document is not in the simple shape the fast path handles exactly, or
 * when what is left for the full parser (the other keys) is longer than restMaxBytes.
 */
export function parseYamlFast(text: string, restMaxBytes = Infinity): ParsedText | undefined {
  if (text.includes('\r') || text.includes('\t')) return undefined;
  const kept: string[] = [];
  const lists = new Map<string, string[]>();
  // Lines as text.split('\n') gives them, walked by offset: a list item's line is never copied.
  let start = 0;
  let end = lineEnd(text, 0);
  const advance = () => {
    start = end + 1;
    end = start <= text.length ? lineEnd(text, start) : -1;
  };
  while (end >= 0) {
    const line = text.slice(start, end);
    const key = KEY_LINE.exec(line);
    if (key === null) {
      if (!BLANK_OR_COMMENT.test(line)) return undefined;
      kept.push(line);
      advance();
      continue;
    }
    advance();
    const items: string[] = [];
    let indent = -1;
    for (; end >= 0; advance()) {
      let itemIndent = plainItemIndent(text, start, end);
      let value: string;
      if (itemIndent >= 0) {
        value = text.slice(itemValueStart(text, start + itemIndent + 1), end);
        if (value.endsWith(':')) return undefined;
      } else {
        const next = text.slice(start, end);
        const item = ITEM_LINE.exec(next);
        if (item === null) {
          if (BLANK_OR_COMMENT.test(next)) continue;
          break;
        }
        itemIndent = (item[1] as string).length;
        value = (item[2] ?? item[3] ?? item[4]) as string;
        if (item[2] !== undefined && value.endsWith(':')) return undefined;
      }
      if (key[2] !== undefined) return undefined; // items under "key: value" would be a multi-line scalar
      if (indent >= 0 && itemIndent !== indent) return undefined;
      indent = itemIndent;
      items.push(value);
    }
    if (items.length === 0) {
      kept.push(line);
    } else if (!LIST_KEYS.has((key[1] as string).toLowerCase())) {
      return undefined; // other keys may resolve to non-strings (YAML 1.1 "yes:"), leave them to the parser
    } else {
      kept.push(`${key[1] as string}: []`);
      lists.set(key[1] as string, items);
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
  return rest;
}

export function parseYaml(text: string, budget?: ParseBudget): ParsedText {
  // The fast path bounds the nesting of what it hands the full parser itself: its list items hold
  // no brackets, so a 100 000-line list is not scanned twice.
  const fast = parseYamlFast(text, budget?.fullParserMaxBytes);
  if (fast) return fast;
  const tooDeep = nestingProblem(text, true);
  if (tooDeep) return { ok: false, message: `invalid YAML: ${tooDeep}` };
  if (budget && text.length > budget.fullParserMaxBytes) throw new ParseDeferred();
  return parseYamlFull(text);
}

/** JSON when the first non-blank character is "{", as upstream; otherwise YAML 1.1. */
export function parseConfigDocument(text: string, budget?: ParseBudget): ParsedText {
  if (budget && text.length > budget.maxBytes) throw new ParseDeferred();
  if (/^\s*\{/.test(text)) {
    const tooDeep = nestingProblem(text, false);
    if (tooDeep) return { ok: false, message: `invalid JSON: ${tooDeep}` };
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      return { ok: false, message: `invalid JSON: ${jsonReason((err as Error).message)}` };
    }
    const duplicate = duplicateTopLevelKey(text);
    if (duplicate !== undefined) {
      return { ok: false, message: `invalid JSON: the key ${quote(duplicate)} is given twice` };
    }
    const map = value !== null && typeof value === 'object' && !Array.isArray(value);
    return { ok: true, value: map ? new Map(Object.entries(value as object)) : value };
  }
  return parseYaml(text, budget);
}
