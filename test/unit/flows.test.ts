// The pure side of the NAT figures (src/flows.ts): protocol names, the ports a translation can use
// (from --to-ports, or from our rules as nft prints them), the headroom of a sample, and --flows's
// grouping and text.
import t from 'tap';
import {
  DEFAULT_SNAT_PORTS,
  flowSources,
  flowsText,
  headroomOf,
  protocolName,
  snatPorts,
  snatPortsOfShapes,
} from '../../src/flows.js';
import type { NatSample } from '../../src/nftables/types.js';

t.test('protocols by family: ICMP is 1 for IPv4, 58 for IPv6', async (t) => {
  t.equal(protocolName(1, 'ipv4'), 'icmp');
  t.equal(protocolName(58, 'ipv6'), 'icmp');
  t.equal(protocolName(58, 'ipv4'), 'other');
  t.same(
    [6, 17, 132, 47].map((p) => protocolName(p, 'ipv4')),
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
  groups: [],
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

t.test('--flows: by source, most flows first; pods named; text', async (t) => {
  const group = (
    source: string,
    destination: string,
    port: number,
    flows: number,
    busiest: number,
  ) => ({
    family: 'ipv4' as const,
    source,
    protocol: 17,
    destination,
    port,
    flows,
    translated: ['192.0.2.1'],
    busiest,
  });
  const sources = flowSources(
    [
      group('10.244.1.3', '198.51.100.7', 53, 2, 5),
      group('10.244.1.2', '198.51.100.7', 53, 3, 5),
      group('10.244.1.2', '198.51.100.8', 443, 4, 4),
    ],
    10,
    new Map([['10.244.1.2', 'shop/web-1']]),
  );
  t.same(
    sources.map((s) => [
      s.source,
      s.flows,
      s.pod,
      s.destinations.map((d) => [d.address, d.flows, d.portUsage]),
    ]),
    [
      [
        '10.244.1.2',
        7,
        'shop/web-1',
        [
          ['198.51.100.8', 4, 0.4],
          ['198.51.100.7', 3, 0.5],
        ],
      ],
      ['10.244.1.3', 2, undefined, [['198.51.100.7', 2, 0.5]]],
    ],
  );
  const text = flowsText(sources, 10);
  t.match(text, /^10\.244\.1\.2 \(shop\/web-1\): 7 flows$/m);
  t.match(text, /^ {2}udp 198\.51\.100\.7:53 {2}3 flows {2}as 192\.0\.2\.1 {2}port usage 50\.0%$/m);
  t.equal(flowsText([], 10), 'no translated flows in conntrack');
});
