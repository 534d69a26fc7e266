// deploy/monitoring: the PrometheusRule's alerts fire and stay quiet as their promtool unit tests
// say, and every query of the rules and of the Grafana dashboard is valid PromQL over series the
// agent exports.
import { execFileSync } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { parse, stringify } from 'yaml';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';
import { packageRoot, requireTool, tempDir } from '../../../harness/netns.js';
import { parseExposition } from '../../../harness/prometheus.js';

const monitoring = join(packageRoot, 'deploy', 'monitoring');
const rule = parse(readFileSync(join(monitoring, 'prometheus-rule.yaml'), 'utf8')) as {
  kind: string;
  spec: { groups: Array<{ rules: Array<{ alert?: string; expr: string }> }> };
};
const dashboard = JSON.parse(readFileSync(join(monitoring, 'grafana-dashboard.json'), 'utf8')) as {
  panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
};

function promtool(dir: string, ...args: string[]): string {
  return execFileSync('promtool', args, {
    cwd: dir,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** The sample names an AgentMetrics exposes, histogram suffixes included. */
async function exportedNames(): Promise<Set<string>> {
  const metrics = new AgentMetrics();
  metrics.kubernetes(); // registered with --kubernetes only
  // Registered by the running agent (src/agent.ts), read from the kernel when scraped.
  metrics.conntrackHealth(async () => ({ entries: 1, max: 2, events: { drop: 0 }, problems: [] }));
  metrics.snatHeadroom()([{ family: 'ipv4', protocol: 'udp', flows: 1, usage: 0.5 }]);
  metrics.decisions(async () => [
    { family: 'ipv4', counters: [{ name: 'exempt', packets: 1, bytes: 1 }] },
  ]);
  const families = parseExposition(await metrics.exposition(0));
  return new Set(
    [...families.values()]
      .flatMap((f) => f.samples.map((s) => s.name))
      .concat([...families.keys()]),
  );
}

const seriesIn = (expr: string) => [...expr.matchAll(/\b(ipmasq_[a-z_]+)/g)].map((m) => m[1]!);

t.test('the alerts fire and stay quiet as their unit tests say', async (t) => {
  if (!requireTool(t, 'promtool', 'prometheus')) return;
  t.equal(rule.kind, 'PrometheusRule');
  const dir = tempDir(t, 'alerts');
  writeFileSync(join(dir, 'rules.yaml'), stringify({ groups: rule.spec.groups }));
  copyFileSync(
    join(packageRoot, 'test', 'fixtures', 'alerts', 'alerts.test.yaml'),
    join(dir, 'alerts.test.yaml'),
  );
  t.match(promtool(dir, 'check', 'rules', 'rules.yaml'), /SUCCESS: 11 rules found/);
  t.match(promtool(dir, 'test', 'rules', 'alerts.test.yaml'), /SUCCESS/);
  const tested = readFileSync(join(dir, 'alerts.test.yaml'), 'utf8');
  for (const alert of rule.spec.groups.flatMap((g) => g.rules).map((r) => r.alert)) {
    const cases = tested.match(new RegExp(`alertname: ${alert}\\n`, 'g')) ?? [];
    t.ok(cases.length >= 2, `${alert}: tested firing and not firing (${cases.length} cases)`);
  }
});

t.test('every query of the rules and the dashboard is PromQL over exported series', async (t) => {
  const names = await exportedNames();
  const queries = [
    ...rule.spec.groups
      .flatMap((g) => g.rules)
      .map((r) => ({ where: r.alert ?? '?', expr: r.expr })),
    ...dashboard.panels.flatMap((p) =>
      p.targets.map((target) => ({ where: p.title, expr: target.expr })),
    ),
  ];
  for (const { where, expr } of queries) {
    const series = seriesIn(expr);
    t.ok(series.length > 0, `${where}: queries the agent's series`);
    for (const name of series) t.ok(names.has(name), `${where}: ${name} is exported`);
  }
  if (!requireTool(t, 'promtool', 'prometheus')) return;
  // Grafana's $instance becomes a plain regex so that promtool can parse each query.
  const dir = tempDir(t, 'dashboard');
  const recording = queries.map(({ expr }, i) => ({
    record: `dashboard:query_${i}`,
    expr: expr.replaceAll('$instance', '.*'),
  }));
  writeFileSync(
    join(dir, 'queries.yaml'),
    stringify({ groups: [{ name: 'dashboard', rules: recording }] }),
  );
  t.match(
    promtool(dir, 'check', 'rules', 'queries.yaml'),
    new RegExp(`SUCCESS: ${queries.length} rules found`),
  );
});
