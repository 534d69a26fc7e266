// What the node's NAT did with the translated flows (README, "What the node's NAT does"): protocol
// names, the source ports a translation can use, the port headroom by family and protocol, and the
// operator's view of `--flows` from a NAT sample (nftables/types.ts, NatSample). Pure.
import type { PortRange } from './compile.js';
import type { AddressFamily } from './config/types.js';
import type { NatGroup, NatSample, RuleShape } from './nftables/types.js';

/** The protocols the series are labelled with. */
export const NAT_PROTOCOLS = ['tcp', 'udp', 'sctp', 'icmp', 'other'] as const;
export type NatProtocol = (typeof NAT_PROTOCOLS)[number];

export function protocolName(protocol: number, family: AddressFamily): NatProtocol {
  if (protocol === 6) return 'tcp';
  if (protocol === 17) return 'udp';
  if (protocol === 132) return 'sctp';
  if (protocol === (family === 'ipv4' ? 1 : 58)) return 'icmp';
  return 'other';
}

/** The source ports a translation may use without --to-ports: 1024–65535. */
export const DEFAULT_SNAT_PORTS = 64_512;

/** How many source ports the translation can use: the --to-ports ranges' size, else the default. */
export function snatPorts(toPorts: readonly PortRange[]): number {
  const total = toPorts.reduce((sum, r) => sum + (r.last - r.first + 1), 0);
  return total > 0 ? total : DEFAULT_SNAT_PORTS;
}

/**
 * The same, from our chains' rules as the kernel holds them (their nat and masq expressions' port
 * registers, native/netlink.h): each range once (the rules of both families and every step repeat them).
 */
export function snatPortsOfShapes(shapes: readonly RuleShape[]): number {
  const ranges = new Map<string, PortRange>();
  for (const { ports } of shapes) if (ports) ranges.set(`${ports.first}-${ports.last}`, ports);
  return snatPorts([...ranges.values()]);
}

/** One family and protocol's figures: translated flows, and the busiest destination's share of the ports. */
export interface Headroom {
  readonly family: AddressFamily;
  readonly protocol: NatProtocol;
  readonly flows: number;
  readonly usage: number;
}

/** A sample's figures for every protocol of the family (0 where it has no translated flow). */
export function headroomOf(family: AddressFamily, sample: NatSample, ports: number): Headroom[] {
  const flows = new Map<NatProtocol, number>();
  const busiest = new Map<NatProtocol, number>();
  for (const [number, count, most] of sample.protocols) {
    const name = protocolName(number, family);
    flows.set(name, (flows.get(name) ?? 0) + count);
    busiest.set(name, Math.max(busiest.get(name) ?? 0, most));
  }
  return NAT_PROTOCOLS.map((protocol) => ({
    family,
    protocol,
    flows: flows.get(protocol) ?? 0,
    usage: (busiest.get(protocol) ?? 0) / ports,
  }));
}

/** One destination of a source, as --flows prints it. */
export interface FlowDestination {
  readonly protocol: NatProtocol;
  readonly address: string;
  readonly port: number;
  readonly flows: number;
  readonly translatedTo: readonly string[];
  /** The busiest translated address's flows to this destination and port ÷ the ports it may use. */
  readonly portUsage: number;
}

export interface FlowSource {
  readonly source: string;
  readonly flows: number;
  /** `namespace/name` of the pod holding the address (with --kubernetes/--kubeconfig). */
  readonly pod?: string;
  readonly destinations: readonly FlowDestination[];
}

/** Groups by source (most flows first), each source's destinations by flows. */
export function flowSources(
  groups: ReadonlyArray<NatGroup & { readonly family: AddressFamily }>,
  ports: number,
  pods?: ReadonlyMap<string, string>,
): FlowSource[] {
  const bySource = new Map<string, FlowDestination[]>();
  for (const group of groups) {
    const list = bySource.get(group.source) ?? [];
    list.push({
      protocol: protocolName(group.protocol, group.family),
      address: group.destination,
      port: group.port,
      flows: group.flows,
      translatedTo: [...group.translated].sort(),
      portUsage: group.busiest / ports,
    });
    bySource.set(group.source, list);
  }
  const sources = [...bySource].map(([source, destinations]) => {
    const pod = pods?.get(source);
    return {
      source,
      flows: destinations.reduce((sum, d) => sum + d.flows, 0),
      ...(pod !== undefined ? { pod } : {}),
      destinations: destinations.sort(
        (a, b) => b.flows - a.flows || a.address.localeCompare(b.address) || a.port - b.port,
      ),
    };
  });
  return sources.sort((a, b) => b.flows - a.flows || a.source.localeCompare(b.source));
}

const percent = (ratio: number) => `${(ratio * 100).toFixed(ratio < 0.01 ? 2 : 1)}%`;

/** --flows as text: a line per source, then one per destination. */
export function flowsText(sources: readonly FlowSource[], ports: number): string {
  if (sources.length === 0) return 'no translated flows in conntrack';
  const lines = [`${ports} source ports per translated address`];
  for (const s of sources) {
    lines.push(
      `${s.source}${s.pod ? ` (${s.pod})` : ''}: ${s.flows} flow${s.flows === 1 ? '' : 's'}`,
    );
    for (const d of s.destinations) {
      const where = d.address.includes(':') ? `[${d.address}]` : d.address;
      lines.push(
        `  ${d.protocol} ${where}${d.port ? `:${d.port}` : ''}  ${d.flows} flow${d.flows === 1 ? '' : 's'}` +
          `  as ${d.translatedTo.join(', ')}  port usage ${percent(d.portUsage)}`,
      );
    }
  }
  return lines.join('\n');
}
