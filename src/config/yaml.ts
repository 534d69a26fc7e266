// YAML 1.1 / JSON text -> top-level mapping. The `yaml` package needs ~1.5 s for 100 000 list items,
// so plain block lists of CIDR-looking items are cut out and parsed by hand when the whole document
// is made of single-line constructs only; anything else goes to the full parser unchanged.
// Over 200 lines: the fast path, the nesting pre-scan and the error wording belong together, since
// each guards the same parse.
import { isMap, isScalar, parseDocument } from 'yaml';
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
 * What YAML text may hold before the full parser sees it. Its time grows with the tokens it is given
 * (microseconds each, more for each error: docs/hardening.md, round 3), and a config needs a handful
 * of keys and no alias; a manifest (--check) may hold many objects, so it gets more keys. The agent
 * and every command use these same limits.
 */
export interface YamlLimits {
  readonly maxKeys: number;
  /** Scalars (words and quoted strings) and tags: 100 000 CIDRs in a flow list are 100 000. */
  readonly maxTokens: number;
  readonly maxAliases: number;
}
export const CONFIG_LIMITS: YamlLimits = { maxKeys: 10_000, maxTokens: 200_000, maxAliases: 100 };
export const MANIFEST_LIMITS: YamlLimits = {
  maxKeys: 200_000,
  maxTokens: 1_000_000,
  maxAliases: 100,
};

/** A "]" or "}" that closes nothing, or not what it should: the parser pays per such error. */
const MAX_UNMATCHED = 100;
const isBlank = (c: number) => c === 32 || c === 10 || c === 9 || c === 13 || Number.isNaN(c);
/** "[" "]" "{" "}" ",": flow indicators, after which a new scalar starts. */
const isFlow = (c: number) => c === 91 || c === 93 || c === 123 || c === 125 || c === 44;

/**
 * Bounds nesting, and in YAML keys, tokens, anchors and aliases, in one linear pass before any
 * parser sees the text: the parsers recurse per level, and thousands of `[` overflow their stack and
 * can take the whole process down with them (a fatal V8 error, not an exception). Quoted scalars
 * and comments are skipped; `#` starts a comment only in YAML. The message names the line only, so
 * the same file always gives the same error.
 */
export function nestingProblem(
  text: string,
  yaml: boolean,
  limits: YamlLimits = CONFIG_LIMITS,
): string | undefined {
  const open: number[] = []; // the open brackets' closing char codes
  let line = 1;
  let lineStart = true;
  let indent = 0;
  let keys = 0;
  let tokens = 0;
  let aliases = 0;
  let unmatched = 0;
  let quote = 0; // the open quote's char code, or 0
  let previous = 10; // "\n"
  const key = () =>
    ++keys > limits.maxKeys ? `more than ${limits.maxKeys} mapping keys (at line ${line})` : '';
  const token = () =>
    ++tokens > limits.maxTokens
      ? `more than ${limits.maxTokens} scalars (at line ${line}): write long lists one item per line, or as JSON`
      : '';
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
        const problem = yaml && c === 63 ? key() : '';
        if (problem) return problem;
        previous = c;
        continue;
      }
      lineStart = false;
    }
    const starts = isBlank(previous) || isFlow(previous); // a new scalar may start here
    let problem = '';
    if (quote !== 0) {
      if (c === 92 && quote === 34)
        i++; // an escape in a double-quoted scalar
      else if (c === quote) quote = 0;
    } else if ((c === 34 || c === 39) && (!yaml || starts)) {
      // In YAML a quote opens a scalar only where one starts ("it's" is plain text).
      quote = c;
      if (yaml) problem = token();
    } else if (yaml && c === 35 && (previous === 32 || previous === 9 || previous === 10)) {
      const end = text.indexOf('\n', i);
      if (end < 0) break;
      i = end - 1;
    } else if (c === 91 || c === 123) {
      if (open.length === MAX_NESTING)
        return `nested more than ${MAX_NESTING} levels deep at line ${line}`;
      open.push(c + 2); // "[" + 2 = "]", "{" + 2 = "}"
    } else if (c === 93 || c === 125) {
      if (open.at(-1) === c) open.pop();
      else if (yaml && ++unmatched > MAX_UNMATCHED)
        return `more than ${MAX_UNMATCHED} unmatched "]" or "}" (at line ${line})`;
    } else if (!yaml || isBlank(c) || c === 44) {
      // JSON is parsed in linear time whatever its tokens; a blank or comma is no token.
    } else if ((c === 58 || c === 63) && isBlank(text.charCodeAt(i + 1))) {
      problem = key(); // "key: value", "? key"
    } else if ((c === 42 || c === 38) && starts && !isBlank(text.charCodeAt(i + 1))) {
      // "*alias", "&anchor"
      if (++aliases > limits.maxAliases)
        return `more than ${limits.maxAliases} anchors and aliases (at line ${line})`;
    } else if (starts) {
      problem = token(); // a word, a tag
    }
    if (problem) return problem;
    previous = c;
  }
  return undefined;
}

