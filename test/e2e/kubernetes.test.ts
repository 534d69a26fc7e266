// The opt-in Kubernetes API against the fake API server (harness/fake-apiserver.ts) in the agent's
// namespace, for what a real server cannot be made to do (test/e2e/kubernetes-real.test.ts has the
// rest, against a real kube-apiserver and etcd):
// - nothing written before the first list: the fake refuses the list and then allows it at once,
//   with no RBAC cache between (the real server's refusals are in the real file's RBAC test);
// - the API server away while its Nodes change: a real one cannot change while it is down;
// - bad input from the API: objects no real server would store (hostile names, CIDRs, sizes).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import {
  generationOf,
  httpGet,
  listTable,
  metricValue,
  runAgentOnce,
  waitFor,
  type RunningAgent,
} from '../../harness/agent.js';
import { inNetns, requireRoot, type TapTest } from '../../harness/netns.js';
import {
  makeTopology,
  NODE_IPV4,
  POD_IPV4,
  REMOTE_TARGETS_IPV4 as V4,
  type Topology,
} from '../../harness/topology.js';
import { nonMasqSet, seenFromPod } from '../helpers/nonmasq.js';
import { agentOnApi } from '../helpers/node.js';
import { startFakeApiServerInNetns, type RemoteFake } from '../../harness/fake-apiserver-remote.js';

// Two other Nodes' pod CIDRs, routed to the remote in this topology; neither is exempt by default.
const NODE_A_PODS = '198.19.0.0/24';
const NODE_B_PODS = '198.18.255.0/24';
const TO_A = V4.outsideDefaultsA; // 198.19.0.4
const SELF = 'node-self';

const TIMINGS = JSON.stringify({ backoffBaseMs: 100, backoffMaxMs: 1_000, idleMs: 3_000 });

interface Setup {
  topo: Topology;
  fake: RemoteFake;
  agent: RunningAgent;
  dir: string;
  put(name: string, text: string): void;
  generation(): Promise<number>;
}

async function setup(
  t: TapTest,
  files: Record<string, string>,
  before?: (fake: RemoteFake, ns: string) => Promise<void>,
): Promise<Setup> {
  const topo = await makeTopology(t, { ipv6: false });
  const fake = await startFakeApiServerInNetns(t, topo.node, { bookmarkMs: 500 });
  await fake.call('setNode', SELF, { podCIDRs: ['10.244.1.0/24'], labels: { pool: 'general' } });
  await fake.call('setNode', 'node-a', { podCIDRs: [NODE_A_PODS] });
  await fake.call('setNode', 'node-b', { podCIDRs: [NODE_B_PODS] });
  if (before) await before(fake, topo.node);
  const { agent, dir, put } = agentOnApi(t, topo.node, files, {
    kubeconfig: fake.kubeconfig,
    nodeName: SELF,
    timings: TIMINGS,
  });
  const generation = async () => generationOf(await listTable(topo.node, 'ip')) ?? 0;
  return { topo, fake, agent, dir, put, generation };
}

/** Until `cidr` is (or is not) in the kernel's nonmasq set; bounded. */
function untilInSet(s: Setup, cidr: string, present: boolean, what: string): Promise<true> {
  return waitFor(
    what,
    async () => ((await nonMasqSet(s.topo.node)).includes(cidr) === present ? true : undefined),
    20_000,
    10,
  );
}

/** The agent's first write: its table in the kernel. */
function untilFirstWrite(s: Setup): Promise<true> {
  return waitFor(
    'first write',
    async () => ((await s.generation()) >= 1 ? true : undefined),
    15_000,
  );
}

async function readyz(ns: string): Promise<{ code: number; body: string }> {
  const reply = await httpGet(ns, 9410, '/readyz');
  return { code: reply.status, body: reply.body };
}

async function metric(ns: string, series: string): Promise<number | undefined> {
  return metricValue((await httpGet(ns, 9410, '/metrics')).body, series);
}

const BASE =
  'nonMasqueradeCIDRs: [10.0.0.0/8]\nnonMasqueradeNodePodCIDRs: true\nresyncInterval: 1s\n';

