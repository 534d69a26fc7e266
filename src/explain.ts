// Why traffic to an address is masqueraded or not (README, "Explain, diff, check"): the decision in
// the order the rules make it (compile.ts), with the config entries responsible. Pure; needs a
// Config loaded with provenance.
import {
  escapeUnprintable,
  type Family,
  formatPrefix,
  hostMask,
  inRanges,
  parseAddress,
  prefixRange,
  quote,
  type Range,
} from './cidr/index.js';
import type { CompileOptions } from './compile.js';
import type { AddressFamily, Config, Origin } from './config/types.js';
import { setRanges } from './decisions.js';

export type Reason =
  /** IPv6 with --enable-ipv6 off: the agent has no ip6 table, so it does not touch the traffic. */
  | 'not managed'
  | 'masqueradeCIDRs'
  | 'nonMasqueradeCIDRs'
  | 'default list'
  | 'link-local default'
  | 'no match';

export interface Explanation {
  readonly address: string;
  readonly family: AddressFamily;
  readonly masqueraded: boolean;
  readonly reason: Reason;
  /** The origins that decide (several when entries overlap). */
  readonly decidedBy: readonly OriginText[];
  /** Non-masquerade origins that also match but that a masqueradeCIDRs entry overrides. */
  readonly overridden: readonly OriginText[];
  /** How the source port is chosen when masqueraded. */
  readonly ports: PortPolicy | null;
}

export interface OriginText {
  /** `file nonMasqueradeCIDRs[2] "10.0.0.0/8"`, `built-in default list 10.0.0.0/8`, … */
  readonly text: string;
  readonly origin: Origin;
}

export interface PortPolicy {
  readonly fullyRandom: boolean;
  /** tcp, udp and sctp: each range with its share of new flows; empty means any port. */
  readonly ranges: ReadonlyArray<{ readonly ports: string; readonly share: number }>;
}

export const LOCAL_NOTE =
  'Destinations local to the node are never masqueraded, whatever the config (the base chain skips ' +
  '`fib daddr type local`): which those are depends on the node, so it is not part of this answer.';

const familyName = (family: Family): AddressFamily => (family === 4 ? 'ipv4' : 'ipv6');

export function describeOrigin(origin: Origin): string {
  const prefix = formatPrefix(origin.prefix);
  if (origin.kind === 'entry') {
    return `${escapeUnprintable(origin.file)} ${origin.key}[${origin.index}] ${quote(origin.written)}`;
  }
  if (origin.kind === 'default') {
    const list = origin.list === 'reserved' ? ' (--nomasq-all-reserved-ranges)' : '';
    return `the built-in default list${list}: ${prefix}`;
  }
  return `the link-local default ${prefix} (masqLinkLocal${origin.prefix.family === 6 ? 'IPv6' : ''} is false)`;
}

/** Each config's sets as ranges, worked out once however many addresses are explained. */
const setCache = new WeakMap<Config, Map<string, Range[]>>();

function covers(
  config: Config,
  set: 'nonMasquerade' | 'masquerade',
  family: AddressFamily,
  addr: bigint,
): boolean {
  let sets = setCache.get(config);
  if (!sets) setCache.set(config, (sets = new Map()));
  const key = `${set} ${family}`;
  let ranges = sets.get(key);
  if (!ranges) sets.set(key, (ranges = setRanges(config[set][family], family)));
  return inRanges(ranges, addr);
}

/**
 * Each config's origins by family, prefix length and network: the origins covering an address are
 * then one lookup per length in use, not a scan of every origin (a --diff of 100 000 ranges
 * explains 200 000 addresses).
 */
interface OriginIndex {
  /** Prefix lengths in use, each with its origins by network, each list in file and entry order. */
  readonly byLength: Map<number, Map<bigint, Array<{ order: number; origin: Origin }>>>;
}
const originCache = new WeakMap<Config, Map<Family, OriginIndex>>();

function originIndex(config: Config, family: Family): OriginIndex {
  let byFamily = originCache.get(config);
  if (!byFamily) originCache.set(config, (byFamily = new Map()));
  let index = byFamily.get(family);
  if (index) return index;
  index = { byLength: new Map() };
  for (const [order, origin] of (config.provenance?.origins ?? []).entries()) {
    if (origin.prefix.family !== family) continue;
    let networks = index.byLength.get(origin.prefix.len);
    if (!networks) index.byLength.set(origin.prefix.len, (networks = new Map()));
    const network = prefixRange(origin.prefix)[0];
    let list = networks.get(network);
    if (!list) networks.set(network, (list = []));
    list.push({ order, origin });
  }
  byFamily.set(family, index);
  return index;
}

