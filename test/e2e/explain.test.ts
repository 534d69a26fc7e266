// --explain agrees with the kernel: for random configs and random addresses, the decision --explain
// prints (offline, from the config) is the one the kernel makes on a real packet from the pod, and
// --explain --live reads the same answer back from the tables.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { runAgentOnce } from '../../harness/agent.js';
import { inNetns, requireRoot, tempDir } from '../../harness/netns.js';
import { makeTopology, NODE_IPV4, NODE_IPV6, probeRawSources } from '../../harness/topology.js';

const SEED = 20261201;
const CONFIGS = 8;
const ADDRESSES = 40;

// Configs and addresses inside 10.77.0.0/24 and fd77::/120, which the remote answers for whole.
const v4 = fc
  .tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 24, max: 32 }))
  .map(([host, len]) => `10.77.0.${host & ~((1 << (32 - len)) - 1) & 255}/${len}`);
const v6 = fc
  .tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 120, max: 128 }))
  .map(([host, len]) => `fd77::${(host & ~((1 << (128 - len)) - 1) & 255).toString(16)}/${len}`);
const cidrs = fc.array(fc.oneof(v4, v6), { maxLength: 6 });
const configArb = fc.tuple(cidrs, fc.array(fc.oneof(v4, v6), { maxLength: 3 }));
const addressArb = fc.oneof(
  fc.integer({ min: 1, max: 254 }).map((h) => `10.77.0.${h}`),
  fc.integer({ min: 1, max: 255 }).map((h) => `fd77::${h.toString(16)}`),
);

interface Explained {
  explanations: Array<{ address: string; masqueraded: boolean }>;
  live?: { answers: Array<{ masqueraded: boolean | null; drift: boolean }> };
}

