// The objects of our tables by name (README, "Reading `nft list table ip ipmasq`"): the compiler
// declares them, and the listing comparisons, the conntrack flush and `--explain --live` find them,
// each through these definitions.
import type { NamedSet, TableFamily } from './types.js';

/** Each object's name in the kernel, by the name the code uses for it. */
const objectNames = {
  /** The nat postrouting base chain; its one rule jumps to the decision chain (`--masq-chain`). */
  BASE_CHAIN: 'postrouting',
  /** The effective non-masquerade set. */
  NONMASQ_SET: 'nonmasq',
  /** masqueradeCIDRs: always masqueraded. */
  MASQ_SET: 'masq',
  /** sourceCIDRs (README, "Egress policy"): declared only while the config gives them. */
  SOURCES_SET: 'sources',
  /** egressInterfaces: declared only while the config gives them. */
  EGRESS_INTERFACES_SET: 'egress-interfaces',
  /**
   * Replies on their way while the conntrack flush deletes their flow's entry: dropped for a
   * moment, or they would start an entry the other way round that keeps the flow on its old
   * decision (README, "Existing flows"). The set's elements come and go with timeouts; the chain
   * drops them.
   */
  LATE_REPLIES_SET: 'late-replies',
  /** The filter prerouting base chain that drops what the late-replies set holds. */
  LATE_REPLIES_CHAIN: 'prerouting',
} as const;

export const {
  BASE_CHAIN,
  NONMASQ_SET,
  MASQ_SET,
  SOURCES_SET,
  EGRESS_INTERFACES_SET,
  LATE_REPLIES_SET,
  LATE_REPLIES_CHAIN,
} = objectNames;

/** A UDP reply's addresses and ports, from the remote to the pod, as the late-replies set keys them. */
export function lateReplyKey(family: TableFamily): string {
  return `${family} saddr . udp sport . ${family} daddr . udp dport`;
}

/** The late-replies set of a table of this family: empty but for the moments after a flush. */
export function lateRepliesSet(family: TableFamily): NamedSet {
  return {
    name: LATE_REPLIES_SET,
    key: { expression: lateReplyKey(family), elementSuffix: '' },
    flags: ['timeout'],
    elements: [],
    transient: true,
  };
}
