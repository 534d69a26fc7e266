// The config with the cluster's data (docs/kubernetes.md, "Kubernetes API (opt-in)"): nodeSelector
// judged on the Node's labels, nonMasqueradeNodePodCIDRs joining every Node's pod CIDRs, and until
// the API has answered, waiting (nothing applied, /readyz says why) rather than invalid. Real
// files, the agent's own loader; the cluster is a stand-in for src/kubernetes/cluster.ts.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { parseCidr, type Prefix } from '../../../src/cidr/index.js';
import { configLoader } from '../../../src/config/loader.js';
import { loadConfig } from '../../../src/config/index.js';
import { withNodePodCIDRs } from '../../../src/config/build.js';
import type { PodFacts } from '../../../src/config/pods.js';
import { explain } from '../../../src/explain.js';
import { ConfigReader, type ClusterData } from '../../../src/reconcile/config-reader.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';
import { agentStatus, initialFacts } from '../../../src/reconcile/status.js';
import { parseArgs } from '../../../src/cli/flags.js';
import { compileOptions } from '../../helpers/compile-options.js';

const options = { enableIPv6: false, nomasqAllReservedRanges: false };

function configDir(t: Test, files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'ipmasq-kube-config-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

class StandIn implements ClusterData {
  labels: ReadonlyMap<string, string> | undefined;
  nodes: Map<string, { prefixes: Prefix[] }> | undefined;
  podCIDRsVersion = 0;
  asked = 0;
  wanted: boolean[] = [];
  podCIDRs() {
    this.asked++;
    return this.nodes;
  }
  wantPodCIDRs(want: boolean) {
    this.wanted.push(want);
  }
  podsMap: Map<string, PodFacts> | undefined;
  namespacesMap: Map<string, ReadonlyMap<string, string>> | undefined;
  podsVersion = 0;
  wantedPods: Array<{ pods: boolean; namespaces: boolean }> = [];
  pods() {
    return this.podsMap;
  }
  namespaces() {
    return this.namespacesMap;
  }
  wantPods(want: { pods: boolean; namespaces: boolean }) {
    this.wantedPods.push(want);
  }
  setPods(pods: PodFacts[]) {
    this.podsMap = new Map(pods.map((pod) => [`${pod.namespace}/${pod.name}`, pod]));
    this.podsVersion++;
  }
  setNamespaces(entries: Record<string, Record<string, string>>) {
    this.namespacesMap = new Map(
      Object.entries(entries).map(([name, labels]) => [name, new Map(Object.entries(labels))]),
    );
    this.podsVersion++;
  }
  setNodes(entries: Record<string, string[]>) {
    this.nodes = new Map(
      Object.entries(entries).map(([name, cidrs]) => [name, { prefixes: cidrs.map(parseCidr) }]),
    );
    this.podCIDRsVersion++;
  }
}

function reader(dir: string, cluster: StandIn | undefined) {
  const metrics = new AgentMetrics();
  return {
    metrics,
    reader: new ConfigReader({
      configPath: dir,
      loadOptions: options,
      load: configLoader(),
      logger: pino({ level: 'silent' }),
      metrics,
      ...(cluster ? { cluster } : {}),
    }),
  };
}

t.test('nodeSelector: waiting for the labels, then judged on them as they change', async (t) => {
  const dir = configDir(t, {
    'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/8]\n',
    'ip-masq-gpu': 'nodeSelector: {pool: gpu}\nmasqueradeCIDRs: [10.9.0.0/16]\n',
  });
  const cluster = new StandIn();
  const { reader: r, metrics } = reader(dir, cluster);
  t.equal(await r.read(), false);
  t.match(r.waiting, /waiting for this Node's labels/);
  t.equal(r.error, null, 'waiting is not invalid');
  t.match(await metrics.exposition(), /ipmasq_config_valid 1/);
  t.equal(r.good, undefined, 'nothing to apply yet');
  const status = agentStatus({ ...initialFacts, waiting: r.waiting }, true);
  t.match(status.notReadyReason, /nothing applied yet: .*labels/);

  cluster.labels = new Map([['pool', 'general']]);
  t.equal(await r.read(), true);
  t.same(r.good?.masquerade.ipv4, [], 'pool=general: the gpu file skipped');
  t.match(r.good?.skipped?.[0]?.reason, /pool is not "gpu"/);
  cluster.labels = new Map([['pool', 'gpu']]);
  await r.read();
  t.same(r.good?.masquerade.ipv4, ['10.9.0.0/16'], 'pool=gpu: it applies');

  const without = reader(dir, undefined).reader;
  t.equal(await without.read(), false);
  t.match(without.error, /start it with --kubernetes/, 'without the API it is invalid, as before');
});

t.test(
  'nonMasqueradeNodePodCIDRs: waits for the first list, then joins and follows the Nodes',
  async (t) => {
    const dir = configDir(t, {
      'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/8]\nnonMasqueradeNodePodCIDRs: true\n',
    });
    const cluster = new StandIn();
    cluster.labels = new Map();
    const { reader: r } = reader(dir, cluster);
    t.equal(await r.read(), false);
    t.match(r.waiting, /waiting for the first list of Nodes/);
    t.ok(cluster.asked > 0, 'asking starts the Nodes’ watch');

    cluster.setNodes({ a: ['100.64.1.0/24'], b: ['100.64.0.0/24'] });
    t.equal(await r.read(), true);
    t.same(r.good?.nonMasquerade.ipv4, ['10.0.0.0/8', '100.64.0.0/23', '169.254.0.0/16'], 'merged');
    const first = r.good!;
    await r.read();
    t.equal(r.good, first, 'the same config object while nothing changed (no recompile)');

    cluster.setNodes({ a: ['100.64.1.0/24'] });
    await r.read();
    t.same(r.good?.nonMasquerade.ipv4, ['10.0.0.0/8', '100.64.1.0/24', '169.254.0.0/16']);
    t.not(r.good?.hash, first.hash, 'the hash follows what the kernel gets');
    cluster.setNodes({});
    await r.read();
    t.same(r.good?.nonMasquerade.ipv4, ['10.0.0.0/8', '169.254.0.0/16']);
  },
);

t.test('the Nodes’ pod CIDRs do not count against cidrLimit', async (t) => {
  const loaded = await loadConfig(
    configDir(t, {
      'ip-masq-agent':
        'nonMasqueradeCIDRs: [10.0.0.0/8]\nnonMasqueradeNodePodCIDRs: true\ncidrLimit: 1\n',
    }),
    { ...options, kubernetes: true },
  );
  t.ok(loaded.ok);
  if (!loaded.ok) return;
  const nodes = new Map(
    Array.from({ length: 300 }, (_, i) => [
      `n${i}`,
      { prefixes: [parseCidr(`100.${64 + (i >> 8)}.${i & 255}.0/24`)] },
    ]),
  );
  const joined = withNodePodCIDRs(loaded.config, nodes);
  t.same(joined.nonMasquerade.ipv4, [
    '10.0.0.0/8',
    '100.64.0.0/16',
    '100.65.0.0/19',
    '100.65.32.0/21',
    '100.65.40.0/22',
    '169.254.0.0/16',
  ]);
});

t.test('explain names "Node NAME’s podCIDRs" as the provenance', async (t) => {
  const loaded = await loadConfig(
    configDir(t, {
      'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/8]\nnonMasqueradeNodePodCIDRs: true\n',
    }),
    { ...options, kubernetes: true, provenance: true },
  );
  if (!loaded.ok) throw loaded.error;
  const config = withNodePodCIDRs(
    loaded.config,
    new Map([['worker-7', { prefixes: [parseCidr('100.64.7.0/24')] }]]),
  );
  const answer = explain(config, compileOptions(), '100.64.7.9');
  t.equal(answer.masqueraded, false);
  t.equal(answer.reason, 'node podCIDRs');
  t.same(
    answer.decidedBy.map((d) => d.text),
    ["Node worker-7's podCIDRs 100.64.7.0/24"],
  );
});

t.test(
  'flags: --kubernetes and --kubeconfig need the node’s name to run, not to describe',
  async (t) => {
    const noEnv = {};
    const run = parseArgs(['--kubernetes'], noEnv);
    t.equal(run.ok, false);
    if (!run.ok) {
      t.equal(run.exitCode, 2);
      t.match(run.message, /need the node's name/);
    }
    t.equal(parseArgs(['--kubeconfig', '/k', '--once'], noEnv).ok, false);
    const withName = parseArgs(['--kubernetes'], { NODE_NAME: 'n1' });
    t.ok(withName.ok && withName.options.kubernetes && withName.options.nodeName === 'n1');
    const explainIt = parseArgs(['--kubeconfig', '/k', '--explain', '10.0.0.1'], noEnv);
    t.ok(explainIt.ok && explainIt.options.kubeconfig === '/k');
    t.equal(parseArgs(['--kubeconfig='], noEnv).ok, false, 'an empty path');
  },
);

t.test(
  'pod policies: wait for the pods (and namespaces), then each address to the first policy that selects its pod',
  async (t) => {
    const dir = configDir(t, {
      'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/8]\n',
      'ip-masq-a-db': 'podSelector: {matchLabels: {app: db}}\nsnatAddress: 192.0.2.10\n',
      'ip-masq-b-open':
        'namespaceSelector: {matchLabels: {egress: open}}\nnonMasqueradeCIDRs: [0.0.0.0/0]\n',
    });
    const cluster = new StandIn();
    cluster.labels = new Map();
    const { reader: r, metrics } = reader(dir, cluster);
    t.equal(await r.read(), false);
    t.match(r.waiting, /pod policies: waiting for the first list of this node's pods/);
    t.same(cluster.wantedPods.at(-1), { pods: true, namespaces: true });
    const pod = (
      namespace: string,
      name: string,
      labels: Record<string, string>,
      addresses: string[],
      created = '2026-01-01T00:00:00Z',
    ) => ({
      namespace,
      name,
      labels: new Map(Object.entries(labels)),
      addresses,
      created,
    });
    cluster.setPods([
      pod('shop', 'db-0', { app: 'db' }, ['10.244.1.5']),
      pod('lab', 'db-1', { app: 'db' }, ['10.244.1.6']),
      pod('lab', 'web', { app: 'web' }, ['10.244.1.7']),
      pod('shop', 'web', { app: 'web' }, ['10.244.1.8']),
    ]);
    t.equal(await r.read(), false);
    t.match(r.waiting, /waiting for the first list of namespaces/);
    cluster.setNamespaces({ lab: { egress: 'open' }, shop: {} });
    t.equal(await r.read(), true);
    const [db, open] = r.good?.podPolicies ?? [];
    t.same(db?.members?.ipv4, ['10.244.1.5/32', '10.244.1.6/32'], 'app=db, in any namespace');
    t.same(
      open?.members?.ipv4,
      ['10.244.1.7/32'],
      "lab/db-1 is db's: the first in file order decides",
    );
    const exposition = await metrics.exposition();
    t.match(exposition, /ipmasq_pod_policy_pods\{policy="ip-masq-a-db"\} 2/);
    t.match(exposition, /ipmasq_pod_policy_pods\{policy="ip-masq-b-open"\} 1/);
    t.match(exposition, /ipmasq_pod_policy_overlaps 1/);

    // A label change, a namespace's label change, an address reused by a newer pod of another
    // policy.
    const first = r.good!;
    cluster.setPods([
      pod('shop', 'db-0', { app: 'web' }, ['10.244.1.5']),
      pod('lab', 'db-1', { app: 'db' }, ['10.244.1.6']),
      pod('lab', 'web', { app: 'web' }, ['10.244.1.7']),
      pod('shop', 'web', { app: 'web' }, ['10.244.1.8']),
      pod('shop', 'db-2', { app: 'db' }, ['10.244.1.7'], '2026-01-02T00:00:00Z'),
    ]);
    cluster.setNamespaces({ lab: {}, shop: { egress: 'open' } });
    await r.read();
    const [db2, open2] = r.good?.podPolicies ?? [];
    t.same(
      db2?.members?.ipv4,
      ['10.244.1.6/32', '10.244.1.7/32'],
      'the reused address goes with the newer pod',
    );
    t.same(open2?.members?.ipv4, ['10.244.1.5/32', '10.244.1.8/32']);
    t.not(r.good?.hash, first.hash, 'the hash follows the membership');

    // No policy any more: the watches are let go.
    writeFileSync(join(dir, 'ip-masq-a-db'), 'masqueradeCIDRs: []\n');
    writeFileSync(join(dir, 'ip-masq-b-open'), 'masqueradeCIDRs: []\n');
    t.equal(await r.read(), true);
    t.same(cluster.wantedPods.at(-1), { pods: false, namespaces: false });
    t.equal(r.good?.podPolicies, undefined);
  },
);

t.test(
  'an invalid file leaves the last good config applying to the pods as they are now',
  async (t) => {
    const dir = configDir(t, {
      'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/8]\n',
      'ip-masq-a-db': 'podSelector: {matchLabels: {app: db}}\nsnatAddress: 192.0.2.10\n',
    });
    const cluster = new StandIn();
    cluster.labels = new Map();
    cluster.namespacesMap = new Map();
    const pod = (name: string, app: string, address: string, created: string): PodFacts => ({
      namespace: 'shop',
      name,
      labels: new Map([['app', app]]),
      addresses: [address],
      created,
    });
    cluster.setPods([pod('db-0', 'db', '10.244.1.5', '2026-01-01T00:00:00Z')]);
    const { reader: r } = reader(dir, cluster);
    t.equal(await r.read(), true);
    t.same(r.good?.podPolicies?.[0]?.members?.ipv4, ['10.244.1.5/32']);
    const good = r.good!;
    // A typo in another file, then the db pod deleted and its address taken by a web pod.
    writeFileSync(join(dir, 'ip-masq-z'), 'nonMasqueradeCIDRs: [not-a-cidr]\n');
    t.equal(await r.read(), false, 'invalid');
    t.match(r.error, /not-a-cidr/);
    cluster.setPods([pod('web-0', 'web', '10.244.1.5', '2026-01-02T00:00:00Z')]);
    t.equal(await r.read(), false, 'still invalid');
    t.same(
      r.good?.podPolicies?.[0]?.members?.ipv4 ?? [],
      [],
      "the reused address does not keep the deleted pod's policy",
    );
    t.same(r.good?.nonMasquerade, good.nonMasquerade, "the last good files' config otherwise");
    t.not(r.good?.hash, good.hash, 'a new membership, a new hash: the kernel follows');
    // Another db pod comes while the file is still wrong: it takes the policy.
    cluster.setPods([
      pod('web-0', 'web', '10.244.1.5', '2026-01-02T00:00:00Z'),
      pod('db-1', 'db', '10.244.1.9', '2026-01-03T00:00:00Z'),
    ]);
    await r.read();
    t.same(r.good?.podPolicies?.[0]?.members?.ipv4, ['10.244.1.9/32']);
  },
);
