// Turns one bench run's figures into docs/bench.md: each measurement beside its target, PASS/FAIL.
import type { BreakdownRow } from './breakdown.js';
import { fmt, verdict, type Machine } from './harness.js';
import type { IdleRow } from './idle.js';
import { crossing, NONE, type NeighbourResults } from './neighbour.js';
import { LINEAR, OURS, type DataPathResults, type FlowRow } from './dataplane.js';
import type { WriteResults } from './write.js';

export interface BenchResults {
  quick: boolean;
  machine: Machine;
  loadAfter: number[];
  durationS: number;
  writes: WriteResults;
  breakdown: BreakdownRow[];
  flows: DataPathResults;
  idle: IdleRow[];
  configLoad: { cidrs: number; ms: number };
  neighbour: NeighbourResults;
  runs: number;
  /** RSS the config worker thread adds, when the build has one. */
  workerRssMiB: number | undefined;
}

const n = (count: number) => count.toLocaleString('en-US').replace(/,/g, ' ');
const table = (head: string[], rows: string[][]) =>
  [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');

export function machineSection(r: BenchResults): string {
  const m = r.machine;
  return [
    `Measured ${m.date.slice(0, 16).replace('T', ' ')} UTC${r.quick ? ' (**--quick**: smaller sizes, fewer runs)' : ''}, ` +
      `one \`npm run bench\` of ${Math.round(r.durationS)} s.`,
    '',
    `- ${m.cpus} vCPU (${m.cpuModel}), kernel ${m.kernel}, ${m.nft}, ${m.iptables}, Node ${m.node}`,
    `- load average before: ${m.loadBefore.join(' / ')}; after: ${r.loadAfter.join(' / ')}` +
      (m.concurrentTests
        ? ' — **other engineers\u2019 test suites were running on the same 2 vCPUs**, so absolute times are noisy; ' +
          'ratios taken within one section are the more reliable figures'
        : ''),
    `- every figure is the median of ${r.runs} runs unless it says otherwise; all namespaces are the bench\u2019s own`,
  ].join('\n');
}

export function writeSection(r: BenchResults, largest: number): string {
  const rows = r.writes.rows;
  const big = rows.find((row) => row.cidrs === largest);
  const small = rows.find((row) => row.cidrs === 64);
  const ratioFresh = big ? big.agentMs / big.nftFreshMs : Number.NaN;
  const ratioReplace = big ? big.agentMs / big.nftReplaceMs : Number.NaN;
  const bd = r.breakdown.find((row) => row.cidrs === largest);
  const lines = [
    '## 1. Config write → kernel',
    '',
    'Agent: a rename of a new config into the watched directory (as a ConfigMap update lands) until `/healthz` shows the ' +
      'next generation, polled every millisecond from a persistent client inside the namespace. Each write replaces every element. ' +
      'Bare: `nft -f` of the `--render` script, timed inside the namespace from exec to exit, into a namespace without the ' +
      'table (fresh) and over a table of the same size (replace: what the agent does). Original: `iptables-nft-restore` of ' +
      'the linear `IP-MASQ-AGENT` chain.',
    '',
    table(
      [
        'CIDRs',
        'agent write→healthz',
        'agent sync (its log)',
        'of which libnftables',
        'bare nft -f fresh',
        'bare nft -f replace',
        'iptables-nft-restore',
        'agent / fresh',
        'agent / replace',
        'iptables / fresh',
      ],
      rows.map((row) => [
        n(row.cidrs),
        `${fmt(row.agentMs)} ms`,
        `${fmt(row.agentSyncMs)} ms`,
        `${fmt(row.agentApplyMs)} ms`,
        `${fmt(row.nftFreshMs)} ms`,
        `${fmt(row.nftReplaceMs)} ms`,
        `${fmt(row.iptablesMs)} ms`,
        `${fmt(row.agentMs / row.nftFreshMs)}×`,
        `${fmt(row.agentMs / row.nftReplaceMs)}×`,
        `${fmt(row.iptablesMs / row.nftFreshMs)}×`,
      ]),
    ),
    '',
    table(
      ['target', 'measured', ''],
      [
        [
          `agent ≤ 1.3× bare \`nft -f\` at ${n(largest)}`,
          `${fmt(ratioFresh)}× fresh, ${fmt(ratioReplace)}× replace`,
          `${verdict(ratioFresh <= 1.3)} (fresh) · ${verdict(ratioReplace <= 1.3)} (replace)`,
        ],
        [
          'agent ≤ 250 ms at 64',
          `${fmt(small?.agentMs ?? Number.NaN)} ms`,
          verdict((small?.agentMs ?? Infinity) <= 250),
        ],
      ],
    ),
    '',
    `What the agent adds to bare \`nft -f\`: the watcher\u2019s 25 ms debounce (part of the floor of every row: at 64 CIDRs the sync ` +
      `itself is ${fmt(small?.agentSyncMs ?? Number.NaN)} ms), and on the JavaScript thread the config read and merge and the ` +
      `rendering. Measured in-process (median of ${r.runs}):`,
    '',
    table(
      [
        'CIDRs',
        'loadConfig (read, parse, validate, merge)',
        'compile + render (script)',
        'script size',
      ],
      r.breakdown.map((row) => [
        n(row.cidrs),
        `${fmt(row.loadConfigMs)} ms`,
        `${fmt(row.compileRenderMs)} ms`,
        `${fmt(row.scriptBytes / 1024)} KiB`,
      ]),
    ),
    '',
  ];
  if (big && bd) {
    const jsMs = bd.loadConfigMs + bd.compileRenderMs;
    const applyRatio = big.agentApplyMs / big.nftReplaceMs;
    lines.push(
      `At ${n(largest)}: ${fmt(big.agentMs)} ms = the 25 ms debounce + the agent\u2019s sync (${fmt(big.agentSyncMs)} ms by its ` +
        `log) + the rest (event delivery, garbage collection, the poll). Inside the sync, the libnftables transaction took ` +
        `${fmt(big.agentApplyMs)} ms against ${fmt(big.nftReplaceMs)} ms for bare \`nft -f\` replacing the same table ` +
        `(${fmt(applyRatio)}×): **our own write costs ${applyRatio <= 1 ? 'no more than' : applyRatio <= 1.2 ? 'about as much as' : 'more than'} bare \`nft -f\`** ` +
        '(a shared 2-vCPU machine moves single runs by 10–20 %). ' +
        `The rest of the sync is JavaScript: ${fmt(jsMs)} ms in-process (config ${fmt(bd.loadConfigMs)}, render ` +
        `${fmt(bd.compileRenderMs)}). ${ratioFresh <= 1.3 ? '' : 'So the miss of the 1.3× target is the debounce and the JavaScript side, not libnftables.'}`,
      '',
      'A CPU profile of the agent (`node --cpu-prof`, three 100 000-CIDR writes, taken once by hand on 2026-11-30 at ' +
        'commit f0e4379, when the config was still parsed on the main thread) puts its self time in: garbage collection 582 ms, YAML parse 195 ms, rendering the set 188 ms (+54 ' +
        'the table), CIDR list parse 144 ms, prefix merge 124 + 65 ms, config build and merge 117 + 103 ms, the config hash ' +
        '73 + 44 ms — over three writes, about 550 ms each, while libnftables ran about 1 s per write on the thread pool. ' +
        'What would close the gap: parse the config once per change and keep the merged prefixes (done for idle resyncs), ' +
        'render the content key and the script in one pass, allocate less per CIDR (strings and objects per element drive ' +
        'the GC time), and a shorter debounce for single-file writes. Since then: the config parses on a worker thread ' +
        'for files over 4 KiB, the content key no longer renders, and the debounce is 25 ms.',
      '',
    );
  }
  return lines.join('\n');
}

export function flowSection(r: BenchResults, largest: number): string {
  const f = r.flows;
  const sizes = [...new Set(f.rows.map((row) => row.cidrs))];
  const layouts = [...new Set(f.rows.map((row) => row.layout))];
  const cell = (layout: string, count: number) =>
    f.rows.find((row) => row.layout === layout && row.cidrs === count);
  const show = (row: FlowRow | undefined) =>
    row ? `${fmt(row.perFlowUs)} (${fmt(row.netUs)})` : '—';
  const ours64 = cell(OURS, 64);
  const oursBig = cell(OURS, largest);
  const ratio = ours64 && oursBig ? oursBig.perFlowUs / ours64.perFlowUs : Number.NaN;
  return [
    '## 2. Cost per new flow',
    '',
    'A python sender in the pod namespace sends one UDP datagram per new socket, each bound to its own source port (a new ' +
      `conntrack entry and NAT decision per flow), to ${'198.19.0.4'} on the remote — not exempt, so every layout walks its whole ` +
      'decision and masquerades. Batches sized to a few hundred ms; median of the batches\u2019 µs per flow. In brackets: minus ' +
      'a baseline with no NAT table in the node measured just before each cell ' +
      `(median ${fmt(f.baselineUs)} µs, from ${fmt(Math.min(...f.baselines))} to ${fmt(Math.max(...f.baselines))}). ` +
      'Each layout was checked to masquerade that destination and to exempt 10.9.0.1 once it is in the set.',
    '',
    table(
      ['µs per flow (net)', ...sizes.map(n)],
      layouts.map((layout) => [layout, ...sizes.map((count) => show(cell(layout, count)))]),
    ),
    '',
    table(
      ['target', 'measured', ''],
      [
        [
          `ours at ${n(largest)} within 1.2× ours at 64`,
          `${fmt(ratio)}× (net: ${fmt(oursBig?.netUs ?? Number.NaN)} vs ${fmt(ours64?.netUs ?? Number.NaN)} µs)`,
          verdict(ratio <= 1.2),
        ],
      ],
    ),
    '',
    `The interval set is a tree lookup: flat in the set size. The original\u2019s chain is evaluated rule by rule: ` +
      `${fmt(cell(LINEAR, largest)?.netUs ?? Number.NaN)} µs per new flow at ${n(largest)}. The ratio is judged on the whole ` +
      'per-flow cost the pod sees; the net figures are a few µs and move by about as much between batches on a loaded machine.',
    '',
  ].join('\n');
}

export function neighbourFigures(r: BenchResults) {
  const ours = r.neighbour.rows.filter((row) => row.layout === OURS);
  const none = r.neighbour.rows.find((row) => row.layout === NONE);
  const noneMs = none?.neighbourMs ?? 0;
  // Load on a shared machine lifts every run, ours or not: the added cost is the steadier figure.
  const added = ours.map((row) => ({ ...row, neighbourMs: row.neighbourMs - row.noneMs }));
  return { ours, none, noneMs, crossAt: crossing(ours, 100), addedCrossAt: crossing(added, 100) };
}

export { table, n };
