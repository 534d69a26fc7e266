// The opt-in Kubernetes API against a real kube-apiserver and etcd (scripts/control-plane.sh) on the
// node namespace's loopback, on real packets: Nodes created and deleted in the real server move
// their pod CIDRs in and out of the non-masquerade set; a label change switches a nodeSelector
// file; Events as the real server validates and stores them (a repeat counted on the same Event);
// the deploy overlay's RBAC as shipped, the agent holding a TokenRequest token: all it does is
// allowed, and each rule taken away shows its documented refusal (said once, the kernel
// untouched); kube-apiserver restarted mid-watch while etcd is compacted (410 → list again, nothing
// lost); the agent started before the API server. test/e2e/kubernetes.test.ts keeps the fake for
// what a real server cannot be made to do.
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import {
  agentWithParts,
  generationOf,
  httpGet,
  listTable,
  metricValue,
  runAgentOnce,
  startAgent,
  waitFor,
  type RunningAgent,
} from '../../harness/agent.js';
import {
  agentKubeconfig,
  prepareControlPlane,
  removeRule,
  shippedRbac,
  startControlPlane,
  type ControlPlane,
} from '../../harness/control-plane.js';
import { inNetns, requireRoot, type TapTest } from '../../harness/netns.js';
import {
  makeTopology,
  NODE_IPV4,
  POD_IPV4,
  REMOTE_TARGETS_IPV4 as V4,
  type Topology,
} from '../../harness/topology.js';
import { nonMasqSet, seenFromPod } from '../helpers/nonmasq.js';

const NODE_A_PODS = '198.19.0.0/24';
const NODE_B_PODS = '198.18.255.0/24';
const TO_A = V4.outsideDefaultsA; // 198.19.0.4
const TO_B = V4.outsideDefaultsB; // 198.18.255.1
const SELF = 'node-self';

const TIMINGS = JSON.stringify({
  backoffBaseMs: 100,
  backoffMaxMs: 1_000,
  idleMs: 10_000,
  eventIntervalMs: 300,
});
const BASE =
  'nonMasqueradeCIDRs: [10.0.0.0/8]\nnonMasqueradeNodePodCIDRs: true\nresyncInterval: 1s\n';

function nodeObject(name: string, podCIDR: string, labels: Record<string, string> = {}): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels },
    spec: { podCIDR, podCIDRs: [podCIDR] },
  });
}

interface KubeEvent {
  reason: string;
  type: string;
  count?: number;
  message: string;
  involvedObject: { kind: string; name: string };
  source?: { component?: string };
  metadata: { name: string };
}

interface Cluster {
  topo: Topology;
  plane: ControlPlane;
}

interface Agent {
  agent: RunningAgent;
  dir: string;
  put(name: string, text: string): void;
  generation(): Promise<number>;
  metric(series: string): Promise<number | undefined>;
}

