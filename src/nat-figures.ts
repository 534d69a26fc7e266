// What the node's NAT did with the translated flows (docs/observability.md, "What the node's NAT
// does"): protocol names, the source ports a translation can use, the port headroom by family and
// protocol, and the operator's view of `--flows` from a NAT sample's records (kernel/conntrack.ts,
// NatRecords), read a source at a time and written a piece at a time: memory flat whatever the
// number of groups. Pure.
import { protocolText } from './protocols.js';
import type { PortRange } from './decision.js';
import type { AddressFamily } from './config/types.js';
import { endianness } from 'node:os';
import { formatAddress } from './cidr/index.js';
import type { NatRecords, NatSample } from './kernel/conntrack.js';
import type { RuleShape } from './nftables/types.js';

/** The protocols the series are labelled with. */
export const NAT_PROTOCOLS = ['tcp', 'udp', 'sctp', 'icmp', 'other'] as const;
export type NatProtocol = (typeof NAT_PROTOCOLS)[number];

/** A protocol as the series label it: the family's ICMP as `icmp`, the rest outside tcp/udp/sctp `other`. */
export function natProtocol(protocol: number, family: AddressFamily): NatProtocol {
  const name = protocolText(protocol);
  if (name === 'tcp' || name === 'udp' || name === 'sctp') return name;
  if (name === (family === 'ipv4' ? 'icmp' : 'icmpv6')) return 'icmp';
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
 * registers, native/netlink.h): each range once (the rules of both families and every step repeat
 * them).
 */
export function snatPortsOfShapes(shapes: readonly RuleShape[]): number {
  const ranges = new Map<string, PortRange>();
  for (const { ports } of shapes) if (ports) ranges.set(`${ports.first}-${ports.last}`, ports);
  return snatPorts([...ranges.values()]);
}

/**
 * One family and protocol's figures: translated flows, and the busiest destination's share of the
 * ports.
 */
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
    const name = natProtocol(number, family);
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

/** One source's flows, its destinations read from the records only when asked for. */
export interface FlowSource {
  readonly source: string;
  readonly flows: number;
  readonly family: AddressFamily;
  /** Its destinations, most flows first; a new pass over the records each time. */
  destinations(): Iterable<FlowDestination>;
}

/** At most this many translated addresses are named per destination. */
export const TRANSLATED_SHOWN = 8;

const hostOrder32 =
  endianness() === 'LE'
    ? (buffer: Buffer, at: number) => buffer.readUInt32LE(at)
    : (buffer: Buffer, at: number) => buffer.readUInt32BE(at);

function addressAt(buffer: Buffer, at: number, width: 4 | 16): string {
  if (width === 4) return `${buffer[at]}.${buffer[at + 1]}.${buffer[at + 2]}.${buffer[at + 3]}`;
  let value = 0n;
  for (let i = 0; i < 16; i++) value = (value << 8n) | BigInt(buffer[at + i]!);
  return formatAddress(6, value);
}

/**
 * The sources of one family's records (native/nat-stats.h, FlowRecords), in the order the addon
 * sorted them: most flows first. Nothing is kept between them: memory stays flat whatever the
 * count.
 */
export function* flowSources(
  records: NatRecords,
  family: AddressFamily,
  ports: number,
): Generator<FlowSource> {
  const { width: w, stride, count, data } = records;
  const same = (a: number, b: number, from: number, length: number) =>
    data.compare(
      data,
      b * stride + from,
      b * stride + from + length,
      a * stride + from,
      a * stride + from + length,
    ) === 0;
  const flowsOf = (k: number) => hostOrder32(data, k * stride + 3 * w + 4);
  for (let k = 0; k < count;) {
    let end = k + 1;
    let flows = flowsOf(k);
    for (; end < count && same(k, end, 0, w); end++) flows += flowsOf(end);
    const [from, to] = [k, end];
    yield {
      source: addressAt(data, k * stride, w),
      flows,
      family,
      *destinations() {
        for (let i = from; i < to;) {
          const record = i * stride;
          const translated: string[] = [];
          let group = 0;
          let j = i;
          for (; j < to && same(i, j, 2 * w, w + 3); j++) {
            group += flowsOf(j);
            if (translated.length < TRANSLATED_SHOWN)
              translated.push(addressAt(data, j * stride + w, w));
          }
          yield {
            protocol: natProtocol(data[record + 3 * w + 2]!, family),
            address: addressAt(data, record + 2 * w, w),
            port: data.readUInt16BE(record + 3 * w),
            flows: group,
            translatedTo: translated,
            portUsage: hostOrder32(data, record + 3 * w + 8) / ports,
          };
          i = j;
        }
      },
    };
    k = end;
  }
}

