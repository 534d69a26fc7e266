// --flows against real conntrack (docs/observability.md, "What the node's NAT does"):
// source-translated entries of both families written with conntrack(8) in a namespace — sources,
// destinations, ports, protocols and translated addresses drawn at random (seeded), some groups
// translated to two addresses — and the JSON --flows prints is exactly what the entries say, worked
// out here on their own: each source's flows, its destinations by (destination, port, protocol)
// with their flows and translated addresses, the busiest translated address's flows to each
// destination and port over the ports, sources most flows first (IPv4 first where equal), each
// source's destinations likewise, ties by address, port and protocol. The addon aggregates and
// sorts them (native/nat-stats.cc); this is its oracle.
import t from 'tap';
import { runAgentOnce } from '../../harness/agent.js';
import { inNetns, makeNetns, requireRoot } from '../../harness/netns.js';
import { parseAddress } from '../../src/cidr/index.js';

const SEED = 20261205;
const PORTS = 64_512; // no table of ours here: the default

/** A small seeded generator (mulberry32). */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

interface Entry {
  family: 4 | 6;
  protocol: 'tcp' | 'udp';
  source: string;
  destination: string;
  port: number;
  translated: string;
}

const POOLS = {
  4: {
    sources: ['10.244.1.2', '10.244.1.10', '10.244.2.3', '10.244.1.9'],
    destinations: ['198.51.100.7', '198.51.100.70', '203.0.113.5'],
    translated: ['192.0.2.1', '192.0.2.2'],
  },
  6: {
    sources: ['fd00:10:244::2', 'fd00:10:244::1:3'],
    destinations: ['fd34::1', 'fd34::a'],
    translated: ['fd00::1', 'fd00::2'],
  },
} as const;

const numeric = (a: string, b: string) => {
  const x = parseAddress(a).addr;
  const y = parseAddress(b).addr;
  return x < y ? -1 : x > y ? 1 : 0;
};

/** What --flows --output json must print for these entries. */
function expected(entries: readonly Entry[]) {
  const protocolNumber = { tcp: 6, udp: 17 };
  const key = (...parts: Array<string | number>) => parts.join('|');
  const toDestination = new Map<string, number>(); // translated, destination, port, protocol
  for (const e of entries) {
    const k = key(e.translated, e.destination, e.port, e.protocol);
    toDestination.set(k, (toDestination.get(k) ?? 0) + 1);
  }
  const sources = new Map<string, { family: 4 | 6; groups: Map<string, Entry[]> }>();
  for (const e of entries) {
    const source = sources.get(e.source) ?? { family: e.family, groups: new Map() };
    const k = key(e.destination, e.port, e.protocol);
    source.groups.set(k, [...(source.groups.get(k) ?? []), e]);
    sources.set(e.source, source);
  }
  const list = [...sources].map(([source, { family, groups }]) => {
    const destinations = [...groups.values()].map((group) => {
      const first = group[0]!;
      const translatedTo = [...new Set(group.map((e) => e.translated))].sort(numeric);
      const busiest = Math.max(
        ...translatedTo.map((to) =>
          toDestination.get(key(to, first.destination, first.port, first.protocol))!,
        ),
      );
      return {
        protocol: first.protocol,
        address: first.destination,
        port: first.port,
        flows: group.length,
        translatedTo,
        portUsage: busiest / PORTS,
      };
    });
    destinations.sort(
      (a, b) =>
        b.flows - a.flows ||
        numeric(a.address, b.address) ||
        a.port - b.port ||
        protocolNumber[a.protocol] - protocolNumber[b.protocol],
    );
    return {
      family,
      source,
      flows: groups.size && destinations.reduce((s, d) => s + d.flows, 0),
      destinations,
    };
  });
  list.sort((a, b) => b.flows - a.flows || a.family - b.family || numeric(a.source, b.source));
  return {
    ports: PORTS,
    sources: list.map(({ source, flows, destinations }) => ({ source, flows, destinations })),
  };
}

if (requireRoot(t)) {
  t.test('--flows is exactly what the conntrack entries say', async (t) => {
    const ns = await makeNetns(t, 'flows');
    const next = random(SEED);
    const pick = <T>(items: readonly T[]) => items[Math.floor(next() * items.length)]!;
    const entries: Entry[] = [];
    for (let i = 0; i < 160; i++) {
      const family = next() < 0.75 ? 4 : 6;
      const pool = POOLS[family];
      entries.push({
        family,
        protocol: next() < 0.5 ? 'tcp' : 'udp',
        source: pick(pool.sources),
        destination: pick(pool.destinations),
        port: pick([53, 443]),
        translated: next() < 0.8 ? pool.translated[0] : pool.translated[1],
      });
    }
    // Ties on purpose: three sources of 2 flows each (IPv4 before IPv6, then by address), each to
    // two destinations of one flow (by address, then port).
    for (const [family, source, a, b] of [
      [4, '10.244.3.20', '203.0.113.5', '198.51.100.7'],
      [6, 'fd00:10:244::9', 'fd34::a', 'fd34::1'],
      [4, '10.244.3.3', '198.51.100.7', '198.51.100.7'],
    ] as const) {
      const translated = POOLS[family].translated[0];
      entries.push({ family, protocol: 'udp', source, destination: a, port: 53, translated });
      entries.push({ family, protocol: 'udp', source, destination: b, port: 443, translated });
    }
    let sport = 1000;
    for (const e of entries) {
      await inNetns(ns, 'conntrack', [
        '-I',
        '-p',
        e.protocol,
        '-s',
        e.source,
        '-d',
        e.destination,
        '--sport',
        String(sport++),
        '--dport',
        String(e.port),
        ...(e.protocol === 'tcp' ? ['--state', 'ESTABLISHED'] : []),
        '--timeout',
        '600',
        '--src-nat',
        e.translated,
      ]);
    }
    const run = await runAgentOnce(ns, ['--flows', '--output', 'json']);
    t.equal(run.code, 0, run.stderr);
    const printed = JSON.parse(run.stdout);
    t.same(printed, expected(entries), `${entries.length} entries, both families`);
    const groups = printed.sources.flatMap(
      (s: { destinations: Array<{ translatedTo: string[] }> }) => s.destinations,
    );
    t.ok(
      groups.some((d: { translatedTo: string[] }) => d.translatedTo.length === 2),
      'some groups translated to two addresses',
    );
    t.ok(
      new Set(printed.sources.map((s: { flows: number }) => s.flows)).size < printed.sources.length,
      'sources with equal flows (ties ordered)',
    );
    const text = await runAgentOnce(ns, ['--flows']);
    const want = expected(entries);
    t.match(
      text.stdout,
      new RegExp(`^${want.sources[0]!.source}: ${want.sources[0]!.flows} flows$`, 'm'),
    );
    const only = await runAgentOnce(ns, ['--flows', '--output', 'json', '--from', '10.244.1.0/24']);
    t.same(
      JSON.parse(only.stdout),
      expected(entries.filter((e) => e.family === 4 && e.source.startsWith('10.244.1.'))),
      '--from: the same, of those sources alone',
    );
  });
}