/** An agent in the node namespace, on a kernel without the table an earlier test's agent left. */
async function startOn(
  t: TapTest,
  c: Cluster,
  files: Record<string, string>,
  kubeconfig = c.plane.kubeconfig,
  timings = TIMINGS,
): Promise<Agent> {
  await inNetns(c.topo.node, 'nft', ['delete', 'table', 'ip', 'ipmasq']).catch(() => undefined);
  const dir = mkdtempSync(join(tmpdir(), 'ipmasq-kube-real-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const put = (name: string, text: string) => {
    writeFileSync(join(dir, `.${name}.tmp`), text);
    renameSync(join(dir, `.${name}.tmp`), join(dir, name));
  };
  for (const [name, text] of Object.entries(files)) put(name, text);
  const agent = startAgent(
    t,
    c.topo.node,
    [
      '--config',
      dir,
      '--listen',
      '127.0.0.1:9410',
      '--kubeconfig',
      kubeconfig,
      '--node-name',
      SELF,
    ],
    [],
    undefined,
    agentWithParts({ kubernetesTimings: JSON.parse(timings) }),
  );
  return {
    agent,
    dir,
    put,
    generation: async () => generationOf(await listTable(c.topo.node, 'ip')) ?? 0,
    metric: async (series) =>
      metricValue((await httpGet(c.topo.node, 9410, '/metrics')).body, series),
  };
}

function untilInSet(c: Cluster, cidr: string, present: boolean, what: string): Promise<true> {
  return waitFor(
    what,
    async () => ((await nonMasqSet(c.topo.node)).includes(cidr) === present ? true : undefined),
    30_000,
    20,
  );
}

async function events(c: Cluster): Promise<KubeEvent[]> {
  const list = await c.plane.json<{ items: KubeEvent[] }>([
    'get',
    'events',
    '-n',
    'default',
    '--field-selector',
    `involvedObject.name=${SELF}`,
  ]);
  return list.items;
}

/** The Nodes this file's tests made, gone before the next test. */
async function resetNodes(c: Cluster): Promise<void> {
  await c.plane.kubectl(['delete', 'nodes', '--all', '--wait=true']);
  await c.plane.kubectl(['delete', 'events', '-n', 'default', '--all']);
}

async function createNodes(c: Cluster, labels: Record<string, string> = { pool: 'general' }) {
  await c.plane.kubectl(['apply', '-f', '-'], nodeObject(SELF, '10.244.1.0/24', labels));
  await c.plane.kubectl(['apply', '-f', '-'], nodeObject('node-a', NODE_A_PODS));
  await c.plane.kubectl(['apply', '-f', '-'], nodeObject('node-b', NODE_B_PODS));
}

/** Log lines of the agent that mention a refusal (401/403). */
function refusals(agent: RunningAgent): string[] {
  return agent.logs
    .map((line) => `${String(line.msg)} ${String(line.err ?? '')}`)
    .filter((text) => /\b(401|403)\b|forbidden/i.test(text));
}

// On a machine that has not built the control plane yet, its first start builds it (minutes).
t.setTimeout(1_500_000);

if (requireRoot(t)) {
  t.test('against a real kube-apiserver and etcd', async (t) => {
    const topo = await makeTopology(t, { ipv6: false });
    const plane = await startControlPlane(t, topo.node);
    const c: Cluster = { topo, plane };
    const version = await plane.json<{ serverVersion?: { gitVersion?: string } }>(['version']);
    t.comment(`kube-apiserver ${version.serverVersion?.gitVersion ?? '?'}`);

    t.test('Nodes created and deleted: their pod CIDRs follow, on real packets', async (t) => {
      t.teardown(() => resetNodes(c));
      await createNodes(c);
      const a = await startOn(t, c, { 'ip-masq-agent': BASE });
      await untilInSet(c, NODE_A_PODS, true, "node-a's pod CIDR applied");
      await untilInSet(c, NODE_B_PODS, true, "node-b's pod CIDR applied");
      t.equal(await seenFromPod(topo, TO_A), POD_IPV4, "to node-a's pods: the pod's own source");
      t.equal(await seenFromPod(topo, TO_B), POD_IPV4, "to node-b's pods: the pod's own source");
      await plane.kubectl(['delete', 'node', 'node-a', '--wait=true']);
      await untilInSet(c, NODE_A_PODS, false, "node-a's pod CIDR removed");
      t.equal(await seenFromPod(topo, TO_A), NODE_IPV4, 'node-a deleted: masqueraded again');
      await plane.kubectl(['apply', '-f', '-'], nodeObject('node-c', '198.19.0.0/25'));
      await untilInSet(c, '198.19.0.0/25', true, "a new Node's pod CIDR applied");
      t.equal(await seenFromPod(topo, TO_A), POD_IPV4, "node-c's pods: the pod's own source");
      t.equal(refusals(a.agent).length, 0, 'nothing refused (the admin)');
      t.equal(await a.metric('ipmasq_kubernetes_up'), 1);
    });

    t.test('a label change on this Node switches a nodeSelector file', async (t) => {
      t.teardown(() => resetNodes(c));
      await createNodes(c);
      const a = await startOn(t, c, {
        'ip-masq-agent': BASE,
        'ip-masq-gpu': `nodeSelector: {pool: gpu}\nmasqueradeCIDRs: [${NODE_A_PODS}]\n`,
      });
      await untilInSet(c, NODE_A_PODS, true, 'first write');
      t.equal(await seenFromPod(topo, TO_A), POD_IPV4, 'pool=general: the gpu file skipped');
      const g = await a.generation();
      await plane.kubectl(['label', 'node', SELF, 'pool=gpu', '--overwrite']);
      await waitFor('written', async () => ((await a.generation()) > g ? true : undefined), 20_000);
      t.equal(await seenFromPod(topo, TO_A), NODE_IPV4, 'pool=gpu: the gpu file applies');
      await plane.kubectl(['label', 'node', SELF, 'pool=general', '--overwrite']);
      await waitFor(
        'switched back',
        async () => ((await a.generation()) > g + 1 ? true : undefined),
        20_000,
      );
      t.equal(await seenFromPod(topo, TO_A), POD_IPV4, 'pool=general again');
    });

    t.test('Events as the real server stores them: one per cause, repeats counted', async (t) => {
      t.teardown(() => resetNodes(c));
      await createNodes(c);
      const a = await startOn(t, c, { 'ip-masq-agent': BASE });
      await untilInSet(c, NODE_A_PODS, true, 'first write');
      const bad = BASE.replace('10.0.0.0/8', '10.0.0.0/33');
      a.put('ip-masq-agent', bad);
      const invalid = await waitFor(
        'ConfigInvalid stored',
        async () => (await events(c)).find((e) => e.reason === 'ConfigInvalid'),
        20_000,
      );
      t.equal(invalid.type, 'Warning');
      t.same([invalid.involvedObject.kind, invalid.involvedObject.name], ['Node', SELF]);
      t.equal(invalid.source?.component, 'ipmasq-agent');
      t.match(invalid.message, /10\.0\.0\.0\/33/);
      a.put('ip-masq-agent', BASE);
      await waitFor(
        'ConfigRecovered stored',
        async () => (await events(c)).find((e) => e.reason === 'ConfigRecovered'),
        20_000,
      );
      // The same cause again: counted on the same Event, not a second one.
      a.put('ip-masq-agent', bad);
      const again = await waitFor(
        'the repeat counted',
        async () =>
          (await events(c)).find((e) => e.reason === 'ConfigInvalid' && (e.count ?? 1) >= 2),
        20_000,
      );
      t.equal(again.metadata.name, invalid.metadata.name, 'the same Event');
      const invalids = (await events(c)).filter((e) => e.reason === 'ConfigInvalid');
      t.equal(invalids.length, 1, 'one Event for the cause');
      t.equal(refusals(a.agent).length, 0, 'the real server took every write');
      t.equal((await a.metric('ipmasq_kubernetes_errors_total{op="event"}')) ?? 0, 0);
    });

    t.test(
      "the deploy overlay's RBAC as shipped, a TokenRequest token: all allowed; each rule taken away refused once, the kernel untouched",
      async (t) => {
        t.teardown(async () => {
          await plane.kubectl(['delete', '-f', '-', '--ignore-not-found'], shipped);
          await resetNodes(c);
        });
        const shipped = shippedRbac();
        const kubeconfig = await agentKubeconfig(t, plane);
        await createNodes(c);
        // Everything it does: list and watch Nodes, this Node, Events.
        // Watches that end within seconds: a running watch is not authorized again, a new one is.
        const short = JSON.stringify({ ...JSON.parse(TIMINGS), watchTimeoutSeconds: 2 });
        const a = await startOn(t, c, { 'ip-masq-agent': BASE }, kubeconfig, short);
        await untilInSet(c, NODE_A_PODS, true, 'Nodes listed with the token');
        a.put('ip-masq-agent', BASE.replace('10.0.0.0/8', '10.0.0.0/33'));
        await waitFor(
          'Event written with the token',
          async () => (await events(c)).find((e) => e.reason === 'ConfigInvalid'),
          20_000,
        );
        a.put('ip-masq-agent', BASE);
        await waitFor(
          'valid again',
          async () =>
            (await httpGet(topo.node, 9410, '/readyz')).status === 200 ? true : undefined,
          20_000,
        );
        t.same(refusals(a.agent), [], 'nothing refused');

        // The Nodes rule taken away: the next watch is refused; what was known stays in the kernel.
        await removeRule(plane, { kind: 'clusterrole', name: 'ipmasq-agent' }, 'nodes');
        // Both watches refused (this Node's and the Nodes'): neither is open any more.
        await waitFor(
          'both watches refused',
          async () =>
            refusals(a.agent).some((l) => l.includes("this Node's")) &&
            refusals(a.agent).some((l) => l.includes("the Nodes'"))
              ? true
              : undefined,
          30_000,
        );
        t.equal(await a.metric('ipmasq_kubernetes_up'), 0, 'ipmasq_kubernetes_up 0');
        const before = await listTable(topo.node, 'ip');
        await plane.kubectl(['delete', 'node', 'node-b', '--wait=true']);
        const failures = async () =>
          ((await a.metric('ipmasq_kubernetes_errors_total{op="watch"}')) ?? 0) +
          ((await a.metric('ipmasq_kubernetes_errors_total{op="list"}')) ?? 0);
        const first = await failures();
        await waitFor(
          'refused again and again',
          async () => ((await failures()) >= first + 4 ? true : undefined),
          30_000,
        );
        const said = refusals(a.agent);
        t.comment(said.join('\n'));
        t.ok(said.length >= 1, 'the refusal said');
        t.ok(
          said.every((line) => /\b403\b/.test(line)),
          'as a 403',
        );
        t.equal(new Set(said).size, said.length, 'each cause said once, however often retried');
        t.ok(said.length <= 4, "at most this Node's and the Nodes' list and watch");
        t.equal(await listTable(topo.node, 'ip'), before, 'the kernel untouched');
        t.ok((await nonMasqSet(topo.node)).includes(NODE_B_PODS), 'node-b as last known');
        t.equal((await httpGet(topo.node, 9410, '/readyz')).status, 200, 'ready on what it knows');
        // Given back: the deletion made meanwhile is applied.
        await plane.kubectl(['apply', '-f', '-'], shipped);
        await untilInSet(c, NODE_B_PODS, false, 'caught up once allowed');
        t.equal(await seenFromPod(topo, TO_B), NODE_IPV4, 'node-b deleted: masqueraded');

        // The Events rule taken away: the Event is refused and counted; the config still applies.
        const eventsRole = {
          kind: 'role',
          name: 'ipmasq-agent-events',
          namespace: 'default',
        } as const;
        await removeRule(plane, eventsRole, 'events');
        const eventErrors = (await a.metric('ipmasq_kubernetes_errors_total{op="event"}')) ?? 0;
        a.put('ip-masq-agent', BASE.replace('10.0.0.0/8', '10.0.0.0/34'));
        await waitFor(
          'the Event refused',
          async () =>
            ((await a.metric('ipmasq_kubernetes_errors_total{op="event"}')) ?? 0) > eventErrors
              ? true
              : undefined,
          20_000,
        );
        t.notOk(
          (await events(c)).some((e) => e.message.includes('10.0.0.0/34')),
          'no Event stored',
        );
        t.equal(a.agent.child.exitCode, null, 'still running');
      },
    );

    t.test('--once --kubeconfig lists the Nodes and writes them', async (t) => {
      t.teardown(() => resetNodes(c));
      await createNodes(c);
      const dir = mkdtempSync(join(tmpdir(), 'ipmasq-kube-once-'));
      t.teardown(() => rmSync(dir, { recursive: true, force: true }));
      writeFileSync(join(dir, 'ip-masq-agent'), BASE);
      await inNetns(topo.node, 'nft', ['delete', 'table', 'ip', 'ipmasq']).catch(() => undefined);
      const once = await runAgentOnce(topo.node, [
        '--config',
        join(dir, 'ip-masq-agent'),
        '--kubeconfig',
        plane.kubeconfig,
        '--node-name',
        SELF,
        '--once',
      ]);
      t.equal(once.code, 0, once.stderr);
      t.ok((await nonMasqSet(topo.node)).includes(NODE_A_PODS), "node-a's pod CIDR written");
      t.equal(await seenFromPod(topo, TO_A), POD_IPV4);
    });

    t.test(
      'etcd compacted past the watch, kube-apiserver restarted: a 410, a new list, nothing lost',
      async (t) => {
        t.teardown(async () => {
          await plane.kubectl(['delete', 'configmaps', '-n', 'default', '-l', 'ipmasq-test=churn']);
          await resetNodes(c);
        });
        await createNodes(c);
        const a = await startOn(t, c, { 'ip-masq-agent': BASE });
        await untilInSet(c, NODE_B_PODS, true, 'first write');
        await waitFor(
          'watching',
          async () => ((await a.metric('ipmasq_kubernetes_up')) === 1 ? true : undefined),
          20_000,
        );
        // Writes the Nodes' watch does not see move etcd's revision past the agent's; compacted
        // there, the agent's resourceVersion is gone from etcd's history.
        const churn = Array.from({ length: 20 }, (_, i) =>
          JSON.stringify({
            apiVersion: 'v1',
            kind: 'ConfigMap',
            metadata: {
              name: `churn-${i}`,
              namespace: 'default',
              labels: { 'ipmasq-test': 'churn' },
            },
          }),
        ).join('\n');
        await plane.kubectl(['apply', '-f', '-'], churn);
        const revision = await plane.compact();
        t.ok(revision > 0, `etcd compacted at revision ${revision}`);
        // The watch drops; the agent comes back with its old resourceVersion.
        await plane.restartApiServer();
        await plane.kubectl(['delete', 'node', 'node-b', '--wait=true']);
        await untilInSet(c, NODE_B_PODS, false, 'the deletion applied');
        const said = a.agent.logs
          .filter((l) => String(l.msg).startsWith('Kubernetes API'))
          .map((l) => String(l.msg));
        t.comment(said.join('\n'));
        t.ok(
          said.some((line) => /\b410\b/.test(line)),
          'the old resourceVersion answered 410 Gone, and the agent listed again',
        );
        t.ok((await nonMasqSet(topo.node)).includes(NODE_A_PODS), 'node-a kept');
        t.equal(await seenFromPod(topo, TO_B), NODE_IPV4, 'node-b deleted: masqueraded');
        await waitFor(
          'watching again',
          async () => ((await a.metric('ipmasq_kubernetes_up')) === 1 ? true : undefined),
          20_000,
        );
        t.equal(a.agent.child.exitCode, null, 'still running');
      },
    );
  });

  t.test('the agent started before the API server: it waits, then applies the Nodes', async (t) => {
    const topo = await makeTopology(t, { ipv6: false });
    const prepared = await prepareControlPlane(t, topo.node);
    const c = { topo } as Cluster;
    const a = await startOn(t, c, { 'ip-masq-agent': BASE }, prepared.kubeconfig);
    await waitFor(
      'serving, not ready',
      async () =>
        (await httpGet(topo.node, 9410, '/readyz').catch(() => undefined))?.status === 503
          ? true
          : undefined,
      20_000,
    );
    t.match(
      (await httpGet(topo.node, 9410, '/readyz')).body,
      /waiting for the first list of Nodes/,
      'waiting for the first list, said',
    );
    t.equal(a.agent.child.exitCode, null, 'running without an API server');
    c.plane = await prepared.start();
    await createNodes(c);
    await untilInSet(c, NODE_A_PODS, true, "node-a's pod CIDR applied once the server is up");
    t.equal(await seenFromPod(topo, TO_A), POD_IPV4, "to node-a's pods: the pod's own source");
    t.equal((await httpGet(topo.node, 9410, '/readyz')).status, 200, 'ready');
  });
}
