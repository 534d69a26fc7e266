// `npm run bench [-- --quick]`: issues 7 and 9's measurements in one run, as root, in the bench's
// own namespaces; writes docs/bench.md and docs/bench.svg (--quick prints the report instead).
import { writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { format, resolveConfig } from 'prettier';
import { packageRoot } from '../test/helpers/netns.js';
import { benchBreakdown } from './breakdown.js';
import { renderChart, type Series } from './chart.js';
import { benchConfigLoad } from './config-load.js';
import { benchDataPath, concatName, LINEAR, OURS } from './dataplane.js';
import { describeMachine } from './harness.js';
import { benchIdle } from './idle.js';
import { benchNeighbour, NONE } from './neighbour.js';
import { layoutSection, neighbourSection, recommendation } from './report-neighbour.js';
import { configLoadSection, healthSection, idleSection } from './report-agent.js';
import { flowSection, machineSection, writeSection, type BenchResults } from './report.js';
import { CONCAT_LAYOUTS } from './scripts.js';
import { workerRssMiB } from './worker-rss.js';
import { benchWrites } from './write.js';

const BUDGET_MS = 12 * 60_000;

const FULL = {
  runs: 5,
  writeSizes: [64, 1_000, 10_000, 100_000],
  idleSizes: [64, 10_000, 100_000],
  flowSizes: [64, 1_000, 10_000, 100_000],
  flowBatches: 7,
  batchMs: 300,
  neighbourSizes: [64, 1_000, 3_000, 5_000, 7_500, 10_000, 20_000, 50_000, 100_000],
  concatSizes: [64, 1_000, 10_000, 100_000],
};
const QUICK: typeof FULL = {
  runs: 3,
  writeSizes: [64, 1_000, 10_000],
  idleSizes: [64, 10_000],
  flowSizes: [64, 1_000, 10_000],
  flowBatches: 3,
  batchMs: 100,
  neighbourSizes: [64, 1_000, 10_000],
  concatSizes: [64, 10_000],
};

function resyncsFor(count: number, quick: boolean): number {
  const full = count <= 1_000 ? 40 : count <= 10_000 ? 20 : 10;
  return quick ? Math.ceil(full / 4) : full;
}

async function section<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const started = performance.now();
  console.error(`bench: ${name}…`);
  const result = await fn();
  console.error(`bench: ${name} done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return result;
}

function chart(r: BenchResults): string {
  const points = <T extends { cidrs: number }>(rows: readonly T[], y: (row: T) => number) =>
    rows.map((row) => [row.cidrs, y(row)] as const);
  const flows = (layout: string) => r.flows.rows.filter((row) => row.layout === layout);
  const neighbours = (layout: string) => r.neighbour.rows.filter((row) => row.layout === layout);
  const sizes = r.flows.rows.map((row) => row.cidrs);
  const flat = (y: number) => [Math.min(...sizes), Math.max(...sizes)].map((x) => [x, y] as const);
  const concatColors = ['#2a9d3f', '#8e44ad'];
  const concatFlows: Series[] = CONCAT_LAYOUTS.map((layout, i) => ({
    label: concatName(layout.name),
    color: concatColors[i] ?? '#666',
    points: points(flows(concatName(layout.name)), (row) => row.perFlowUs),
  }));
  const concatNeighbours: Series[] = CONCAT_LAYOUTS.map((layout, i) => ({
    label: concatName(layout.name),
    color: concatColors[i] ?? '#666',
    points: points(neighbours(concatName(layout.name)), (row) => row.neighbourMs),
  }));
  const none = r.neighbour.rows.find((row) => row.layout === NONE)?.neighbourMs ?? 1;
  return renderChart(
    [
      {
        title: 'Config write → kernel',
        yLabel: 'ms (median)',
        series: [
          {
            label: 'agent: file write → /healthz',
            color: '#1f6feb',
            points: points(r.writes.rows, (row) => row.agentMs),
          },
          {
            label: 'bare nft -f of the same script',
            color: '#f39c12',
            points: points(r.writes.rows, (row) => row.nftFreshMs),
          },
          {
            label: 'original: iptables-nft-restore',
            color: '#c0392b',
            points: points(r.writes.rows, (row) => row.iptablesMs),
          },
        ],
        marks: [{ label: '250 ms', y: 250 }],
      },
      {
        title: 'Per new flow (dest. not exempt)',
        yLabel: 'µs per flow, as the pod sees it',
        series: [
          { label: OURS, color: '#1f6feb', points: points(flows(OURS), (row) => row.perFlowUs) },
          {
            label: LINEAR,
            color: '#c0392b',
            points: points(flows(LINEAR), (row) => row.perFlowUs),
          },
          ...concatFlows,
          {
            label: 'no NAT table (baseline)',
            color: '#999',
            points: flat(r.flows.baselineUs),
            dashed: true,
          },
        ],
      },
      {
        title: "A neighbour's nft -f",
        yLabel: 'ms (median)',
        series: [
          {
            label: `with ${OURS}`,
            color: '#1f6feb',
            points: points(neighbours(OURS), (row) => row.neighbourMs),
          },
          ...concatNeighbours,
          { label: NONE, color: '#999', points: flat(none), dashed: true },
        ],
        marks: [{ label: '100 ms', y: 100 }],
      },
    ],
    `ipmasq-agent bench, ${r.machine.cpus} vCPU, kernel ${r.machine.kernel}, ${r.machine.nft.split(' (')[0]}, ${r.machine.date.slice(0, 10)}`,
  );
}

function report(r: BenchResults): string {
  const largest = Math.max(...r.writes.rows.map((row) => row.cidrs));
  return [
    '# Benchmarks',
    '',
    '<!-- Generated by `npm run bench` (bench/run.ts); edit the generator, not this file. -->',
    '',
    machineSection(r),
    '',
    '![config write, per-flow cost and neighbour cost by number of CIDRs](bench.svg)',
    '',
    writeSection(r, largest),
    flowSection(r, Math.max(...r.flows.rows.map((row) => row.cidrs))),
    idleSection(r, Math.max(...r.idle.map((row) => row.cidrs))),
    healthSection(r),
    configLoadSection(r),
    neighbourSection(r),
    layoutSection(r),
    recommendation(r),
  ].join('\n');
}

async function main(argv: readonly string[]): Promise<void> {
  const quick = argv.includes('--quick');
  if (process.getuid?.() !== 0)
    throw new Error('the bench needs root: it creates network namespaces');
  const plan = quick ? QUICK : FULL;
  const started = performance.now();
  const machine = describeMachine();
  const breakdown = await section('JavaScript-side breakdown', () =>
    benchBreakdown(plan.writeSizes, plan.runs),
  );
  const configLoad = await section('config load (100 000)', () => benchConfigLoad());
  const writes = await section('config write → kernel', () =>
    benchWrites(plan.writeSizes, plan.runs),
  );
  const idle = await section('idle resync and RSS', () =>
    benchIdle(plan.idleSizes, (c) => resyncsFor(c, quick)),
  );
  const flows = await section('per-flow cost', () =>
    benchDataPath(plan.flowSizes, plan.flowBatches, plan.batchMs),
  );
  const neighbour = await section('neighbour cost', () =>
    benchNeighbour(plan.neighbourSizes, plan.concatSizes, plan.runs),
  );
  const workerRss = await section('config worker RSS', () => workerRssMiB());
  const results: BenchResults = {
    quick,
    machine,
    loadAfter: loadavg().map((l) => Math.round(l * 100) / 100),
    durationS: (performance.now() - started) / 1000,
    writes,
    breakdown,
    flows,
    idle,
    configLoad,
    neighbour,
    runs: plan.runs,
    workerRssMiB: workerRss,
  };
  const markdown = report(results);
  if (quick && !argv.includes('--write')) {
    process.stdout.write(markdown);
    return;
  }
  // Formatted as `npm run lint` (prettier --check .) expects it.
  const formatted = await format(markdown, {
    ...(await resolveConfig(join(packageRoot, 'docs', 'bench.md'))),
    parser: 'markdown',
  });
  await writeFile(join(packageRoot, 'docs', 'bench.md'), formatted);
  await writeFile(join(packageRoot, 'docs', 'bench.svg'), chart(results));
  console.error('bench: wrote docs/bench.md and docs/bench.svg');
}

// Namespaces are deleted by the helpers' exit hook, which process.exit() runs: on a signal or
// when the whole run overstays its budget, exit rather than leave them behind.
const watchdog = setTimeout(() => {
  console.error(`bench: over the ${BUDGET_MS / 60_000} min budget; exiting`);
  process.exit(1);
}, BUDGET_MS);
watchdog.unref();
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(130));

main(process.argv.slice(2)).then(
  () => clearTimeout(watchdog),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
