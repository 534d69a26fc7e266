// Who else translates (docs/observability.md, "Other NAT on the node"): other tables' nat
// postrouting chains that may translate traffic we leave alone are reported — warning, gauge with
// their position against ours, Event — and kube-proxy's mark-guarded shapes are not; --explain
// --live names the chain and says it would translate an exempt destination, and a real packet to it
// arrives masqueraded (the note tells the truth). A finding that goes away clears its gauge;
// nothing is repeated while unchanged. The Event is read from the fake API server, which records
// what it was sent: this file is about the finding, and a real server's storing of Events is in
// test/e2e/kubernetes-real.test.ts.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import {
  httpGet,
  runAgentOnce,
  startAgent,
  waitFor,
  type RunningAgent,
} from '../../harness/agent.js';
import { startFakeApiServerInNetns } from '../../harness/fake-apiserver-remote.js';
import { inNetns, requireRoot, tempDir } from '../../harness/netns.js';
import { makeTopology, NODE_IPV4, POD_IPV4, probeSource } from '../../harness/topology.js';
import { nftTools, requireMatrix, runNftTool } from '../helpers/nft-versions.js';

const PORT = 9411;
const EXEMPT = '10.9.0.1';

const FLANNEL = `table ip flannel {
  chain postrtg {
    type nat hook postrouting priority srcnat + 10; policy accept;
    ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return
    ip saddr 10.244.0.0/16 ip daddr != 10.244.0.0/16 masquerade
  }
}
`;
const EARLY = `table ip early {
  chain post {
    type nat hook postrouting priority srcnat - 10; policy accept;
    ip saddr 10.244.0.0/16 ip daddr 203.0.113.0/24 snat to 192.0.2.1
  }
}
`;
// kube-proxy's nftables mode: only packets it marked are masqueraded (an older release's chain),
// and as 1.36 writes it (test/node/node.test.ts saw it on a real node), also the hairpin
// connections whose destination it translated itself (`ct status dnat`).
const KUBE_PROXY = `table ip kube-proxy {
  set hairpin-connections {
    type ipv4_addr . ipv4_addr . inet_proto . inet_service
  }
  chain nat-postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    jump masquerading
    jump masquerading-1-36
  }
  chain masquerading {
    meta mark & 0x00004000 == 0x00000000 return
    meta mark set meta mark ^ 0x00004000
    masquerade fully-random
  }
  chain masquerading-1-36 {
    meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random
    ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
  }
}
`;

/** The series of ipmasq_other_nat_rules, by `table|chain|position`. */
async function otherNatSeries(ns: string): Promise<Map<string, number>> {
  const { body } = await httpGet(ns, PORT, '/metrics');
  const series = new Map<string, number>();
  for (const line of body.split('\n')) {
    const m =
      /^ipmasq_other_nat_rules\{table="([^"]*)",chain="([^"]*)",position="([^"]*)"\} (\S+)$/.exec(
        line,
      );
    if (m) series.set(`${m[1]}|${m[2]}|${m[3]}`, Number(m[4]));
  }
  return series;
}

const otherNatWarnings = (agent: RunningAgent, table: string) =>
  agent.logs.filter((l) => l.level === 40 && l.table === table && 'translatingRules' in l);