/** nestingProblem with a manifest's limits: what --check bounds before parsing a manifest. */
export function manifestProblem(text: string): string | undefined {
  return nestingProblem(text, true, MANIFEST_LIMITS);
}

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

// A list item that YAML 1.1 can only read as this exact string: CIDR characters including a "/".
const ITEM_LINE =
  /^( *)- +(?:([0-9A-Fa-f.:]*\/[0-9A-Fa-f.:/]*)|"([0-9A-Fa-f.:/]*)"|'([0-9A-Fa-f.:/]*)')[ ]*(?:[ ]#.*)?$/;
const BLANK_OR_COMMENT = /^[ ]*(?:#.*)?$/;
const LIST_KEYS = new Set(['nonmasqueradecidrs', 'masqueradecidrs']);

/** " at line L, column C" of offset `pos`, as the parser's own pretty errors say it. */
function at(text: string, pos: number | undefined): string {
  if (pos === undefined) return '';
  const before = text.lastIndexOf('\n', pos - 1);
  let line = 1;
  for (let i = text.indexOf('\n'); i >= 0 && i < pos; i = text.indexOf('\n', i + 1)) line++;
  return ` at line ${line}, column ${pos - before}`;
}

/**
 * The offset of the first top-level key given twice. The parser's own check (uniqueKeys) compares
 * every pair of keys in every mapping; this one is a set lookup per key, and only the top level
 * matters: a config's values are lists and scalars.
 */
function duplicateKeyOffset(contents: unknown): number | undefined {
  if (!isMap(contents)) return undefined;
  const seen = new Set<string>();
  for (const pair of contents.items) {
    if (!isScalar(pair.key)) continue;
    const id = `${typeof pair.key.value}:${String(pair.key.value)}`;
    if (seen.has(id)) return pair.key.range?.[0];
    seen.add(id);
  }
  return undefined;
}

export function parseYamlFull(text: string): ParsedText {
  // The parser makes an Error per problem it finds and may find one per token: without an excerpt
  // (prettyErrors) or a stack trace for each, that costs a third of the time.
  const stackTraceLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  let doc: ReturnType<typeof parseDocument>;
  try {
    doc = parseDocument(text, { version: '1.1', uniqueKeys: false, prettyErrors: false });
  } finally {
    Error.stackTraceLimit = stackTraceLimit;
  }
  const firstError = doc.errors[0];
  if (firstError !== undefined) {
    return {
      ok: false,
      message: `invalid YAML: ${yamlReason(firstError.message)}${at(text, firstError.pos[0])}`,
    };
  }
  const duplicate = duplicateKeyOffset(doc.contents);
  if (duplicate !== undefined) {
    return { ok: false, message: `invalid YAML: Map keys must be unique${at(text, duplicate)}` };
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
    const key = keyLine(line);
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
      if (key.value !== undefined) return undefined; // items under "key: value" would be a multi-line scalar
      if (indent >= 0 && itemIndent !== indent) return undefined;
      indent = itemIndent;
      items.push(value);
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
