// Pod policies (docs/egress-policy.md, "Pod policies") against a real kube-apiserver and etcd, on
// real packets: Pod and Namespace objects made in the server (bound to this Node, their addresses
// set through the status subresource: no kubelet needed), the agent holding the shipped RBAC's
// token. Each "pod" is an address of the pod namespace, so one namespace sends as many pods. A
// selected pod's flows arrive from its policy's snatAddress, an unselected one's from the node, a
// namespace opted out untranslated, a hostNetwork pod is never selected; a label change moves a
// running UDP stream; a deleted pod's address reused by a pod of another policy; two policies on
// one pod: the first decides, said once and counted; the API server stopped: nothing changes, and
// once it is back the changes made meanwhile apply; an invalid selector is refused, the last good
// config kept.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
import {
  agentKubeconfig,
  createPod,
  startControlPlane,
  type ControlPlane,
} from '../../harness/control-plane.js';
import { inNetns, requireRoot, tempDir } from '../../harness/netns.js';
import { agentOnApi } from '../helpers/node.js';
import {
  makeTopology,
  NODE_IPV4,
  POD_IPV4,
  probeSource,
  REMOTE_TARGETS_IPV4 as V4,
  startStream,
  type Topology,
} from '../../harness/topology.js';

const SELF = 'node-self';
const SNAT = '192.0.2.10';
const TO = V4.outsideDefaultsA; // 198.19.0.4: translated by the node-wide config
/** Addresses of the pod namespace, one per pod of the tests. */
const DB = '10.244.1.3';
const WEB = '10.244.1.4';
const LAB = '10.244.1.5';
const SPARE = '10.244.1.6';

const TIMINGS = JSON.stringify({ backoffBaseMs: 100, backoffMaxMs: 1_000, idleMs: 10_000 });
const FILES = {
  'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 60s\n',
  'ip-masq-db': `podSelector: {matchLabels: {app: db}}\nsnatAddress: ${SNAT}\n`,
  'ip-masq-untranslated':
    'namespaceSelector: {matchLabels: {egress: untranslated}}\nnonMasqueradeCIDRs: [0.0.0.0/0]\n',
};

// On a machine that has not built the control plane yet, its first start builds it (minutes).
t.setTimeout(1_500_000);

interface Setup {
  topo: Topology;
  plane: ControlPlane;
  agent: RunningAgent;
  put(name: string, text: string): void;
  dir: string;
}

/** The source the remote sees for a new UDP flow from one of the pod namespace's addresses. */
async function seen(s: Setup, from: string): Promise<string> {
  return (await probeSource(s.topo, TO, 'udp', { from })).address;
}

/** The verdict map's elements as the kernel holds them: address -> policy chain. */
async function podMap(s: Setup): Promise<Map<string, string>> {
  const listing = (await listTable(s.topo.node, 'ip')) ?? '';
  const found = new Map<string, string>();
  const block = /map pod-policies \{[^}]*?elements = \{([^}]*)\}/.exec(listing)?.[1] ?? '';
  for (const m of block.matchAll(/([0-9.]+) : goto (\S+?)(?:,|\s|$)/g)) found.set(m[1]!, m[2]!);
  return found;
}

function untilMapped(s: Setup, address: string, chain: string | undefined, what: string) {
  return waitFor(
    what,
    async () => ((await podMap(s)).get(address) === chain ? true : undefined),
    30_000,
    20,
  );
}

async function metric(s: Setup, series: string): Promise<number | undefined> {
  return metricValue((await httpGet(s.topo.node, 9410, '/metrics')).body, series);
}

async function label(s: Setup, namespace: string, kind: string, name: string, pair: string) {
  const where = kind === 'namespace' ? [kind, name] : [kind, name, '-n', namespace];
  await s.plane.kubectl(['label', ...where, pair, '--overwrite']);
}

const AGENT_PORT = 7443;

