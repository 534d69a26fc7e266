// `npm run bench [-- --quick]`: every driver in one run, as root, in the bench's own namespaces;
// writes their data to docs/bench.json and renders docs/bench.md and docs/bench.svg from it
// (bench/report.ts; --quick prints the report instead).
import { readFile, writeFile } from 'node:fs/promises';
import { format, resolveConfig } from 'prettier';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../harness/netns.js';
import { benchBigDirectory } from './big-directory.js';
import { benchBusy } from './busy.js';
import { benchWhole } from './whole.js';
import { benchBreakdown } from './breakdown.js';
import { benchChurn } from './churn.js';
import { benchConntrack } from './conntrack.js';
import { benchDecisions } from './decisions.js';
import { benchEdit } from './edit.js';
import { benchEditPackets } from './edit-packets.js';
import { benchNatSample } from './nat-sample.js';
import { benchFlowsMemory } from './flows-memory.js';
import { benchDataPath } from './dataplane.js';
import { describeMachine } from './harness.js';
import { benchIdle } from './idle.js';
import { benchKubernetes } from './kubernetes.js';
import { benchNeighbour } from './neighbour.js';
import { benchLookBeside, benchOtherNat } from './other-nat.js';
import { benchKubernetesReal } from './kubernetes-real.js';
import { benchPodPolicies } from './pod-policies.js';
import { renderMarkdown, writeReport, type BenchResults } from './report.js';
import { workerRssMiB } from './worker-rss.js';
import { benchWrites } from './write.js';

// The edit section's 1 000 one-CIDR edits at 100 000 CIDRs alone take ~15 min (each burst's audit
// reads the tables back), and the 1 000 judged on packets another ~5.
const BUDGET_MS = 45 * 60_000;