function matching(config: Config, family: Family, addr: bigint): Origin[] {
  const found: Array<{ order: number; origin: Origin }> = [];
  for (const [len, networks] of originIndex(config, family).byLength) {
    const network = addr & ~hostMask(family, len);
    const list = networks.get(network);
    if (list) found.push(...list);
  }
  return found.sort((a, b) => a.order - b.order).map((entry) => entry.origin);
}

export function portPolicy(options: CompileOptions): PortPolicy {
  const total = options.toPorts.reduce((sum, r) => sum + r.last - r.first + 1, 0);
  return {
    fullyRandom: options.randomFully,
    ranges: options.toPorts.map((r) => ({
      ports: r.first === r.last ? String(r.first) : `${r.first}-${r.last}`,
      share: (r.last - r.first + 1) / total,
    })),
  };
}

/** Throws a CidrError for text that is not an IPv4 or IPv6 address. */
export function explain(config: Config, options: CompileOptions, address: string): Explanation {
  const { family, addr } = parseAddress(address.trim());
  const base = { address: address.trim(), family: familyName(family) };
  if (family === 6 && !options.enableIPv6) {
    return {
      ...base,
      masqueraded: false,
      reason: 'not managed',
      decidedBy: [],
      overridden: [],
      ports: null,
    };
  }
  const set = familyName(family);
  const origins = matching(config, family, addr);
  const text = (origin: Origin): OriginText => ({ text: describeOrigin(origin), origin });
  // The rules' order: masqueradeCIDRs first, then the non-masquerade set, then masquerade.
  if (covers(config, 'masquerade', set, addr)) {
    const isMasq = (o: Origin) => o.kind === 'entry' && o.key === 'masqueradeCIDRs';
    return {
      ...base,
      masqueraded: true,
      reason: 'masqueradeCIDRs',
      decidedBy: origins.filter(isMasq).map(text),
      overridden: origins.filter((o) => !isMasq(o)).map(text),
      ports: portPolicy(options),
    };
  }
  if (covers(config, 'nonMasquerade', set, addr)) {
    const by = origins.filter((o) => o.kind !== 'entry' || o.key === 'nonMasqueradeCIDRs');
    const first = by[0];
    const reason: Reason =
      first?.kind === 'default'
        ? 'default list'
        : first?.kind === 'link-local'
          ? 'link-local default'
          : 'nonMasqueradeCIDRs';
    return {
      ...base,
      masqueraded: false,
      reason,
      decidedBy: by.map(text),
      overridden: [],
      ports: null,
    };
  }
  return {
    ...base,
    masqueraded: true,
    reason: 'no match',
    decidedBy: [],
    overridden: [],
    ports: portPolicy(options),
  };
}

function portText(ports: PortPolicy): string {
  const random = ports.fullyRandom ? 'fully-random' : 'not fully-random';
  if (ports.ranges.length === 0) return `source port: any (${random})`;
  const shares = ports.ranges.map((r) => `${r.ports} (${Math.round(r.share * 1000) / 10} %)`);
  return `source port for tcp/udp/sctp: ${shares.join(', ')}; other protocols: any (${random})`;
}

/** The explanation as the lines --explain prints. */
export function explanationText(e: Explanation): string {
  const lines: string[] = [];
  if (e.reason === 'not managed') {
    lines.push(
      `${e.address}: not touched: IPv6 is off (--enable-ipv6), the agent has no ip6 table`,
    );
  } else if (!e.masqueraded) {
    lines.push(
      `${e.address}: not masqueraded, because of ${e.decidedBy[0]?.text ?? 'the non-masquerade set'}`,
    );
    for (const also of e.decidedBy.slice(1)) lines.push(`  also: ${also.text}`);
  } else {
    lines.push(
      e.reason === 'no match'
        ? `${e.address}: masqueraded: no entry exempts it`
        : `${e.address}: masqueraded, because of ${e.decidedBy[0]?.text ?? 'masqueradeCIDRs'} (masqueradeCIDRs come first)`,
    );
    for (const also of e.decidedBy.slice(1)) lines.push(`  also: ${also.text}`);
    for (const over of e.overridden) lines.push(`  overrides: ${over.text}`);
    if (e.ports) lines.push(`  ${portText(e.ports)}`);
  }
  return lines.join('\n');
}
