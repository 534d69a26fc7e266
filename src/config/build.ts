// Fragments (one per file) + defaults -> the frozen Config. The only place where files are merged.
import { createHash } from 'node:crypto';
import {
  escapeUnprintable,
  familyLists,
  type Prefix,
  mergeToLines,
  parseCidr,
} from '../cidr/index.js';
import { collapseInterfaces, type SnatRange, snatText } from './egress.js';
import type { ConfigFragment } from './fragment.js';
import {
  type CidrSets,
  type Config,
  ConfigError,
  type EgressPolicy,
  type LoadOptions,
  type LoadResult,
  type Origin,
  type Provenance,
  type SkippedFile,
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
  const listed = <T>(list: (f: ConfigFragment) => readonly T[] | undefined) =>
    fragments.flatMap((f) =>
      (list(f) ?? []).map((value, index) => ({ file: f.file, index, value })),
    );
  const sourceCIDRs = listed((f) => f.sourceCIDRs);
  const egressInterfaces = listed((f) => f.egressInterfaces);
  if (sourceCIDRs.length === 0 && egressInterfaces.length === 0) return { origins };
  return { origins, policy: { sourceCIDRs, egressInterfaces } };
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
function hashOf(sets: Pick<Config, 'nonMasquerade' | 'masquerade' | 'egress'>): string {
  const canonical = JSON.stringify([
    'ipmasq-config-v2',
    sets.nonMasquerade.ipv4,
    sets.nonMasquerade.ipv6,
    sets.masquerade.ipv4,
    sets.masquerade.ipv6,
    // Only a config with egress policy keys hashes more: the hash of one without stays as it was.
    ...(sets.egress ? [sets.egress] : []),
  ]);
  return createHash('sha256').update(canonical).digest('hex');
}

type Scoped = { applies: ConfigFragment[]; skipped: SkippedFile[] } | { error: ConfigError };

/**
 * Which files apply on this node (README, "Egress policy": node scoping). Every file was parsed and
 * validated before this; only those that apply are merged. For the agent, a scoped file that cannot
 * be judged is an error saying what is missing; the operator's commands skip it and say why.
 */
function scope(fragments: readonly ConfigFragment[], options: LoadOptions): Scoped {
  const describe = options.scoping === 'describe';
  const applies: ConfigFragment[] = [];
  const skipped: SkippedFile[] = [];
  for (const fragment of fragments) {
    const { file, nodeNames, nodeSelector } = fragment;
    let reason: string | undefined;
    if (nodeSelector !== undefined) {
      const labels = options.nodeLabels;
      if (labels === undefined) {
        if (!describe && options.kubernetes) {
          return {
            error: new ConfigError(
              file,
              "nodeSelector: waiting for this Node's labels from the API server",
              'pending',
            ),
          };
        }
        if (!describe) {
          return {
            error: new ConfigError(
              file,
              "nodeSelector: this file applies only on nodes with the labels it names, and the agent reads a node's labels from the API server: start it with --kubernetes, or scope the file with nodeNames",
            ),
          };
        }
        reason = "nodeSelector: the node's labels are not known (give --node-labels)";
      } else {
        const differs = nodeSelector.find(([label, value]) => labels.get(label) !== value);
        if (differs)
          reason = `nodeSelector: the node's label ${escapeUnprintable(differs[0])} is not "${escapeUnprintable(differs[1])}"`;
      }
    }
    if (reason === undefined && nodeNames !== undefined) {
      const node = options.nodeName ?? '';
      if (node === '') {
        if (!describe) {
          return {
            error: new ConfigError(
              file,
              "nodeNames: this file applies only on the nodes it names, and this node's name is not known: set --node-name or the NODE_NAME environment variable (the DaemonSet sets it from spec.nodeName)",
            ),
          };
        }
        reason = "nodeNames: the node's name is not known (give --node-name)";
      } else if (!nodeNames.includes(node)) {
        reason = `nodeNames: ${escapeUnprintable(node)} is not among them`;
      }
    }
    if (reason === undefined) applies.push(fragment);
    else skipped.push({ file, reason });
  }
  return { applies, skipped };
}

/**
 * The egress policy of the files that apply: sourceCIDRs unioned and merged, egressInterfaces
 * unioned without the names a wildcard covers (collapseInterfaces), one snatAddress per family that every file giving it agrees on. Undefined when no file
 * gives any of them, so that such a config is the original's, hash and all.
 */
function egressOf(
  fragments: readonly ConfigFragment[],
  origin: string,
): EgressPolicy | undefined | ConfigError {
  const policy: { -readonly [K in keyof EgressPolicy]: EgressPolicy[K] } = {};
  const sources = fragments.flatMap((f) => f.sourceCIDRs ?? []);
  if (sources.length > 0) policy.sourceCIDRs = mergedSets(sources);
  const interfaces = collapseInterfaces(fragments.flatMap((f) => f.egressInterfaces ?? []));
  if (interfaces.length > 0) policy.egressInterfaces = interfaces;
  const snat: { ipv4?: SnatRange; ipv6?: SnatRange } = {};
  for (const [key, family] of [
    ['snatAddress', 'ipv4'],
    ['snatAddressIPv6', 'ipv6'],
  ] as const) {
    const givers = fragments.filter((f) => f[key] !== undefined);
    const [first, ...others] = givers;
    if (first === undefined) continue;
    const text = snatText(first[key]!);
    const other = others.find((f) => snatText(f[key]!) !== text);
    if (other) {
      return new ConfigError(
        origin,
        `${key}: ${escapeUnprintable(first.file)} says ${text} and ${escapeUnprintable(other.file)} says ${snatText(other[key]!)}; the files that apply on a node must agree`,
      );
    }
    snat[family] = first[key]!;
  }
  if (snat.ipv4 || snat.ipv6) policy.snat = snat;
  return Object.keys(policy).length > 0 ? policy : undefined;
}

/**
 * Merges files as the README's "Configuration" says: lists unioned, booleans OR'd, the smallest resyncInterval
 * and the largest cidrLimit among the files that set them, the limit checked against all entries.
 * `origin` (the file or directory) names the config in errors that no single file causes.
 */
export function buildConfig(
  allFragments: readonly ConfigFragment[],
  options: LoadOptions,
  origin: string,
  warnings: readonly string[] = [],
): LoadResult {
  const invalid = (error: ConfigError): LoadResult =>
    Object.freeze({ ok: false, error, warnings: Object.freeze([...warnings]) });
  const scoped = scope(allFragments, options);
  if ('error' in scoped) return invalid(scoped.error);
  const fragments = scoped.applies;
  const podCidrs = fragments.find((f) => f.nonMasqueradeNodePodCIDRs === true);
  if (podCidrs && options.scoping !== 'describe' && !options.kubernetes) {
    return invalid(
      new ConfigError(
        podCidrs.file,
        "nonMasqueradeNodePodCIDRs: the Nodes' pod CIDRs come from the API server: start the agent with --kubernetes, or list the pod CIDRs in nonMasqueradeCIDRs",
      ),
    );
  }
  const egress = egressOf(fragments, origin);
  if (egress instanceof ConfigError) return invalid(egress);
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
    return invalid(new ConfigError(origin, message));
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
    ...(egress ? { egress } : {}),
  };
  const config: Config = Object.freeze({
    ...meaning,
    hash: hashOf(meaning),
    sources: Object.freeze(fragments.map((f) => f.file)),
    ...(scoped.skipped.length > 0 ? { skipped: Object.freeze(scoped.skipped) } : {}),
    ...(podCidrs ? { nodePodCIDRs: true as const } : {}),
    ...(options.provenance
      ? { provenance: provenanceOf(fragments, options, nonMasqLists.length === 0, linkLocal) }
      : {}),
  });
  return Object.freeze({ ok: true, config, warnings: Object.freeze([...warnings]) });
}