if (requireRoot(t)) {
  t.test('nothing is written before the first list; /readyz says why', async (t) => {
    // A table from an earlier run is in the kernel, and the API forbids the list.
    let earlier: string | null = null;
    const s = await setup(t, { 'ip-masq-agent': BASE }, async (fake, ns) => {
      await fake.call('setForbidden', true);
      const dir = mkdtempSync(join(tmpdir(), 'ipmasq-kube-earlier-'));
      t.teardown(() => rmSync(dir, { recursive: true, force: true }));
      writeFileSync(join(dir, 'ip-masq-agent'), 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
      const once = await runAgentOnce(ns, ['--config', join(dir, 'ip-masq-agent'), '--once']);
      if (once.code !== 0) throw new Error(`--once failed: ${once.stderr}`);
      earlier = await listTable(ns, 'ip');
    });
    t.ok(earlier, 'a table from an earlier run');
    await waitFor(
      'not ready, waiting',
      async () => {
        const r = await readyz(s.topo.node).catch(() => undefined);
        return r && r.code === 503 && r.body.includes('waiting for the first list') ? r : undefined;
      },
      15_000,
    );
    t.equal(
      await listTable(s.topo.node, 'ip'),
      earlier,
      'the table already there stays as it was while the Nodes are not listed',
    );
    const errors = await waitFor('list errors counted', async () => {
      const n = await metric(s.topo.node, 'ipmasq_kubernetes_errors_total{op="list"}');
      return n !== undefined && n >= 1 ? n : undefined;
    });
    t.ok(errors >= 1, 'forbidden lists counted');
    t.equal(await metric(s.topo.node, 'ipmasq_kubernetes_up'), 0);
    const warned = s.agent.logs.filter((l) =>
      String(l.msg).includes("the Nodes' list failed: 403"),
    );
    t.equal(warned.length, 1, 'the cause logged once however often it is retried');
    await s.fake.call('setForbidden', false);
    await untilInSet(s, NODE_A_PODS, true, 'the Nodes written once listed');
    await waitFor('ready', async () =>
      (await readyz(s.topo.node)).code === 200 ? true : undefined,
    );
  });

  t.test(
    'the API server away: the kernel keeps its ruleset, the agent stays healthy, then catches up',
    async (t) => {
      const s = await setup(t, { 'ip-masq-agent': BASE });
      await untilFirstWrite(s);
      const before = await listTable(s.topo.node, 'ip');
      await s.fake.call('down');
      await s.fake.call('deleteNode', 'node-a'); // the API changes while the agent cannot see it
      await waitFor('down seen', async () =>
        (await metric(s.topo.node, 'ipmasq_kubernetes_up')) === 0 ? true : undefined,
      );
      // Several resyncs (1 s) and reconnect attempts while the API is away.
      const syncs = (await metric(s.topo.node, 'ipmasq_syncs_total{result="unchanged"}')) ?? 0;
      await waitFor(
        'three resyncs',
        async () =>
          ((await metric(s.topo.node, 'ipmasq_syncs_total{result="unchanged"}')) ?? 0) >= syncs + 3
            ? true
            : undefined,
        10_000,
      );
      t.equal(
        await listTable(s.topo.node, 'ip'),
        before,
        'the kernel unchanged while the API is away',
      );
      t.equal((await httpGet(s.topo.node, 9410, '/healthz')).status, 200, 'healthy');
      t.equal((await readyz(s.topo.node)).code, 200, 'ready: the last known data is applied');
      t.equal(
        await seenFromPod(s.topo, TO_A),
        POD_IPV4,
        'node-a still exempt from what was last known',
      );
      // Drift is still repaired while the API is away.
      await inNetns(s.topo.node, 'nft', [
        'delete',
        'element',
        'ip',
        'ipmasq',
        'nonmasq',
        `{ ${NODE_A_PODS} }`,
      ]);
      await untilInSet(s, NODE_A_PODS, true, 'repaired');
      t.pass('drift repaired without the API');
      await s.fake.call('up');
      await untilInSet(s, NODE_A_PODS, false, 'caught up');
      t.equal(
        await seenFromPod(s.topo, TO_A),
        NODE_IPV4,
        'the deletion made while away is applied',
      );
      // The Node's own watch comes back on its own backoff, independently of the Nodes' one.
      await waitFor('up again', async () =>
        (await metric(s.topo.node, 'ipmasq_kubernetes_up')) === 1 ? true : undefined,
      );
      t.pass('ipmasq_kubernetes_up back to 1');
      t.equal(s.agent.child.exitCode, null, 'still running');
    },
  );

  t.test('bad input from the API never reaches nftables and ends nothing', async (t) => {
    const s = await setup(t, { 'ip-masq-agent': BASE });
    await untilFirstWrite(s);
    await s.fake.call('setNode', 'bad-text', { podCIDRs: ['10.96.0.0/12; flush ruleset'] });
    await s.fake.call('setNode', 'host-bits', { podCIDRs: ['198.51.100.7/24'] });
    await s.fake.call('setNode', 'ipv6-only', { podCIDRs: ['fd00:99::/64'] });
    await s.fake.call('setNode', 'not-a-string', { podCIDRs: [{ cidr: '203.0.113.0/24' }] });
    await s.fake.call('setNode', 'huge', {
      podCIDRs: ['192.0.2.128/25'],
      padBytes: 10 * 1024 * 1024,
    });
    await s.fake.call('setNode', SELF, {
      podCIDRs: ['10.244.1.0/24'],
      labels: { pool: 'a\nb', 'x/y': '"; flush ruleset' },
    });
    await untilInSet(s, '192.0.2.128/25', true, 'the huge Node applied');
    const set = await nonMasqSet(s.topo.node);
    t.same(
      set.sort(),
      ['10.0.0.0/8', '169.254.0.0/16', '192.0.2.128/25', NODE_B_PODS, NODE_A_PODS].sort(),
      'only well-formed IPv4 pod CIDRs in the kernel',
    );
    const ruleset = (await inNetns(s.topo.node, 'nft', ['list', 'ruleset'])).stdout;
    t.notMatch(ruleset, /flush|198\.51\.100|fd00:99/, 'no text from the API in the ruleset');
    const warnings = s.agent.logs.filter((l) => String(l.msg).includes("'s podCIDRs: left out"));
    t.same(
      warnings.map((l) => String(l.msg).split("'s")[0]).sort(),
      ['Node bad-text', 'Node host-bits', 'Node not-a-string'],
      'one warning per bad Node, naming it (IPv6 without --enable-ipv6 is left out quietly)',
    );
    t.equal(s.agent.child.exitCode, null, 'still running');
    t.equal((await httpGet(s.topo.node, 9410, '/healthz')).status, 200);
  });
}