if (requireRoot(t)) {
  const topo = await makeTopology(t, { ipv6: true });
  await inNetns(topo.remote, 'ip', ['route', 'add', 'local', '10.77.0.0/24', 'dev', 'lo']);
  await inNetns(topo.remote, 'ip', ['-6', 'route', 'add', 'local', 'fd77::/120', 'dev', 'lo']);
  const dir = tempDir(t, 'explain-e2e');

  t.test(`${CONFIGS} random configs × ${ADDRESSES} addresses (seed ${SEED})`, async (t) => {
    const configs = fc.sample(configArb, { numRuns: CONFIGS, seed: SEED });
    const addressSets = fc.sample(
      fc.array(addressArb, { minLength: ADDRESSES, maxLength: ADDRESSES }),
      {
        numRuns: CONFIGS,
        seed: SEED + 1,
      },
    );
    let pairs = 0;
    for (const [i, [nonMasq, masq]] of configs.entries()) {
      const file = join(dir, `config-${i}`);
      writeFileSync(
        file,
        `nonMasqueradeCIDRs: ${JSON.stringify(nonMasq)}\nmasqueradeCIDRs: ${JSON.stringify(masq)}\n`,
      );
      const flags = ['--config', file, '--enable-ipv6'];
      const once = await runAgentOnce(topo.node, [...flags, '--once']);
      t.equal(once.code, 0, `config ${i} applied`);
      // Every probe must be a first packet: protocol 253 has no ports, so an address probed under
      // an earlier config would reuse that flow's conntrack entry and its NAT decision.
      await inNetns(topo.node, 'conntrack', ['-F']).catch(() => undefined);
      const addresses = [...new Set(addressSets[i])];
      const explained = await runAgentOnce(topo.node, [
        ...flags,
        '--output',
        'json',
        '--live',
        '--explain',
        ...addresses,
      ]);
      t.equal(explained.code, 0, `config ${i}: --explain exits 0 ${explained.stderr}`);
      const answer = JSON.parse(explained.stdout) as Explained;
      const sources = await probeRawSources(topo, addresses, '253');
      const disagreements = addresses.filter((address, k) => {
        const kernel = sources[k] === NODE_IPV4 || sources[k] === NODE_IPV6;
        const offline = answer.explanations[k]?.masqueraded;
        const live = answer.live?.answers[k];
        return offline !== kernel || live?.masqueraded !== kernel || live?.drift !== false;
      });
      t.same(disagreements, [], `config ${i}: ${JSON.stringify([nonMasq, masq])}`);
      pairs += addresses.length;
    }
    t.ok(pairs >= 250, `${pairs} config/address pairs checked on the wire`);
  });

  t.test("--live names a missing table and the original agent's chain", async (t) => {
    const file = join(dir, 'plain');
    writeFileSync(file, 'nonMasqueradeCIDRs: [10.77.0.0/24]\n');
    await runAgentOnce(topo.node, ['--config', file, '--cleanup']);
    await inNetns(topo.node, 'iptables-nft', ['-t', 'nat', '-N', 'IP-MASQ-AGENT']);
    const result = await runAgentOnce(topo.node, [
      '--config',
      file,
      '--live',
      '--explain',
      '10.77.0.9',
    ]);
    t.equal(result.code, 0);
    t.match(result.stdout, /live: no table ip ipmasq in this namespace/);
    t.match(result.stdout, /the original agent's chain IP-MASQ-AGENT is still in table ip nat/);
    await inNetns(topo.node, 'iptables-nft', ['-t', 'nat', '-X', 'IP-MASQ-AGENT']);
    // Without CAP_NET_ADMIN nftables cannot be read: a clear error and exit 1, no stack trace.
    const unprivileged = ['setpriv', '--bounding-set', '-net_admin', '--inh-caps', '-all'];
    const denied = await runAgentOnce(
      topo.node,
      ['--config', file, '--live', '--explain', '10.77.0.9'],
      unprivileged,
    );
    t.equal(denied.code, 1);
    t.match(
      denied.stderr,
      /--live: cannot read the kernel's tables \(run as root in the node's network namespace\)/,
    );
    t.notMatch(denied.stderr, /\n\s+at /, 'no stack trace');
  });

  t.test(
    '--live judges the rules too, with either layout, and leaves a foreign table alone',
    async (t) => {
      const file = join(dir, 'rules');
      writeFileSync(file, 'nonMasqueradeCIDRs: [10.77.0.0/24]\n');
      const live = async (extra: string[]) => {
        const result = await runAgentOnce(topo.node, [
          '--config',
          file,
          ...extra,
          '--output',
          'json',
          '--live',
          '--explain',
          '10.77.0.9',
          '198.18.0.9',
        ]);
        t.equal(result.code, 0, result.stderr);
        return (JSON.parse(result.stdout) as { live: { answers: Array<Record<string, unknown>> } })
          .live.answers;
      };
      for (const layout of ['interval', 'concat']) {
        const flags = ['--set-layout', layout];
        t.equal((await runAgentOnce(topo.node, ['--config', file, ...flags, '--once'])).code, 0);
        t.match(
          await live(flags),
          [
            { masqueraded: false, drift: false, text: /in the nonmasq set/ },
            { masqueraded: true, drift: false, text: /in neither set/ },
          ],
          `${layout}: the sets answer`,
        );
        // Someone deletes the exemption rule: the set still holds 10.77.0.0/24, a packet is masqueraded.
        const listing = (
          await inNetns(topo.node, 'nft', ['-a', 'list', 'chain', 'ip', 'ipmasq', 'IP-MASQ-AGENT'])
        ).stdout;
        const handle = /@nonmasq counter name "exempt" return # handle (\d+)/.exec(listing)?.[1];
        t.ok(handle, `${layout}: the return rule is there`);
        await inNetns(topo.node, 'nft', [
          'delete',
          'rule',
          'ip',
          'ipmasq',
          'IP-MASQ-AGENT',
          'handle',
          handle ?? '0',
        ]);
        const sources = await probeRawSources(topo, ['10.77.0.9'], '253');
        t.equal(sources[0], NODE_IPV4, `${layout}: a real packet is masqueraded now`);
        t.match(
          await live(flags),
          [
            {
              masqueraded: null,
              drift: true,
              text: /DRIFT: chain IP-MASQ-AGENT differs from what the agent writes/,
            },
            { masqueraded: null, drift: true },
          ],
          `${layout}: the deleted rule is drift, not "in the nonmasq set"`,
        );
        await inNetns(topo.node, 'conntrack', ['-F']).catch(() => undefined);
      }
      // A same-named table that is not ours: no decision from it, and no promise of a repair.
      await runAgentOnce(topo.node, ['--config', file, '--cleanup']);
      await inNetns(topo.node, 'nft', [
        'add table ip ipmasq; add set ip ipmasq nonmasq { type ipv4_addr; }',
      ]);
      const foreign = await live([]);
      t.match(foreign[0], { masqueraded: null, drift: false, text: /not ours, left alone/ });
      t.notMatch(String(foreign[0]?.text), /repaired/);
      await inNetns(topo.node, 'nft', ['delete table ip ipmasq']);
    },
  );
}
