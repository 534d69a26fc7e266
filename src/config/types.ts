// The shape every other module sees of a loaded config. Produced only by src/config.
import { escapeUnprintable, type Prefix } from '../cidr/index.js';
import type { SnatRange } from './egress.js';
import type { MergedKeys } from './keys.js';
import type { LabelSelector } from './selector.js';

export type { SnatRange } from './egress.js';

export type AddressFamily = 'ipv4' | 'ipv6';

/** Canonical CIDR strings (formatted by src/cidr), merged and sorted by address, per family. */
export type CidrSets = { readonly [F in AddressFamily]: readonly string[] };

export interface Config {
  /** Effective non-masquerade set: configured (or default) CIDRs, plus link-local unless masqLinkLocal(IPv6), merged. */
  readonly nonMasquerade: CidrSets;
  /** masqueradeCIDRs, merged. Always masqueraded, even inside a non-masquerade range. */
  readonly masquerade: CidrSets;
  readonly masqLinkLocal: boolean;
  readonly masqLinkLocalIPv6: boolean;
  readonly cidrLimit: number;
  /** resyncInterval in milliseconds, at least 1000. */
  readonly resyncIntervalMs: number;
  /** sha256 hex that depends on meaning only: same addresses in any order or spelling give the same hash. */
  readonly hash: string;
  /** Files that were read (empty when defaults were used because nothing was found). */
  readonly sources: readonly string[];
  /** Where each effective prefix came from; only when loaded with `provenance` (explain, diff, check). */
  readonly provenance?: Provenance;
  /** The egress policy keys of the files that apply (README, "Egress policy"); absent: none given. */
  readonly egress?: EgressPolicy;
  /**
   * Every key's merged value over the files that apply (config/keys.ts), but the two CIDR lists,
   * which the sets above carry; a key no file gives is absent.
   */
  readonly keys: MergedKeys;
  /** Files that node scoping (nodeNames, nodeSelector) left out, with why. */
  readonly skipped?: readonly SkippedFile[];
  /**
   * nonMasqueradeNodePodCIDRs: the Nodes' pod CIDRs join nonMasquerade (withNodePodCIDRs, once the
   * API server listed them). True on the config as the files give it and on the joined one.
   */
  readonly nodePodCIDRs?: true;
  /** The Nodes' pod CIDRs are joined in (withNodePodCIDRs). */
  readonly nodesJoined?: true;
  /**
   * The pod policies that apply on this node, in file-name order (README, "Pod policies"); absent:
   * none. The fields above are the node-wide config: the files without selectors.
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
  readonly masqLinkLocal: boolean;
  readonly masqLinkLocalIPv6: boolean;
  readonly egress?: EgressPolicy;
  /** The keys this file gives itself (merged as one file), beside the node-wide ones it inherits. */
  readonly own: MergedKeys;
  /** Where each of its effective prefixes came from; only when loaded with `provenance`. */
  readonly provenance?: Provenance;
  /**
   * The addresses this policy decides (withPodMembers): of the pods on this node it selects and no
   * earlier policy does, as full-length prefixes formatted by src/cidr. Absent: not joined yet.
   */
  readonly members?: CidrSets;
}

/** What the egress policy keys add to the decision; each left out when no file that applies gives it. */
export interface EgressPolicy {
  /** sourceCIDRs, merged per family: only traffic from these is considered (an empty family: none of it). */
  readonly sourceCIDRs?: CidrSets;
  /** egressInterfaces, sorted and without repeats: only traffic leaving through these is considered. */
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
  /** A Node's spec.podCIDRs, with nonMasqueradeNodePodCIDRs (README, "Kubernetes API (opt-in)"). */
  | { readonly kind: 'node'; readonly node: string; readonly prefix: Prefix };

export interface Provenance {
  /** Every origin, in the order of files and entries; merging keeps them all. */
  readonly origins: readonly Origin[];
  /** The egress policy's entries, in the same order (README, "Egress policy"). */
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

/** Flags that change how a config is read. */
export interface LoadOptions {
  readonly enableIPv6: boolean;
  readonly nomasqAllReservedRanges: boolean;
  /** Keep each entry's origin (Config.provenance): the operator's commands; the agent does not pay for it. */
  readonly provenance?: boolean;
  /** This node's name (--node-name), for files with nodeNames; undefined or empty: not known. */
  readonly nodeName?: string;
  /** This node's labels, for files with nodeSelector; undefined: not known (yet). */
  readonly nodeLabels?: ReadonlyMap<string, string>;
  /**
   * The agent reads its cluster from the API server (--kubernetes, --kubeconfig): nodeSelector and
   * nonMasqueradeNodePodCIDRs can be judged, once the data is there (until then: `pending`).
   */
  readonly kubernetes?: boolean;
  /**
   * `agent` (the default): a scoped file that cannot be judged for lack of the node's name or labels
   * makes the config invalid. `describe` (--explain, --diff, --check): it is skipped, saying why.
   */
  readonly scoping?: 'agent' | 'describe';
}

export type LoadResult =
  | { readonly ok: true; readonly config: Config; readonly warnings: readonly string[] }
  | { readonly ok: false; readonly error: ConfigError; readonly warnings: readonly string[] };

/**
 * Why a config cannot be applied: `invalid` is a verdict on what was read (it stays while the files
 * are unchanged), `unreadable` a failure to read (EACCES, EMFILE, …), worth trying again, `pending`
 * a config that needs data from the API server not read yet (README, "Kubernetes API (opt-in)").
 */
export type ConfigErrorKind = 'invalid' | 'unreadable' | 'pending';

/** A config that must not be applied. The message names the file, key, index and value. */
export class ConfigError extends Error {
  readonly file: string;
  readonly kind: ConfigErrorKind;
  constructor(file: string, message: string, kind: ConfigErrorKind = 'invalid') {
    super(`${escapeUnprintable(file)}: ${message}`);
    this.name = 'ConfigError';
    this.file = file;
    this.kind = kind;
  }
}
