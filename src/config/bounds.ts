// What text may hold before a parser sees it (docs/hardening.md, round 3): nesting for JSON and YAML,
// and for YAML the keys, scalars, anchors and aliases the full parser would spend time on. One linear
// pass; the same limits for the agent and for every command.

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
