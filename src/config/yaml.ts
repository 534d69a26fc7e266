// YAML 1.1 / JSON text -> top-level mapping: JSON when the text starts with "{", as upstream; YAML
// through the fast path (yaml-fast.ts) where it applies, else the full parser (yaml-full.ts), each
// bounded first (bounds.ts) and within the caller's budget.
import { quote } from '../cidr/index.js';
import { nestingProblem } from './bounds.js';
import { parseYamlFast, type ListRegion } from './yaml-fast.js';
import { parseYamlFull, reasonText, type ParsedText } from './yaml-full.js';

export type { ParsedText } from './yaml-full.js';

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

export function parseYaml(text: string, budget?: ParseBudget, regions?: ListRegion[]): ParsedText {
  // The fast path bounds the nesting of what it hands the full parser itself: its list items hold
  // no brackets, so a 100 000-line list is not scanned twice.
  const fast = parseYamlFast(text, budget?.fullParserMaxBytes, regions);
  if (fast) return fast;
  const tooDeep = nestingProblem(text, true);
  if (tooDeep) return { ok: false, message: `invalid YAML: ${tooDeep}` };
  if (budget && text.length > budget.fullParserMaxBytes) throw new ParseDeferred();
  return parseYamlFull(text);
}

/**
 * JSON when the first non-blank character is "{", as upstream; otherwise YAML 1.1. `regions` gets
 * where the lists the YAML fast path read lie (config/incremental.ts).
 */
export function parseConfigDocument(
  text: string,
  budget?: ParseBudget,
  regions?: ListRegion[],
): ParsedText {
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
  return parseYaml(text, budget, regions);
}
