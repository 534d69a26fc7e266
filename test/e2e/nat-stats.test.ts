// What the node's NAT does (docs/observability.md, "What the node's NAT does"): the kernel counts
// each new flow by the decision that took it — N flows to a masqueraded destination, M to an exempt
// one, K from a source the egress policy skips move ipmasq_flows_total by exactly N, M and K, per
// family — and the counts never go back: not across a write that changes the decision chain's
// rules, a repair that writes the table whole, a restart, or `nft reset counters`. Another tool's
// counter in our table is drift, repaired, and never a series. The conntrack series agree with
// conntrack(8)'s own view.
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import {
  generationOf,
  httpGet,
  listTable,
  metricValue,
  startAgent,
  waitFor,
  type RunningAgent,
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
  REMOTE_TARGETS_IPV4,
  REMOTE_TARGETS_IPV6,
} from '../../harness/topology.js';

const PORT = 9412;
// A second source on the pod's side that sourceCIDRs does not list: its flows are skipped.
const CLIENT = { ipv4: '10.250.1.2', ipv6: 'fd00:250::2' };
// Each probe binds its source: IPv6 would pick the client's address for the pod's flows otherwise.
const POD = { ipv4: POD_IPV4, ipv6: POD_IPV6 };
const TARGETS = {
  ipv4: { translated: REMOTE_TARGETS_IPV4.testNet2, exempt: REMOTE_TARGETS_IPV4.private10 },
  ipv6: {
    translated: REMOTE_TARGETS_IPV6.uniqueLocalOther,
    exempt: REMOTE_TARGETS_IPV6.uniqueLocal,
  },
};
const CONFIG =
  'nonMasqueradeCIDRs: [10.0.0.0/8, "fd12::/16"]\n' +
  'sourceCIDRs: [10.244.0.0/16, "fd00:10:244::/48"]\n' +
  'resyncInterval: 1h\n';
const decisions = ['translated', 'exempt', 'skipped'] as const;
type Family = 'ipv4' | 'ipv6';
type Counts = Record<`${Family} ${(typeof decisions)[number]}`, number>;

