// Which pod policy decides each pod address of this node (docs/egress-policy.md, "Pod policies"):
// the first, in file-name order, that selects the pod; every other selecting policy is an overlap,
// reported. The membership joins the config (withPodMembers) as the Nodes' pod CIDRs do, so the
// kernel's verdict map and the hash follow it. Pure.
import { basename } from 'node:path';
import { type Family, formatAddress, parseAddress, familyOf } from '../cidr/index.js';
import { hashOf } from './build.js';
import { EVERYTHING, selects } from './selector.js';
import type { CidrSets, Config, PodPolicy } from './types.js';

/**
 * A pod policy's name in the kernel and in metrics (docs/egress-policy.md, "Pod policies"): its
 * file's name.
 */
export function podPolicyName(policy: Pick<PodPolicy, 'file'>): string {
  return basename(policy.file);
}

/** What the agent keeps of one pod of this node (kubernetes/cluster.ts, podOf). */
export interface PodFacts {
  readonly namespace: string;
  readonly name: string;
  readonly labels: ReadonlyMap<string, string>;
  /** status.podIPs, parsed and formatted by src/cidr (no prefix length). */
  readonly addresses: readonly string[];
  /** metadata.creationTimestamp (RFC 3339): of two pods holding one address, the later wins. */
  readonly created: string;
}

export interface PodMembership {
  /** Per policy, in the config's order: the addresses it decides, as full-length prefixes. */
  readonly members: readonly CidrSets[];
  /** Per policy: the pods it decides. */
  readonly pods: readonly number[];
  /** Pods more than one policy selects: the first decides; `others` would have. */
  readonly overlaps: ReadonlyArray<{
    readonly pod: string;
    readonly decides: string;
    readonly others: readonly string[];
  }>;
}

/** The policies (indices, in order) that select a pod, given its namespace's labels. */
export function selectingPolicies(
  policies: readonly PodPolicy[],
  pod: Pick<PodFacts, 'labels'>,
  namespaceLabels: ReadonlyMap<string, string> | undefined,
): number[] {
  const found: number[] = [];
  policies.forEach((policy, index) => {
    if (!selects(policy.podSelector ?? EVERYTHING, pod.labels)) return;
    if (policy.namespaceSelector !== undefined) {
      // A namespace not (yet) known has no labels to match.
      if (!namespaceLabels || !selects(policy.namespaceSelector, namespaceLabels)) return;
    }
    found.push(index);
  });
  return found;
}

const familyOfAddress = (address: string): Family => (address.includes(':') ? 6 : 4);

/** Older pods first (created earlier; at one moment, by name): a later one takes an address over. */
function byAge(a: PodFacts, b: PodFacts): number {
  if (a.created !== b.created) return a.created < b.created ? -1 : 1;
  return `${a.namespace}/${a.name}` < `${b.namespace}/${b.name}` ? -1 : 1;
}

/**
 * The pod an address belongs to, as podMembership gives it: of the pods holding it, the one
 * created last (--explain --pod judges by it as the agent does).
 */
export function addressHolder(pods: Iterable<PodFacts>, address: string): PodFacts | undefined {
  return [...pods]
    .filter((pod) => pod.addresses.includes(address))
    .sort(byAge)
    .at(-1);
}

/**
 * Each address of the pods to the first policy that selects its pod. An address two pods hold (one
 * ending, one new) goes with the pod created later; at one moment, with the one named last.
 */
export function podMembership(
  policies: readonly PodPolicy[],
  pods: Iterable<PodFacts>,
  namespaces: ReadonlyMap<string, ReadonlyMap<string, string>> | undefined,
): PodMembership {
  const ordered = [...pods].sort(byAge);
  const owner = new Map<string, number>(); // address -> policy index, -1 for none
  const counts = policies.map(() => 0);
  const overlaps: Array<{ pod: string; decides: string; others: string[] }> = [];
  for (const pod of ordered) {
    const selecting = selectingPolicies(policies, pod, namespaces?.get(pod.namespace));
    const first = selecting[0] ?? -1;
    if (first >= 0) counts[first]! += 1;
    if (selecting.length > 1) {
      overlaps.push({
        pod: `${pod.namespace}/${pod.name}`,
        decides: policies[first]!.file,
        others: selecting.slice(1).map((i) => policies[i]!.file),
      });
    }
    for (const address of pod.addresses) owner.set(address, first);
  }
  const members = policies.map(() => ({ ipv4: [] as string[], ipv6: [] as string[] }));
  for (const [address, index] of owner) {
    if (index < 0) continue;
    const family = familyOfAddress(address);
    members[index]![familyOf(family).name].push(
      `${formatAddress(family, parseAddress(address).addr)}/${family === 4 ? 32 : 128}`,
    );
  }
  for (const set of members) {
    set.ipv4.sort(byAddress);
    set.ipv6.sort(byAddress);
  }
  return { members, pods: counts, overlaps };
}

const byAddress = (a: string, b: string) => {
  const x = parseAddress(a.slice(0, a.indexOf('/'))).addr;
  const y = parseAddress(b.slice(0, b.indexOf('/'))).addr;
  return x < y ? -1 : x > y ? 1 : 0;
};

/** The config with each pod policy's members joined: the hash follows what the kernel gets. */
export function withPodMembers(config: Config, membership: PodMembership): Config {
  const policies = config.podPolicies;
  if (!policies) return config;
  const podPolicies = policies.map((policy, index) =>
    Object.freeze({
      ...policy,
      members: Object.freeze(membership.members[index] ?? { ipv4: [], ipv6: [] }),
    }),
  );
  const meaning = { ...config, podPolicies: Object.freeze(podPolicies) };
  return Object.freeze({ ...meaning, hash: hashOf(meaning) });
}
