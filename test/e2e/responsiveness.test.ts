// docs/observability.md, "HTTP": the server keeps answering while a 100 000-CIDR transaction is
// applied, because libnftables runs off the JavaScript thread. A client inside the namespace probes
// /healthz the way the kubelet does (a new connection each time) before, during and after the
// write.
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import {
  httpGet,
  generationOf,
  metricValue,
  startAgent,
  startHealthProbe,
  waitFor,
} from '../../harness/agent.js';
import { inNetns, makeNetns, requireRoot, tempDir } from '../../harness/netns.js';

const CIDRS = 100_000;
const MAX_REQUESTS = 2_000;
const MAX_SECONDS = 30;
/** Pause between requests: ~100 requests/s leaves the agent the CPU it needs on 2 cores. */
const GAP_SECONDS = 0.005;
/** The end of the write that is surely inside the libnftables call (it takes ~800 ms here). */
const KERNEL_CALL_TAIL_MS = 300;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

/** Non-adjacent /32s (every other address from 11.0.0.0), so merging keeps all of them. */
function bigConfig(): string {
  const cidrs: string[] = [];
  for (let i = 0; i < CIDRS; i++) {
    const n = 11 * 2 ** 24 + 2 * i;
    cidrs.push(`${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}/32`);
  }
  return JSON.stringify({ nonMasqueradeCIDRs: cidrs, cidrLimit: CIDRS, resyncInterval: '60s' });
}

if (requireRoot(t)) {
  const dir = tempDir(t, 'responsive');
  const configFile = join(dir, 'ip-masq-agent');
  writeFileSync(configFile, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 60s\n');
  writeFileSync(`${configFile}.next`, bigConfig());
  const ns = await makeNetns(t, 'resp');
  await inNetns(ns, 'ip', ['link', 'set', 'lo', 'up']);
  const port = 9410;
  // tap's child_process wrapper puts its loaders back into NODE_OPTIONS; the agent runs without
  // them.
  const agent = startAgent(
    t,
    ns,
    // The plain interval layout, explicitly: the largest write there is, and the large-set warning.
    ['--config', configFile, '--listen', `127.0.0.1:${port}`, '--set-layout', 'interval'],
    ['env', '-u', 'NODE_OPTIONS'],
  );
  const written = (generation: number) =>
    agent.logs.find(
      (l) => l.msg === 'ruleset written to the kernel' && l.generation === generation,
    );
  await waitFor('generation 1', () => (written(1) ? true : undefined), 10_000);
  await waitFor('the server', () =>
    httpGet(ns, port, '/healthz').then(
      (r) => r.status,
      () => undefined,
    ),
  );

  const probe = await startHealthProbe(t, ns, port, {
    maxRequests: MAX_REQUESTS,
    maxSeconds: MAX_SECONDS,
    gapS: GAP_SECONDS,
  });

  await new Promise((r) => setTimeout(r, 500)); // a baseline before the write
  const writeStarted = Date.now();
  renameSync(`${configFile}.next`, configFile);
  const applied = await waitFor('generation 2', () => written(2), 20_000, 20);
  const writeDone = Number(applied.time);
  await new Promise((r) => setTimeout(r, 500)); // and some after it
  const result = await probe.stop();

  t.test('every probe answered within the bound during a 100 000-CIDR write', async (t) => {
    t.same(result.failures, [], 'all requests succeeded');
    const latencies = result.samples.map(([, ms]) => ms).sort((a, b) => a - b);
    const during = result.samples.filter(([start]) => start >= writeStarted && start <= writeDone);
    const duringSorted = during.map(([, ms]) => ms).sort((a, b) => a - b);
    const stats = (sorted: number[]) =>
      `p50 ${percentile(sorted, 50).toFixed(1)} ms, p99 ${percentile(sorted, 99).toFixed(1)} ms, max ${sorted.at(-1)?.toFixed(1)} ms`;
    t.comment(
      `write took ${writeDone - writeStarted} ms from the rename (durationMs ${String(applied.durationMs)})`,
    );
    t.comment(`all ${latencies.length} requests: ${stats(latencies)}`);
    t.comment(`${during.length} requests during the write: ${stats(duringSorted)}`);
    t.ok(during.length >= 20, `${during.length} requests overlapped the write`);
    // The libnftables call is the write's last ~0.8 s here; were it on the JS thread, no request
    // could complete in the moments before the write is logged.
    const inKernelCall = result.samples.filter(
      ([start, ms]) => start + ms >= writeDone - KERNEL_CALL_TAIL_MS && start + ms <= writeDone,
    );
    t.ok(
      inKernelCall.length >= 5,
      `${inKernelCall.length} requests answered during the kernel call`,
    );
    // How fast each answer came is the machine's (reported above and by the bench); that no
    // request waited out a large part of the write is the behaviour: a loop blocked by the write
    // would hold some request for about the write's length.
    const writeMs = writeDone - writeStarted;
    t.ok(
      (duringSorted.at(-1) ?? Infinity) < writeMs / 2,
      `no request during the write waited half of it (longest ${duringSorted.at(-1)} ms of ${writeMs})`,
    );
  });

  t.test('the new generation is in the kernel and reported', async (t) => {
    t.match(
      applied,
      { nonMasqueradeCIDRs: { ipv4: CIDRS + 1 } },
      'the configured /32s plus link-local',
    );
    const listing = (
      await inNetns(ns, 'nft', ['list', 'table', 'ip', 'ipmasq'], { timeoutMs: 30_000 })
    ).stdout;
    t.equal(generationOf(listing), 2);
    const elements = /set nonmasq \{[^}]*elements = \{([^}]*)\}/.exec(listing)?.[1] ?? '';
    t.equal(elements.split(',').length, CIDRS + 1, 'the kernel set holds every element');
    const health = await httpGet(ns, port, '/healthz');
    t.equal(health.status, 200);
    t.match(JSON.parse(health.body), { generation: 2, nonMasqueradeCIDRs: { ipv4: CIDRS + 1 } });
    const metrics = (await httpGet(ns, port, '/metrics')).body;
    t.equal(metricValue(metrics, 'ipmasq_large_set_warning'), 1);
    t.equal(metricValue(metrics, 'ipmasq_generation'), 2);
  });
}