if (requireRoot(t)) {
  const root = t;
  const topo = await makeTopology(root, { ipv6: true });
  const batch = (ns: string, lines: string[]) =>
    inNetns(ns, 'ip', ['-batch', '-'], { input: lines.join('\n') + '\n' });
  await Promise.all([
    batch(topo.pod, [
      `address add ${CLIENT.ipv4}/24 dev eth0`,
      `address add ${CLIENT.ipv6}/64 dev eth0 nodad`,
    ]),
    batch(topo.node, [
      'address add 10.250.1.1/24 dev pod0',
      'address add fd00:250::1/64 dev pod0 nodad',
    ]),
    batch(topo.remote, [
      `route add 10.250.0.0/16 via ${NODE_IPV4}`,
      `route add fd00:250::/48 via ${NODE_IPV6}`,
    ]),
  ]);
  const dir = tempDir(root, 'nat-stats');
  const file = join(dir, 'ip-masq-agent');
  const put = (text: string) => {
    writeFileSync(`${file}.tmp`, text);
    renameSync(`${file}.tmp`, file);
  };
  put(CONFIG);
  const start = (): RunningAgent =>
    startAgent(
      root,
      topo.node,
      ['--config', file, '--listen', `127.0.0.1:${PORT}`, '--enable-ipv6'],
      ['env', '-u', 'NODE_OPTIONS'],
    );
  const generation = async () => generationOf(await listTable(topo.node, 'ip')) ?? 0;
  let agent = start();
  await waitFor('the first write', async () => ((await generation()) >= 1 ? true : undefined));

  const metrics = () =>
    waitFor('/metrics', () =>
      httpGet(topo.node, PORT, '/metrics').then(
        (r) => (r.status === 200 ? r.body : undefined),
        () => undefined,
      ),
    );
  async function counts(): Promise<Counts> {
    const body = await metrics();
    const out = {} as Counts;
    for (const family of ['ipv4', 'ipv6'] as const)
      for (const decision of decisions) {
        const value = metricValue(
          body,
          `ipmasq_flows_total{family="${family}",decision="${decision}",policy=""}`,
        );
        if (value === undefined) throw new Error(`no ipmasq_flows_total for ${family} ${decision}`);
        out[`${family} ${decision}`] = value;
      }
    return out;
  }
  /**
   * New flows, each from a socket of its own: n per decision and family. The node's conntrack
   * table is emptied first: a probe whose source port an earlier call's probe had (the kernel may
   * give it again once that socket closed) would find that probe's entry, and make no new flow.
   */
  async function flows(n: Record<(typeof decisions)[number], number>): Promise<void> {
    await inNetns(topo.node, 'conntrack', ['-F']);
    for (const family of ['ipv4', 'ipv6'] as const) {
      const { translated, exempt } = TARGETS[family];
      const once = { attempts: 1, timeoutMs: 3_000, from: POD[family] };
      await probeSources(topo, Array(n.translated).fill(translated), 'udp', once);
      await probeSources(topo, Array(n.exempt).fill(exempt), 'udp', once);
      await probeSources(topo, Array(n.skipped).fill(translated), 'udp', {
        ...once,
        from: CLIENT[family],
      });
    }
  }
  /**
   * The counts once they moved by `n` from `before` (the series is read at most once a second);
   * the last counts when they do not within 10 s.
   */
  async function countsAfter(before: Counts, n: Record<(typeof decisions)[number], number>) {
    const want = JSON.stringify(exactly(n));
    let last = before;
    await waitFor(
      'the counts',
      async () => {
        last = await counts();
        return JSON.stringify(delta(last, before)) === want ? true : undefined;
      },
      10_000,
    ).catch(() => undefined);
    return last;
  }
  const delta = (after: Counts, before: Counts) =>
    Object.fromEntries(
      Object.keys(after).map((k) => [k, after[k as keyof Counts] - before[k as keyof Counts]]),
    );
  const exactly = (n: Record<(typeof decisions)[number], number>) =>
    Object.fromEntries(
      (['ipv4', 'ipv6'] as const).flatMap((family) =>
        decisions.map((decision) => [`${family} ${decision}`, n[decision]]),
      ),
    );

  t.test('N, M and K new flows move the counters by exactly N, M and K, per family', async (t) => {
    const before = await counts();
    const n = { translated: 5, exempt: 3, skipped: 2 };
    await flows(n);
    t.same(delta(await countsAfter(before, n), before), exactly(n));
  });

  t.test('not back across a write that changes the decision chain’s rules', async (t) => {
    const before = await counts();
    const was = await generation();
    put(CONFIG + 'egressInterfaces: [eth0]\n');
    await waitFor('the write', async () => ((await generation()) > was ? true : undefined));
    const after = await counts();
    t.same(after, before, 'the same counts: kept by the in-place write');
    const n = { translated: 2, exempt: 1, skipped: 1 };
    await flows(n);
    t.same(delta(await countsAfter(after, n), after), exactly(n));
  });

  t.test('not back across a repair that writes the table whole', async (t) => {
    const before = await counts();
    const was = await generation();
    // A chain of someone else's in our table: no longer our shape, so the repair replaces it whole.
    await inNetns(topo.node, 'nft', ['add', 'chain', 'ip', 'ipmasq', 'stray']);
    agent.child.kill('SIGHUP');
    await waitFor('the repair', async () => ((await generation()) > was ? true : undefined));
    t.notMatch((await listTable(topo.node, 'ip')) ?? '', /chain stray/, 'replaced');
    t.same(await counts(), before, 'the counts given back to the new table');
  });

  t.test(
    'a counter of someone else’s in our table is no series, and is repaired away',
    async (t) => {
      const before = await counts();
      const was = await generation();
      const drifts = async () =>
        metricValue(await metrics(), 'ipmasq_drift_repairs_total') ?? Number.NaN;
      const repairs = await drifts();
      await inNetns(topo.node, 'nft', [
        'add',
        'counter',
        'ip',
        'ipmasq',
        'bogus',
        '{ packets 123456789 bytes 0 }',
      ]);
      // Heard at once (the commit names our table): read back, drift, written whole.
      await waitFor('the repair', async () => ((await generation()) > was ? true : undefined));
      t.notMatch((await listTable(topo.node, 'ip')) ?? '', /counter bogus/, 'gone');
      t.equal(await drifts(), repairs + 1, 'counted as drift');
      const body = await metrics();
      t.notMatch(body, /decision="bogus"/, 'never a series');
      t.notMatch(body, /123456789/);
      t.same(await counts(), before, 'our counts given back');
    },
  );

  t.test('a restart continues from what the kernel holds', async (t) => {
    const before = await counts();
    agent.child.kill('SIGTERM');
    await agent.exited;
    agent = start();
    const after = await waitFor('the restarted agent', () => counts().catch(() => undefined));
    t.same(after, before, 'nothing lost');
    const n = { translated: 1, exempt: 1, skipped: 1 };
    await flows(n);
    t.same(delta(await countsAfter(after, n), after), exactly(n));
  });

  t.test('a reset of the kernel’s counters never takes a series back', async (t) => {
    const before = await counts();
    t.ok(before['ipv4 translated'] > 0, 'something counted to lose');
    await inNetns(topo.node, 'nft', ['reset', 'counters', 'table', 'ip', 'ipmasq']);
    // Read after the reset (the series is read at most once a second): not below what it was.
    const listed = await waitFor('a reading after the reset', async () => {
      const out = (await inNetns(topo.node, 'nft', ['list', 'counter', 'ip', 'ipmasq', 'exempt']))
        .stdout;
      return /packets 0 /.test(out) ? out : undefined;
    });
    t.match(listed, /packets 0 /, 'the kernel counts from 0 again');
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const after = await counts();
    t.same(after, before, 'each series where it was');
    const n = { translated: 2, exempt: 1, skipped: 1 };
    await flows(n);
    t.same(delta(await countsAfter(after, n), after), exactly(n), 'and counts on from there');
  });

  t.test('conntrack series agree with conntrack -C and -S in the namespace', async (t) => {
    const conntrack = async (...args: string[]) =>
      (await inNetns(topo.node, 'conntrack', args)).stdout + '';
    const countNow = async () => Number((await conntrack('-C')).trim());
    await flows({ translated: 3, exempt: 0, skipped: 0 });
    // The series is read at most once a second: scraped until a reading falls between two counts
    // made around the scrape (the scrape's own connection, over lo, is an entry too).
    let seen: { entries: number; low: number; high: number; body: string } | undefined;
    await waitFor('a reading between two counts', async () => {
      const low = await countNow();
      const body = await metrics();
      const high = await countNow();
      const entries = metricValue(body, 'ipmasq_conntrack_entries') ?? -1;
      seen = { entries, low, high, body };
      return entries >= Math.min(low, high) - 1 && entries <= Math.max(low, high) + 1
        ? true
        : undefined;
    }).catch(() => undefined);
    const { entries, low, high, body } = seen!;
    t.ok(
      entries >= Math.min(low, high) - 1 && entries <= Math.max(low, high) + 1,
      `${entries} within [${low}, ${high}] ± 1`,
    );
    t.ok(entries >= 6, 'the probes’ flows are in it');
    t.equal(
      metricValue(body, 'ipmasq_conntrack_max'),
      Number(
        (await inNetns(topo.node, 'cat', ['/proc/sys/net/netfilter/nf_conntrack_max'])).stdout,
      ),
    );
    const stats = await conntrack('-S');
    const sum = (kind: string) =>
      [...stats.matchAll(new RegExp(`\\b${kind}=(\\d+)`, 'g'))].reduce(
        (s, m) => s + Number(m[1]),
        0,
      );
    for (const kind of ['insert_failed', 'drop', 'early_drop', 'clash_resolve'])
      t.equal(
        metricValue(body, `ipmasq_conntrack_events_total{kind="${kind}"}`),
        sum(kind),
        `${kind} summed over the CPUs`,
      );
  });

  t.test('a nonsensical nf_conntrack_max: no series, one warning', async (t) => {
    // The kernel refuses such a value; a file bound over /proc's, in the agent's own mount
    // namespace, shows the agent one.
    for (const value of ['abc', '-5', '99999999999999999999']) {
      const fake = join(dir, 'nf_conntrack_max');
      writeFileSync(fake, `${value}\n`);
      const node = await makeNode(t, 'ct-max');
      writeConfig(node, 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
      const bound = [
        'unshare',
        '-m',
        '--propagation',
        'private',
        'sh',
        '-c',
        'mount --bind "$0" /proc/sys/net/netfilter/nf_conntrack_max && exec "$@"',
        fake,
      ];
      const running = startAgent(t, node.ns, agentArgs(node), bound);
      await untilGeneration(node, 1, 15_000);
      const body = await waitFor('/metrics', () =>
        httpGet(node.ns, node.port, '/metrics').then(
          (r) => (r.status === 200 ? r.body : undefined),
          () => undefined,
        ),
      );
      t.equal(metricValue(body, 'ipmasq_conntrack_max'), undefined, `${value}: no series`);
      t.type(metricValue(body, 'ipmasq_conntrack_entries'), 'number', 'entries still read');
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      await httpGet(node.ns, node.port, '/metrics');
      const warned = running.logs.filter(
        (l) => l.level === 40 && /nf_conntrack_max/.test(String(l.problem)),
      );
      t.equal(warned.length, 1, 'one warning over two scrapes');
      running.child.kill('SIGTERM');
      await running.exited;
    }
  });
}
