// One config file's text -> the keys it sets, validated. Merging and defaults live in build.ts.
import { CidrError, escapeUnprintable, type Prefix, parseCidr, quote } from '../cidr/index.js';
import { parseGoDuration } from './duration.js';
import {
  parseInterfaceName,
  parseLabel,
  parseNodeName,
  parseSnatAddress,
  type SnatRange,
  ValueError,
} from './egress.js';
import { ConfigError, type LoadOptions } from './types.js';
import { parseConfigDocument, type ParseBudget } from './yaml.js';

/** What one file says; a key left out (or null for the scalar keys) is undefined. */
export interface ConfigFragment {
  readonly file: string;
  readonly nonMasqueradeCIDRs?: readonly Prefix[];
  readonly masqueradeCIDRs?: readonly Prefix[];
  readonly masqLinkLocal?: boolean;
  readonly masqLinkLocalIPv6?: boolean;
  readonly cidrLimit?: number;
  readonly resyncIntervalMs?: number;
  /** Egress policy (README, "Egress policy"): only traffic from these sources is considered. */
  readonly sourceCIDRs?: readonly Prefix[];
  /** Only traffic leaving through these interfaces (a trailing `*`: every name it starts). */
  readonly egressInterfaces?: readonly string[];
  readonly snatAddress?: SnatRange;
  readonly snatAddressIPv6?: SnatRange;
  /** This file applies only on the nodes named. */
  readonly nodeNames?: readonly string[];
  /** This file applies only on nodes with all these labels (label, value). */
  readonly nodeSelector?: readonly (readonly [string, string])[];
  readonly nonMasqueradeNodePodCIDRs?: boolean;
  /** The CIDR lists as written, with LoadOptions.provenance only. */
  readonly written?: { readonly [K in CidrListKey]?: readonly string[] };
}

export type CidrListKey = 'nonMasqueradeCIDRs' | 'masqueradeCIDRs' | 'sourceCIDRs';

export type FragmentResult =
  | { ok: true; fragment: ConfigFragment; warnings: string[] }
  | { ok: false; error: ConfigError; warnings: string[] };

type Mutable<T> = { -readonly [K in keyof T]: T[K] };
type KeyName =
  Exclude<keyof ConfigFragment, 'file' | 'resyncIntervalMs' | 'written'> | 'resyncInterval';

const KEYS: ReadonlyMap<string, KeyName> = new Map(
  (
    [
      'nonMasqueradeCIDRs',
      'masqueradeCIDRs',
      'masqLinkLocal',
      'masqLinkLocalIPv6',
      'cidrLimit',
      'resyncInterval',
      'sourceCIDRs',
      'egressInterfaces',
      'snatAddress',
      'snatAddressIPv6',
      'nodeNames',
      'nodeSelector',
      'nonMasqueradeNodePodCIDRs',
    ] as const
  ).map((name) => [name.toLowerCase(), name]),
);

const MIN_RESYNC_MS = 1000;
// setTimeout fires at once for delays above 2^31-1 ms, which would turn a long interval into a busy loop.
const MAX_RESYNC_MS = 2 ** 31 - 1;

/** Thrown inside this module only; parseFragment turns it into a ConfigError result. */
class Invalid extends Error {}

function describe(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (value instanceof Date) {
    return Number.isNaN(value.getTime())
      ? 'an invalid date'
      : `a date (${value.toISOString().slice(0, 10)})`;
  }
  if (value instanceof Uint8Array) return `binary data (${value.length} bytes)`;
  if (value instanceof Set) return 'a set';
  // Maps (YAML) and plain objects (JSON): String() of a JSON object may throw ({"toString": 1}).
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return `a string (${quote(value)})`;
  return `${typeof value} ${String(value)}`;
}

/** A key as written when it is short and printable, else quoted and cut short. */
function keyText(key: string): string {
  return /^[\x20-\x7e]{1,100}$/.test(key) ? key : quote(key);
}

function parseCidrList(key: KeyName, value: unknown, options: LoadOptions): Prefix[] {
  if (value === null || value === undefined) return [];
  if (!Array.isArray(value)) {
    const example =
      typeof value === 'string' && /^[\x20-\x7e]{1,100}$/.test(value)
        ? ` (write a list: [${value}])`
        : '';
    throw new Invalid(`${key}: expected a list of CIDR strings, got ${describe(value)}${example}`);
  }
  const prefixes: Prefix[] = new Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const entry: unknown = value[i];
    if (typeof entry !== 'string') {
      throw new Invalid(`${key}[${i}]: expected a CIDR string, got ${describe(entry)}`);
    }
    let prefix: Prefix;
    try {
      prefix = parseCidr(entry);
    } catch (err) {
      if (err instanceof CidrError) throw new Invalid(`${key}[${i}]: ${err.message}`);
      throw err;
    }
    if (prefix.family === 6 && !options.enableIPv6) {
      throw new Invalid(
        `${key}[${i}]: ${JSON.stringify(entry)} is an IPv6 CIDR but IPv6 is off (start the agent with --enable-ipv6, or remove it)`,
      );
    }
    prefixes[i] = prefix;
  }
  return prefixes;
}

function parseBoolean(key: KeyName, value: unknown): boolean {
  if (typeof value === 'boolean') return value;
  throw new Invalid(`${key}: expected true or false, got ${describe(value)}`);
}

