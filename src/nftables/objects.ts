// The objects of our tables by name (README, "Reading `nft list table ip ipmasq`"): the compiler
// declares them, and the listing comparisons, the conntrack flush and `--explain --live` find them,
// each through these definitions.
import { NO_ELEMENTS, type Chain, type NamedSet, type TableFamily } from './types.js';

/** Each object's name in the kernel, by the name the code uses for it. */
const objectNames = {
  /** The nat postrouting base chain; its one rule jumps to the decision chain (`--masq-chain`). */
  BASE_CHAIN: 'postrouting',
  /** The effective non-masquerade set. */
  NONMASQ_SET: 'nonmasq',
  /** masqueradeCIDRs: always masqueraded. */
  MASQ_SET: 'masq',
  /**
   * sourceCIDRs (docs/egress-policy.md, "Egress policy"): declared only while the config gives
   * them.
   */
  SOURCES_SET: 'sources',
  /** egressInterfaces: declared only while the config gives them. */
  EGRESS_INTERFACES_SET: 'egress-interfaces',
  /**
   * Replies on their way while the conntrack flush deletes their flow's entry: let through
   * untracked for a moment, or they would start an entry the other way round that keeps the flow on
   * its old decision (docs/writes.md, "Existing flows"). Bounded in size; each element lives as
   * long as the set's own timeout.
   */
  LATE_REPLIES_SET: 'late-replies',
  /**
   * The raw prerouting base chain (before conntrack) that lets what the late-replies set holds
   * through untracked.
   */
  LATE_REPLIES_CHAIN: 'prerouting',
  /**
   * The verdict map from a pod's source address to its pod policy's chain (docs/egress-policy.md,
   * "Pod policies"): one lookup, whatever the number of policies. Declared only while some pod
   * policy applies.
   */
  POD_POLICY_MAP: 'pod-policies',
} as const;

export const {
  BASE_CHAIN,
  NONMASQ_SET,
  MASQ_SET,
  SOURCES_SET,
  EGRESS_INTERFACES_SET,
  LATE_REPLIES_SET,
  LATE_REPLIES_CHAIN,
  POD_POLICY_MAP,
} = objectNames;

/**
 * The prefix of pod policy `index`'s objects (its chain, its sets, its counters), by its place in
 * file-name order: `pod-policy-0-`. Each carries the policy's file name as a comment.
 */
export const podPolicyPrefix = (index: number) => `pod-policy-${index}-`;

/** The chain of pod policy `index`: its decision, reached from the verdict map. */
export const podPolicyChain = (index: number) => `pod-policy-${index}`;

/** The index of a pod policy's chain, by its name; undefined for any other chain. */
export function podPolicyChainIndex(chain: string): number | undefined {
  const match = /^pod-policy-(\d{1,4})$/.exec(chain);
  return match ? Number(match[1]) : undefined;
}

/**
 * Which pod policy an object of ours belongs to, by its name: its index, or undefined (node-wide).
 */
export function podPolicyIndex(name: string): { index: number; rest: string } | undefined {
  const match = /^pod-policy-(\d{1,4})-(.+)$/.exec(name);
  return match ? { index: Number(match[1]), rest: match[2]! } : undefined;
}

/**
 * The named counters of the decision chain's outcomes (docs/observability.md, "What the node's NAT
 * does"): each step counts the new flows it decides. Objects of the table, so a write that changes
 * the rules keeps their counts; a table written whole is given them back (reconcile/converge.ts).
 */
export const DECISION_COUNTERS = ['translated', 'exempt', 'skipped'] as const;
export type DecisionCounter = (typeof DECISION_COUNTERS)[number];

/** The statement counting a flow in one of them (a pod policy's own, with its prefix). */
export const countIn = (counter: DecisionCounter, prefix = '') =>
  `counter name "${prefix}${counter}"`;

/**
 * A UDP reply's addresses and ports, from the remote to the pod, as the late-replies set keys them.
 */
export function lateReplyKey(family: TableFamily): string {
  return `${family} saddr . udp sport . ${family} daddr . udp dport`;
}

/** How many replies the late-replies set holds at most, and for how long each. */
export const LATE_REPLIES_SIZE = 16_384;
export const LATE_REPLIES_TIMEOUT_S = 3;

/** The late-replies set of a table of this family: empty but for the moments after a flush. */
export function lateRepliesSet(family: TableFamily): NamedSet {
  return {
    name: LATE_REPLIES_SET,
    key: { expression: lateReplyKey(family), elementSuffix: '' },
    flags: [],
    size: LATE_REPLIES_SIZE,
    timeoutS: LATE_REPLIES_TIMEOUT_S,
    elements: NO_ELEMENTS,
    transient: true,
  };
}

/** The chain that lets the held replies through untracked: before conntrack (priority raw). */
export function lateRepliesChain(family: TableFamily): Chain {
  return {
    name: LATE_REPLIES_CHAIN,
    base: { type: 'filter', hook: 'prerouting', priority: 'raw', policy: 'accept' },
    rules: [`${lateReplyKey(family)} @${LATE_REPLIES_SET} notrack`],
    transient: true,
  };
}
