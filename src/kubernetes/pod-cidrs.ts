// A Node's pod CIDRs as the agent takes them from its spec: parsed strictly, bounded in count, and
// none wider than --widest-node-pod-cidr (docs/kubernetes.md, "Kubernetes API (opt-in)"). Only
// prefixes the agent formatted itself go further.
import { escapeUnprintable, formatPrefix, parseCidr, type Prefix } from '../cidr/index.js';
import { errorText } from '../errors.js';
import { record } from '../record.js';

/** The shortest prefix length a Node's pod CIDR may have, per family. */
export interface WidestPodCIDR {
  readonly ipv4: number;
  readonly ipv6: number;
}

/**
 * A Node's pod range is its slice of the cluster's (kube-controller-manager hands out /24 and /64
 * by default): one wider than /16 or /48 is a mistake or an attack (docs/kubernetes.md, "Kubernetes
 * API (opt-in)").
 */
export const DEFAULT_WIDEST_NODE_POD_CIDR: WidestPodCIDR = { ipv4: 16, ipv6: 48 };

/** One Node's pod CIDRs, parsed; the ones left out are named in `rejected`. */
export interface NodePodCIDRs {
  readonly prefixes: readonly Prefix[];
  readonly rejected: readonly string[];
}

/** A Node's spec.podCIDRs has one per family; more is not a Node the API server would store. */
const MAX_POD_CIDRS = 8;

/**
 * spec.podCIDRs (or the older spec.podCIDR), parsed strictly; IPv6 only with --enable-ipv6; one
 * wider than `widest` allows (a Node's slice of the cluster's range is never /0) left out.
 */
export function podCIDRsOf(
  node: Record<string, unknown>,
  enableIPv6: boolean,
  widest: WidestPodCIDR = DEFAULT_WIDEST_NODE_POD_CIDR,
): NodePodCIDRs {
  const spec = record(node.spec);
  let texts: unknown[] = [];
  if (Array.isArray(spec.podCIDRs)) texts = spec.podCIDRs as unknown[];
  else if (typeof spec.podCIDR === 'string') texts = [spec.podCIDR];
  const prefixes: Prefix[] = [];
  const rejected: string[] = [];
  for (const text of texts.slice(0, MAX_POD_CIDRS)) {
    if (typeof text !== 'string') {
      rejected.push(`${typeof text} is not a CIDR`);
      continue;
    }
    try {
      const prefix = parseCidr(text.slice(0, 64));
      if (text.length > 64) throw new Error(`${escapeUnprintable(text.slice(0, 64))}… is too long`);
      // A single-stack IPv4 agent leaves the IPv6 half of a dual-stack Node out, as it would a
      // file's.
      if (prefix.family === 6 && !enableIPv6) continue;
      const shortest = prefix.family === 4 ? widest.ipv4 : widest.ipv6;
      if (prefix.len < shortest) {
        rejected.push(
          `${formatPrefix(prefix)} is wider than a Node's pod range may be (/${shortest} at most: --widest-node-pod-cidr)`,
        );
        continue;
      }
      prefixes.push(prefix);
    } catch (err) {
      rejected.push(errorText(err));
    }
  }
  if (texts.length > MAX_POD_CIDRS) rejected.push(`${texts.length - MAX_POD_CIDRS} more left out`);
  return { prefixes, rejected };
}