/** What withNodePodCIDRs needs of one Node: its pod CIDRs, parsed by the agent. */
export interface NodePrefixes {
  readonly prefixes: readonly Prefix[];
}

/**
 * The config with every Node's pod CIDRs joined to its non-masquerade set (nonMasqueradeNodePodCIDRs,
 * README "Kubernetes API (opt-in)"): merged like any entry, the hash following what the kernel gets.
 * They do not count against cidrLimit, which bounds what the files list.
 */
export function withNodePodCIDRs(config: Config, nodes: ReadonlyMap<string, NodePrefixes>): Config {
  const pods: Prefix[] = [];
  const origins: Origin[] = [];
  for (const [node, { prefixes }] of nodes) {
    for (const prefix of prefixes) {
      pods.push(prefix);
      if (config.provenance) origins.push({ kind: 'node', node, prefix });
    }
  }
  const current = [...config.nonMasquerade.ipv4, ...config.nonMasquerade.ipv6].map(parseCidr);
  const nonMasquerade = mergedSets(current.concat(pods));
  const meaning = { ...config, nonMasquerade };
  const { provenance } = config;
  return Object.freeze({
    ...meaning,
    hash: hashOf(meaning),
    nodesJoined: true as const,
    ...(provenance
      ? { provenance: { ...provenance, origins: provenance.origins.concat(origins) } }
      : {}),
  });
}
