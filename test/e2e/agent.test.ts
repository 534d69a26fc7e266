// The running agent in a node namespace (docs/writes.md, "When it writes" and "HTTP"): live reload,
// invalid config, drift repair, SIGHUP, generation-gated resyncs, restarts, SIGTERM — checked in
// the kernel, on HTTP and on the wire.
import { join } from 'node:path';
import t from 'tap';
import {
  httpGet,
  listTable,
  metricValue,
  startAgent,
  waitFor,
  type RunningAgent,
} from '../../harness/agent.js';
import { inNetns, requireRoot, tempDir } from '../../harness/netns.js';
import {
  generation as nodeGeneration,
  metrics as nodeMetrics,
  untilGeneration as untilNodeGeneration,
  untilUp as untilNodeUp,
  writeConfig as writeNodeConfig,
  type Node,
} from '../helpers/node.js';
import {
  makeTopology,
  NODE_IPV4,
  POD_IPV4,
  probeSource,
  REMOTE_TARGETS_IPV4 as V4,
} from '../../harness/topology.js';

if (requireRoot(t)) {
  // Agents outlive the subtest that starts them: their teardown belongs to the file.
  const root = t;
  const dir = tempDir(t, 'agent');
  const configFile = join(dir, 'ip-masq-agent');
  const topo = await makeTopology(t, { ipv6: false });
  const ns = topo.node;
  const port = 9410;
  const args = ['--config', configFile, '--listen', `127.0.0.1:${port}`];
  const nft = (...a: string[]) => inNetns(ns, 'nft', a);

  const node: Node = { ns, dir, configFile, port };
  const writeConfig = (text: string) => writeNodeConfig(node, text);
  const generation = () => nodeGeneration(node);
  const untilGeneration = (n: number, timeoutMs?: number) =>
    untilNodeGeneration(node, n, timeoutMs);
  const via = async (dst: string) => {
    const seen = await probeSource(topo, dst);
    return seen.address === NODE_IPV4 ? 'node' : seen.address === POD_IPV4 ? 'pod' : seen.address;
  };
  const metrics = () => nodeMetrics(node);
  const healthz = async () => {
    const r = await httpGet(ns, port, '/healthz');
    return { status: r.status, body: JSON.parse(r.body) as Record<string, unknown> };
  };
  const untilUp = () => untilNodeUp(node, agent);

  const canaryScript =
    'table inet canary {\n\tset keep { type ipv4_addr; flags interval; elements = { 10.1.0.0/16, 172.31.0.0/16 } }\n' +
    '\tchain out { type filter hook output priority 0; policy accept; ip daddr @keep accept; }\n}\n';
  await inNetns(ns, 'nft', ['-f', '-'], { input: canaryScript });
  const canaryBefore = await listTable(ns, 'inet', 'canary');

  writeConfig('nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 2s\n');
  let agent: RunningAgent = startAgent(root, ns, args);

  t.test('starts: generation 1, healthy, ready, metrics', async (t) => {
    await untilGeneration(1, 10_000);
    await untilUp();
    const h = await healthz();
    t.equal(h.status, 200);
    t.match(h.body, {
      status: 'ok',
      generation: 1,
      lastError: null,
      configError: null,
      nonMasqueradeCIDRs: { ipv4: 2, ipv6: 0 },
    });
    t.match(h.body.configHash, /^[0-9a-f]{64}$/);
    t.ok(!Number.isNaN(Date.parse(String(h.body.lastSyncTime))), 'lastSyncTime is ISO 8601');
    t.equal((await httpGet(ns, port, '/readyz')).status, 200);
    const text = await metrics();
    t.equal(metricValue(text, 'ipmasq_generation'), 1);
    t.equal(metricValue(text, 'ipmasq_config_valid'), 1);
    t.equal(metricValue(text, 'ipmasq_syncs_total{result="applied"}'), 1);
    t.equal(await via(V4.outsideDefaultsA), 'node');
    t.equal(await via(V4.private10), 'pod');
  });

  t.test('a live update lands within 1 s of the write', async (t) => {
    const written = writeConfig(
      'nonMasqueradeCIDRs: [10.0.0.0/8, 198.19.0.0/24]\nresyncInterval: 2s\n',
    );
    await untilGeneration(2);
    const elapsed = Date.now() - written;
    t.ok(elapsed <= 1000, `applied ${elapsed} ms after the write`);
    t.equal(await via(V4.outsideDefaultsA), 'pod');
  });

  t.test('an invalid update keeps the old behaviour on the wire; the fix recovers', async (t) => {
    writeConfig('nonMasqueradeCIDRs: [10.0.0.1/8]\nresyncInterval: 2s\n');
    const h = await waitFor('configError', async () => {
      const r = await healthz();
      return r.body.configError ? r : undefined;
    });
    t.match(
      h.body.configError,
      /nonMasqueradeCIDRs\[0\]: "10\.0\.0\.1\/8" is not aligned.*did you mean 10\.0\.0\.0\/8/,
    );
    t.equal(h.status, 200, 'healthy: the last good ruleset is in place');
    t.equal((await httpGet(ns, port, '/readyz')).status, 503);
    t.equal(await generation(), 2);
    t.equal(await via(V4.outsideDefaultsA), 'pod', 'still the last good config');
    t.equal(metricValue(await metrics(), 'ipmasq_config_valid'), 0);
    const errorLines = agent.logs.filter(
      (l) => l.level === 50 && /not aligned/.test(String(l.msg)),
    );
    t.equal(errorLines.length, 1, 'the error is logged once');
    writeConfig('nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 2s\n');
    await untilGeneration(3);
    t.equal(await via(V4.outsideDefaultsA), 'node');
    await waitFor('ready', async () =>
      (await httpGet(ns, port, '/readyz')).status === 200 ? true : undefined,
    );
  });

  t.test('drift is repaired within one resync', async (t) => {
    const drifts: Array<[string, string[]]> = [
      ['table deleted', ['delete', 'table', 'ip', 'ipmasq']],
      ['set flushed', ['flush', 'set', 'ip', 'ipmasq', 'nonmasq']],
      ['chain flushed', ['flush', 'chain', 'ip', 'ipmasq', 'IP-MASQ-AGENT']],
    ];
    for (const [name, command] of drifts) {
      const before = (await generation()) ?? 0;
      await nft(...command);
      await untilGeneration(before + 1, 6_000);
      t.pass(`${name}: repaired`);
      t.equal(await via(V4.private10), 'pod', `${name}: exempt again`);
    }
    // A single rule deleted by hand, by its handle.
    const listing = (await nft('-a', 'list', 'chain', 'ip', 'ipmasq', 'IP-MASQ-AGENT')).stdout;
    const handle = /@nonmasq counter name "exempt" return # handle (\d+)/.exec(listing)?.[1];
    t.ok(handle, 'found the rule');
    const before = (await generation()) ?? 0;
    await nft('delete', 'rule', 'ip', 'ipmasq', 'IP-MASQ-AGENT', 'handle', String(handle));
    await untilGeneration(before + 1, 6_000);
    t.equal(metricValue(await metrics(), 'ipmasq_drift_repairs_total'), 4);
    t.ok(
      agent.logs.filter((l) => l.level === 40 && /drift/.test(String(l.msg))).length >= 4,
      'warned',
    );
  });

  t.test('SIGHUP resyncs at once; idle resyncs do not read the table', async (t) => {
    // Only the resync interval changes: no rule does, so the config's sync writes nothing.
    const g = await generation();
    const syncsBefore = metricValue(await metrics(), 'ipmasq_syncs_total{result="unchanged"}') ?? 0;
    writeConfig('nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 60s\n');
    await waitFor('the sync of the changed file', async () =>
      (metricValue(await metrics(), 'ipmasq_syncs_total{result="unchanged"}') ?? 0) > syncsBefore
        ? true
        : undefined,
    );
    t.equal(await generation(), g, 'a new resyncInterval alone rewrites nothing');
    await new Promise((r) => setTimeout(r, 300));
    const reads = metricValue(await metrics(), 'ipmasq_kernel_reads_total') ?? NaN;
    const unchanged = metricValue(await metrics(), 'ipmasq_syncs_total{result="unchanged"}') ?? NaN;
    for (let i = 0; i < 5; i++) {
      agent.child.kill('SIGHUP');
      await new Promise((r) => setTimeout(r, 150));
    }
    await waitFor('5 more syncs', async () =>
      (metricValue(await metrics(), 'ipmasq_syncs_total{result="unchanged"}') ?? 0) >= unchanged + 5
        ? true
        : undefined,
    );
    t.equal(
      metricValue(await metrics(), 'ipmasq_kernel_reads_total'),
      reads,
      'no read while nothing changed',
    );

    await nft('add', 'table', 'ip', 'someone-else');
    agent.child.kill('SIGHUP');
    await waitFor('one read', async () =>
      (metricValue(await metrics(), 'ipmasq_kernel_reads_total') ?? 0) > reads ? true : undefined,
    );
    const afterOther = metricValue(await metrics(), 'ipmasq_kernel_reads_total');
    agent.child.kill('SIGHUP');
    await new Promise((r) => setTimeout(r, 300));
    t.equal(
      metricValue(await metrics(), 'ipmasq_kernel_reads_total'),
      afterOther,
      'back to no reads',
    );
    t.equal(await generation(), g, 'another tool writing elsewhere is not drift');
    await nft('delete', 'table', 'ip', 'someone-else');

    await nft('delete', 'table', 'ip', 'ipmasq');
    agent.child.kill('SIGHUP');
    await untilGeneration((g ?? 0) + 1, 2_000);
    t.pass('repaired on SIGHUP, long before the 60 s resync');
  });

  t.test('kill -9 leaves the table; a restart adopts it without writing', async (t) => {
    const g = await generation();
    agent.child.kill('SIGKILL');
    await agent.exited;
    t.equal(await generation(), g, 'table left in place');
    agent = startAgent(root, ns, args);
    await untilUp();
    await waitFor('first sync', async () =>
      (metricValue(await metrics(), 'ipmasq_syncs_total{result="unchanged"}') ?? 0) >= 1
        ? true
        : undefined,
    );
    const text = await metrics();
    t.equal(metricValue(text, 'ipmasq_syncs_total{result="applied"}'), 0, 'no write');
    t.equal(metricValue(text, 'ipmasq_generation'), g, 'generation adopted');
    t.equal((await healthz()).body.generation, g);
    t.equal(await generation(), g);
  });

  t.test('a restart with a changed config continues the count', async (t) => {
    const g = (await generation()) ?? 0;
    agent.child.kill('SIGKILL');
    await agent.exited;
    writeConfig('nonMasqueradeCIDRs: [10.0.0.0/8, 198.18.255.0/24]\nresyncInterval: 60s\n');
    agent = startAgent(root, ns, args);
    await untilGeneration(g + 1, 10_000);
    t.equal(await via(V4.outsideDefaultsB), 'pod');
  });

  t.test('SIGTERM: exit 0 within 5 s, tables left in place', async (t) => {
    await untilUp();
    const g = await generation();
    const started = Date.now();
    agent.child.kill('SIGTERM');
    const { code } = await agent.exited;
    t.equal(code, 0);
    t.ok(Date.now() - started < 5_000, `exited in ${Date.now() - started} ms`);
    t.equal(await generation(), g);
  });

  t.test('the canary table of another owner is byte-for-byte unchanged', async (t) => {
    t.equal(await listTable(ns, 'inet', 'canary'), canaryBefore);
  });
}
