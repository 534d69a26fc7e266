// docs/bench.json → docs/bench.md and docs/bench.svg. Presents what the drivers measured beside the
// goals the issues name; it draws no conclusions. Run on its own to re-render without measuring:
//   node --import=tsx bench/report.ts
import { readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { format, resolveConfig } from 'prettier';
import { AUTO_LAYOUT_CROSSOVER } from '../src/compile.js';
import { packageRoot } from '../harness/netns.js';
import type { BreakdownRow } from './breakdown.js';
import type { ChurnResult } from './churn.js';
import type { ConntrackSummary } from './conntrack.js';
import { renderChart, type Series } from './chart.js';
import { concatName, LINEAR, OURS, type DataPathResults } from './dataplane.js';
import { arrivalLatencies, fmt, median, percentile, type Machine } from './harness.js';
import type { IdleRow } from './idle.js';
import type { BigDirectoryResult } from './big-directory.js';
import type { BusyRow } from './busy.js';
import type { WholeRow } from './whole.js';
import type { KubernetesRow } from './kubernetes.js';
import type { RealApiRow } from './kubernetes-real.js';
import type { PodPolicyResults } from './pod-policies.js';
import type { FlowsMemoryRow } from './flows-memory.js';
import type { OtherNatRow } from './other-nat.js';
import type { DecisionsResult } from './decisions.js';
import type { EditResults, EditRow } from './edit.js';
import type { EditPacketsResult } from './edit-packets.js';
import type { NatSampleRow } from './nat-sample.js';
import { NONE, type NeighbourRow } from './neighbour.js';
import type { LookBeside } from './other-nat.js';
import { autoLayoutOf, CONCAT_LAYOUTS } from './scripts.js';
import type { WriteResults } from './write.js';

/** Everything one `npm run bench` measured: the content of docs/bench.json. */
export interface BenchResults {
  quick: boolean;
  machine: Machine;
  loadAfter: number[];
  durationS: number;
  runs: number;
  writes: WriteResults;
  breakdown: BreakdownRow[];
  flows: DataPathResults;
  idle: IdleRow[];
  neighbour: { rows: NeighbourRow[]; listings: Record<string, string>; runs?: number };
  conntrack: ConntrackSummary[];
  /** RSS the config worker thread adds at 64 CIDRs. */
  workerRssMiB: number | undefined;
  /** One agent through a sequence of writes (bench/churn.ts); absent in results from before it. */
  churn?: ChurnResult;
  /** The opt-in Kubernetes API at 5 000 Nodes (bench/kubernetes.ts), with when it was measured. */
  kubernetes?: KubernetesRow & { date: string };
  /** The client against a real API server, beside client-go (bench/kubernetes-real.ts). */
  kubernetesReal?: { rows: RealApiRow[]; date: string };
  /** The look at other tables' nat chains (bench/other-nat.ts), with when it was measured. */
  /** `beside`: absent in results recorded before it was measured. */
  otherNat?: { rows: OtherNatRow[]; beside?: LookBeside; date: string };
  /** Decisions counted (bench/decisions.ts), with when it was measured. */
  decisions?: DecisionsResult & { date: string };
  /** The SNAT port sample (bench/nat-sample.ts), with when it was measured. */
  natSample?: { rows: NatSampleRow[]; date: string };
  /** --flows' peak RSS at 250 000 groups (bench/flows-memory.ts), with when it was measured. */
  flowsMemory?: { rows: FlowsMemoryRow[]; date: string };
  /** The everyday edit (bench/edit.ts), with when it was measured. */
  edit?: EditResults & { date: string };
  /** Pod policies (bench/pod-policies.ts), with when they were measured. */
  podPolicies?: PodPolicyResults & { date: string };
  bigDirectory?: BigDirectoryResult & { date: string };
  busy?: { rows: BusyRow[]; date: string };
  /** Whole changes with the defaults against bare `nft -f` (bench/whole.ts), when measured. */
  whole?: { rows: WholeRow[]; date: string };
  /** One-CIDR edits back to back judged on packets (bench/edit-packets.ts), when measured. */
  editPackets?: EditPacketsResult & { date: string };
}

const CONCAT = concatName(CONCAT_LAYOUTS[0]?.name ?? 'addr . l4proto');
const n = (count: number) => count.toLocaleString('en-US').replace(/,/g, ' ');
const ms = (value: number | undefined) => `${fmt(value ?? NaN)} ms`;
const table = (head: string[], rows: string[][]) =>
  [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');

/** A column of a table: its header and how a row fills it. */
type Column<T> = [header: string, cell: (row: T) => string];
const columns = <T>(rows: readonly T[], cols: ReadonlyArray<Column<T>>) =>
  table(
    cols.map(([header]) => header),
    rows.map((row) => cols.map(([, cell]) => cell(row))),
  );

/** A goal, the part of an issue that names it, the figure measured, and whether it is met. */
type Goal = [goal: string, part: string, measured: string, pass: boolean];

const autoLayouts = new Map<number, string>();
/** The bench's name of the layout `--set-layout auto` writes for `cidrs` of its CIDRs. */
function autoLayoutName(cidrs: number): string {
  let name = autoLayouts.get(cidrs);
  if (name === undefined) {
    name = autoLayoutOf(cidrs) === 'interval' ? OURS : CONCAT;
    autoLayouts.set(cidrs, name);
  }
  return name;
}

/** The neighbour's added cost with the layout `--set-layout auto` writes at each measured size. */
function autoNeighbour(rows: readonly NeighbourRow[]): NeighbourRow[] {
  return rows.filter((row) => row.layout === autoLayoutName(row.cidrs));
}

function editPacketsText(e: EditPacketsResult & { date: string }): string {
  const all = [...e.addedMs, ...e.removedMs];
  const row = (label: string, v: readonly number[]) => [
    label,
    String(v.length),
    ms(median(v)),
    ms(percentile(v, 99)),
    ms(Math.max(...v)),
    String(v.filter((x) => x > 100).length),
  ];
  return [
    `Measured ${e.date.slice(0, 16).replace('T', ' ')} UTC with \`npm run bench -- --only edit-packets\` (bench/edit-packets.ts): ${n(e.edits)} edits, ${n(e.flows)} flows; ${n(e.writes)} writes logged; ${e.notVisible} edits not seen on packets before the next; ${e.backslides} flows with the decision before an edit once it was seen.`,
    '',
    table(
      ['edits', 'seen', 'p50', 'p99', 'most', 'over 100 ms'],
      [row('CIDR added', e.addedMs), row('CIDR removed', e.removedMs), row('all', all)],
    ),
  ].join('\n');
}

/** Edits back to back on packets (issue 61, item 3): each seen within 100 ms, p50 ≤ 50, none merged. */
function editPacketsGoals(e: EditPacketsResult | undefined): Goal[] {
  if (!e) return [];
  const all = [...e.addedMs, ...e.removedMs];
  const [p50, worst] = [median(all), Math.max(...all)];
  const part = 'edits back to back';
  const what = `${n(e.edits)} one-CIDR edits at ${n(e.cidrs)}, ${e.spacingMs} ms apart`;
  return [
    [
      `${what}: each on packets within 100 ms`,
      part,
      `${ms(worst)} at most, ${e.notVisible} not seen before the next edit`,
      worst <= 100 && e.notVisible === 0 && all.length === e.edits,
    ],
    [
      `${what}: on packets p50 ≤ 50 ms`,
      part,
      `${ms(p50)} (added ${ms(median(e.addedMs))}, removed ${ms(median(e.removedMs))})`,
      p50 <= 50,
    ],
    [
      `${what}: none merged away (a write each), no flow with the decision before it once seen`,
      part,
      `${n(e.writes)} writes; ${e.backslides} such flows`,
      e.writes === e.edits && e.backslides === 0,
    ],
  ];
}

/**
 * Per new flow at the largest size over at 64, each with the layout `auto` writes there: as the
 * sender sees it, and net of the baseline without any table measured right before each.
 */
function flowGoals(flows: DataPathResults): Goal[] {
  const at = (c: number) =>
    flows.rows.find((row) => row.cidrs === c && row.layout === autoLayoutName(c));
  const big = Math.max(...flows.rows.map((row) => row.cidrs));
  const [small, large] = [at(64), at(big)];
  const gross = (large?.perFlowUs ?? NaN) / (small?.perFlowUs ?? NaN);
  const net = (large?.netUs ?? NaN) / (small?.netUs ?? NaN);
  const layouts = `${large?.layout ?? '—'} at ${n(big)}, ${small?.layout ?? '—'} at 64`;
  return [
    [
      `per new flow at ${n(big)} ≤ 1.2× at 64, the layout \`auto\` writes at each`,
      'data path',
      `${fmt(gross)}× (${fmt(large?.perFlowUs ?? NaN)} vs ${fmt(small?.perFlowUs ?? NaN)} µs; ${layouts})`,
      gross <= 1.2,
    ],
    [
      `the same net of a baseline without any table ≤ 1.2×`,
      'data path',
      `${fmt(net)}× (${fmt(large?.netUs ?? NaN)} vs ${fmt(small?.netUs ?? NaN)} µs)`,
      net <= 1.2,
    ],
  ];
}

/** The first size at which the interval set adds more than limitMs to the neighbour, interpolated. */
function crossing(rows: readonly NeighbourRow[], limitMs: number): number | undefined {
  const added = rows
    .map((row) => ({ cidrs: row.cidrs, ms: row.neighbourMs - row.noneMs }))
    .sort((a, b) => a.cidrs - b.cidrs);
  for (let i = 1; i < added.length; i++) {
    const [low, high] = [added[i - 1]!, added[i]!];
    if (low.ms <= limitMs && high.ms > limitMs) {
      return Math.round(
        low.cidrs + ((limitMs - low.ms) / (high.ms - low.ms)) * (high.cidrs - low.cidrs),
      );
    }
  }
  return added[0] && added[0].ms > limitMs ? added[0].cidrs : undefined;
}

/** The goals of the everyday edit (issue 42), from bench/edit.ts's rows; none before it ran. */
function editGoals(r: BenchResults): Goal[] {
  const e = r.edit;
  if (!e) return [];
  const alone = e.rows.filter((row) => row.beside === 'alone');
  const largest = Math.max(...alone.map((row) => row.cidrs));
  const at = (rows: readonly EditRow[], c: number, added: boolean) =>
    rows.filter((row) => row.cidrs === c && row.kind.startsWith(added ? 'added' : 'removed'));
  const worst = (rows: readonly EditRow[], value: (row: EditRow) => number) =>
    Math.max(...rows.map(value));
  const beside = e.rows.filter((row) => row.beside !== 'alone');
  const own = worst(alone, (row) => row.ownMs);
  const ten = alone.filter((row) => row.cidrs === 10_000);
  const overBare = worst(ten, (row) => row.agentMs - row.nftMs);
  const besideWorst = worst(beside, (row) => row.agentMs);
  const goal = (added: boolean): Goal => {
    const rows = at(alone, largest, added);
    const x = worst(rows, (row) => row.agentMs);
    return [
      `one CIDR ${added ? 'added to' : 'removed from'} ${n(largest)} (default layout), rename → kernel ≤ 100 ms`,
      'the everyday edit',
      `${ms(x)} at most (${rows.map((row) => `${row.kind} ${ms(row.agentMs)}`).join(', ')})`,
      x <= 100,
    ];
  };
  return [
    goal(true),
    goal(false),
    [
      "the agent's own part of a one-CIDR edit ≤ 30 ms at every size",
      'the everyday edit',
      `${ms(own)} at most`,
      own <= 30,
    ],
    [
      'one-CIDR edit at 10 000 within 20 ms of bare `nft -f` of the same transaction',
      'the everyday edit',
      `${ms(overBare)} above it at most`,
      overBare <= 20,
    ],
    [
      `one-CIDR edit at ${[...new Set(beside.map((row) => n(row.cidrs)))].join(' and ')} CIDRs ${beside[0]?.beside ?? 'beside a large interval set'} ≤ 100 ms`,
      'the everyday edit',
      `${ms(besideWorst)} at most`,
      besideWorst <= 100,
    ],
    ...(e.stream
      ? [
          [
            `RSS after ${n(e.stream.edits)} one-CIDR edits at 100 000 within 10 % of its value after the first (1 s after each: its audits done)`,
            'fast and never wrong: memory',
            `${fmt(e.stream.firstMiB)} MiB after the first, ${fmt(e.stream.lastMiB)} MiB after the last (${fmt(e.stream.mostMiB)} MiB at most right after an edit between, sampled every 50)`,
            e.stream.lastMiB <= 1.1 * e.stream.firstMiB,
          ] as Goal,
          [
            `RSS 20 s after the last of ${n(e.stream.edits)} one-CIDR edits at 100 000 ≤ 200 MiB`,
            'fast and never wrong: memory',
            `${fmt(e.stream.idleMiB)} MiB`,
            e.stream.idleMiB <= 200,
          ] as Goal,
        ]
      : []),
    ...e.memory.map((m): Goal => [
      `RSS after whole changes at 100 000 ≤ 160 MiB, run from ${m.node} (5 s after each)`,
      'the everyday edit: memory',
      `${fmt(m.settledRssMiB)} MiB (anon ${fmt(m.settledAnonMiB)}); 2 s after: ${fmt(m.rssMiB)} MiB`,
      m.settledRssMiB <= 160,
    ]),
  ];
}

function goals(r: BenchResults): Goal[] {
  const write = (c: number) => r.writes.rows.find((row) => row.cidrs === c);
  const idle = (c: number) => r.idle.find((row) => row.cidrs === c);
  const largest = (rows: ReadonlyArray<{ cidrs: number }>) => Math.max(...rows.map((x) => x.cidrs));
  const [bigWrite, bigIdle] = [largest(r.writes.rows), largest(r.idle)];
  const ratio = (c: number, limit: number, part: string): Goal => {
    const row = write(c);
    const x = row ? row.agentMs / row.nftFreshMs : NaN;
    const measured = `${fmt(x)}× (${ms(row?.agentMs)} vs ${ms(row?.nftFreshMs)})`;
    return [
      `config write → /healthz at ${n(c)} ≤ ${limit}× bare \`nft -f\``,
      part,
      measured,
      x <= limit,
    ];
  };
  const cpu = (c: number, limit: number): Goal => {
    const x = idle(c)?.cpuMsPerResync ?? NaN;
    return [`CPU per idle resync at ${n(c)} ≤ ${limit} ms`, 'idle resync', ms(x), x <= limit];
  };
  const rss = (c: number, limit: number): Goal => {
    const row = idle(c);
    const measured = row
      ? `${fmt(row.rssMiB)} MiB (anon ${fmt(row.rssAnonMiB)}, file ${fmt(row.rssFileMiB)})`
      : '—';
    return [
      `idle RSS at ${n(c)} ≤ ${limit} MiB`,
      'memory',
      measured,
      (row?.rssMiB ?? Infinity) <= limit,
    ];
  };
  const w64 = write(64)?.agentMs ?? NaN;
  const p99 = percentile(arrivalLatencies(r.writes.busyLatencies, 1), 99);
  const load = r.breakdown.find((row) => row.cidrs === bigWrite)?.loadConfigMs ?? NaN;
  const auto = autoNeighbour(r.neighbour.rows);
  const worst = Math.max(...auto.map((row) => row.neighbourMs - row.noneMs));
  const cross = crossing(
    r.neighbour.rows.filter((row) => row.layout === OURS),
    10,
  );
  const inPlace = write(bigWrite);
  const inPlaceRatio = inPlace ? inPlace.agentMs / inPlace.nftInPlaceMs : NaN;
  return [
    ...editGoals(r),
    ratio(64, 2.5, 'small configs'),
    ratio(1_000, 2.5, 'small configs'),
    ratio(bigWrite, 1.3, 'the largest write'),
    [
      `whole change at ${n(bigWrite)} ≤ 1.2× bare \`nft -f\` of the same in-place script`,
      'the largest write',
      `${fmt(inPlaceRatio)}× (${ms(inPlace?.agentMs)} vs ${ms(inPlace?.nftInPlaceMs)})`,
      inPlaceRatio <= 1.2,
    ],
    ['config write → /healthz at 64 ≤ 250 ms', 'write latency', ms(w64), w64 <= 250],
    ...flowGoals(r.flows),
    [
      '0 writes per idle resync at 64',
      'idle resync',
      fmt(idle(64)?.writesPerResync ?? NaN),
      idle(64)?.writesPerResync === 0,
    ],
    cpu(64, 5),
    cpu(bigIdle, 10),
    rss(64, 64),
    rss(bigIdle, 160),
    ...churnGoals(r.churn),
    ...kubernetesGoals(r.kubernetes),
    ...kubernetesRealGoals(r.kubernetesReal),
    ...bigDirectoryGoals(r.bigDirectory),
    ...busyGoals(r.busy?.rows),
    ...wholeGoals(r.whole?.rows),
    ...editPacketsGoals(r.editPackets),
    ...lookBesideGoals(r.otherNat?.beside),
    ...wideLookGoals(r.otherNat?.rows),
    ...flowsMemoryGoals(r.flowsMemory?.rows),
    [
      `/healthz p99 ≤ 50 ms while ${n(r.writes.busyCidrs)} CIDRs apply`,
      'responsiveness',
      ms(p99),
      p99 <= 50,
    ],
    [`loadConfig of ${n(bigWrite)} CIDRs < 300 ms`, 'config load', ms(load), load < 300],
    [
      "`--set-layout auto` adds ≤ 10 ms to a neighbour's transaction",
      'no neighbour slowed',
      `${ms(worst)} at most (at ${auto.map((row) => n(row.cidrs)).join(', ')})`,
      worst <= 10,
    ],
    [
      `the interval set adds 10 ms only above the crossover (${n(AUTO_LAYOUT_CROSSOVER)})`,
      'no neighbour slowed',
      cross === undefined ? 'never, at the sizes measured' : `from about ${n(cross)} CIDRs`,
      cross === undefined || cross >= AUTO_LAYOUT_CROSSOVER,
    ],
  ];
}

/** Other tables never hold our writes back (issue 51, item 1), from bench/other-nat.ts. */
function lookBesideGoals(b: LookBeside | undefined): Goal[] {
  if (!b) return [];
  const part = 'hardening 5: other tables never hold our writes back';
  return [
    [
      'config change → kernel ≤ 1 s beside a look-heavy foreign table ("The look at other NAT": a large set, 4 base chains, a rule writer)',
      part,
      `${ms(b.changeMaxMs)} at most (median ${ms(b.changeMedianMs)}, ${b.changes} changes)`,
      b.changeMaxMs <= 1_000,
    ],
    [
      '/readyz and /healthz answer within 100 ms throughout',
      part,
      `${ms(b.probeMaxMs)} at most (p99 ${ms(b.probeP99Ms)}, ${b.probes} probes, ${b.probesFailed} not 200)`,
      b.probeMaxMs <= 100 && b.probesFailed === 0,
    ],
  ];
}

/** --flows streams (issue 51, item 7): its peak RSS at 250 000 groups, text and JSON. */
function flowsMemoryGoals(rows: readonly FlowsMemoryRow[] | undefined): Goal[] {
  if (!rows?.length) return [];
  const most = Math.max(...rows.map((row) => row.peakMiB));
  return [
    [
      `--flows at ${n(rows[0]!.groups)} groups: peak RSS ≤ 64 MiB, text and JSON (before: 528 and 583 MiB)`,
      'hardening 5: --flows streams',
      rows
        .map(
          (row) =>
            `${row.output} ${fmt(row.peakMiB)} MiB (${fmt(row.bytes / 1048576)} MiB printed)`,
        )
        .join(', '),
      most <= 64,
    ],
  ];
}

/** The look's cost is bounded (issue 51, item 6): an idle look beside 10 000 foreign chains. */
function wideLookGoals(rows: readonly OtherNatRow[] | undefined): Goal[] {
  const wide = rows?.find((row) => /10 000 chains/.test(row.setting));
  if (!wide) return [];
  return [
    [
      'an idle look beside one base chain jumping to 10 000 chains ≤ 20 ms of CPU',
      'hardening 5: the look is bounded',
      `${ms(wide.idleCpuMs)} (p99 ${ms(wide.idleCpuP99Ms)}; first look ${ms(wide.firstMs)})`,
      wide.idleCpuP99Ms <= 20,
    ],
  ];
}

/** The Kubernetes API (issue "The agent knows its cluster"): RSS beside the file-driven agent, latency. */
function kubernetesGoals(k: BenchResults['kubernetes']): Goal[] {
  if (!k) return [];
  const delta = k.allNodesRssMiB - k.withoutRssMiB;
  return [
    [
      `RSS with ${n(k.nodes)} Nodes watched ≤ ~30 MiB above the agent without the feature`,
      'Kubernetes API: scale',
      `+${fmt(delta)} MiB (${fmt(k.allNodesRssMiB)} vs ${fmt(k.withoutRssMiB)}); +${fmt(k.listedRssMiB - k.withoutRssMiB)} MiB 3 s after the list`,
      delta <= 30,
    ],
    [
      'a Node added → in the kernel within 1 s',
      'Kubernetes API: every Node’s pod CIDRs',
      `${ms(k.addToKernelMs)} (median, during ${fmt(k.eventsPerSecond)} events/s)`,
      k.addToKernelMs <= 1000,
    ],
  ];
}

/** Beside a busy node (issue 59): ready, healthy, edits at a quiet node's pace, CPU bounded. */
function busyGoals(rows: readonly BusyRow[] | undefined): Goal[] {
  return (rows ?? []).flatMap((row): Goal[] => {
    const beside = `beside ${row.neighbour} at ${n(row.cidrs)}`;
    const worst = Math.max(...row.editMs);
    const cpuBound = row.idleCpuMsPerS * 1.2 + 0.2 * row.commitsPerSecond;
    const goals: Goal[] = [
      [
        `${beside}: /readyz 200 in every probe, /healthz never 503`,
        'a busy node',
        `${fmt(row.readyShare * 100)} % of ${row.probes}; ${row.unhealthy} unhealthy`,
        row.readyShare === 1 && row.unhealthy === 0,
      ],
      [
        `${beside}: every one-CIDR edit in the kernel within 1 s`,
        'a busy node',
        `median ${ms(median(row.editMs))}, most ${ms(worst)}`,
        worst <= 1_000,
      ],
      [
        `${beside}: CPU ≤ 1.2× idle + 0.2 ms per foreign commit`,
        'a busy node',
        `${fmt(row.busyCpuMsPerS)} ms/s (idle ${fmt(row.idleCpuMsPerS)}, ${fmt(row.commitsPerSecond)} commits/s)`,
        row.busyCpuMsPerS <= cpuBound,
      ],
    ];
    if (row.cidrs >= 100_000)
      goals.push([
        `${beside}: the everyday edit ≤ 100 ms (median)`,
        'a busy node',
        ms(median(row.editMs)),
        median(row.editMs) <= 100,
      ]);
    return goals;
  });
}

/** The goal of a whole change at each size, as a ratio to bare `nft -f` of a fresh table. */
const WHOLE_RATIO_GOAL = (cidrs: number) => (cidrs <= 64 ? 1.5 : 1.2);

/** A whole change with the defaults: agent ÷ bare `nft -f` fresh, medians of runs in turn. */
function wholeGoals(rows: readonly WholeRow[] | undefined): Goal[] {
  return (rows ?? []).map((row): Goal => {
    const ratio = median(row.agentMs) / median(row.bareMs);
    const goal = WHOLE_RATIO_GOAL(row.cidrs);
    return [
      `whole change at ${n(row.cidrs)} with the defaults ≤ ${fmt(goal)}× bare \`nft -f\` of a fresh table`,
      'at the floor: whole writes',
      `${fmt(ratio)}× (${ms(median(row.agentMs))} vs ${ms(median(row.bareMs))})`,
      ratio <= goal,
    ];
  });
}

/** An idle agent beside a config directory over the file limit (10 000 files). */
function bigDirectoryGoals(b: BenchResults['bigDirectory']): Goal[] {
  if (!b) return [];
  return [
    [
      `idle beside a directory of ${n(b.files)} files, resyncs every second: ≤ 2 % of a core`,
      'a big directory',
      `${fmt(b.cpuPercent)} % (${fmt(b.listingsPerResync)} listings per resync, ${b.resyncs} resyncs; was 20–24 %)`,
      b.cpuPercent <= 2,
    ],
  ];
}

/** The client at any size (CONTRACT section 10): the first list and its memory, a real server. */
function kubernetesRealGoals(k: BenchResults['kubernetesReal']): Goal[] {
  const row = k?.rows.find((r) => r.nodes === 5_000);
  if (!row) return [];
  const growth = row.agent.peakMiB - row.agent.beforeMiB;
  return [
    [
      `first list of ${n(row.nodes)} Nodes of ${row.padKiB} KiB from a real API server ≤ 30 s`,
      'the cluster for real: scale',
      `${fmt(row.agent.firstListS)} s (client-go's informer: ${fmt(row.clientGo.firstListS)} s)`,
      row.agent.firstListS <= 30,
    ],
    [
      `RSS growth over that list ≤ 64 MiB`,
      'the cluster for real: scale',
      `+${fmt(growth)} MiB (client-go's informer: ${fmt(row.clientGo.peakMiB)} MiB at most)`,
      growth <= 64,
    ],
  ];
}

/** Hardening round 3, items 7 and 9: memory and event-loop stalls along a sequence of writes. */
function churnGoals(churn: ChurnResult | undefined): Goal[] {
  if (!churn) return [];
  const settled = churn.settleRssMiB.at(-1) ?? NaN;
  const stall = Math.max(...churn.steps.map((step) => step.stallMs));
  return [
    [
      'RSS ≤ 160 MiB at 100 000 after any sequence of writes',
      'memory after churn',
      `${fmt(churn.maxRssMiB)} MiB at most`,
      churn.maxRssMiB <= 160,
    ],
    [
      'back within 5 MiB of idle within a minute of a small config',
      'memory after churn',
      `${fmt(settled)} MiB vs ${fmt(churn.idleRssMiB)} idle`,
      settled - churn.idleRssMiB <= 5,
    ],
    [
      'event loop stalled ≤ 50 ms during any write or flush',
      'event-loop stalls',
      ms(stall),
      stall <= 50,
    ],
  ];
}

/**
 * How each flow row was measured: one baseline is taken per round of each row (bench/dataplane.ts),
 * so the rounds are read off the results, --quick's one as the full run's three.
 */
export function flowRoundsText(flows: {
  baselines: readonly number[];
  rows: readonly unknown[];
}): string {
  const rounds = flows.rows.length === 0 ? 0 : flows.baselines.length / flows.rows.length;
  return rounds === 1
    ? 'each from one round, without the table then with it'
    : `each the median of ${rounds} rounds in turn, without the table then with it`;
}

/** The tables and figures the template (docs/bench.template.md) names, each by its {{name}}. */
function values(r: BenchResults): Record<string, string> {
  const m = r.machine;
  const b = (c: number) => r.breakdown.find((row) => row.cidrs === c);
  const flowSizes = [...new Set(r.flows.rows.map((row) => row.cidrs))];
  const flowLayouts = [...new Set(r.flows.rows.map((row) => row.layout))];
  const flowCell = (layout: string, c: number) => {
    const row = r.flows.rows.find((x) => x.layout === layout && x.cidrs === c);
    return row ? `${fmt(row.perFlowUs)} (${fmt(row.netUs)})` : '—';
  };
  const busy = r.writes.busyLatencies;
  const latency = (label: string, v: readonly number[]) => [
    label,
    ms(median(v)),
    ms(percentile(v, 99)),
    ms(Math.max(...v)),
  ];
  const churn = r.churn;
  const k = r.kubernetes;
  const o = r.otherNat;
  const d = r.decisions;
  const us = (value: number | undefined) => `${fmt(value ?? NaN)} µs`;
  const ns = r.natSample;
  const pp = r.podPolicies;
  const w = r.whole;
  return {
    whole: w
      ? [
          `Measured ${w.date.slice(0, 16).replace('T', ' ')} UTC with \`npm run bench -- --only whole\`, ${w.rows[0]?.agentMs.length ?? 0} runs at each size, medians.`,
          '',
          columns(w.rows, [
            ['CIDRs', (row) => n(row.cidrs)],
            ['agent', (row) => ms(median(row.agentMs))],
            ['its write', (row) => ms(median(row.applyMs))],
            ['its load', (row) => ms(median(row.loadMs))],
            ['bare `nft -f` fresh', (row) => ms(median(row.bareMs))],
            ['ratio', (row) => `${fmt(median(row.agentMs) / median(row.bareMs))}×`],
            [
              'each run (agent / bare)',
              (row) =>
                row.agentMs
                  .map((a, i) => `${Math.round(a)}/${Math.round(row.bareMs[i] ?? NaN)}`)
                  .join(' '),
            ],
          ]),
        ].join('\n')
      : '(not measured yet: `npm run bench -- --only whole`)',
    podPolicies: pp
      ? [
          `Measured ${pp.date.slice(0, 16).replace('T', ' ')} UTC with \`npm run bench -- --only pod-policies\`: per new flow from a pod that a pod policy selects (its own policy the last of them, ${pp.flows[0]?.pods ?? 250} pods in the verdict map), as in "Data path" below (median of the batches, each count measured twice, in the order 1, 10, 50, 50, 10, 1, and the median of the two taken; in brackets, net of a baseline without any table); and, against a real kube-apiserver and etcd, from a pod's watch event (its addresses set, or its deletion, as a kubectl watch beside the agent receives it) to the end of the agent's write that changed the map, from the agent's own log (20 pods started and deleted one after another; 0 where the agent's write ended before kubectl printed the event). Goals: within 1.2× between 1 and 50 policies; ≤ 50 ms.`,
          '',
          table(
            ['pod policies', 'per new flow (net)'],
            pp.flows.map((row) => [
              String(row.policies),
              `${us(row.perFlowUs)} (${us(row.netUs)})`,
            ]),
          ),
          '',
          `50 policies over 1: **${fmt(pp.ratio)}×** per new flow (goal ≤ 1.2: ${pp.ratio <= 1.2 ? 'PASS' : 'FAIL'}); net of the baselines ${fmt(pp.netRatio ?? NaN)}× (the table's own few µs, where a baseline's noise weighs more).`,
          '',
          table(
            ['membership change', 'median', 'p99', 'max', 'goal ≤ 50 ms'],
            [
              ['pod started', pp.startedMs],
              ['pod deleted', pp.deletedMs],
            ].map(([label, v]) => {
              const values = v as number[];
              return [
                label as string,
                ms(median(values)),
                ms(percentile(values, 99)),
                ms(Math.max(...values)),
                Math.max(...values) <= 50 ? 'PASS' : 'FAIL',
              ];
            }),
          ),
        ].join('\n')
      : '(not measured yet: `npm run bench -- --only pod-policies`)',
    natSample: ns
      ? [
          `Measured ${ns.date.slice(0, 16).replace('T', ' ')} UTC with \`node --import=tsx bench/nat-sample.ts\`: a namespace's conntrack table filled with source-translated UDP entries by ctnetlink (bench/ct-fill.c; every entry translated: the worst case, as the kernel filters the dump by status and an untranslated entry costs it ~0.3 µs, a translated one ~2 µs); one sample's CPU (its thread's, the kernel's dump on its behalf included), wall time and the peak RSS it adds; the average share of one core with the default 30 s interval (stretched past it where a sample would take more than 2 %, src/reconcile/nat-sampler.ts); and /healthz every 20 ms for 15 s while the agent samples the same table every second. Goals: ≤ 2 % of one core on average at 1 000 000 entries, /healthz p99 ≤ 50 ms.`,
          '',
          table(
            [
              'entries',
              'sample CPU',
              'wall',
              'RSS added',
              'average, one core',
              '/healthz p99 (answers)',
            ],
            ns.rows.map((row) => [
              n(row.entries),
              `${fmt(row.sampleCpuS)} s`,
              ms(row.sampleWallMs),
              `${fmt(row.rssDeltaMiB)} MiB`,
              `${fmt(row.averageCorePercent)} %`,
              `${ms(row.healthzP99Ms)} (${row.healthzAnswers})`,
            ]),
          ),
        ].join('\n')
      : '(not measured yet: `npm run bench -- --only nat-sample`)',
    decisions: d
      ? [
          `Measured ${d.date.slice(0, 16).replace('T', ' ')} UTC with \`node --import=tsx bench/decisions.ts\`: per new flow through the node as in "Data path" below (net of a baseline without any table, medians of the batches), our table as the agent writes it beside the same table with the counting statements taken out; and one read of the three counters over netlink, what a scrape of \`ipmasq_flows_total\` does (median of 200). Goals: counting within the noise; a read that costs the same at 64 and 100 000 CIDRs.`,
          '',
          table(
            ['CIDRs', 'per flow, counted', 'per flow, not counted', 'read of the counts'],
            [...new Set(d.flows.map((row) => row.cidrs))].map((c) => [
              n(c),
              us(d.flows.find((row) => row.cidrs === c && !/not counted/.test(row.layout))?.netUs),
              us(d.flows.find((row) => row.cidrs === c && /not counted/.test(row.layout))?.netUs),
              us(d.reads.find((row) => row.cidrs === c)?.readUs),
            ]),
          ),
        ].join('\n')
      : '(not measured yet: `npm run bench -- --only decisions`)',
    editPackets: r.editPackets
      ? editPacketsText(r.editPackets)
      : '(not measured yet: `npm run bench -- --only edit-packets`)',
    edit: r.edit
      ? [
          `Measured ${r.edit.date.slice(0, 16).replace('T', ' ')} UTC with \`npm run bench -- --only edit\` (bench/edit.ts), medians of ${r.edit.runs} runs.`,
          '',
          columns(r.edit.rows, [
            ['CIDRs', (row) => n(row.cidrs)],
            ['where', (row) => row.beside],
            ['edit', (row) => row.kind],
            ['rename → kernel', (row) => ms(row.agentMs)],
            ['the write', (row) => `${ms(row.applyMs)} (${row.via})`],
            ["the agent's own part", (row) => ms(row.ownMs)],
            ['bare `nft -f`', (row) => ms(row.nftMs)],
          ]),
          '',
          columns(r.edit.memory, [
            ['agent run from', (m) => m.node],
            ['RSS 2 s after a whole change at 100 000 (most)', (m) => `${fmt(m.rssMiB)} MiB`],
            ['anonymous', (m) => `${fmt(m.anonMiB)} MiB`],
            ['RSS 5 s after (most)', (m) => `${fmt(m.settledRssMiB ?? NaN)} MiB`],
            ['anonymous', (m) => `${fmt(m.settledAnonMiB ?? NaN)} MiB`],
          ]),
        ].join('\n')
      : '(not measured yet: `npm run bench -- --only edit`)',
    otherNat: o
      ? [
          `Measured ${o.date.slice(0, 16).replace('T', ' ')} UTC with \`node --import=tsx bench/other-nat.ts\`: the look the agent makes at start and at each resync, run in a namespace of its own with the tables below; the first look's wall time (it prints the translating chains' rules through libnftables), then the CPU of each later look (median and p99 of 50), nothing having changed. Goal: an idle look beside a foreign 100 000-element set costs at most 10 ms of CPU more than without it; beside 10 000 foreign chains at most 20 ms (it reads the generation id alone while nobody committed).`,
          '',
          table(
            ['tables', 'first look', 'idle look, CPU (median)', 'p99'],
            o.rows.map((row) => [
              row.setting,
              ms(row.firstMs),
              ms(row.idleCpuMs),
              ms(row.idleCpuP99Ms),
            ]),
          ),
          ...(o.beside
            ? [
                '',
                `Beside the red team's table (issue 51): ${o.beside.setting}; resyncs every 2 s, so the look prints that chain again at each (libnftables downloading the set). Meanwhile ${o.beside.changes} config changes 1.5 s apart, each rename → \`/healthz\` showing its generation, and \`/readyz\` and \`/healthz\` in turn every 100 ms on fresh connections. From loading the foreign table (its \`nft -f\` of the whole set included) to the agent's first write: ${ms(o.beside.firstWriteMs)}.`,
                '',
                table(
                  [
                    'config change → kernel (median)',
                    'most',
                    'probes',
                    'probe p99',
                    'most',
                    'not 200',
                  ],
                  [
                    [
                      ms(o.beside.changeMedianMs),
                      ms(o.beside.changeMaxMs),
                      String(o.beside.probes),
                      ms(o.beside.probeP99Ms),
                      ms(o.beside.probeMaxMs),
                      String(o.beside.probesFailed),
                    ],
                  ],
                ),
              ]
            : []),
        ].join('\n')
      : '(not measured yet: `npm run bench -- --only other-nat`)',
    kubernetes: k
      ? [
          `Measured ${k.date.slice(0, 16).replace('T', ' ')} UTC with \`node --import=tsx bench/kubernetes.ts\`: the fake API server (harness/fake-apiserver.ts) in the agent's namespace holds ${n(k.nodes)} Nodes of ~16 KiB each (most of it \`status.images\`), listed in pages, then sends ${fmt(k.eventsPerSecond)} status updates a second for ${k.eventSeconds} s while five Nodes are added one by one.`,
          '',
          table(
            ['', 'agent RSS'],
            [
              ['the same agent and file, without `--kubeconfig`', `${fmt(k.withoutRssMiB)} MiB`],
              ['with `--kubeconfig`, watching its own Node only', `${fmt(k.ownNodeRssMiB)} MiB`],
              [
                `3 s after \`nonMasqueradeNodePodCIDRs: true\`: ${n(k.nodes)} Nodes listed and written`,
                `${fmt(k.listedRssMiB)} MiB`,
              ],
              ['15 s after, every Node watched', `${fmt(k.allNodesRssMiB)} MiB`],
              [
                `after ${k.eventSeconds} s of ${fmt(k.eventsPerSecond)} events/s`,
                `${fmt(k.afterEventsRssMiB)} MiB`,
              ],
            ],
          ),
          '',
          table(
            ['', ''],
            [
              [
                `config switched → ${n(k.nodes)} Nodes listed and in the kernel`,
                ms(k.listToKernelMs),
              ],
              ['agent CPU during the events', `${fmt(k.eventsCpuPercent)} % of one core`],
              [
                'a Node added → its pod CIDR in the kernel',
                `${ms(k.addToKernelMs)} median (${k.addSamples.map((v) => fmt(v)).join(', ')})`,
              ],
            ],
          ),
        ].join('\n')
      : 'Not measured in this run.',
    kubernetesReal: r.kubernetesReal
      ? [
          `Measured ${r.kubernetesReal.date.slice(0, 16).replace('T', ' ')} UTC with \`npm run bench -- --only kubernetes-real\`: a real kube-apiserver and etcd (scripts/control-plane.sh) in the agent's namespace hold that many Nodes of 100 KiB each (an annotation). The agent holds the shipped ServiceAccount's token and waits, refused, until the shipped RBAC is applied; then the time until every Node's pod CIDR is in the kernel, its RSS waiting, at most and 5 s after; then a label patched on every Node, the CPU per event. Beside it, client-go's shared informer on Nodes (test/control-plane/cmd/listwatch, admin credentials): from its start to synced, the same RSS and CPU. Goals: the first list of 5 000 within 30 s, RSS growth ≤ 64 MiB.`,
          '',
          columns(r.kubernetesReal.rows, [
            ['Nodes', (row) => n(row.nodes)],
            ['agent: first list', (row) => `${fmt(row.agent.firstListS)} s`],
            [
              'agent RSS waiting → most → settled',
              (row) =>
                `${fmt(row.agent.beforeMiB)} → ${fmt(row.agent.peakMiB)} → ${fmt(row.agent.settledMiB)} MiB`,
            ],
            ['agent CPU per event', (row) => ms(row.agent.cpuMsPerEvent)],
            ['client-go: synced', (row) => `${fmt(row.clientGo.firstListS)} s`],
            [
              'client-go RSS start → most → settled',
              (row) =>
                `${fmt(row.clientGo.beforeMiB)} → ${fmt(row.clientGo.peakMiB)} → ${fmt(row.clientGo.settledMiB)} MiB`,
            ],
            ['client-go CPU per event', (row) => ms(row.clientGo.cpuMsPerEvent)],
          ]),
        ].join('\n')
      : '(not measured yet: `npm run bench -- --only kubernetes-real`)',
    measured:
      `Measured ${m.date.slice(0, 16).replace('T', ' ')} UTC${r.quick ? ' (--quick)' : ''} in ${Math.round(r.durationS)} s: ` +
      `${m.cpus} vCPU (${m.cpuModel}), kernel ${m.kernel}, ${m.nft}, ${m.iptables}, Node ${m.node}; load ${m.loadBefore.join(' / ')} before, ` +
      `${r.loadAfter.join(' / ')} after${m.concurrentTests ? '; other test suites were running' : ''}. Medians of ${r.runs} runs unless said otherwise.`,
    goals: columns(goals(r), [
      ['goal', ([goal]) => goal],
      ['issue part', ([, part]) => part],
      ['measured', ([, , measured]) => measured],
      ['', ([, , , pass]) => (pass ? '**PASS**' : '**FAIL**')],
    ]),
    writes: columns(r.writes.rows, [
      ['CIDRs', (row) => n(row.cidrs)],
      ['agent', (row) => ms(row.agentMs)],
      ['agent sync', (row) => ms(row.agentSyncMs)],
      ['libnftables', (row) => ms(row.agentApplyMs)],
      ['nft -f fresh', (row) => ms(row.nftFreshMs)],
      ['nft -f replace', (row) => ms(row.nftReplaceMs)],
      ['nft -f in place', (row) => ms(row.nftInPlaceMs)],
      ['one CIDR added (auto)', (row) => ms(row.agentOneCidrAddMs)],
      ['one CIDR removed (auto)', (row) => ms(row.agentOneCidrRemoveMs)],
      ['iptables-nft-restore', (row) => ms(row.iptablesMs)],
      ['load config', (row) => ms(b(row.cidrs)?.loadConfigMs)],
      ['compile + render', (row) => ms(b(row.cidrs)?.compileRenderMs)],
    ]),
    flowBaselineUs: fmt(r.flows.baselineUs),
    flowRounds: flowRoundsText(r.flows),
    flowsMeasured: r.flows.date
      ? `Measured ${r.flows.date.slice(0, 16).replace('T', ' ')} UTC with \`npm run bench -- --only flows\`. `
      : '',
    flows: table(
      ['layout', ...flowSizes.map(n)],
      flowLayouts.map((layout) => [layout, ...flowSizes.map((c) => flowCell(layout, c))]),
    ),
    churnIdleRss: churn ? `${fmt(churn.idleRssMiB)} MiB` : '—',
    churnSettleRss: churn ? `${churn.settleRssMiB.map((v) => fmt(v)).join(', ')} MiB` : '—',
    churn: churn
      ? columns(churn.steps, [
          ['write to', (step) => `${n(step.cidrs)} (variant ${step.variant})`],
          ['write', (step) => ms(step.writeMs)],
          ['longest stall', (step) => ms(step.stallMs)],
          ['RSS', (step) => `${fmt(step.rssMiB)} MiB`],
          ['V8 heap (used)', (step) => `${fmt(step.heapTotalMiB)} (${fmt(step.heapUsedMiB)}) MiB`],
        ])
      : 'Not measured in this run.',
    idle: columns(r.idle, [
      ['CIDRs', (row) => n(row.cidrs)],
      ['resyncs', (row) => String(row.resyncs)],
      ['CPU / resync', (row) => ms(row.cpuMsPerResync)],
      ['idle CPU / slot', (row) => ms(row.idleCpuMsPerSlot)],
      ['writes / resync', (row) => fmt(row.writesPerResync)],
      ['reads / resync', (row) => fmt(row.readsPerResync)],
      ['RSS', (row) => `${fmt(row.rssMiB)} MiB`],
      ['anon', (row) => `${fmt(row.rssAnonMiB)} MiB`],
      ['file', (row) => `${fmt(row.rssFileMiB)} MiB`],
      ['V8 heap used / total', (row) => `${fmt(row.heapUsedMiB)} / ${fmt(row.heapTotalMiB)} MiB`],
    ]),
    workerRss:
      r.workerRssMiB === undefined
        ? ''
        : `The config worker thread adds ${fmt(r.workerRssMiB)} MiB while it lives: from the first config too large for the agent’s own thread (above 64 KiB, or needing the full YAML parser above 4 KiB) to the next one that fits there.`,
    busyCidrs: n(r.writes.busyCidrs),
    healthz: table(
      ['', 'p50', 'p99', 'max'],
      [
        latency('idle', r.writes.idleLatencies),
        latency('during the write, as polled', busy),
        latency('during the write, a probe arriving at a random moment', arrivalLatencies(busy, 1)),
      ],
    ),
    neighbourRuns: r.neighbour.runs ? ` (medians of ${r.neighbour.runs} runs)` : '',
    crossover: n(AUTO_LAYOUT_CROSSOVER),
    neighbour: [
      columns(
        r.neighbour.rows.filter((row) => row.layout !== NONE),
        [
          ['layout', (row) => row.layout],
          ['our CIDRs', (row) => n(row.cidrs)],
          ['neighbour', (row) => ms(row.neighbourMs)],
          ['without ours', (row) => ms(row.noneMs)],
          ['added', (row) => ms(row.neighbourMs - row.noneMs)],
          ['our load (nft -f)', (row) => ms(row.loadMs)],
          ['`nft list table`', (row) => ms(row.listMs)],
        ],
      ),
      ...Object.entries(r.neighbour.listings).map(
        ([layout, text]) => `\`${layout}\`:\n\n\`\`\`\n${text}\n\`\`\``,
      ),
    ].join('\n\n'),
    conntrack: columns(r.conntrack, [
      ['--conntrack-flush', (row) => row.mode],
      ['unrelated entries', (row) => n(row.unrelated)],
      ['matching entries', (row) => n(row.matching)],
      ['deleted', (row) => n(row.deleted)],
      ['flush', (row) => (row.flushMs === null ? '—' : ms(row.flushMs))],
      ['rename → /healthz', (row) => ms(row.writeMs)],
      ['agent CPU of the sync', (row) => ms(row.cpuMs)],
      ['entries left after', (row) => n(row.entriesLeft)],
    ]),
  };
}

const TEMPLATE = join(packageRoot, 'docs', 'bench.template.md');

/** docs/bench.template.md with every {{name}} filled; a name the template uses and values lacks throws. */
export function renderMarkdown(r: BenchResults): string {
  const filled = values(r);
  const template = readFileSync(TEMPLATE, 'utf8').replace(/^<!-- The template of[^\n]*\n+/, '');
  return template.replace(/\{\{(\w+)\}\}/g, (_, name: string) => {
    const value = filled[name];
    if (value === undefined) throw new Error(`${TEMPLATE}: no value for {{${name}}}`);
    return value;
  });
}

export function renderSvg(r: BenchResults): string {
  const pts = <T extends { cidrs: number }>(rows: readonly T[], y: (row: T) => number) =>
    rows.map((row) => [row.cidrs, y(row)] as const);
  const flows = (layout: string) => r.flows.rows.filter((row) => row.layout === layout);
  const nbr = (layout: string) => r.neighbour.rows.filter((row) => row.layout === layout);
  const sizes = r.flows.rows.map((row) => row.cidrs);
  const flat = (y: number) => [Math.min(...sizes), Math.max(...sizes)].map((x) => [x, y] as const);
  const none = median(
    r.neighbour.rows.filter((row) => row.layout !== NONE).map((row) => row.noneMs),
  );
  const line = (
    label: string,
    color: string,
    points: Series['points'],
    dashed = false,
  ): Series => ({ label, color, points, dashed });
  return renderChart(
    [
      {
        title: 'Config write → kernel',
        yLabel: 'ms (median)',
        series: [
          line(
            'agent: file write → /healthz',
            '#1f6feb',
            pts(r.writes.rows, (row) => row.agentMs),
          ),
          line(
            'bare nft -f of the same script',
            '#f39c12',
            pts(r.writes.rows, (row) => row.nftFreshMs),
          ),
          line(
            'original: iptables-nft-restore',
            '#c0392b',
            pts(r.writes.rows, (row) => row.iptablesMs),
          ),
        ],
      },
      {
        title: 'Per new flow (dest. not exempt)',
        yLabel: 'µs per flow, as the pod sees it',
        series: [
          line(
            OURS,
            '#1f6feb',
            pts(flows(OURS), (row) => row.perFlowUs),
          ),
          line(
            LINEAR,
            '#c0392b',
            pts(flows(LINEAR), (row) => row.perFlowUs),
          ),
          line(
            CONCAT,
            '#2a9d3f',
            pts(flows(CONCAT), (row) => row.perFlowUs),
          ),
          line('no NAT table (baseline)', '#999', flat(r.flows.baselineUs), true),
        ],
      },
      {
        title: "A neighbour's nft -f",
        yLabel: 'ms (median)',
        series: [
          line(
            `with ${OURS}`,
            '#1f6feb',
            pts(nbr(OURS), (row) => row.neighbourMs),
          ),
          line(
            CONCAT,
            '#2a9d3f',
            pts(nbr(CONCAT), (row) => row.neighbourMs),
          ),
          line(NONE, '#999', flat(none), true),
        ],
      },
    ],
    `ipmasq-agent bench, ${r.machine.cpus} vCPU, kernel ${r.machine.kernel}, ${r.machine.nft.split(' (')[0]}, ${r.machine.date.slice(0, 10)}`,
  );
}

/** Writes docs/bench.md (formatted as `npm run lint` expects) and docs/bench.svg. */
export async function writeReport(r: BenchResults): Promise<void> {
  const file = join(packageRoot, 'docs', 'bench.md');
  const options = { ...(await resolveConfig(file)), parser: 'markdown' as const };
  await writeFile(file, await format(renderMarkdown(r), options));
  await writeFile(join(packageRoot, 'docs', 'bench.svg'), renderSvg(r));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const results = JSON.parse(
    await readFile(join(packageRoot, 'docs', 'bench.json'), 'utf8'),
  ) as BenchResults;
  await writeReport(results);
  console.error('bench: wrote docs/bench.md and docs/bench.svg from docs/bench.json');
}