/**
 * Whether the agent's port leads to the API server: a DNAT in the node namespace's output, or,
 * taken away, nothing listening there (a refused connection, as from a stopped server), the
 * connections already open cut too (their conntrack entries deleted: their next packet is refused).
 */
async function apiReachable(topo: Topology, reachable: boolean): Promise<void> {
  if (reachable) {
    await inNetns(topo.node, 'nft', ['-f', '-'], {
      input:
        'table ip apiproxy {\n' +
        '  chain out {\n' +
        '    type nat hook output priority -100; policy accept;\n' +
        `    ip daddr 127.0.0.1 tcp dport ${AGENT_PORT} dnat to 127.0.0.1:6443\n` +
        '  }\n' +
        '}\n',
    });
    return;
  }
  await inNetns(topo.node, 'nft', ['delete', 'table', 'ip', 'apiproxy']);
  await inNetns(topo.node, 'conntrack', ['-D', '-p', 'tcp', '--dport', String(AGENT_PORT)]).catch(
    () => undefined, // none open: conntrack exits 1
  );
}

if (requireRoot(t)) {
  t.test('pod policies against a real kube-apiserver', async (t) => {
    const topo = await makeTopology(t, { ipv6: false });
    await inNetns(topo.pod, 'ip', ['-batch', '-'], {
      input: [DB, WEB, LAB, SPARE].map((a) => `address add ${a}/24 dev eth0\n`).join(''),
    });
    await inNetns(topo.node, 'ip', ['address', 'add', `${SNAT}/24`, 'dev', 'eth0']);
    const plane = await startControlPlane(t, topo.node);
    await plane.kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name: SELF } }),
    );
    // The agent reaches the API server through a port of its own (7443, DNAT to 6443), so that the
    // server can be taken from it alone while kubectl goes on changing things on 6443.
    const direct = await agentKubeconfig(t, plane);
    const kubeconfig = join(tempDir(t, 'pod-policy-kubeconfig'), 'kubeconfig');
    writeFileSync(kubeconfig, readFileSync(direct, 'utf8').replace(':6443', `:${AGENT_PORT}`));
    await apiReachable(topo, true);
    await plane.kubectl(['create', 'namespace', 'lab']);
    await label({ plane } as Setup, '', 'namespace', 'lab', 'egress=untranslated');
    await createPod(plane, 'shop', 'db', SELF, [DB], { labels: { app: 'db' } });
    await createPod(plane, 'shop', 'web', SELF, [WEB], { labels: { app: 'web' } });
    await createPod(plane, 'lab', 'notebook', SELF, [LAB], { labels: { app: 'notebook' } });
    // A pod on the host's network: its address is the node's, never a pod policy's.
    await createPod(plane, 'shop', 'host-agent', SELF, [POD_IPV4], {
      labels: { app: 'db' },
      hostNetwork: true,
    });
    // Another node's pod with the same labels: never this node's business.
    await createPod(plane, 'shop', 'db-elsewhere', 'node-other', [SPARE], {
      labels: { app: 'db' },
    });

    const { agent, dir, put } = agentOnApi(t, topo.node, FILES, {
      kubeconfig,
      nodeName: SELF,
      timings: TIMINGS,
    });
    const s: Setup = { topo, plane, agent, put, dir };
    await untilMapped(s, DB, 'pod-policy-0', 'the db pod in its policy');
    await untilMapped(s, LAB, 'pod-policy-1', "the lab namespace's pod in its policy");

    /** --explain TO from a source (--from, --pod, --live), as this node's agent would decide. */
    const explainFrom = (source: string[]) =>
      runAgentOnce(topo.node, [
        '--explain',
        TO,
        ...source,
        '--config',
        dir,
        '--kubeconfig',
        kubeconfig,
        '--node-name',
        SELF,
      ]);

    t.test('selected, unselected, opted out, on the host network, on another node', async (t) => {
      t.equal(await seen(s, DB), SNAT, "app=db: from its policy's snatAddress");
      t.equal(await seen(s, WEB), NODE_IPV4, 'app=web: no policy selects it: the node');
      t.equal(await seen(s, LAB), LAB, 'namespace lab (egress=untranslated): untranslated');
      t.equal(await seen(s, POD_IPV4), NODE_IPV4, 'the hostNetwork pod (app=db) is not selected');
      t.equal(await seen(s, SPARE), NODE_IPV4, "another node's db pod is not this node's");
      const map = await podMap(s);
      t.same([...map.keys()].sort(), [DB, LAB], 'the verdict map holds exactly the selected pods');
      const listing = (await listTable(topo.node, 'ip')) ?? '';
      t.match(listing, /chain pod-policy-0 \{\s+comment "ip-masq-db"/, 'commented with its file');
      t.match(listing, /chain pod-policy-1 \{\s+comment "ip-masq-untranslated"/);
      t.equal(await metric(s, 'ipmasq_pod_policy_pods{policy="ip-masq-db"}'), 1);
      t.equal(await metric(s, 'ipmasq_pod_policy_pods{policy="ip-masq-untranslated"}'), 1);
      t.equal(await metric(s, 'ipmasq_pod_policy_overlaps'), 0);
      const translated = await metric(
        s,
        'ipmasq_flows_total{family="ipv4",decision="translated",policy="ip-masq-db"}',
      );
      t.ok((translated ?? 0) >= 1, `the db policy's translations counted (${translated})`);
      const exempt = await metric(
        s,
        'ipmasq_flows_total{family="ipv4",decision="exempt",policy="ip-masq-untranslated"}',
      );
      t.ok((exempt ?? 0) >= 1, `the untranslated policy's exemptions counted (${exempt})`);

      // --explain --live: the policy from the kernel's verdict map, the pod named by the API.
      const explained = (from: string) => explainFrom(['--from', from, '--live']);
      const db = await explained(DB);
      t.equal(db.code, 0, db.stderr);
      t.match(
        db.stdout,
        /masqueraded: no entry exempts it\n[^]*translated to 192\.0\.2\.10 \(snatAddress\)[^]*live: generation \d+ in the kernel masquerades it \(in neither set\)/,
      );
      t.match(
        db.stdout,
        /decided by pod policy .*ip-masq-db \(podSelector app=db\), as the kernel holds it/,
      );
      // --pod: the source and the labels from the API server (no kernel read).
      const byPod = (pod: string) => explainFrom(['--pod', pod]);
      const dbPod = await byPod('shop/db');
      t.equal(dbPod.code, 0, dbPod.stderr);
      t.match(dbPod.stdout, /decided by pod policy .*ip-masq-db \(podSelector app=db\)\n/);
      const labPod = await byPod('lab/notebook');
      t.match(
        labPod.stdout,
        /not masqueraded[^]*decided by pod policy .*ip-masq-untranslated \(namespaceSelector egress=untranslated\)/,
      );
      const missing = await byPod('shop/nothing-here');
      t.equal(missing.code, 1);
      t.match(missing.stderr, /--pod: cannot read pod shop\/nothing-here: no such pod/);
      const web = await explained(WEB);
      t.match(web.stdout, /no pod policy decides for pod shop\/web in the kernel/);
      // To a destination the untranslated policy exempts and the node-wide config does not: the
      // live answer reads the policy's own set.
      const lab = await explained(LAB);
      t.match(
        lab.stdout,
        /not masqueraded[^]*decided by pod policy .*ip-masq-untranslated[^]*live: generation \d+ in the kernel does not masquerade it \(in the pod-policy-1-nonmasq set\)/,
      );
    });

    t.test('a label change moves a running UDP stream to its new decision', async (t) => {
      const stream = startStream(t, topo, 'udp', TO, 0.05, 60, undefined, { bind: `${WEB}:40001` });
      await stream.until(0, (a) => a.address === NODE_IPV4, 10_000);
      const changed = Date.now();
      await label(s, 'shop', 'pod', 'web', 'app=db');
      const moved = await stream.until(changed, (a) => a.address === SNAT, 30_000);
      t.comment(`the stream arrived from ${SNAT} ${moved.at - changed} ms after kubectl label`);
      t.pass("the same UDP socket now arrives from the policy's address");
      await label(s, 'shop', 'pod', 'web', 'app=web');
      const back = Date.now();
      await stream.until(back, (a) => a.address === NODE_IPV4, 30_000);
      t.pass('and back to the node once the label is gone');
      await untilMapped(s, WEB, undefined, 'the web pod out of the map');
    });

    t.test("a deleted pod's address reused by a pod of another policy", async (t) => {
      await plane.kubectl(['delete', 'pod', 'db', '-n', 'shop', '--grace-period=0', '--force']);
      await untilMapped(s, DB, undefined, 'the deleted pod out of the map');
      t.equal(await seen(s, DB), NODE_IPV4, 'deleted: the node decides its address');
      await createPod(plane, 'lab', 'reuse', SELF, [DB], { labels: { app: 'notebook' } });
      await untilMapped(s, DB, 'pod-policy-1', "the reused address in lab's policy");
      t.equal(await seen(s, DB), DB, "reused by lab's pod: untranslated");
    });

    t.test('--explain --pod judges phase and address ownership as the agent does', async (t) => {
      const byPod = (pod: string) => explainFrom(['--pod', pod]);
      const shared = '10.244.1.99';
      await createPod(plane, 'shop', 'old-db', SELF, [shared], { labels: { app: 'db' } });
      // creationTimestamp counts whole seconds: the newer pod a second later.
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      await createPod(plane, 'shop', 'z-web', SELF, [shared], { labels: { app: 'web' } });
      const older = await byPod('shop/old-db');
      t.equal(older.code, 0, older.stderr);
      t.match(
        older.stderr,
        /held by the newer pod shop\/z-web too: the agent decides it by shop\/z-web's labels/,
      );
      t.notMatch(older.stdout, /decided by pod policy/, "decided as the newer (app=web) pod's");
      await plane.kubectl([
        'patch',
        'pod',
        'z-web',
        '-n',
        'shop',
        '--subresource=status',
        '--type=merge',
        '-p',
        JSON.stringify({ status: { phase: 'Succeeded' } }),
      ]);
      const done = await byPod('shop/z-web');
      t.match(done.stderr, /pod shop\/z-web is Succeeded: no pod policy selects it any more/);
      const again = await byPod('shop/old-db');
      t.match(
        again.stdout,
        /decided by pod policy .*ip-masq-db/,
        'the completed pod holds it no more',
      );
      for (const name of ['old-db', 'z-web'])
        await plane.kubectl(['delete', 'pod', name, '-n', 'shop', '--grace-period=0', '--force']);
    });

    t.test('two policies select one pod: the first in file order decides, said once', async (t) => {
      await label(s, 'lab', 'pod', 'reuse', 'app=db');
      await untilMapped(s, DB, 'pod-policy-0', 'the first policy (ip-masq-db) decides');
      t.equal(await seen(s, DB), SNAT);
      await waitFor('the overlap counted', async () =>
        (await metric(s, 'ipmasq_pod_policy_overlaps')) === 1 ? true : undefined,
      );
      const warned = () =>
        agent.logs.filter((line) => /selected by more than one pod policy/.test(String(line.msg)));
      await waitFor('the warning', () => (warned().length > 0 ? true : undefined));
      t.match(
        String(warned()[0]?.msg),
        /lab\/reuse .*ip-masq-db decides .*not .*ip-masq-untranslated/,
      );
      // Another event of the same pod that changes nothing kept: no second warning. A later event
      // that moves the kernel (web into the db policy) says the agent has seen the first.
      await label(s, 'lab', 'pod', 'reuse', 'unrelated=1');
      await label(s, 'shop', 'pod', 'web', 'app=db');
      await untilMapped(s, WEB, 'pod-policy-0', 'the later event applied');
      t.equal(warned().length, 1, 'said once');
      await label(s, 'shop', 'pod', 'web', 'app=web');
      await untilMapped(s, WEB, undefined, 'web back out');
      await label(s, 'lab', 'pod', 'reuse', 'app=notebook');
      await untilMapped(s, DB, 'pod-policy-1', 'back to lab');
    });

    t.test('an invalid selector: refused by --check and by the running agent', async (t) => {
      const before = await listTable(topo.node, 'ip');
      const bad =
        'podSelector: {matchExpressions: [{key: app, operator: In}]}\nsnatAddress: 192.0.2.11\n';
      const checkDir = mkdtempSync(join(tmpdir(), 'ipmasq-pod-policy-check-'));
      t.teardown(() => rmSync(checkDir, { recursive: true, force: true }));
      writeFileSync(join(checkDir, 'ip-masq-bad'), bad);
      const check = await runAgentOnce(topo.node, ['--check', checkDir]);
      t.not(check.code, 0, '--check fails');
      t.match(check.stderr + check.stdout, /matchExpressions\[0\]\.values: must be given/);
      put('ip-masq-bad', bad);
      await waitFor('the agent refuses it', async () =>
        (await metric(s, 'ipmasq_config_valid')) === 0 ? true : undefined,
      );
      t.equal(
        generationOf(await listTable(topo.node, 'ip')),
        generationOf(before),
        'nothing written: the last good config stays',
      );
      t.equal(await seen(s, DB), DB);
      rmSync(join(dir, 'ip-masq-bad'));
      await waitFor('valid again', async () =>
        (await metric(s, 'ipmasq_config_valid')) === 1 ? true : undefined,
      );
    });

    t.test(
      'the API server stopped: nothing changes; back: what changed meanwhile applies',
      async (t) => {
        await apiReachable(topo, false);
        await waitFor(
          'ipmasq_kubernetes_up 0',
          async () => ((await metric(s, 'ipmasq_kubernetes_up')) === 0 ? true : undefined),
          30_000,
        );
        // Changed while the agent cannot reach the API server.
        await plane.kubectl(['label', 'namespace', 'lab', 'egress-']);
        await plane.kubectl(['delete', 'pod', 'web', '-n', 'shop', '--grace-period=0', '--force']);
        await createPod(plane, 'shop', 'db-2', SELF, [WEB], { labels: { app: 'db' } });
        // The agent tries again after the changes, and is refused.
        const refused = async () =>
          ((await metric(s, 'ipmasq_kubernetes_errors_total{op="list"}')) ?? 0) +
          ((await metric(s, 'ipmasq_kubernetes_errors_total{op="watch"}')) ?? 0);
        const refusedBefore = await refused();
        await waitFor(
          'an attempt refused after the changes',
          async () => ((await refused()) > refusedBefore + 1 ? true : undefined),
          30_000,
        );
        t.same(
          [...(await podMap(s))].sort(),
          [
            [DB, 'pod-policy-1'],
            [LAB, 'pod-policy-1'],
          ],
          'the last known membership stays in the kernel',
        );
        t.equal(await seen(s, LAB), LAB, 'and decides');
        t.equal(await seen(s, WEB), NODE_IPV4);
        t.equal((await httpGet(topo.node, 9410, '/readyz')).status, 200, 'still ready');
        await apiReachable(topo, true);
        await waitFor(
          'ipmasq_kubernetes_up 1',
          async () => ((await metric(s, 'ipmasq_kubernetes_up')) === 1 ? true : undefined),
          60_000,
        );
        await untilMapped(s, WEB, 'pod-policy-0', 'the pod made meanwhile in its policy');
        t.equal(await seen(s, WEB), SNAT);
        await untilMapped(s, LAB, undefined, "lab's label gone: its pods leave the policy");
        t.equal(await seen(s, LAB), NODE_IPV4);
      },
    );
  });
}
