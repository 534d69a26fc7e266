import { spawnSync } from 'node:child_process';
import t from 'tap';
import { requireTool } from '../../../harness/netns.js';
import { register as globalRegistry } from 'prom-client';
import { buildServer, type AgentStatus } from '../../../src/server/index.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';
import { parseExposition, type MetricFamily } from '../../../harness/prometheus.js';

const status: AgentStatus = {
  alive: true,
  lastWriteOk: true,
  generation: 0,
  configHash: null,
  lastSyncTime: null,
  lastError: null,
  configError: null,
  waiting: null,
  nonMasqueradeCIDRs: { ipv4: 0, ipv6: 0 },
  ready: false,
  notReadyReason: 'starting',
};

async function scrape(test: { teardown: (fn: () => unknown) => void }, metrics: AgentMetrics) {
  const app = await buildServer({ status: () => status, metrics });
  test.teardown(() => app.close());
  const res = await app.inject('/metrics');
  if (res.statusCode !== 200) throw new Error(`GET /metrics: ${res.statusCode}`);
  return parseExposition(res.body);
}

function valueOf(
  families: Map<string, MetricFamily>,
  family: string,
  labels: Record<string, string> = {},
  sampleName = family,
): number | undefined {
  const samples = families.get(family)?.samples ?? [];
  const wanted = Object.entries(labels);
  return samples.find(
    (s) =>
      s.name === sampleName &&
      Object.keys(s.labels).length === wanted.length &&
      wanted.every(([k, v]) => s.labels[k] === v),
  )?.value;
}

const required: [string, string][] = [
  ['ipmasq_generation', 'gauge'],
  ['ipmasq_syncs_total', 'counter'],
  ['ipmasq_sync_duration_seconds', 'histogram'],
  ['ipmasq_config_valid', 'gauge'],
  ['ipmasq_config_errors_total', 'counter'],
  ['ipmasq_drift_repairs_total', 'counter'],
  ['ipmasq_fast_path_mismatches_total', 'counter'],
  ['ipmasq_nonmasquerade_cidrs', 'gauge'],
  ['ipmasq_last_success_timestamp_seconds', 'gauge'],
  ['ipmasq_legacy_chain_present', 'gauge'],
  ['ipmasq_large_set_warning', 'gauge'],
  ['process_cpu_user_seconds_total', 'counter'],
  ['nodejs_eventloop_lag_seconds', 'gauge'],
];

t.test('a fresh agent exposes every series, labelled series at zero', async (t) => {
  const families = await scrape(t, new AgentMetrics());
  for (const [name, type] of required) {
    t.equal(families.get(name)?.type, type, `${name} is a ${type}`);
  }
  for (const result of ['applied', 'unchanged', 'error']) {
    t.equal(valueOf(families, 'ipmasq_syncs_total', { result }), 0, `syncs ${result} = 0`);
  }
  t.equal(families.get('ipmasq_syncs_total')?.samples.length, 3, 'no other result label');
  for (const path of ['config', 'element-write']) {
    const value = valueOf(families, 'ipmasq_fast_path_mismatches_total', { path });
    t.equal(value, 0, `fast path mismatches ${path} = 0`);
  }
  for (const family of ['ipv4', 'ipv6']) {
    t.equal(valueOf(families, 'ipmasq_nonmasquerade_cidrs', { family }), 0, `${family} = 0`);
  }
  for (const name of [
    'ipmasq_generation',
    'ipmasq_config_valid',
    'ipmasq_config_errors_total',
    'ipmasq_drift_repairs_total',
    'ipmasq_legacy_chain_present',
    'ipmasq_large_set_warning',
  ]) {
    t.equal(valueOf(families, name), 0, `${name} starts at 0`);
  }
  t.ok(families.has('nodejs_heap_size_used_bytes'), 'other default metrics too');
});

