// Proves the packet-test harness with a hand-written nft ruleset in the node namespace (not the
// agent): the remote sees the pod's address until a masquerade rule applies, then the node's.
import t from 'tap';
import {
  NODE_IPV4,
  NODE_IPV6,
  POD_IPV4,
  POD_IPV6,
  REMOTE_TARGETS_IPV4,
  REMOTE_TARGETS_IPV6,
  inNetns,
  makeTopology,
  probeSources,
  requireRoot,
  type Topology,
} from '../../harness/netns.js';

const MASQUERADE_OUTSIDE_PRIVATE = `
table ip t {
  chain p {
    type nat hook postrouting priority srcnat;
    ip daddr != 10.0.0.0/8 masquerade
  }
}
table ip6 t {
  chain p {
    type nat hook postrouting priority srcnat;
    ip6 daddr != fd00::/8 masquerade
  }
}
`;

const addresses = (seen: { address: string }[]) => seen.map((s) => s.address);

t.test('harness topology', async (t) => {
  if (!requireRoot(t)) return;
  const topo: Topology = await makeTopology(t, { ipv6: true });
  const ipv4Targets = Object.values(REMOTE_TARGETS_IPV4);
  const ipv6Targets = Object.values(REMOTE_TARGETS_IPV6);

  await t.test('without rules every target answers and sees the pod address', async (t) => {
    for (const proto of ['udp', 'tcp'] as const) {
      const seen4 = await probeSources(topo, ipv4Targets, proto);
      t.same(
        addresses(seen4),
        ipv4Targets.map(() => POD_IPV4),
        `${proto} IPv4`,
      );
      const seen6 = await probeSources(topo, ipv6Targets, proto);
      t.same(
        addresses(seen6),
        ipv6Targets.map(() => POD_IPV6),
        `${proto} IPv6`,
      );
    }
  });

  await t.test('each probe is a new flow with its own source port', async (t) => {
    const dst = REMOTE_TARGETS_IPV4.outsideDefaultsA;
    const seen = await probeSources(topo, [dst, dst, dst]);
    t.equal(new Set(seen.map((s) => s.port)).size, 3, JSON.stringify(seen));
  });

  await t.test('a masquerade rule in the node changes what the remote sees', async (t) => {
    await inNetns(topo.node, 'nft', ['-f', '-'], { input: MASQUERADE_OUTSIDE_PRIVATE });
    const dsts = [REMOTE_TARGETS_IPV4.outsideDefaultsA, REMOTE_TARGETS_IPV4.private10];
    const dsts6 = [REMOTE_TARGETS_IPV6.documentation, REMOTE_TARGETS_IPV6.uniqueLocal];
    for (const proto of ['udp', 'tcp'] as const) {
      t.same(
        addresses(await probeSources(topo, dsts, proto)),
        [NODE_IPV4, POD_IPV4],
        `${proto} IPv4`,
      );
      t.same(
        addresses(await probeSources(topo, dsts6, proto)),
        [NODE_IPV6, POD_IPV6],
        `${proto} IPv6`,
      );
    }
  });

  await t.test('removing the rule restores the pod address for new flows', async (t) => {
    await inNetns(topo.node, 'nft', ['delete table ip t; delete table ip6 t']);
    const seen = await probeSources(topo, [
      REMOTE_TARGETS_IPV4.outsideDefaultsA,
      REMOTE_TARGETS_IPV6.documentation,
    ]);
    t.same(addresses(seen), [POD_IPV4, POD_IPV6]);
  });
});

t.test('an IPv4-only topology has no IPv6 on the pod', async (t) => {
  if (!requireRoot(t)) return;
  const topo = await makeTopology(t, { ipv6: false });
  const [seen] = await probeSources(topo, [REMOTE_TARGETS_IPV4.outsideDefaultsB]);
  t.equal(seen?.address, POD_IPV4);
  await t.rejects(
    probeSources(topo, [REMOTE_TARGETS_IPV6.documentation], 'udp', { attempts: 1, timeoutMs: 300 }),
  );
});
