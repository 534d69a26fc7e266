// The pure side of the NAT figures (src/nat-figures.ts): protocol names, the ports a translation can use
// (from --to-ports, or from our rules' expressions), the headroom of a sample, and --flows's reading
// of the addon's records, its text and JSON written in pieces.
import { endianness } from 'node:os';
import t from 'tap';
import { parseAddress } from '../../src/cidr/index.js';
import {
  chunked,
  DEFAULT_SNAT_PORTS,
  flowSources,
  flowsJsonPieces,
  flowsTextLines,
  headroomOf,
  mergedSources,
  natProtocol,
  snatPorts,
  snatPortsOfShapes,
} from '../../src/nat-figures.js';
import type { NatRecords, NatSample } from '../../src/kernel/conntrack.js';

t.test('protocols by family: ICMP is 1 for IPv4, 58 for IPv6', async (t) => {
  t.equal(natProtocol(1, 'ipv4'), 'icmp');
  t.equal(natProtocol(58, 'ipv6'), 'icmp');
  t.equal(natProtocol(58, 'ipv4'), 'other');
  t.same(
    [6, 17, 132, 47].map((p) => natProtocol(p, 'ipv4')),
    ['tcp', 'udp', 'sctp', 'other'],
  );
});

t.test('ports: the --to-ports ranges summed, else 1024-65535', async (t) => {
  t.equal(snatPorts([]), DEFAULT_SNAT_PORTS);
  t.equal(DEFAULT_SNAT_PORTS, 65535 - 1024 + 1);
  t.equal(
    snatPorts([
      { first: 1024, last: 29999 },
      { first: 32768, last: 65535 },
    ]),
    61744,
  );
  const shape = (ports?: { first: number; last: number }) => ({
    handle: 1,
    translates: true,
    jumps: [],
    expressions: [],
    ...(ports ? { ports } : {}),
  });
  t.equal(
    snatPortsOfShapes([
      shape({ first: 1024, last: 29999 }),
      shape({ first: 32768, last: 65535 }),
      shape({ first: 1024, last: 29999 }),
      shape({ first: 32768, last: 65535 }),
      shape(),
    ]),
    61744,
    'each range once (both families, every step)',
  );
  t.equal(snatPortsOfShapes([shape()]), DEFAULT_SNAT_PORTS, 'no range: the default');
  t.equal(snatPortsOfShapes([shape({ first: 5000, last: 5000 })]), 1);
});

const sample = (protocols: NatSample['protocols']): NatSample => ({
  complete: true,
  seen: 0,
  translated: 0,
  cpuS: 0,
  protocols,
});

t.test('headroom: every protocol, the busiest over the ports, others summed', async (t) => {
  const rows = headroomOf(
    'ipv4',
    sample([
      [17, 12, 8],
      [6, 3, 1],
      [47, 2, 2],
      [50, 1, 1],
    ]),
    10,
  );
  t.same(
    rows.map((r) => [r.protocol, r.flows, r.usage]),
    [
      ['tcp', 3, 0.1],
      ['udp', 12, 0.8],
      ['sctp', 0, 0],
      ['icmp', 0, 0],
      ['other', 3, 0.2],
    ],
  );
});

/**
 * Records as the addon lays them out (native/nat-stats.h, FlowRecords), in the order given, with the
 * busiest given: what the addon computes and sorts is tested against real conntrack in
 * test/kernel/flows.test.ts.
 */
function packed(
  width: 4 | 16,
  rows: ReadonlyArray<{
    source: string;
    translated: string;
    destination: string;
    port: number;
    protocol: number;
    flows: number;
    busiest: number;
  }>,
): NatRecords {
  const stride = 3 * width + 12;
  const data = Buffer.alloc(rows.length * stride);
  const bytes = (text: string) => {
    const { addr } = parseAddress(text);
    return Buffer.from(addr.toString(16).padStart(2 * width, '0'), 'hex');
  };
  const put = endianness() === 'LE' ? 'writeUInt32LE' : 'writeUInt32BE';
  rows.forEach((row, i) => {
    const at = i * stride;
    bytes(row.source).copy(data, at);
    bytes(row.translated).copy(data, at + width);
    bytes(row.destination).copy(data, at + 2 * width);
    data.writeUInt16BE(row.port, at + 3 * width);
    data[at + 3 * width + 2] = row.protocol;
    data[put](row.flows, at + 3 * width + 4);
    data[put](row.busiest, at + 3 * width + 8);
  });
  return { width, stride, count: rows.length, data };
}

