// The config keys (README, "Configuration" and "Egress policy"), declared once: how each is parsed
// and checked in one file, and merged across the files that apply (README, "Configuration":
// directory mode). fragment.ts reads a file's keys by this table, build.ts merges them by it; what
// the policy keys do to a flow is the decision's (decision.ts). Adding a key: docs/design.md,
// "Adding a config key".
import {
  CidrError,
  escapeUnprintable,
  familyLists,
  mergeToLines,
  type Prefix,
  parseCidr,
  quote,
} from '../cidr/index.js';
import { parseGoDuration } from './duration.js';
import {
  collapseInterfaces,
  parseInterfaceName,
  parseLabel,
  parseNodeName,
  parseSnatAddress,
  type SnatRange,
  snatText,
  ValueError,
} from './egress.js';
import { type LabelSelector, parseSelector, SelectorError } from './selector.js';
import { type CidrSets, ConfigError, type LoadOptions } from './base.js';

/** A value that is not what its key takes: the message names the key (and index) and the value. */
export class Invalid extends Error {}

/** What a key's parse has besides the value. */
export interface ParseContext {
  readonly options: LoadOptions;
  readonly file: string;
  /** Warnings of the file (a value raised to a bound, say), each naming the file. */
  readonly warnings: string[];
}

/** One file's value of a key, where it came from. */
export interface Given<V> {
  readonly file: string;
  readonly value: V;
}

/**
 * One key: its parse (a value of the file, or undefined where a key given as null keeps its
 * default), its merge over the files that apply that give it (at least one, in file order), and
 * whether the merged value reaches the config's hash or its `keys` (the CIDR lists reach the config
 * as its merged sets; the scoping keys choose the files and are not merged).
 */
export interface KeySpec<V, M> {
  readonly parse: (value: unknown, context: ParseContext) => V | undefined;
  readonly merge?: (given: readonly Given<V>[], origin: string) => M;
  /** Each entry as the file wrote it is kept for --explain (LoadOptions.provenance). */
  readonly written?: true;
  /**
   * The merged value reaches the config as its merged sets (nonMasquerade, masquerade), not in
   * `keys`.
   */
  readonly bySets?: true;
  /** The merged value changes what compile writes, beside the sets and the policy: hashed. */
  readonly hashed?: true;
  /**
   * Its value where no file that applies gives it (README, "Configuration"), read by keyValue;
   * absent: the key does nothing when not given.
   */
  readonly default?: M;
  /** How --diff shows the merged value (a policy key), and the key not given. */
  readonly shown?: { readonly as: (merged: M) => readonly string[]; readonly absent: string };
}

// --- the values -------------------------------------------------------------------------------

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

/** How a value that is not a mapping is named (parseFragment's first check). */
export { describe as describeValue };

