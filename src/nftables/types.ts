// Data types of the nftables objects the agent writes. Behaviour (rendering) lives in render.ts.

export type Family = 'ip' | 'ip6';
export type AddressType =
  'ipv4_addr' | 'ipv6_addr' | 'ipv4_addr . inet_proto' | 'ipv6_addr . inet_proto';

export interface NamedSet {
  readonly name: string;
  readonly type: AddressType;
  readonly flags: readonly 'interval'[];
  /** Canonical prefixes formatted by src/cidr: never text taken from a config file. */
  readonly elements: readonly string[];
}

export interface BaseChainHook {
  readonly type: 'nat';
  readonly hook: 'postrouting';
  readonly priority: 'srcnat';
  readonly policy: 'accept';
}

export interface Chain {
  readonly name: string;
  readonly base?: BaseChainHook;
  /** Rules as nft prints them; built only from typed values by the compiler. */
  readonly rules: readonly string[];
}

export interface Table {
  readonly family: Family;
  readonly name: string;
  readonly comment: string;
  readonly sets: readonly NamedSet[];
  readonly chains: readonly Chain[];
}

export interface TableRef {
  readonly family: Family;
  readonly name: string;
}
