// The IP family in its three spellings, one record each: the number the address code works with
// (4), the config's name for it (`ipv4`, the keys of a CidrSets), and the nftables table family
// (`ip`). familyOf takes any spelling; the record's fields give the others.
import type { Family } from './address.js';

export type AddressFamily = 'ipv4' | 'ipv6';
export type TableFamily = 'ip' | 'ip6';

export interface IpFamily {
  readonly number: Family;
  readonly name: AddressFamily;
  readonly table: TableFamily;
}

const IPV4: IpFamily = Object.freeze({ number: 4, name: 'ipv4', table: 'ip' });
const IPV6: IpFamily = Object.freeze({ number: 6, name: 'ipv6', table: 'ip6' });

const V4_ONLY: readonly IpFamily[] = Object.freeze([IPV4]);
const BOTH: readonly IpFamily[] = Object.freeze([IPV4, IPV6]);

/** The families the agent manages: IPv4 always, IPv6 with `--enable-ipv6`. */
export function managedFamilies(enableIPv6: boolean): readonly IpFamily[] {
  return enableIPv6 ? BOTH : V4_ONLY;
}

/** The family's record, from any of its spellings. */
export function familyOf(spelling: Family | AddressFamily | TableFamily): IpFamily {
  return spelling === 4 || spelling === 'ipv4' || spelling === 'ip' ? IPV4 : IPV6;
}