t.test('every method shows in the scrape', async (t) => {
  const metrics = new AgentMetrics();
  metrics.setGeneration(5);
  metrics.recordSync('applied', 0.003);
  metrics.recordSync('applied', 0.004);
  metrics.recordSync('unchanged', 0.0005);
  metrics.recordSync('error', 2);
  metrics.setConfigValid(true);
  metrics.incConfigErrors();
  metrics.incConfigErrors();
  metrics.incDriftRepairs();
  metrics.setNonMasqueradeCount('ipv4', 4);
  metrics.setNonMasqueradeCount('ipv6', 2);
  metrics.setLastSuccess(new Date(1_700_000_000_500));
  metrics.setLegacyChainPresent(true);
  metrics.setLargeSetWarning(true);
  const families = await scrape(t, metrics);

  t.equal(valueOf(families, 'ipmasq_generation'), 5);
  t.equal(valueOf(families, 'ipmasq_syncs_total', { result: 'applied' }), 2);
  t.equal(valueOf(families, 'ipmasq_syncs_total', { result: 'unchanged' }), 1);
  t.equal(valueOf(families, 'ipmasq_syncs_total', { result: 'error' }), 1);
  t.equal(valueOf(families, 'ipmasq_config_valid'), 1);
  t.equal(valueOf(families, 'ipmasq_config_errors_total'), 2);
  t.equal(valueOf(families, 'ipmasq_drift_repairs_total'), 1);
  t.equal(valueOf(families, 'ipmasq_nonmasquerade_cidrs', { family: 'ipv4' }), 4);
  t.equal(valueOf(families, 'ipmasq_nonmasquerade_cidrs', { family: 'ipv6' }), 2);
  t.equal(valueOf(families, 'ipmasq_last_success_timestamp_seconds'), 1_700_000_000.5);
  t.equal(valueOf(families, 'ipmasq_legacy_chain_present'), 1);
  t.equal(valueOf(families, 'ipmasq_large_set_warning'), 1);

  const histogram = 'ipmasq_sync_duration_seconds';
  t.equal(valueOf(families, histogram, {}, `${histogram}_count`), 4);
  t.ok(Math.abs(valueOf(families, histogram, {}, `${histogram}_sum`)! - 2.0075) < 1e-9, 'sum');
  const bucket = (le: string) => valueOf(families, histogram, { le }, `${histogram}_bucket`);
  t.equal(bucket('0.001'), 1, 'the 0.5 ms sync');
  t.equal(bucket('0.005'), 3, 'and the two applied syncs');
  t.equal(bucket('1'), 3);
  t.equal(bucket('2.5'), 4, 'the 2 s error');
  t.equal(bucket('+Inf'), 4);
  const bounds = families
    .get(histogram)!
    .samples.filter((s) => s.name === `${histogram}_bucket` && s.labels['le'] !== '+Inf')
    .map((s) => Number(s.labels['le']));
  t.equal(Math.min(...bounds), 0.001, 'buckets start at 1 ms');
  t.equal(Math.max(...bounds), 10, 'buckets end at 10 s');

  metrics.setConfigValid(false);
  metrics.setLegacyChainPresent(false);
  metrics.setLargeSetWarning(false);
  metrics.setGeneration(6);
  const after = await scrape(t, metrics);
  t.equal(valueOf(after, 'ipmasq_config_valid'), 0);
  t.equal(valueOf(after, 'ipmasq_legacy_chain_present'), 0);
  t.equal(valueOf(after, 'ipmasq_large_set_warning'), 0);
  t.equal(valueOf(after, 'ipmasq_generation'), 6);
});

t.test(
  'promtool check metrics: a scrape of every series follows Prometheus conventions',
  async (t) => {
    if (!requireTool(t, 'promtool', 'prometheus')) return;
    const metrics = new AgentMetrics({ version: '1.2.3', libnftables: '1.0.6' });
    metrics.recordSync('applied', 0.01);
    metrics.setNonMasqueradeCount('ipv6', 3);
    metrics.incNftFailure('crash');
    metrics.addConntrackFlushed('ipv4', 'udp', 7);
    metrics.incConntrackFlushFailures();
    metrics.setResyncInterval(60_000);
    metrics.setConflictingWriter(true);
    const app = await buildServer({ status: () => status, metrics });
    t.teardown(() => app.close());
    const body = (await app.inject('/metrics')).body;
    t.match(
      body,
      /^ipmasq_build_info\{version="1\.2\.3",libnftables="1\.0\.6",node="v\d+[^"]*"\} 1$/m,
    );
    const result = spawnSync('promtool', ['check', 'metrics'], { input: body, encoding: 'utf8' });
    t.equal(result.status, 0, 'exit 0');
    t.equal(`${result.stdout}${result.stderr}`.trim(), '', 'no warning');
  },
);

t.test('each instance has its own registry, apart from the global one', async (t) => {
  const first = new AgentMetrics();
  const second = new AgentMetrics();
  first.setGeneration(3);
  first.incDriftRepairs();
  t.not(first.registry, second.registry);
  t.not(first.registry, globalRegistry);
  const secondFamilies = await scrape(t, second);
  t.equal(valueOf(secondFamilies, 'ipmasq_generation'), 0);
  t.equal(valueOf(secondFamilies, 'ipmasq_drift_repairs_total'), 0);
  t.equal(globalRegistry.getSingleMetric('ipmasq_generation'), undefined);
});

t.test('the parser rejects what it should', async (t) => {
  t.throws(() => parseExposition('ipmasq_generation 1'), /sample before any TYPE/);
  t.throws(() => parseExposition('# TYPE a gauge\nb 1'), /outside family a/);
  t.throws(() => parseExposition('# TYPE a gauge\na{x="1"y="2"} 1'), /bad labels/);
  t.throws(() => parseExposition('# TYPE a gauge\na one'), /bad value/);
  const parsed = parseExposition('# TYPE a gauge\na{x="q\\"uote",y="2"} 1.5');
  t.same(parsed.get('a')?.samples, [{ name: 'a', labels: { x: 'q"uote', y: '2' }, value: 1.5 }]);
});

t.test(
  "the process series are rendered at most once a second, the agent's own on every scrape",
  async (t) => {
    const metrics = new AgentMetrics({ version: 'test', libnftables: '1.0.6' });
    let renders = 0;
    const render = metrics.runtime.metrics.bind(metrics.runtime);
    metrics.runtime.metrics = () => {
      renders++;
      return render();
    };
    const first = await metrics.exposition(1_000);
    t.match(first, /^process_cpu_seconds_total /m, 'the runtime series are in the exposition');
    for (let i = 0; i < 100; i++) await metrics.exposition(1_500); // a scrape flood within the second
    t.equal(renders, 1, 'one render of the runtime series for 101 scrapes');
    metrics.incDriftRepairs();
    const changed = await metrics.exposition(1_600);
    t.equal(renders, 1);
    t.not(changed, first);
    t.match(changed, /^ipmasq_drift_repairs_total 1$/m, 'a changed agent series shows at once');
    await metrics.exposition(1_999);
    t.equal(renders, 1);
    await metrics.exposition(2_000);
    t.equal(renders, 2, 'process series refresh after 1 s');
    t.match(changed, /^ipmasq_build_info\{version="test",libnftables="1\.0\.6",node="v\d+/m);
  },
);
