// Fragments (one per file) + defaults -> the frozen Config. The only place where files are merged.
import { createHash } from 'node:crypto';
import { escapeUnprintable, type Prefix, parseCidr } from '../cidr/index.js';
import {
  CONFIG_KEYS,
  keyValue,
  type KeyName,
  type KeySpec,
  type MergedKeys,
  mergedSets,
  NODE_WIDE_ONLY,
} from './keys.js';
import type { ConfigFragment } from './fragment.js';
import {
  type Config,
  ConfigError,
  type EgressPolicy,
  type LoadOptions,
  type LoadResult,
  type Origin,
  type PodPolicy,
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

/**
 * sha256 of exactly what compile consumes: the merged, sorted sets (masqLinkLocal* are already in
 * them), so spelling and order vanish, and changing resyncInterval or cidrLimit rewrites nothing.
 * Every release since v2 hashed these bytes: two versions of the agent with one config agree on the
 * table (README, "Choices where the contract is silent": two agents in one namespace).
 */
export function hashOf(
  sets: Pick<Config, 'nonMasquerade' | 'masquerade' | 'keys' | 'podPolicies'>,
  /** The IPv4 lists' JSON where the caller has it already (config/incremental.ts). */
  v4Json?: { readonly nonMasquerade: Uint8Array; readonly masquerade: Uint8Array },
): string {
  const hashed = hashedKeys(sets.keys);
  // The bytes of JSON.stringify(['ipmasq-config-v2', the four lists, …]), given in parts.
  const hash = createHash('sha256');
  hash.update('["ipmasq-config-v2",');
  hash.update(v4Json?.nonMasquerade ?? JSON.stringify(sets.nonMasquerade.ipv4));
  hash.update(`,${JSON.stringify(sets.nonMasquerade.ipv6)},`);
  hash.update(v4Json?.masquerade ?? JSON.stringify(sets.masquerade.ipv4));
  hash.update(`,${JSON.stringify(sets.masquerade.ipv6)}`);
  // Only a config with egress policy keys hashes more: the hash of one without stays as it was.
  const egress = egressOf(sets.keys);
  if (egress) hash.update(`,${JSON.stringify(egress)}`);
  if (hashed.length > 0) hash.update(`,${JSON.stringify(hashed)}`);
  // Likewise the pod policies: what each selects and decides, in order.
  if (sets.podPolicies) hash.update(`,${JSON.stringify(sets.podPolicies.map(policyMeaning))}`);
  hash.update(']');
  return hash.digest('hex');
}

/** Keys beside the sets and the policy that change what compile writes (keys.ts, `hashed`). */
function hashedKeys(keys: MergedKeys): Array<[KeyName, unknown]> {
  return (Object.keys(CONFIG_KEYS) as KeyName[]).flatMap((name) =>
    'hashed' in CONFIG_KEYS[name] && keys[name] !== undefined ? [[name, keys[name]]] : [],
  );
}

/** What of a pod policy reaches the kernel or chooses its pods (its `own` keys are in these). */
function policyMeaning(policy: PodPolicy): unknown[] {
  const { file, podSelector, namespaceSelector, nonMasquerade, masquerade, members } = policy;
  const hashed = hashedKeys(policy.keys);
  return [
    file,
    podSelector ?? null,
    namespaceSelector ?? null,
    nonMasquerade,
    masquerade,
    egressOf(policy.keys) ?? null,
    members ?? null,
    // Only a policy with such keys means more: the hash of one without stays as it was.
    ...(hashed.length > 0 ? [hashed] : []),
  ];
}

/**
 * A file with podSelector or namespaceSelector: a pod policy (docs/egress-policy.md, "Pod
 * policies").
 */
export function isPodPolicy(fragment: ConfigFragment): boolean {
  return fragment.podSelector !== undefined || fragment.namespaceSelector !== undefined;
}

/** The first key a pod policy gives that only a node-wide file may (checked in every file). */
function podPolicyProblem(fragments: readonly ConfigFragment[]): ConfigError | undefined {
  for (const fragment of fragments) {
    if (!isPodPolicy(fragment)) continue;
    const key = NODE_WIDE_ONLY.find((name) => fragment[name] !== undefined);
    if (key !== undefined) {
      return new ConfigError(
        fragment.file,
        `${key}: a pod policy (a file with podSelector or namespaceSelector) may not give it; it is the node's as a whole: move it to a file without selectors`,
      );
    }
  }
  return undefined;
}

/**
 * A pod policy's own decision: each key it gives, else the node-wide value (`node`, the merge of
 * the files without selectors), else the default.
 */
function podPolicyOf(
  fragment: ConfigFragment,
  node: MergedKeys,
  options: LoadOptions,
  origin: string,
  /** The node-wide files, for the provenance of what the policy inherits (explain). */
  nodeFiles?: readonly ConfigFragment[],
): PodPolicy {
  const own = mergeKeys([fragment], origin);
  // Every key the policy's flows are decided by: its own, else the node-wide value; a key that is
  // the node's alone (NODE_WIDE_ONLY) always the node's.
  const keys: Record<string, unknown> = { ...node, ...own };
  for (const name of NODE_WIDE_ONLY) {
    if (node[name] === undefined) delete keys[name];
    else keys[name] = node[name];
  }
  const nonMasq =
    own.nonMasqueradeCIDRs ?? node.nonMasqueradeCIDRs ?? defaultNonMasqueradeCIDRs(options);
  const masq = own.masqueradeCIDRs ?? node.masqueradeCIDRs ?? [];
  const linkLocal = linkLocalPrefixes(keys as MergedKeys, options);
  return Object.freeze({
    file: fragment.file,
    ...(fragment.podSelector ? { podSelector: fragment.podSelector } : {}),
    ...(fragment.namespaceSelector ? { namespaceSelector: fragment.namespaceSelector } : {}),
    nonMasquerade: mergedSets(nonMasq.concat(linkLocal)),
    masquerade: mergedSets(masq),
    keys: carriedKeys(keys as MergedKeys),
    ...(nodeFiles
      ? { provenance: podPolicyProvenance(fragment, nodeFiles, options, linkLocal) }
      : {}),
  });
}

/**
 * Where a pod policy's prefixes come from: each list from the policy's own file where it gives
 * it, else from the node-wide files (or the built-in list) it inherits.
 */
function podPolicyProvenance(
  fragment: ConfigFragment,
  nodeFiles: readonly ConfigFragment[],
  options: LoadOptions,
  linkLocal: readonly Prefix[],
): Provenance {
  const from = (key: 'nonMasqueradeCIDRs' | 'masqueradeCIDRs') =>
    fragment[key] !== undefined ? [fragment] : nodeFiles;
  const lists = (key: 'nonMasqueradeCIDRs' | 'masqueradeCIDRs') =>
    from(key).map((f) => ({
      file: f.file,
      [key]: f[key],
      written: { [key]: f.written?.[key] },
    })) as ConfigFragment[];
  const nonMasq = lists('nonMasqueradeCIDRs');
  const defaults = nonMasq.every((f) => f.nonMasqueradeCIDRs === undefined);
  const { origins } = provenanceOf(
    [...nonMasq, ...lists('masqueradeCIDRs')],
    options,
    defaults,
    linkLocal,
  );
  const node = provenanceOf(nodeFiles, options, false, []);
  const interfaces = fragment.egressInterfaces !== undefined ? [fragment] : nodeFiles;
  const own = provenanceOf(interfaces, options, false, []);
  const sourceCIDRs = node.policy?.sourceCIDRs ?? [];
  const egressInterfaces = own.policy?.egressInterfaces ?? [];
  return sourceCIDRs.length + egressInterfaces.length > 0
    ? { origins, policy: { sourceCIDRs, egressInterfaces } }
    : { origins };
}

/** Every merged key but those the sets carry. */
function carriedKeys(keys: MergedKeys): MergedKeys {
  return Object.freeze(
    Object.fromEntries(
      Object.entries(keys).filter(([name]) => !('bySets' in CONFIG_KEYS[name as KeyName])),
    ),
  ) as MergedKeys;
}

/**
 * The link-local prefixes the non-masquerade set gets: unless masqLinkLocal (masqLinkLocalIPv6).
 */
export function linkLocalPrefixes(keys: MergedKeys, options: LoadOptions): Prefix[] {
  const linkLocal: Prefix[] = [];
  if (!keyValue(keys, 'masqLinkLocal')) linkLocal.push(LINK_LOCAL_V4);
  if (options.enableIPv6 && !keyValue(keys, 'masqLinkLocalIPv6')) linkLocal.push(LINK_LOCAL_V6);
  return linkLocal;
}

type Scoped = { applies: ConfigFragment[]; skipped: SkippedFile[] } | { error: ConfigError };

/**
 * Which files apply on this node (docs/egress-policy.md, "Egress policy": node scoping). Every file
 * was parsed and validated before this; only those that apply are merged. For the agent, a scoped
 * file that cannot be judged is an error saying what is missing; the operator's commands skip it
 * and say why.
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
 * Each key's merge (keys.ts) over the files that apply that give it (of `names` only, when given).
 * Throws the ConfigError of a merge that cannot be made (two files that must agree and do not).
 */
function mergeKeys(
  fragments: readonly ConfigFragment[],
  origin: string,
  names: readonly KeyName[] = Object.keys(CONFIG_KEYS) as KeyName[],
): MergedKeys {
  const merged: Record<string, unknown> = {};
  for (const name of names) {
    const spec: KeySpec<unknown, unknown> = CONFIG_KEYS[name] as KeySpec<unknown, unknown>;
    if (spec.merge === undefined) continue;
    const given = fragments.flatMap((f) => {
      const value: unknown = (f as { readonly [K in KeyName]?: unknown })[name];
      return value === undefined ? [] : [{ file: f.file, value }];
    });
    if (given.length > 0) merged[name] = spec.merge(given, origin);
  }
  return merged as MergedKeys;
}

/**
 * The egress policy the decision reads (decision.ts), as a view of a config's (or a pod policy's)
 * keys: the policy keys' merged values, each left out where no file gives an entry. Undefined when
 * none is given, so that such a config is the original's, hash and all.
 */
export function egressOf(keys: MergedKeys): EgressPolicy | undefined {
  const { sourceCIDRs, egressInterfaces, snatAddress, snatAddressIPv6 } = keys;
  const policy: EgressPolicy = {
    ...(sourceCIDRs && sourceCIDRs.ipv4.length + sourceCIDRs.ipv6.length > 0
      ? { sourceCIDRs }
      : {}),
    ...(egressInterfaces && egressInterfaces.length > 0 ? { egressInterfaces } : {}),
    ...(snatAddress || snatAddressIPv6
      ? {
          snat: {
            ...(snatAddress ? { ipv4: snatAddress } : {}),
            ...(snatAddressIPv6 ? { ipv6: snatAddressIPv6 } : {}),
          },
        }
      : {}),
  };
  return Object.keys(policy).length > 0 ? policy : undefined;
}

/**
 * Merges files as the README's "Configuration" says: lists unioned, booleans OR'd, the smallest
 * resyncInterval and the largest cidrLimit among the files that set them, the limit checked against
 * all entries. `origin` (the file or directory) names the config in errors that no single file
 * causes.
 */
export function buildConfig(
  allFragments: readonly ConfigFragment[],
  options: LoadOptions,
  origin: string,
  warnings: readonly string[] = [],
): LoadResult {
  const invalid = (error: ConfigError): LoadResult =>
    Object.freeze({ ok: false, error, warnings: Object.freeze([...warnings]) });
  // Checked in every file, whatever node it is for: a pod policy's keys.
  const policyProblem = podPolicyProblem(allFragments);
  if (policyProblem) return invalid(policyProblem);
  const scoped = scope(allFragments, options);
  if ('error' in scoped) return invalid(scoped.error);
  const applying = scoped.applies;
  // The node-wide config is the files without selectors; each pod policy is decided apart.
  const fragments = applying.filter((f) => !isPodPolicy(f));
  const policyFragments = applying.filter(isPodPolicy);
  const withoutApi = apiProblem(fragments, policyFragments, options);
  if (withoutApi) return invalid(withoutApi);
  let keys: MergedKeys;
  let podPolicies: PodPolicy[];
  try {
    keys = mergeKeys(fragments, origin);
    podPolicies = policyFragments.map((f) =>
      podPolicyOf(f, keys, options, origin, options.provenance ? fragments : undefined),
    );
  } catch (err) {
    if (err instanceof ConfigError) return invalid(err);
    throw err;
  }
  const nonMasq = keys.nonMasqueradeCIDRs ?? defaultNonMasqueradeCIDRs(options);
  const masq = keys.masqueradeCIDRs ?? [];
  const overLimit = limitProblem(fragments, policyFragments, nonMasq.length + masq.length, origin);
  if (overLimit) return invalid(overLimit);

  const linkLocal = linkLocalPrefixes(keys as MergedKeys, options);
  const effectiveNonMasq = nonMasq.concat(linkLocal);
  const meaning = {
    nonMasquerade: mergedSets(effectiveNonMasq),
    masquerade: mergedSets(masq),
    // Every merged key but those the sets carry, for whoever reads one (compile, say).
    keys: carriedKeys(keys as MergedKeys),
    ...(podPolicies.length > 0 ? { podPolicies: Object.freeze(podPolicies) } : {}),
  };
  const config: Config = Object.freeze({
    ...meaning,
    hash: hashOf(meaning),
    sources: Object.freeze(applying.map((f) => f.file)),
    ...(scoped.skipped.length > 0 ? { skipped: Object.freeze(scoped.skipped) } : {}),
    ...(options.provenance
      ? {
          provenance: provenanceOf(
            fragments,
            options,
            keys.nonMasqueradeCIDRs === undefined,
            linkLocal,
          ),
        }
      : {}),
  });
  return Object.freeze({ ok: true, config, warnings: Object.freeze([...warnings]) });
}

/**
 * What the files ask of the API server when the agent was not started to read it (--explain and
 * --check describe them anyway): a pod policy selects pods by their labels, and
 * nonMasqueradeNodePodCIDRs takes the Nodes' pod CIDRs.
 */
function apiProblem(
  fragments: readonly ConfigFragment[],
  policyFragments: readonly ConfigFragment[],
  options: LoadOptions,
): ConfigError | undefined {
  if (options.scoping === 'describe' || options.kubernetes) return undefined;
  const policy = policyFragments[0];
  if (policy) {
    const key = policy.podSelector !== undefined ? 'podSelector' : 'namespaceSelector';
    return new ConfigError(
      policy.file,
      `${key}: a pod policy selects pods by their labels, which the agent reads from the API server: start it with --kubernetes (or --kubeconfig)`,
    );
  }
  const podCidrs = fragments.find((f) => f.nonMasqueradeNodePodCIDRs === true);
  if (podCidrs) {
    return new ConfigError(
      podCidrs.file,
      "nonMasqueradeNodePodCIDRs: the Nodes' pod CIDRs come from the API server: start the agent with --kubernetes, or list the pod CIDRs in nonMasqueradeCIDRs",
    );
  }
  return undefined;
}

/**
 * cidrLimit bounds every entry of the files that apply, pod policies' included: its merge (the
 * largest) over all of them, against the node-wide lists' `nodeEntries` and the policies' own.
 */
function limitProblem(
  fragments: readonly ConfigFragment[],
  policyFragments: readonly ConfigFragment[],
  nodeEntries: number,
  origin: string,
): ConfigError | undefined {
  const bound = mergeKeys([...fragments, ...policyFragments], origin, ['cidrLimit']);
  const cidrLimit = keyValue(bound, 'cidrLimit');
  const policyEntries = policyFragments.reduce(
    (sum, f) => sum + (f.nonMasqueradeCIDRs?.length ?? 0) + (f.masqueradeCIDRs?.length ?? 0),
    0,
  );
  const entries = nodeEntries + policyEntries;
  if (entries <= cidrLimit) return undefined;
  const files = fragments.length + policyFragments.length;
  const where = files > 1 ? ` across ${files} files` : '';
  const message = `cidrLimit: ${cidrLimit} is less than the ${entries} entries of nonMasqueradeCIDRs + masqueradeCIDRs${where} (raise cidrLimit to at least ${entries}, or list fewer CIDRs)`;
  return new ConfigError(origin, message);
}

/** What withNodePodCIDRs needs of one Node: its pod CIDRs, parsed by the agent. */
export interface NodePrefixes {
  readonly prefixes: readonly Prefix[];
}

/**
 * The config with every Node's pod CIDRs joined to its non-masquerade set
 * (nonMasqueradeNodePodCIDRs, docs/kubernetes.md "Kubernetes API (opt-in)"): merged like any entry,
 * the hash following what the kernel gets. They do not count against cidrLimit, which bounds what
 * the files list.
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
  const joined = (sets: Config['nonMasquerade']) =>
    mergedSets([...sets.ipv4, ...sets.ipv6].map(parseCidr).concat(pods));
  const nonMasquerade = joined(config.nonMasquerade);
  // Each pod policy's non-masquerade set takes them too (docs/egress-policy.md, "Pod policies").
  const podPolicies = config.podPolicies?.map((policy) =>
    Object.freeze({ ...policy, nonMasquerade: joined(policy.nonMasquerade) }),
  );
  const meaning = { ...config, nonMasquerade, ...(podPolicies ? { podPolicies } : {}) };
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
