// SNAT port headroom and --flows (docs/observability.md, "What the node's NAT does"), on real
// packets: with
// --to-ports of 10 ports, long-lived UDP flows from distinct pod ports to one remote address and
// port read 0.8 at 8 flows and 1.0 at 10, and an 11th finds no port (the kernel's statistics say
// so);
// --flows groups two pod addresses' flows and filters them (test/e2e/flows-pods.test.ts has its
// pods named by a real API server).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import {
  generationOf,
  httpGet,
  listTable,
  metricValue,
  runAgentOnce,
  startAgent,
  waitFor,
} from '../../harness/agent.js';
import { inNetns, requireRoot, tempDir } from '../../harness/netns.js';
import { agentArgs, makeNode, untilGeneration, writeConfig } from '../helpers/node.js';
import {
  makeTopology,
  NODE_IPV4,
  NODE_IPV6,
  POD_IPV4,
  POD_IPV6,
  probeSources,
  REMOTE_IPV4,
  REMOTE_TARGETS_IPV6,
} from '../../harness/topology.js';

const PORT = 9413;
const SECOND_POD = '10.244.1.3';
const PORTS = '20000-20009';

if (requireRoot(t)) {
  const root = t;
  const topo = await makeTopology(root, { ipv6: true });
  await inNetns(topo.pod, 'ip', ['address', 'add', `${SECOND_POD}/24`, 'dev', 'eth0']);
  const dir = tempDir(root, 'headroom');
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n');
  const agent = startAgent(
    root,
    topo.node,
    [
      '--config',
      file,
      '--listen',
      `127.0.0.1:${PORT}`,
      '--enable-ipv6',
      '--to-ports',
      PORTS,
      '--nat-stats-interval',
      '1s',
    ],
    ['env', '-u', 'NODE_OPTIONS'],
  );
  await waitFor('the first write', async () =>
    (generationOf(await listTable(topo.node, 'ip')) ?? 0) >= 1 ? true : undefined,
  );
  const series = async (name: string) =>
    metricValue((await httpGet(topo.node, PORT, '/metrics')).body, name);
  const usage = () => series('ipmasq_snat_port_usage_ratio{family="ipv4",protocol="udp"}');
  /** New UDP flows to the remote's echo, each from a socket (a source port) of its own. */
  const flows = async (n: number, from = POD_IPV4) => {
    const seen = await probeSources(topo, Array(n).fill(REMOTE_IPV4), 'udp', {
      attempts: 1,
      from,
    });
    return seen.map((s) => s.port);
  };

  t.test('10 ports: 8 flows read 0.8, 10 read 1.0, the 11th finds no port', async (t) => {
    const first = await flows(8);
    t.ok(
      first.every((p) => p >= 20000 && p <= 20009),
      `translated into ${PORTS}: ${first.join(' ')}`,
    );
    t.equal(new Set(first).size, 8, 'eight ports');
    t.equal(await waitFor('0.8', async () => ((await usage()) === 0.8 ? 0.8 : undefined)), 0.8);
    t.equal(await series('ipmasq_snat_flows{family="ipv4",protocol="udp"}'), 8);
    await flows(2);
    t.equal(await waitFor('1.0', async () => ((await usage()) === 1 ? 1 : undefined)), 1);
    const stats = async () => {
      const text = (await inNetns(topo.node, 'conntrack', ['-S'])).stdout;
      return ['insert_failed', 'drop'].reduce(
        (sum, kind) =>
          sum +
          [...text.matchAll(new RegExp(`\\b${kind}=(\\d+)`, 'g'))].reduce(
            (s, m) => s + Number(m[1]),
            0,
          ),
        0,
      );
    };
    const before = await stats();
    await t.rejects(flows(1), /probes failed/, 'the 11th gets no answer');
    t.ok((await stats()) > before, 'conntrack counted the flow it could not translate');
    t.equal(await usage(), 1, 'still 1.0');
    t.same(
      agent.logs.filter((l) => (l.level ?? 0) >= 50),
      [],
      'no error logged',
    );
  });

  t.test('--flows groups by pod address, filters, prints JSON', async (t) => {
    // The 10 ports to the echo are taken: the entries go, the ports are free again.
    await inNetns(topo.node, 'conntrack', ['-F']);
    await flows(3, POD_IPV4);
    await flows(2, SECOND_POD);
    await probeSources(topo, [REMOTE_TARGETS_IPV6.uniqueLocalOther], 'udp', {
      attempts: 1,
      from: POD_IPV6,
    });
    const all = await runAgentOnce(topo.node, ['--flows', '--output', 'json']);
    t.equal(all.code, 0, all.stderr);
    const parsed = JSON.parse(all.stdout) as {
      ports: number;
      sources: Array<{
        source: string;
        flows: number;
        pod?: string;
        destinations: Array<Record<string, unknown>>;
      }>;
    };
    t.equal(parsed.ports, 10, 'the ports read from our rules in the kernel');
    t.same(
      parsed.sources.map((s) => [s.source, s.flows]),
      [
        [POD_IPV4, 3],
        [SECOND_POD, 2],
        [POD_IPV6, 1],
      ],
    );
    t.same(parsed.sources[0]!.destinations, [
      {
        protocol: 'udp',
        address: REMOTE_IPV4,
        port: 9999,
        flows: 3,
        translatedTo: [NODE_IPV4],
        portUsage: 0.5,
      },
    ]);
    t.same(parsed.sources[2]!.destinations[0]!.translatedTo, [NODE_IPV6]);
    const one = await runAgentOnce(topo.node, ['--flows', '--from', SECOND_POD]);
    t.equal(one.code, 0);
    t.match(one.stdout, new RegExp(`^${SECOND_POD.replaceAll('.', '\\.')}: 2 flows$`, 'm'));
    t.notMatch(one.stdout, POD_IPV4);
    const none = await runAgentOnce(topo.node, ['--flows', '--to', '203.0.113.0/24']);
    t.match(none.stdout, /no translated flows/);
    const v6 = await runAgentOnce(topo.node, ['--flows', '--to', 'fd34::/16']);
    t.match(v6.stdout, /fd00:10:244::2: 1 flow$/m);
  });

  t.test(
    '--flows reads the ports from our rules’ expressions: snat to an IPv6 address, ranges or none',
    async (t) => {
      // An address's last group is no port (the rule text's `snat to 2001:db8:5::1` read as 1
      // port).
      const egress = 'snatAddress: 192.0.2.10\nsnatAddressIPv6: "2001:db8:5::1"\n';
      for (const [toPorts, want] of [
        [[], 64_512],
        [['--to-ports', '1024-29999,32768-65535'], 61_744],
        [['--to-ports', '5000'], 1],
      ] as const) {
        const node = await makeNode(t, 'flow-ports');
        writeConfig(node, `nonMasqueradeCIDRs: [10.0.0.0/8]\n${egress}`);
        const running = startAgent(t, node.ns, [...agentArgs(node), '--enable-ipv6', ...toPorts]);
        await untilGeneration(node, 1, 15_000);
        const listed = await listTable(node.ns, 'ip6');
        t.match(listed, /snat to 2001:db8:5::1/, 'the IPv6 table translates to the address');
        const run = await runAgentOnce(node.ns, ['--flows', '--output', 'json']);
        t.equal(run.code, 0, run.stderr);
        t.equal(JSON.parse(run.stdout).ports, want, `${toPorts.join(' ') || 'no --to-ports'}`);
        running.child.kill('SIGTERM');
        await running.exited;
      }
    },
  );

  t.test('bad input: exit 2 naming it', async (t) => {
    for (const [args, message] of [
      [['--flows', '--from', 'pod-a'], /--from/],
      [['--flows', '--to', '10.0.0.1/8'], /--to: .*not aligned/],
      [['--nat-stats-interval', 'often'], /--nat-stats-interval: "often"/],
      [['--nat-stats-interval', '10ms'], /below 1s/],
    ] as const) {
      const run = await runAgentOnce(topo.node, [...args]);
      t.equal(run.code, 2, args.join(' '));
      t.match(run.stderr, message);
    }
  });
}
