// The shape every other module sees of a loaded config. Produced only by src/config.
import type { Prefix } from '../cidr/index.js';
import type { CidrSets, ConfigError } from './base.js';
import type { SnatRange } from './egress.js';
import type { MergedKeys } from './keys.js';
import type { LabelSelector } from './selector.js';

export type { SnatRange } from './egress.js';
export {
  ConfigError,
  type AddressFamily,
  type CidrSets,
  type ConfigErrorKind,
  type LoadOptions,
} from './base.js';

export interface Config {
  /**
   * Effective non-masquerade set: configured (or default) CIDRs, plus link-local unless
   * masqLinkLocal(IPv6), merged.
   */
  readonly nonMasquerade: CidrSets;
  /** masqueradeCIDRs, merged. Always masqueraded, even inside a non-masquerade range. */
  readonly masquerade: CidrSets;
  /**
   * sha256 hex that depends on meaning only: same addresses in any order or spelling give the same
   * hash.
   */
  readonly hash: string;
  /** Files that were read (empty when defaults were used because nothing was found). */
  readonly sources: readonly string[];
  /**
   * Where each effective prefix came from; only when loaded with `provenance` (explain, diff,
   * check).
   */
  readonly provenance?: Provenance;
  /**
   * Every key's merged value over the files that apply (config/keys.ts), but the two CIDR lists,
   * which the sets above carry; a key no file gives is absent (keyValue reads a key's default). The
   * egress policy (docs/egress-policy.md, "Egress policy") is a view of these: egressOf
   * (config/build.ts).
   */
  readonly keys: MergedKeys;
  /** Files that node scoping (nodeNames, nodeSelector) left out, with why. */
  readonly skipped?: readonly SkippedFile[];
  /**
   * The Nodes' pod CIDRs are joined in (withNodePodCIDRs), as keys.nonMasqueradeNodePodCIDRs asks
   * once the API server listed them.
   */
  readonly nodesJoined?: true;
  /**
   * The pod policies that apply on this node, in file-name order (docs/egress-policy.md, "Pod
   * policies"); absent: none. The fields above are the node-wide config: the files without
   * selectors.
   */
  readonly podPolicies?: readonly PodPolicy[];
}

/**
 * One pod policy: a file with podSelector and/or namespaceSelector, and what it decides for the
 * flows of the pods it selects. A key it leaves out has the node-wide value, so each field is its
 * own decision as whole as the node-wide one (decision.ts reads it as it reads a Config).
 */
export interface PodPolicy {
  readonly file: string;
  /** Absent: every pod (of the namespaces namespaceSelector selects). */
  readonly podSelector?: LabelSelector;
  /** Absent: every namespace. */
  readonly namespaceSelector?: LabelSelector;
  readonly nonMasquerade: CidrSets;
  readonly masquerade: CidrSets;
  /**
   * Every key's value for the flows this policy decides, as Config.keys is the node's: its own,
   * else the node-wide one (a key that is the node's alone always the node's); not the CIDR lists.
   */
  readonly keys: MergedKeys;
  /** Where each of its effective prefixes came from; only when loaded with `provenance`. */
  readonly provenance?: Provenance;
  /**
   * The addresses this policy decides (withPodMembers): of the pods on this node it selects and no
   * earlier policy does, as full-length prefixes formatted by src/cidr. Absent: not joined yet.
   */
  readonly members?: CidrSets;
}

/**
 * What the egress policy keys add to the decision; each left out when no file that applies gives
 * it.
 */
export interface EgressPolicy {
  /**
   * sourceCIDRs, merged per family: only traffic from these is considered (an empty family: none of
   * it).
   */
  readonly sourceCIDRs?: CidrSets;
  /**
   * egressInterfaces, sorted and without repeats: only traffic leaving through these is considered.
   */
  readonly egressInterfaces?: readonly string[];
  /** snatAddress / snatAddressIPv6: translated to these instead of masqueraded. */
  readonly snat?: { readonly ipv4?: SnatRange; readonly ipv6?: SnatRange };
}

export interface SkippedFile {
  readonly file: string;
  readonly reason: string;
}

/** One thing that put a prefix into a set: an entry of a file, or a built-in default. */
export type Origin =
  | {
      readonly kind: 'entry';
      readonly file: string;
      readonly key: 'nonMasqueradeCIDRs' | 'masqueradeCIDRs';
      readonly index: number;
      /** The entry as the file wrote it. */
      readonly written: string;
      readonly prefix: Prefix;
    }
  /** The built-in non-masquerade list, used when no file sets nonMasqueradeCIDRs. */
  | { readonly kind: 'default'; readonly list: 'private' | 'reserved'; readonly prefix: Prefix }
  /** 169.254.0.0/16 (and fe80::/10 with IPv6) unless masqLinkLocal(IPv6). */
  | { readonly kind: 'link-local'; readonly prefix: Prefix }
  /**
   * A Node's spec.podCIDRs, with nonMasqueradeNodePodCIDRs (docs/kubernetes.md, "Kubernetes API
   * (opt-in)").
   */
  | { readonly kind: 'node'; readonly node: string; readonly prefix: Prefix };

export interface Provenance {
  /** Every origin, in the order of files and entries; merging keeps them all. */
  readonly origins: readonly Origin[];
  /** The egress policy's entries, in the same order (docs/egress-policy.md, "Egress policy"). */
  readonly policy?: {
    readonly sourceCIDRs: readonly PolicyOrigin<Prefix>[];
    readonly egressInterfaces: readonly PolicyOrigin<string>[];
  };
}

/** One entry of an egress policy list, where it was written. */
export interface PolicyOrigin<T> {
  readonly file: string;
  readonly index: number;
  readonly value: T;
}

export type LoadResult =
  | { readonly ok: true; readonly config: Config; readonly warnings: readonly string[] }
  | { readonly ok: false; readonly error: ConfigError; readonly warnings: readonly string[] };
