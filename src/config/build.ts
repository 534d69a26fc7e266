// Fragments (one per file) + defaults -> the frozen Config. The only place where files are merged.
import { createHash } from 'node:crypto';
import { familyLists, type Prefix, mergeToLines, parseCidr } from '../cidr/index.js';
import type { ConfigFragment } from './fragment.js';
import {
  type CidrSets,
  type Config,
  ConfigError,
  type LoadOptions,
  type LoadResult,
  type Origin,
  type Provenance,
} from './types.js';

const PRIVATE_RANGES = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'];
const RESERVED_RANGES = [
  '100.64.0.0/10', // RFC 6598
  '192.0.0.0/24', // RFC 6890
  '192.0.2.0/24', // RFC 5737
  '192.88.99.0/24', // RFC 7526
  '198.18.0.0/15', // RFC 6815
  '198.51.100.0/24', // RFC 5737
  '203.0.113.0/24', // RFC 5737
  '240.0.0.0/4', // RFC 5735, former class E
];
const LINK_LOCAL_V4 = parseCidr('169.254.0.0/16');
const LINK_LOCAL_V6 = parseCidr('fe80::/10');
export const DEFAULT_CIDR_LIMIT = 64;
export const DEFAULT_RESYNC_INTERVAL_MS = 60_000;

export function defaultNonMasqueradeCIDRs(options: LoadOptions): Prefix[] {
  return defaultOrigins(options).map((origin) => origin.prefix);
}

/** The built-in list as origins: the private ranges, and the reserved ones with the flag. */
function defaultOrigins(options: LoadOptions): Array<Origin & { kind: 'default' }> {
  const list = (texts: readonly string[], name: 'private' | 'reserved') =>
    texts.map((text) => ({ kind: 'default' as const, list: name, prefix: parseCidr(text) }));
  return [
    ...list(PRIVATE_RANGES, 'private'),
    ...(options.nomasqAllReservedRanges ? list(RESERVED_RANGES, 'reserved') : []),
  ];
}

function provenanceOf(
  fragments: readonly ConfigFragment[],
  options: LoadOptions,
  defaults: boolean,
  linkLocal: readonly Prefix[],
): Provenance {
  const origins: Origin[] = [];
  for (const fragment of fragments) {
    for (const key of ['nonMasqueradeCIDRs', 'masqueradeCIDRs'] as const) {
      const prefixes = fragment[key] ?? [];
      const written = fragment.written?.[key] ?? [];
      prefixes.forEach((prefix, index) =>
        origins.push({
          kind: 'entry',
          file: fragment.file,
          key,
          index,
          written: written[index] ?? '',
          prefix,
        }),
      );
    }
  }
  if (defaults) origins.push(...defaultOrigins(options));
  for (const prefix of linkLocal) origins.push({ kind: 'link-local', prefix });
  return { origins };
}

/** The lists one after another; concat copies a 100 000-entry list in one go, flat() entry by entry. */
function joined(lists: readonly (readonly Prefix[])[]): readonly Prefix[] {
  return ([] as Prefix[]).concat(...lists);
}

function mergedSets(prefixes: readonly Prefix[]): CidrSets {
  let v6 = 0;
  for (const p of prefixes) if (p.family === 6) v6++;
  // The common case, one family, needs no copy of a list that may hold 100 000 entries.
  const ipv4 = v6 === 0 ? prefixes : prefixes.filter((p) => p.family === 4);
  const ipv6 =
    v6 === 0 ? [] : v6 === prefixes.length ? prefixes : prefixes.filter((p) => p.family === 6);
  return familyLists({ ipv4: mergeToLines(ipv4), ipv6: mergeToLines(ipv6) });
}

/**
 * sha256 of exactly what compile consumes: the merged, sorted sets (masqLinkLocal* are already in
 * them), so spelling and order vanish, and changing resyncInterval or cidrLimit rewrites nothing.
 * Every release since v2 hashed these bytes: two versions of the agent with one config agree on the
 * table (README, "Two agents in one namespace").
 */
function hashOf(sets: Pick<Config, 'nonMasquerade' | 'masquerade'>): string {
  const canonical = JSON.stringify([
    'ipmasq-config-v2',
    sets.nonMasquerade.ipv4,
    sets.nonMasquerade.ipv6,
    sets.masquerade.ipv4,
    sets.masquerade.ipv6,
  ]);
  return createHash('sha256').update(canonical).digest('hex');
}

/**
 * Merges files as the README's "Configuration" says: lists unioned, booleans OR'd, the smallest resyncInterval
 * and the largest cidrLimit among the files that set them, the limit checked against all entries.
 * `origin` (the file or directory) names the config in errors that no single file causes.
 */
export function buildConfig(
  fragments: readonly ConfigFragment[],
  options: LoadOptions,
  origin: string,
  warnings: readonly string[] = [],
): LoadResult {
  const given = <K extends keyof ConfigFragment>(key: K) =>
    fragments.flatMap((f) =>
      f[key] === undefined ? [] : [f[key] as NonNullable<ConfigFragment[K]>],
    );
  const nonMasqLists = given('nonMasqueradeCIDRs');
  const nonMasq =
    nonMasqLists.length > 0 ? joined(nonMasqLists) : defaultNonMasqueradeCIDRs(options);
  const masq = joined(given('masqueradeCIDRs'));
  const limits = given('cidrLimit');
  const cidrLimit = limits.length > 0 ? Math.max(...limits) : DEFAULT_CIDR_LIMIT;
  const intervals = given('resyncIntervalMs');
  const resyncIntervalMs =
    intervals.length > 0 ? Math.min(...intervals) : DEFAULT_RESYNC_INTERVAL_MS;
  const masqLinkLocal = given('masqLinkLocal').some(Boolean);
  const masqLinkLocalIPv6 = given('masqLinkLocalIPv6').some(Boolean);

  const entries = nonMasq.length + masq.length;
  if (entries > cidrLimit) {
    const where = fragments.length > 1 ? ` across ${fragments.length} files` : '';
    const message = `cidrLimit: ${cidrLimit} is less than the ${entries} entries of nonMasqueradeCIDRs + masqueradeCIDRs${where} (raise cidrLimit to at least ${entries}, or list fewer CIDRs)`;
    return Object.freeze({
      ok: false,
      error: new ConfigError(origin, message),
      warnings: Object.freeze([...warnings]),
    });
  }

  const linkLocal: Prefix[] = [];
  if (!masqLinkLocal) linkLocal.push(LINK_LOCAL_V4);
  if (options.enableIPv6 && !masqLinkLocalIPv6) linkLocal.push(LINK_LOCAL_V6);
  const effectiveNonMasq = nonMasq.concat(linkLocal);
  const meaning = {
    nonMasquerade: mergedSets(effectiveNonMasq),
    masquerade: mergedSets(masq),
    masqLinkLocal,
    masqLinkLocalIPv6,
    cidrLimit,
    resyncIntervalMs,
  };
  const config: Config = Object.freeze({
    ...meaning,
    hash: hashOf(meaning),
    sources: Object.freeze(fragments.map((f) => f.file)),
    ...(options.provenance
      ? { provenance: provenanceOf(fragments, options, nonMasqLists.length === 0, linkLocal) }
      : {}),
  });
  return Object.freeze({ ok: true, config, warnings: Object.freeze([...warnings]) });
}