if (requireRoot(t)) {
  const root = t;
  const topo = await makeTopology(root, { ipv6: false });
  const dir = tempDir(root, 'other-nat');
  const configFile = join(dir, 'ip-masq-agent');
  writeFileSync(configFile, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 2s\n');
  const nft = (script: string) => inNetns(topo.node, 'nft', ['-f', '-'], { input: script });
  const iptables = (...args: string[]) =>
    inNetns(topo.node, 'iptables-nft', ['-t', 'nat', ...args]);

  await nft(FLANNEL);
  await nft(EARLY);
  await nft(KUBE_PROXY);
  // iptables-nft: kube-proxy's iptables mode (marked only), and a pod-source masquerade.
  await iptables('-N', 'KUBE-POSTROUTING');
  await iptables('-A', 'POSTROUTING', '-j', 'KUBE-POSTROUTING');
  await iptables(
    '-A',
    'KUBE-POSTROUTING',
    '-m',
    'mark',
    '!',
    '--mark',
    '0x4000/0x4000',
    '-j',
    'RETURN',
  );
  await iptables('-A', 'KUBE-POSTROUTING', '-j', 'MARK', '--xor-mark', '0x4000');
  await iptables('-A', 'KUBE-POSTROUTING', '-j', 'MASQUERADE', '--random-fully');
  const podMasquerade = ['POSTROUTING', '-s', '10.244.0.0/16', '-j', 'MASQUERADE'];
  await iptables('-A', ...podMasquerade);

  const fake = await startFakeApiServerInNetns(root, topo.node);
  await fake.call('setNode', 'self', { podCIDRs: ['10.244.1.0/24'] });
  const agent = startAgent(
    root,
    topo.node,
    [
      '--config',
      configFile,
      '--listen',
      `127.0.0.1:${PORT}`,
      '--kubeconfig',
      fake.kubeconfig,
      '--node-name',
      'self',
    ],
    ['env', '-u', 'NODE_OPTIONS'],
  );
  await waitFor('the first write', () =>
    agent.logs.some((l) => l.generation === 1) ? true : undefined,
  );

  t.test(
    'each translating chain reported once, with its position; mark-guarded ones not',
    async (t) => {
      const series = await waitFor('the gauge', async () => {
        const s = await otherNatSeries(topo.node).catch(() => undefined);
        return s && s.size >= 3 ? s : undefined;
      });
      t.same(
        Object.fromEntries(series),
        {
          'ip flannel|postrtg|after': 1,
          'ip early|post|before': 1,
          'ip nat|POSTROUTING|same': 1,
        },
        'flannel after ours, the snat before, iptables-nft at our priority; no kube-proxy series',
      );
      const flannel = otherNatWarnings(agent, 'ip flannel');
      t.equal(flannel.length, 1, 'one warning');
      t.match(flannel[0], {
        chain: 'postrtg',
        position: 'after',
        rules: ['ip saddr 10.244.0.0/16 ip daddr != 10.244.0.0/16 masquerade'],
      });
      t.match(otherNatWarnings(agent, 'ip nat')[0], {
        rules: ['ip saddr 10.244.0.0/16 counter masquerade'],
      });
      t.same(otherNatWarnings(agent, 'ip kube-proxy'), [], 'kube-proxy (nftables) not reported');
      const event = await waitFor('the Event', async () =>
        (await fake.call('eventList')).find(
          (e) => e.reason === 'OtherNATPresent' && /flannel/.test(e.message),
        ),
      );
      t.match(event, { type: 'Warning', message: /chain postrtg of table ip flannel \(after\)/ });
    },
  );

  t.test(
    '--explain --live says the flannel chain would translate an exempt destination; a packet agrees',
    async (t) => {
      const answer = await runAgentOnce(topo.node, [
        '--config',
        configFile,
        '--explain',
        EXEMPT,
        '--live',
        '--from',
        POD_IPV4,
        '--output',
        'json',
      ]);
      t.equal(answer.code, 0, answer.stderr);
      const live = JSON.parse(answer.stdout).live.answers[0];
      t.equal(live.masqueraded, false, 'our table leaves it alone');
      const byTable = (a: { table: string }, b: { table: string }) =>
        a.table.localeCompare(b.table);
      t.same(
        live.otherNat.sort(byTable),
        [
          {
            table: 'ip flannel',
            chain: 'postrtg',
            position: 'after',
            rule: 'ip saddr 10.244.0.0/16 ip daddr != 10.244.0.0/16 masquerade',
            verdict: 'translates',
          },
          {
            table: 'ip nat',
            chain: 'POSTROUTING',
            position: 'same',
            rule: 'ip saddr 10.244.0.0/16 counter masquerade',
            verdict: 'translates',
          },
        ],
        'the snat before ours takes only 203.0.113.0/24: not noted',
      );
      const text = await runAgentOnce(topo.node, [
        '--config',
        configFile,
        '--explain',
        EXEMPT,
        '--live',
      ]);
      t.match(
        text.stdout,
        /other NAT: chain postrtg of table ip flannel \(runs after ours\) may translate it/,
      );
      t.equal(
        (await probeSource(topo, EXEMPT)).address,
        NODE_IPV4,
        'masqueraded, as the notes say',
      );
    },
  );

  t.test('a finding that goes away clears its gauge; the others are not repeated', async (t) => {
    await inNetns(topo.node, 'nft', ['delete', 'table', 'ip', 'flannel']);
    await iptables('-D', ...podMasquerade);
    const series = await waitFor('the gauges cleared', async () => {
      const s = await otherNatSeries(topo.node);
      return s.has('ip flannel|postrtg|after') || s.has('ip nat|POSTROUTING|same') ? undefined : s;
    });
    t.equal(series.get('ip early|post|before'), 1, 'the others stay');
    await waitFor('the note', () =>
      agent.logs.some((l) => l.table === 'ip flannel' && /no longer translates/.test(String(l.msg)))
        ? true
        : undefined,
    );
    t.equal(otherNatWarnings(agent, 'ip early').length, 1, 'no repeat while unchanged');
    t.equal((await probeSource(topo, EXEMPT)).address, POD_IPV4, 'the exemption holds again');
  });

  t.test('control characters escaped, a long rule bounded', async (t) => {
    const many = Array.from({ length: 60 }, (_, i) => `198.18.${2 * i}.0/24`).join(', ');
    await nft(`table ip odd {
  chain post {
    type nat hook postrouting priority srcnat + 20; policy accept;
    ip daddr 192.0.2.99 masquerade comment "bad\u0007text"
    ip daddr != { ${many} } masquerade
  }
}
`);
    const warning = await waitFor('the warning', async () => otherNatWarnings(agent, 'ip odd')[0]);
    const [odd, long] = warning.rules as string[];
    t.equal(odd, 'ip daddr 192.0.2.99 masquerade comment "bad\\u0007text"', 'escaped');
    t.notOk(String(warning.msg).includes('\u0007'), 'no raw control character in the message');
    t.ok(long && long.length < 300, `bounded (${long?.length} characters)`);
    t.match(long, /… \(\d+ characters\)$/);
    await inNetns(topo.node, 'nft', ['delete', 'table', 'ip', 'odd']);
  });

  t.test(
    'a chain this libnftables cannot read is reported as unreadable; the agent stays healthy',
    async (t) => {
      const tools = requireMatrix(t);
      const other = tools?.find((tool) => !tool.own);
      if (!other) return;
      const own = nftTools().find((tool) => tool.own)!;
      const older = (a: string, b: string) =>
        a
          .split('.')
          .map(Number)
          .reduce((d, x, i) => d || x - Number(b.split('.')[i]), 0) < 0;
      // FIELD-NOTES, "Mixed nftables versions": a `type` set by nft >= 1.1.2 crashes older ones.
      const crashes = older(own.version, '1.1.2') && !older(other.version, '1.1.2');
      await runNftTool(
        topo.node,
        other,
        ['-f', '-'],
        `table ip newer {
  set pods { type ipv4_addr; flags interval; elements = { 10.244.0.0/16 } }
  chain post {
    type nat hook postrouting priority srcnat + 5; policy accept;
    ip saddr @pods masquerade
  }
}
`,
      );
      const warning = await waitFor(
        'the warning',
        async () => otherNatWarnings(agent, 'ip newer')[0],
      );
      t.match(warning, { chain: 'post', position: 'after', translatingRules: 1 });
      if (crashes) t.match((warning.rules as string[])[0], /^\(unreadable by libnftables/);
      else
        t.same(warning.rules, ['ip saddr @pods masquerade'], `nft ${other.version}'s table read`);
      t.equal((await otherNatSeries(topo.node)).get('ip newer|post|after'), 1);
      t.equal((await httpGet(topo.node, PORT, '/healthz')).status, 200, 'healthy');
      t.equal((await httpGet(topo.node, PORT, '/readyz')).status, 200, 'ready');
      t.same(
        agent.logs.filter((l) => (l.level ?? 0) >= 50),
        [],
        'no error logged',
      );
      // Deleted by the nft that wrote it: an older one may not be able to read it even to delete
      // it.
      await runNftTool(topo.node, other, ['delete', 'table', 'ip', 'newer']);
    },
  );

  t.test('a loaded x_tables nat table is reported without parsing it', async (t) => {
    await inNetns(topo.node, 'iptables-legacy', ['-t', 'nat', '-S']);
    const series = await waitFor('the gauge', async () => {
      const s = await otherNatSeries(topo.node);
      return s.has('iptables-legacy nat||unknown') ? s : undefined;
    });
    t.equal(series.get('iptables-legacy nat||unknown'), 1);
  });
}
