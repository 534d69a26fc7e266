// README, "Configuration" and "What it does" on the wire: the agent applies a config (--once) in the node namespace, and the
// remote reports which source each new flow from the pod arrived with.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { AUTO_LAYOUT_CROSSOVER } from '../../src/compile.js';
import { listTable, runAgentOnce } from '../../harness/agent.js';
import { inNetns, requireRoot, tempDir } from '../../harness/netns.js';
import {
  makeTopology,
  NODE_IPV4,
  NODE_IPV6,
  POD_IPV4,
  POD_IPV6,
  probeRawSources,
  probeSources,
  REMOTE_TARGETS_IPV4 as V4,
  REMOTE_TARGETS_IPV6 as V6,
} from '../../harness/topology.js';

if (requireRoot(t)) {
  const dir = tempDir(t, 'semantics');
  const topo = await makeTopology(t, { ipv6: true });
  let n = 0;

  /** Applies `config` (or no file at all) with flags, then maps each destination to 'node' or 'pod'. */
  async function apply(config: string | null, flags: string[] = []): Promise<void> {
    const file = join(dir, `config-${n++}`);
    if (config !== null) writeFileSync(file, config);
    const result = await runAgentOnce(topo.node, ['--once', '--config', file, ...flags]);
    if (result.code !== 0)
      throw new Error(`--once exited ${result.code}: ${result.stdout}${result.stderr}`);
    // Each test judges new flows. A probe whose ephemeral port an earlier probe to the same address
    // used would ride that flow's conntrack entry and its earlier decision (seen once in CI: an
    // address exempt two tests before came back 'pod'); what existing flows do after a change is
    // conntrack.test.ts's subject.
    await inNetns(topo.node, 'conntrack', ['-F']);
  }
  const named = (address: string | undefined) =>
    address === NODE_IPV4 || address === NODE_IPV6
      ? 'node'
      : address === POD_IPV4 || address === POD_IPV6
        ? 'pod'
        : `unexpected ${address}`;
  async function seen(
    destinations: string[],
    proto: 'udp' | 'tcp' = 'udp',
  ): Promise<Record<string, string>> {
    const sources = await probeSources(topo, destinations, proto);
    return Object.fromEntries(destinations.map((dst, i) => [dst, named(sources[i]?.address)]));
  }
  const expectAll = (destinations: string[], who: string) =>
    Object.fromEntries(destinations.map((d) => [d, who]));

  t.test('defaults: private ranges and link-local exempt, the rest masqueraded', async (t) => {
    await apply(null);
    const exempt = [V4.private10, V4.private172, V4.private192, V4.linkLocal];
    const masqueraded = [
      V4.outsideDefaultsA,
      V4.outsideDefaultsB,
      V4.sharedCgnat,
      V4.testNet3,
      V4.classE,
    ];
    t.same(await seen([...exempt, ...masqueraded]), {
      ...expectAll(exempt, 'pod'),
      ...expectAll(masqueraded, 'node'),
    });
    t.same(await seen([V4.outsideDefaultsA, V4.private10], 'tcp'), {
      [V4.outsideDefaultsA]: 'node',
      [V4.private10]: 'pod',
    });
  });

  t.test('a custom list replaces the defaults', async (t) => {
    await apply('nonMasqueradeCIDRs:\n  - 198.19.0.0/24\n  - 10.9.0.0/16\n');
    t.same(
      await seen([
        V4.outsideDefaultsA,
        V4.private10,
        V4.private10Other,
        V4.outsideDefaultsB,
        V4.private192,
        V4.linkLocal,
      ]),
      {
        [V4.outsideDefaultsA]: 'pod',
        [V4.private10]: 'pod',
        [V4.private10Other]: 'node',
        [V4.outsideDefaultsB]: 'node',
        [V4.private192]: 'node',
        [V4.linkLocal]: 'pod',
      },
    );
  });

  const reserved = [
    V4.sharedCgnat,
    V4.ietfProtocol,
    V4.relay6to4,
    V4.benchmarking,
    V4.testNet2,
    V4.testNet3,
    V4.classE,
  ];

  t.test('--nomasq-all-reserved-ranges alone exempts every reserved range', async (t) => {
    await apply(null, ['--nomasq-all-reserved-ranges']);
    // Every address outside these lists is public, and test traffic never goes to one: the masquerade
    // side of the default list is checked without the flag above.
    t.same(await seen([...reserved, V4.private10]), expectAll([...reserved, V4.private10], 'pod'));
  });

  t.test('--nomasq-all-reserved-ranges with a config list: the list replaces it', async (t) => {
    await apply('nonMasqueradeCIDRs: [10.0.0.0/8]\n', ['--nomasq-all-reserved-ranges']);
    t.same(await seen([...reserved, V4.private10]), {
      ...expectAll(reserved, 'node'),
      [V4.private10]: 'pod',
    });
  });

  t.test('masqLinkLocal: true masquerades link-local', async (t) => {
    await apply('masqLinkLocal: true\n');
    t.same(await seen([V4.linkLocal, V4.private10]), {
      [V4.linkLocal]: 'node',
      [V4.private10]: 'pod',
    });
  });

  t.test('masqueradeCIDRs inside a non-masquerade range are masqueraded', async (t) => {
    await apply('masqueradeCIDRs: [10.9.0.0/16]\n');
    t.same(await seen([V4.private10, V4.private10Other, V4.outsideDefaultsA]), {
      [V4.private10]: 'node',
      [V4.private10Other]: 'pod',
      [V4.outsideDefaultsA]: 'node',
    });
  });

  t.test('IPv6 with --enable-ipv6', async (t) => {
    await apply(
      'nonMasqueradeCIDRs: [10.0.0.0/8, "fd12::/16"]\nmasqueradeCIDRs: ["2001:db8:ff::1/128"]\n',
      ['--enable-ipv6'],
    );
    t.same(
      await seen([
        V6.uniqueLocal,
        V6.documentation,
        V6.uniqueLocalOther,
        V4.private10,
        V4.outsideDefaultsA,
      ]),
      {
        [V6.uniqueLocal]: 'pod',
        [V6.documentation]: 'node',
        [V6.uniqueLocalOther]: 'node',
        [V4.private10]: 'pod',
        [V4.outsideDefaultsA]: 'node',
      },
    );
    t.ok(await listTable(topo.node, 'ip6'), 'ip6 table present');
  });

  t.test('IPv6 turned off again: the stale ip6 table is deleted', async (t) => {
    await apply(null);
    t.equal(await listTable(topo.node, 'ip6'), null);
  });

  t.test('--to-ports: tcp and udp leave from the given ranges, in proportion', async (t) => {
    await apply(null, ['--to-ports', '20000-20099,30000-30299']);
    const destinations = Array.from({ length: 40 }, () => V4.outsideDefaultsPorts);
    for (const proto of ['udp', 'tcp'] as const) {
      const sources = await probeSources(topo, destinations, proto);
      const ports = sources.map((s) => s.port);
      t.ok(
        sources.every((s) => s.address === NODE_IPV4),
        `${proto}: masqueraded`,
      );
      t.ok(
        ports.every((p) => (p >= 20000 && p <= 20099) || (p >= 30000 && p <= 30299)),
        `${proto}: every port in a range (${ports.join(',')})`,
      );
      const high = ports.filter((p) => p >= 30000).length;
      // 3/4 of the ports are in the second range; 40 draws put it above 1/3 with near certainty.
      t.ok(high > 13 && high < 40, `${proto}: both ranges used, the larger more (${high}/40)`);
    }
  });

  t.test(
    `--set-layout auto (the default): concat above ${AUTO_LAYOUT_CROSSOVER} CIDRs, interval again below`,
    async (t) => {
      // Non-adjacent /24s from 10.32.0.0 up, plus 10.9.0.0/16 for the probe: one above the crossover.
      const many = Array.from(
        { length: AUTO_LAYOUT_CROSSOVER },
        (_, i) => `  - 10.${32 + ((i * 2) >> 8)}.${(i * 2) & 255}.0/24`,
      );
      const big = `cidrLimit: 5000\nnonMasqueradeCIDRs:\n  - 10.9.0.0/16\n${many.join('\n')}\n`;
      await apply(big);
      t.match(
        await listTable(topo.node, 'ip'),
        /typeof ip daddr \. meta l4proto/,
        'concatenated above',
      );
      t.same(await seen([V4.private10, V4.outsideDefaultsA]), {
        [V4.private10]: 'pod',
        [V4.outsideDefaultsA]: 'node',
      });
      await apply('nonMasqueradeCIDRs: [10.9.0.0/16]\n');
      const listing = await listTable(topo.node, 'ip');
      t.match(listing, /typeof ip daddr\n/, 'interval again below');
      t.notMatch(listing, /meta l4proto/);
      t.same(await seen([V4.private10, V4.outsideDefaultsA]), {
        [V4.private10]: 'pod',
        [V4.outsideDefaultsA]: 'node',
      });
    },
  );

  t.test('--random-fully=false still masquerades, without fully-random', async (t) => {
    await apply(null, ['--random-fully=false']);
    t.same(await seen([V4.outsideDefaultsA, V4.private10]), {
      [V4.outsideDefaultsA]: 'node',
      [V4.private10]: 'pod',
    });
    t.notMatch(await listTable(topo.node, 'ip'), /fully-random/);
  });

  t.test('--set-layout=concat makes the same decisions, for every protocol', async (t) => {
    await apply('nonMasqueradeCIDRs: [10.0.0.0/8, "fd12::/16"]\nmasqueradeCIDRs: [10.9.0.0/16]\n', [
      '--set-layout=concat',
      '--enable-ipv6',
    ]);
    t.match(await listTable(topo.node, 'ip'), /typeof ip daddr \. meta l4proto/);
    const expected = {
      [V4.private10]: 'node',
      [V4.private10Other]: 'pod',
      [V4.outsideDefaultsA]: 'node',
      [V4.linkLocal]: 'pod',
      [V6.uniqueLocal]: 'pod',
      [V6.documentation]: 'node',
    };
    const destinations = Object.keys(expected);
    t.same(await seen(destinations), expected, 'udp');
    t.same(await seen(destinations, 'tcp'), expected, 'tcp');
    // SCTP (ports, NATed by conntrack's sctp tracker) and protocol 253 (no ports at all).
    for (const proto of ['sctp', '253'] as const) {
      const sources = await probeRawSources(topo, destinations, proto);
      t.same(
        Object.fromEntries(destinations.map((d, i) => [d, named(sources[i])])),
        expected,
        proto,
      );
    }
  });

  t.test('an empty list masquerades everything but link-local', async (t) => {
    await apply('nonMasqueradeCIDRs: []\n');
    t.same(await seen([V4.private10, V4.outsideDefaultsA, V4.linkLocal]), {
      [V4.private10]: 'node',
      [V4.outsideDefaultsA]: 'node',
      [V4.linkLocal]: 'pod',
    });
  });
}
