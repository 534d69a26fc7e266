// Data types of the nftables objects the agent writes. Behaviour (rendering) lives in render.ts.

export type TableFamily = 'ip' | 'ip6';

/**
 * What a set's elements are keyed by. Sets are declared `typeof EXPRESSION`, never `type
 * ipv4_addr`: libnftables up to 1.1.1 crashes on `type` sets written by 1.1.2 and later, while
 * `typeof` sets read back in every version (README, "nftables versions").
 */
export interface SetKey {
  /** Declared with `typeof` and matched in rules: `ip daddr`, or `ip daddr . meta l4proto`. */
  readonly expression: string;
  /** Written after every prefix: the concatenated layout pairs each with all protocols. */
  readonly elementSuffix: '' | ' . 0-255';
  /** `names`: the elements are interface names (checked again and quoted when written), not prefixes. */
  readonly elements?: 'names';
}

export interface NamedSet {
  readonly name: string;
  readonly key: SetKey;
  readonly flags: readonly ('interval' | 'timeout')[];
  /**
   * Canonical prefixes formatted by src/cidr, or (a `names` key) interface names the config
   * checked: never text taken from a config file unchecked.
   */
  readonly elements: readonly string[];
  /**
   * Elements the agent adds for a moment (with a timeout) apart from the config: never written
   * with the table's content, changed by a write or compared with a read-back.
   */
  readonly transient?: true;
}

export interface BaseChainHook {
  readonly type: 'nat' | 'filter';
  readonly hook: 'postrouting' | 'prerouting';
  readonly priority: 'srcnat' | 'mangle';
  readonly policy: 'accept';
}

export interface Chain {
  readonly name: string;
  readonly base?: BaseChainHook;
  /** Rules as nft prints them; built only from typed values by the compiler. */
  readonly rules: readonly string[];
}

export interface Table {
  readonly family: TableFamily;
  readonly name: string;
  readonly comment: string;
  readonly sets: readonly NamedSet[];
  readonly chains: readonly Chain[];
}

export interface TableRef {
  readonly family: TableFamily;
  readonly name: string;
}

/** A UDP flow's reply direction as conntrack holds it: from the remote, to the pod. */
export interface ReplyTuple {
  readonly source: string;
  readonly sourcePort: number;
  readonly destination: string;
  readonly destinationPort: number;
}

/**
 * The namespace's nftables generation id read right before and right after one commit of ours, with
 * no other call of ours between (undefined where it could not be read). `after === before + 1` says
 * that no other commit came in that time; anything else, that another tool's did.
 */
export interface CommitStep {
  readonly before: number | undefined;
  readonly after: number | undefined;
}

/** How a libnftables call can fail (nftables/addon.ts), each counted by kind (reconcile/metrics.ts). */
export const nftFailureKinds = ['error', 'crash', 'timeout', 'spawn'] as const;
export type NftFailureKind = (typeof nftFailureKinds)[number];
