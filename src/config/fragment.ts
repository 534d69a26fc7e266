// One config file's text -> the keys it sets, each parsed and checked by the key table (keys.ts).
// Merging and defaults live in build.ts.
import { escapeUnprintable, quote } from '../cidr/index.js';
import {
  CONFIG_KEYS,
  describeValue,
  Invalid,
  KEY_BY_NAME,
  type KeyName,
  type KeyValues,
  type ParseContext,
} from './keys.js';
import { ConfigError, type LoadOptions } from './types.js';
import { parseConfigDocument, type ParseBudget } from './yaml.js';
import type { ListRegion } from './yaml-fast.js';

/** What one file says: each key it gives, parsed (a scalar given as null is as not given). */
export type ConfigFragment = { readonly file: string } & {
  readonly [K in KeyName]?: KeyValues[K];
} & {
  /** The CIDR lists as written, with LoadOptions.provenance only. */
  readonly written?: { readonly [K in KeyName]?: readonly string[] };
};

export type FragmentResult =
  | { ok: true; fragment: ConfigFragment; warnings: string[] }
  | { ok: false; error: ConfigError; warnings: string[] };

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** A key as written when it is short and printable, else quoted and cut short. */
function keyText(key: string): string {
  return /^[\x20-\x7e]{1,100}$/.test(key) ? key : quote(key);
}

function readKeys(
  document: Map<unknown, unknown>,
  fragment: Mutable<ConfigFragment>,
  options: LoadOptions,
  warnings: string[],
): void {
  const unknownKeys: string[] = [];
  const seen = new Map<KeyName, string>();
  const context: ParseContext = { options, file: fragment.file, warnings };
  const values = fragment as Record<KeyName, unknown>;
  for (const [rawKey, value] of document) {
    const written = String(rawKey);
    const key = KEY_BY_NAME.get(written.toLowerCase());
    if (key === undefined) {
      unknownKeys.push(written);
      continue;
    }
    const earlier = seen.get(key);
    if (earlier !== undefined) {
      throw new Invalid(`${key}: given twice (as ${quote(earlier)} and ${quote(written)})`);
    }
    seen.set(key, written);
    const spec = CONFIG_KEYS[key];
    const parsed = spec.parse(value, context);
    if (parsed === undefined) continue; // as upstream: a scalar key given as null keeps its default
    values[key] = parsed;
    // Every entry was checked to be a string by the parse just above.
    if ('written' in spec && options.provenance)
      fragment.written = { ...fragment.written, [key]: Array.isArray(value) ? [...value] : [] };
  }
  if (unknownKeys.length > 0) {
    const shown = unknownKeys.slice(0, 10).map(keyText);
    if (unknownKeys.length > 10) shown.push(`and ${unknownKeys.length - 10} more`);
    warnings.push(`${escapeUnprintable(fragment.file)}: unknown keys ignored: ${shown.join(', ')}`);
  }
}

/**
 * Parses and validates one file's text. Never throws for bad input: it returns a ConfigError. With a
 * budget, throws ParseDeferred for text beyond it (yaml.ts).
 */
export function parseFragment(
  text: string,
  file: string,
  options: LoadOptions,
  budget?: ParseBudget,
  regions?: ListRegion[],
): FragmentResult {
  const warnings: string[] = [];
  const bom = text.startsWith('\uFEFF');
  // Regions are offsets in the text as given: none are said of a text whose mark was cut off.
  const parsed = parseConfigDocument(bom ? text.slice(1) : text, budget, bom ? undefined : regions);
  if (!parsed.ok) return { ok: false, error: new ConfigError(file, parsed.message), warnings };
  const fragment: Mutable<ConfigFragment> = { file };
  const document = parsed.value;
  if (document === null || document === undefined) return { ok: true, fragment, warnings };
  if (!(document instanceof Map)) {
    // A file that is not a mapping may be anything the path points at (a symlink to
    // /proc/self/environ): say what it is, never what it holds.
    const got =
      typeof document === 'string'
        ? `a string of ${document.length} characters (not shown)`
        : describeValue(document);
    const message = `expected a mapping of keys such as nonMasqueradeCIDRs, got ${got}`;
    return { ok: false, error: new ConfigError(file, message), warnings };
  }
  try {
    readKeys(document, fragment, options, warnings);
  } catch (err) {
    if (err instanceof Invalid)
      return { ok: false, error: new ConfigError(file, err.message), warnings };
    throw err;
  }
  return { ok: true, fragment, warnings };
}