const cidrList =
  (key: string) =>
  (value: unknown, { options }: ParseContext): Prefix[] => {
    if (value === null || value === undefined) return [];
    if (!Array.isArray(value)) {
      const example =
        typeof value === 'string' && /^[\x20-\x7e]{1,100}$/.test(value)
          ? ` (write a list: [${value}])`
          : '';
      throw new Invalid(
        `${key}: expected a list of CIDR strings, got ${describe(value)}${example}`,
      );
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
  };

/** A scalar key given as null keeps its default, as upstream. */
const scalar =
  <V>(parse: (value: unknown, context: ParseContext) => V) =>
  (value: unknown, context: ParseContext): V | undefined =>
    value === null || value === undefined ? undefined : parse(value, context);

const boolean = (key: string) =>
  scalar((value): boolean => {
    if (typeof value === 'boolean') return value;
    throw new Invalid(`${key}: expected true or false, got ${describe(value)}`);
  });

/** A list of strings, each checked by `parseOne` (which throws ValueError). */
const stringList =
  (key: string, what: string, parseOne: (text: string) => string) =>
  (value: unknown): string[] => {
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
  };

const snat = (key: 'snatAddress' | 'snatAddressIPv6') =>
  scalar((value, { options }): SnatRange => {
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
  });

/** nodeSelector: a mapping of label keys to string values (YAML gives a Map, JSON an object). */
const selector = scalar((value): Array<[string, string]> => {
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
});

/**
 * podSelector / namespaceSelector: a label selector (selector.ts). Given as null it is still given:
 * the file is a pod policy whose selector selects everything, as `{}` does.
 */
const labelSelector =
  (key: 'podSelector' | 'namespaceSelector') =>
  (value: unknown): LabelSelector => {
    try {
      return parseSelector(value);
    } catch (err) {
      if (err instanceof SelectorError) throw new Invalid(`${key}: ${err.message}`);
      throw err;
    }
  };

const cidrLimit = scalar((value): number => {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  throw new Invalid(`cidrLimit: expected a whole number of 0 or more, got ${describe(value)}`);
});

const MIN_RESYNC_MS = 1000;
// setTimeout fires at once for delays above 2^31-1 ms, which would turn a long interval into a busy
// loop.
const MAX_RESYNC_MS = 2 ** 31 - 1;

const resyncInterval = scalar((value, { warnings, file }): number => {
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
});

// --- the merges ------------------------------------------------------------------------------

/** Prefixes of either family, merged into the fewest per family, in address order. */
export function mergedSets(prefixes: readonly Prefix[]): CidrSets {
  let v6 = 0;
  for (const p of prefixes) if (p.family === 6) v6++;
  // The common case, one family, needs no copy of a list that may hold 100 000 entries.
  const ipv4 = v6 === 0 ? prefixes : prefixes.filter((p) => p.family === 4);
  const ipv6 =
    v6 === 0 ? [] : v6 === prefixes.length ? prefixes : prefixes.filter((p) => p.family === 6);
  return familyLists({ ipv4: mergeToLines(ipv4), ipv6: mergeToLines(ipv6) });
}

const values = <V>(given: readonly Given<V>[]) => given.map((g) => g.value);
/** Lists unioned (merged into sets later); one concat, not one copy per entry. */
const union = <T>(given: readonly Given<readonly T[]>[]): readonly T[] =>
  ([] as T[]).concat(...values(given));
const any = (given: readonly Given<boolean>[]) => values(given).some(Boolean);
const smallest = (given: readonly Given<number>[]) => Math.min(...values(given));
const largest = (given: readonly Given<number>[]) => Math.max(...values(given));

/** One address (range) for every file that gives it, else an error naming two that disagree. */
const agreed =
  (key: string) =>
  (given: readonly Given<SnatRange>[], origin: string): SnatRange => {
    const [first, ...others] = given;
    const text = snatText(first!.value);
    const other = others.find((g) => snatText(g.value) !== text);
    if (other) {
      throw new ConfigError(
        origin,
        `${key}: ${escapeUnprintable(first!.file)} says ${text} and ${escapeUnprintable(other.file)} says ${snatText(other.value)}; the files that apply on a node must agree`,
      );
    }
    return first!.value;
  };

// --- the table -------------------------------------------------------------------------------

const spec = <V, M = never>(s: KeySpec<V, M>) => s;
/** A key with a default: its type says so, for keyValue. */
const defaulted = <V, M>(s: KeySpec<V, M> & { readonly default: M }) => s;

export const DEFAULT_CIDR_LIMIT = 64;
export const DEFAULT_RESYNC_INTERVAL_MS = 60_000;

/**
 * Every key, as written in README "Configuration" and "Egress policy" (matched case-insensitively).
 */
export const CONFIG_KEYS = {
  nonMasqueradeCIDRs: spec({
    parse: cidrList('nonMasqueradeCIDRs'),
    merge: union<Prefix>,
    written: true,
    bySets: true,
  }),
  masqueradeCIDRs: spec({
    parse: cidrList('masqueradeCIDRs'),
    merge: union<Prefix>,
    written: true,
    bySets: true,
  }),
  masqLinkLocal: defaulted({ parse: boolean('masqLinkLocal'), merge: any, default: false }),
  masqLinkLocalIPv6: defaulted({ parse: boolean('masqLinkLocalIPv6'), merge: any, default: false }),
  cidrLimit: defaulted({ parse: cidrLimit, merge: largest, default: DEFAULT_CIDR_LIMIT }),
  resyncInterval: defaulted({
    parse: resyncInterval,
    merge: smallest,
    default: DEFAULT_RESYNC_INTERVAL_MS,
  }),
  sourceCIDRs: spec({
    parse: cidrList('sourceCIDRs'),
    merge: (given: readonly Given<readonly Prefix[]>[]) => mergedSets(union(given)),
    written: true,
    shown: { as: (merged: CidrSets) => [...merged.ipv4, ...merged.ipv6], absent: 'every source' },
  }),
  egressInterfaces: spec({
    parse: stringList('egressInterfaces', 'interface name', parseInterfaceName),
    merge: (given: readonly Given<readonly string[]>[]) => collapseInterfaces(union(given)),
    shown: { as: (merged: readonly string[]) => merged, absent: 'every interface' },
  }),
  snatAddress: spec({
    parse: snat('snatAddress'),
    merge: agreed('snatAddress'),
    shown: { as: (merged: SnatRange) => [snatText(merged)], absent: "the interface's address" },
  }),
  snatAddressIPv6: spec({
    parse: snat('snatAddressIPv6'),
    merge: agreed('snatAddressIPv6'),
    shown: { as: (merged: SnatRange) => [snatText(merged)], absent: "the interface's address" },
  }),
  nodeNames: spec({ parse: stringList('nodeNames', 'node name', parseNodeName) }),
  nodeSelector: spec({ parse: selector }),
  nonMasqueradeNodePodCIDRs: spec({ parse: boolean('nonMasqueradeNodePodCIDRs'), merge: any }),
  podSelector: spec({ parse: labelSelector('podSelector') }),
  namespaceSelector: spec({ parse: labelSelector('namespaceSelector') }),
};

/**
 * Keys a pod policy may not give (docs/egress-policy.md, "Pod policies"): they are about the node's
 * traffic as a whole, not a pod's.
 */
export const NODE_WIDE_ONLY: readonly KeyName[] = [
  'sourceCIDRs',
  'resyncInterval',
  'nonMasqueradeNodePodCIDRs',
];

export type KeyName = keyof typeof CONFIG_KEYS;

/** What a file's parse of each key gives. */
export type KeyValues = {
  readonly [K in KeyName]: NonNullable<ReturnType<(typeof CONFIG_KEYS)[K]['parse']>>;
};

/** What the merge of each key over the files that apply gives (absent: no file gives it). */
export type MergedKeys = { readonly [K in KeyName]?: MergeOf<(typeof CONFIG_KEYS)[K]> };

/** The keys with a default (KeySpec.default). */
export type DefaultedKey = {
  [K in KeyName]: (typeof CONFIG_KEYS)[K] extends { readonly default: unknown } ? K : never;
}[KeyName];

/** A key's merged value over the files that apply, or its default where none gives it. */
export function keyValue<K extends DefaultedKey>(
  keys: MergedKeys,
  name: K,
): NonNullable<MergedKeys[K]> {
  return (keys[name] ?? CONFIG_KEYS[name].default) as NonNullable<MergedKeys[K]>;
}

type MergeOf<S> = S extends { readonly merge?: (given: never, origin: string) => infer M }
  ? M
  : never;

/** The key each written name stands for, by its lower-case spelling. */
export const KEY_BY_NAME: ReadonlyMap<string, KeyName> = new Map(
  (Object.keys(CONFIG_KEYS) as KeyName[]).map((name) => [name.toLowerCase(), name]),
);