/** A list of strings, each checked by `parseOne` (which throws ValueError). */
function parseStringList(
  key: KeyName,
  value: unknown,
  what: string,
  parseOne: (text: string) => string,
): string[] {
  if (value === null || value === undefined) return [];
  if (!Array.isArray(value)) {
    throw new Invalid(`${key}: expected a list of ${what}s, got ${describe(value)}`);
  }
  return value.map((entry: unknown, i) => {
    if (typeof entry !== 'string') {
      throw new Invalid(`${key}[${i}]: expected ${what}, got ${describe(entry)}`);
    }
    try {
      return parseOne(entry);
    } catch (err) {
      if (err instanceof ValueError) throw new Invalid(`${key}[${i}]: ${err.message}`);
      throw err;
    }
  });
}

function parseSnat(key: 'snatAddress' | 'snatAddressIPv6', value: unknown, options: LoadOptions) {
  if (typeof value !== 'string') {
    throw new Invalid(`${key}: expected an address or a range A-B, got ${describe(value)}`);
  }
  const family = key === 'snatAddress' ? 4 : 6;
  if (family === 6 && !options.enableIPv6) {
    throw new Invalid(
      `${key}: ${quote(value)} is for IPv6 but IPv6 is off (start the agent with --enable-ipv6, or remove it)`,
    );
  }
  try {
    return parseSnatAddress(value, family);
  } catch (err) {
    if (err instanceof ValueError) throw new Invalid(`${key}: ${err.message}`);
    throw err;
  }
}

/** nodeSelector: a mapping of label keys to string values (YAML gives a Map, JSON an object). */
function parseSelector(value: unknown): Array<[string, string]> {
  const entries =
    value instanceof Map
      ? [...(value as Map<unknown, unknown>)]
      : value !== null && typeof value === 'object' && !Array.isArray(value)
        ? Object.entries(value)
        : undefined;
  if (entries === undefined) {
    throw new Invalid(
      `nodeSelector: expected a mapping of labels to values, got ${describe(value)}`,
    );
  }
  return entries.map(([label, wanted]) => {
    const key = String(label);
    if (typeof wanted !== 'string') {
      throw new Invalid(
        `nodeSelector[${quote(key)}]: expected a string value, got ${describe(wanted)}`,
      );
    }
    try {
      parseLabel(key, wanted);
    } catch (err) {
      if (err instanceof ValueError)
        throw new Invalid(`nodeSelector[${quote(key)}]: ${err.message}`);
      throw err;
    }
    return [key, wanted];
  });
}

function parseCidrLimit(value: unknown): number {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  throw new Invalid(`cidrLimit: expected a whole number of 0 or more, got ${describe(value)}`);
}

function parseResyncInterval(value: unknown, warnings: string[], file: string): number {
  if (typeof value !== 'string') {
    const hint =
      typeof value === 'number' ? ` (write a duration with a unit, e.g. "${value}s")` : '';
    throw new Invalid(`resyncInterval: expected a duration string, got ${describe(value)}${hint}`);
  }
  const ms = parseGoDuration(value);
  if (typeof ms === 'string') throw new Invalid(`resyncInterval: ${quote(value)} ${ms}`);
  if (ms <= 0) throw new Invalid(`resyncInterval: ${quote(value)} must be greater than 0`);
  if (ms < MIN_RESYNC_MS) {
    warnings.push(
      `${escapeUnprintable(file)}: resyncInterval: ${quote(value)} is below 1s; using 1s`,
    );
    return MIN_RESYNC_MS;
  }
  if (ms > MAX_RESYNC_MS) {
    warnings.push(
      `${escapeUnprintable(file)}: resyncInterval: ${quote(value)} is above 596h; using 596h`,
    );
    return MAX_RESYNC_MS;
  }
  return Math.round(ms);
}

function readKeys(
  document: Map<unknown, unknown>,
  fragment: Mutable<ConfigFragment>,
  options: LoadOptions,
  warnings: string[],
): void {
  const unknownKeys: string[] = [];
  const seen = new Map<KeyName, string>();
  for (const [rawKey, value] of document) {
    const written = String(rawKey);
    const key = KEYS.get(written.toLowerCase());
    if (key === undefined) {
      unknownKeys.push(written);
      continue;
    }
    const earlier = seen.get(key);
    if (earlier !== undefined) {
      throw new Invalid(`${key}: given twice (as ${quote(earlier)} and ${quote(written)})`);
    }
    seen.set(key, written);
    if (key === 'nonMasqueradeCIDRs' || key === 'masqueradeCIDRs' || key === 'sourceCIDRs') {
      fragment[key] = parseCidrList(key, value, options);
      // Every entry was checked to be a string by the parse just above.
      if (options.provenance)
        fragment.written = { ...fragment.written, [key]: Array.isArray(value) ? [...value] : [] };
    } else if (key === 'egressInterfaces') {
      fragment.egressInterfaces = parseStringList(key, value, 'interface name', parseInterfaceName);
    } else if (key === 'nodeNames') {
      fragment.nodeNames = parseStringList(key, value, 'node name', parseNodeName);
    } else if (value === null || value === undefined) {
      continue; // as upstream: a scalar key given as null keeps its default
    } else if (key === 'snatAddress' || key === 'snatAddressIPv6') {
      fragment[key] = parseSnat(key, value, options);
    } else if (key === 'nodeSelector') {
      fragment.nodeSelector = parseSelector(value);
    } else if (
      key === 'masqLinkLocal' ||
      key === 'masqLinkLocalIPv6' ||
      key === 'nonMasqueradeNodePodCIDRs'
    ) {
      fragment[key] = parseBoolean(key, value);
    } else if (key === 'cidrLimit') {
      fragment.cidrLimit = parseCidrLimit(value);
    } else {
      fragment.resyncIntervalMs = parseResyncInterval(value, warnings, fragment.file);
    }
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
): FragmentResult {
  const warnings: string[] = [];
  const parsed = parseConfigDocument(text.startsWith('\uFEFF') ? text.slice(1) : text, budget);
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
        : describe(document);
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