const FULL = {
  runs: 5,
  writeSizes: [64, 1_000, 10_000, 100_000],
  idleSizes: [64, 10_000, 100_000],
  // Both layouts at auto's crossover too (2 000 CIDRs, 2 001 elements: concatenated).
  flowSizes: [64, 1_000, 2_000, 10_000, 100_000],
  flowBatches: 7,
  // Each size and layout measured with and without its table this many times in turn.
  flowRounds: 3,
  batchMs: 300,
  neighbourSizes: [64, 1_000, 2_000, 2_500, 3_000, 5_000, 7_500, 10_000, 20_000, 50_000, 100_000],
  // A neighbour's transaction is ~15 ms and its gain is judged against 10 ms: medians of more runs.
  neighbourRuns: 15,
  concatSizes: [64, 1_000, 10_000, 100_000],
  conntrackUnrelated: 100_000,
};
const QUICK: typeof FULL = {
  runs: 3,
  writeSizes: [64, 1_000, 10_000],
  idleSizes: [64, 10_000],
  flowSizes: [64, 1_000, 10_000],
  flowBatches: 3,
  flowRounds: 1,
  batchMs: 100,
  neighbourSizes: [64, 1_000, 10_000],
  neighbourRuns: 5,
  concatSizes: [64, 10_000],
  conntrackUnrelated: 10_000,
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

/**
 * `--only kubernetes`, `other-nat`, `decisions`, `nat-sample`, `flows-memory`, `edit`, `kubernetes-real`, `pod-policies`, `big-directory`, `busy`, `whole`, `flows` or `edit-packets`: measures that section alone and puts it into
 * docs/bench.json beside the other sections' figures from their own run (each such section says
 * when it was measured).
 */
async function onlySection(name: string): Promise<void> {
  const json = join(packageRoot, 'docs', 'bench.json');
  const results = JSON.parse(await readFile(json, 'utf8')) as BenchResults;
  const date = new Date().toISOString();
  if (name === 'kubernetes') results.kubernetes = { ...(await benchKubernetes()), date };
  else if (name === 'other-nat')
    results.otherNat = { rows: await benchOtherNat(), beside: await benchLookBeside(), date };
  else if (name === 'decisions') results.decisions = { ...(await benchDecisions()), date };
  else if (name === 'nat-sample') results.natSample = { rows: await benchNatSample(), date };
  else if (name === 'flows-memory') results.flowsMemory = { rows: await benchFlowsMemory(), date };
  else if (name === 'edit') results.edit = { ...(await benchEdit()), date };
  else if (name === 'kubernetes-real')
    results.kubernetesReal = { rows: await benchKubernetesReal(), date };
  else if (name === 'pod-policies') results.podPolicies = { ...(await benchPodPolicies()), date };
  else if (name === 'big-directory')
    results.bigDirectory = { ...(await benchBigDirectory()), date };
  else if (name === 'busy') results.busy = { rows: await benchBusy(), date };
  else if (name === 'whole') results.whole = { rows: await benchWhole(), date };
  else if (name === 'edit-packets') results.editPackets = { ...(await benchEditPackets()), date };
  else if (name === 'flows')
    results.flows = {
      ...(await benchDataPath(
        FULL.flowSizes,
        FULL.flowBatches,
        FULL.batchMs,
        undefined,
        FULL.flowRounds,
      )),
      date,
    };
  else
    throw new Error(
      `--only: no section ${name} (kubernetes, other-nat, decisions, nat-sample, flows-memory, edit, kubernetes-real, pod-policies, big-directory, busy, whole, flows, edit-packets)`,
    );
  const style = { ...(await resolveConfig(json)), parser: 'json' as const };
  await writeFile(json, await format(JSON.stringify(results), style));
  await writeReport(results);
  console.error(`bench: wrote the ${name} section into docs/bench.json and docs/bench.md`);
}

async function main(argv: readonly string[]): Promise<void> {
  if (argv.includes('--only')) return onlySection(argv[argv.indexOf('--only') + 1] ?? '');
  const quick = argv.includes('--quick');
  if (process.getuid?.() !== 0)
    throw new Error('the bench needs root: it creates network namespaces');
  const plan = quick ? QUICK : FULL;
  const started = performance.now();
  const machine = describeMachine();
  const breakdown = await section('JavaScript-side breakdown', () =>
    benchBreakdown(plan.writeSizes, plan.runs),
  );
  const writes = await section('config write → kernel', () =>
    benchWrites(plan.writeSizes, plan.runs),
  );
  const idle = await section('idle resync and RSS', () =>
    benchIdle(plan.idleSizes, (c) => resyncsFor(c, quick)),
  );
  const flows = await section('per-flow cost', () =>
    benchDataPath(plan.flowSizes, plan.flowBatches, plan.batchMs, undefined, plan.flowRounds),
  );
  const neighbour = await section('neighbour cost', () =>
    benchNeighbour(plan.neighbourSizes, plan.concatSizes, plan.neighbourRuns),
  );
  const conntrack = await section('conntrack flush', () =>
    benchConntrack(plan.conntrackUnrelated, 1_000, plan.runs),
  );
  const workerRss = await section('config worker RSS', () => workerRssMiB());
  const busy = await section('beside a busy node', async () => ({
    rows: await benchBusy(quick ? [64, 4_500] : [64, 4_500, 100_000]),
    date: new Date().toISOString(),
  }));
  const whole = await section('whole changes with the defaults', async () => ({
    rows: await benchWhole(quick ? [64, 1_000] : [64, 1_000, 100_000], quick ? 3 : 5),
    date: new Date().toISOString(),
  }));
  const bigDirectory = await section('idle beside a directory of 10 000 files', async () => ({
    ...(await benchBigDirectory(10_000, quick ? 5 : 20)),
    date: new Date().toISOString(),
  }));
  const churn = await section('memory and stalls after churn', () =>
    quick
      ? benchChurn(
          [
            [10_000, 0],
            [64, 0],
            [10_000, 1],
            [64, 1],
          ],
          2,
        )
      : benchChurn(),
  );
  const kubernetes = await section('Kubernetes API at 5 000 Nodes', async () => ({
    ...(await benchKubernetes(quick ? 1_000 : 5_000, quick ? 5 : 20)),
    date: new Date().toISOString(),
  }));
  const otherNat = await section('the look at other NAT', async () => ({
    rows: await benchOtherNat(quick ? 10_000 : 100_000, quick ? 10 : 50),
    beside: await benchLookBeside(quick ? 20_000 : 200_000, quick ? 4 : 10),
    date: new Date().toISOString(),
  }));
  const decisions = await section('decisions counted', async () => ({
    ...(await benchDecisions(quick ? [64, 10_000] : [64, 100_000], plan.flowBatches, plan.batchMs)),
    date: new Date().toISOString(),
  }));
  const edit = await section('the everyday edit', async () => ({
    ...(await benchEdit(
      quick ? [1_000, 10_000] : [1_000, 10_000, 100_000],
      plan.runs,
      quick ? 20_000 : 200_000,
    )),
    date: new Date().toISOString(),
  }));
  const editPackets = await section('edits back to back, on packets', async () => ({
    ...(await benchEditPackets(quick ? 10_000 : 100_000, quick ? 100 : 1_000)),
    date: new Date().toISOString(),
  }));
  const natSample = await section('SNAT port sample', async () => ({
    rows: await benchNatSample(quick ? [100_000] : [100_000, 1_000_000]),
    date: new Date().toISOString(),
  }));
  const flowsMemory = await section('--flows memory', async () => ({
    rows: await benchFlowsMemory(),
    date: new Date().toISOString(),
  }));
  const results: BenchResults = {
    quick,
    machine,
    loadAfter: loadavg().map((l) => Math.round(l * 100) / 100),
    durationS: (performance.now() - started) / 1000,
    writes,
    breakdown,
    flows,
    idle,
    neighbour: {
      rows: neighbour.rows,
      listings: Object.fromEntries(neighbour.listings),
      runs: plan.neighbourRuns,
    },
    runs: plan.runs,
    conntrack,
    workerRssMiB: workerRss,
    churn,
    kubernetes,
    otherNat,
    decisions,
    natSample,
    flowsMemory,
    edit,
    editPackets,
    bigDirectory,
    busy,
    whole,
  };
  if (quick && !argv.includes('--write')) {
    process.stdout.write(renderMarkdown(results));
    return;
  }
  // The drivers' data first; the report is rendered from it, and again by bench/report.ts alone.
  const json = join(packageRoot, 'docs', 'bench.json');
  const style = { ...(await resolveConfig(json)), parser: 'json' as const };
  await writeFile(json, await format(JSON.stringify(results), style));
  await writeReport(results);
  console.error('bench: wrote docs/bench.json, docs/bench.md and docs/bench.svg');
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