/** Two families' sources as one list, most flows first (IPv4 first where equal). */
export function* mergedSources(
  a: Iterable<FlowSource>,
  b: Iterable<FlowSource>,
): Generator<FlowSource> {
  const left = a[Symbol.iterator]();
  const right = b[Symbol.iterator]();
  let l = left.next();
  let r = right.next();
  while (!l.done || !r.done) {
    if (r.done || (!l.done && l.value.flows >= r.value.flows)) {
      yield l.value as FlowSource;
      l = left.next();
    } else {
      yield r.value;
      r = right.next();
    }
  }
}

const percent = (ratio: number) => `${(ratio * 100).toFixed(ratio < 0.01 ? 2 : 1)}%`;

/**
 * One of --flows' outputs made a piece at a time from its sources, each with its pod where named.
 */
export type FlowsOutput = (
  sources: Iterable<FlowSource>,
  ports: number,
  pods?: ReadonlyMap<string, string>,
) => Generator<string>;

/** --flows as text, a line at a time: a line per source, then one per destination. */
export const flowsTextLines: FlowsOutput = function* (sources, ports, pods) {
  let any = false;
  for (const s of sources) {
    if (!any) yield `${ports} source ports per translated address`;
    any = true;
    const pod = pods?.get(s.source);
    yield `${s.source}${pod ? ` (${pod})` : ''}: ${s.flows} flow${s.flows === 1 ? '' : 's'}`;
    for (const d of s.destinations()) {
      const where = d.address.includes(':') ? `[${d.address}]` : d.address;
      yield (
        `  ${d.protocol} ${where}${d.port ? `:${d.port}` : ''}  ${d.flows} flow${d.flows === 1 ? '' : 's'}` +
        `  as ${d.translatedTo.join(', ')}  port usage ${percent(d.portUsage)}`
      );
    }
  }
  if (!any) yield 'no translated flows in conntrack';
};

/** `text` indented by `by` spaces on every line. */
const indented = (text: string, by: number) => text.replace(/^/gm, ' '.repeat(by));

/**
 * --flows as JSON, a piece at a time: the same text JSON.stringify({ ports, sources }, null, 2)
 * makes, each source with its `pod` where named and its destinations.
 */
export const flowsJsonPieces: FlowsOutput = function* (sources, ports, pods) {
  let any = false;
  for (const s of sources) {
    yield any ? ',\n' : `{\n  "ports": ${JSON.stringify(ports)},\n  "sources": [\n`;
    any = true;
    const pod = pods?.get(s.source);
    yield `    {\n      "source": ${JSON.stringify(s.source)},\n      "flows": ${JSON.stringify(s.flows)},\n`;
    if (pod !== undefined) yield `      "pod": ${JSON.stringify(pod)},\n`;
    yield '      "destinations": [\n';
    let first = true;
    for (const d of s.destinations()) {
      yield (first ? '' : ',\n') + indented(JSON.stringify(d, null, 2), 8);
      first = false;
    }
    yield '\n      ]\n    }';
  }
  yield any ? '\n  ]\n}\n' : `{\n  "ports": ${JSON.stringify(ports)},\n  "sources": []\n}\n`;
};

/**
 * A generator's pieces written into buffers of `size` bytes, each yielded once full (the last one
 * when the pieces end), `separator` after each piece. A piece is garbage as soon as it is copied:
 * nothing of the output is held on the JavaScript heap, whatever its length.
 */
export function* chunked(
  pieces: Iterable<string>,
  size = 64 * 1024,
  separator = '',
): Generator<Buffer> {
  let buffer = Buffer.allocUnsafeSlow(size);
  let used = 0;
  for (const piece of pieces) {
    const text = piece + separator;
    if (used + Buffer.byteLength(text) > size) {
      if (used > 0) yield buffer.subarray(0, used);
      buffer = Buffer.allocUnsafeSlow(size);
      used = 0;
      if (Buffer.byteLength(text) > size) {
        yield Buffer.from(text);
        continue;
      }
    }
    used += buffer.write(text, used);
  }
  if (used > 0) yield buffer.subarray(0, used);
}