const row = (
  source: string,
  destination: string,
  port: number,
  flows: number,
  busiest: number,
  translated = '192.0.2.1',
) => ({ source, translated, destination, port, protocol: 17, flows, busiest });

const RECORDS = packed(4, [
  row('10.244.1.2', '198.51.100.8', 443, 4, 4),
  row('10.244.1.2', '198.51.100.7', 53, 2, 5),
  row('10.244.1.2', '198.51.100.7', 53, 1, 5, '192.0.2.2'),
  row('10.244.1.3', '198.51.100.7', 53, 2, 5),
]);

t.test('--flows: read by source from the records; pods named; text', async (t) => {
  const pods = new Map([['10.244.1.2', 'shop/web-1']]);
  const sources = [...flowSources(RECORDS, 'ipv4', 10)];
  t.same(
    sources.map((s) => [
      s.source,
      s.flows,
      [...s.destinations()].map((d) => [d.address, d.port, d.flows, d.translatedTo, d.portUsage]),
    ]),
    [
      [
        '10.244.1.2',
        7,
        [
          ['198.51.100.8', 443, 4, ['192.0.2.1'], 0.4],
          ['198.51.100.7', 53, 3, ['192.0.2.1', '192.0.2.2'], 0.5],
        ],
      ],
      ['10.244.1.3', 2, [['198.51.100.7', 53, 2, ['192.0.2.1'], 0.5]]],
    ],
    'one destination per (destination, port, protocol), its translated addresses together',
  );
  const text = [...flowsTextLines(flowSources(RECORDS, 'ipv4', 10), 10, pods)].join('\n');
  t.match(text, /^10 source ports per translated address$/m);
  t.match(text, /^10\.244\.1\.2 \(shop\/web-1\): 7 flows$/m);
  t.match(
    text,
    /^ {2}udp 198\.51\.100\.7:53 {2}3 flows {2}as 192\.0\.2\.1, 192\.0\.2\.2 {2}port usage 50\.0%$/m,
  );
  t.same([...flowsTextLines([], 10)], ['no translated flows in conntrack']);
});

t.test('--flows JSON: the text JSON.stringify would make, written in pieces', async (t) => {
  const pods = new Map([['10.244.1.2', 'shop/web-1']]);
  const streamed = [...flowsJsonPieces(flowSources(RECORDS, 'ipv4', 10), 10, pods)].join('');
  const whole = {
    ports: 10,
    sources: [...flowSources(RECORDS, 'ipv4', 10)].map((s) => ({
      source: s.source,
      flows: s.flows,
      ...(pods.get(s.source) ? { pod: pods.get(s.source) } : {}),
      destinations: [...s.destinations()],
    })),
  };
  t.equal(streamed, `${JSON.stringify(whole, null, 2)}\n`);
  t.equal(
    [...flowsJsonPieces([], 64_512)].join(''),
    `${JSON.stringify({ ports: 64_512, sources: [] }, null, 2)}\n`,
  );
  t.same(
    [...chunked(['ab', 'cd', 'ef', 'g'], 5)].map(String),
    ['abcd', 'efg'],
    'pieces copied into buffers of the size asked',
  );
  t.same(
    [...chunked(['ab', 'cdefgh', 'é'], 4, '\n')].map(String),
    ['ab\n', 'cdefgh\n', 'é\n'],
    'a piece longer than a buffer goes alone; the separator after each; bytes, not characters',
  );
});

t.test('--flows: two families merged, most flows first', async (t) => {
  const v6 = packed(16, [row('fd00:10:244::2', 'fd34::1', 53, 5, 5, 'fd00::1')]);
  const merged = [...mergedSources(flowSources(RECORDS, 'ipv4', 10), flowSources(v6, 'ipv6', 10))];
  t.same(
    merged.map((s) => [s.source, s.flows, s.family]),
    [
      ['10.244.1.2', 7, 'ipv4'],
      ['fd00:10:244::2', 5, 'ipv6'],
      ['10.244.1.3', 2, 'ipv4'],
    ],
  );
  t.same([...merged[1]!.destinations()][0]!.translatedTo, ['fd00::1']);
});
