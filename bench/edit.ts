// The everyday edit (docs/writes.md, "The everyday edit"; issue 42): one CIDR added to or removed
// from a config of 1 000, 10 000 and 100 000, on an agent with its defaults, timed from the rename
// until /healthz shows the new generation; the agent's own part is that less its write's applyMs
// (the libnftables call, or the netlink batch). Beside it, bare `nft -f` of the same one-element
// transaction (its elements and the mark's rule, as libnftables is given it) on the same table in a
// namespace of its own. Four edits in turn, each undoing the last kind: an element added last
// (after every other, in address and in time) and removed; the first element (written first)
// removed and added back. At 100 000, the same beside another table's 200 000-element plain
// interval set, whose elements libnftables downloads for every element command. Then the agent's
// RSS after whole changes at 100 000, run from a copy of node and from the system's node, 2 s and 5
// s after each.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AgentSession } from './agent-session.js';
import { copyOfNode } from '../harness/agent.js';
import { inNetns } from '../harness/netns.js';
import {
  median,
  netns,
  sleep,
  tempDir,
  timedIn,
  timedInside,
  withScope,
  type Scope,
} from './harness.js';
import { cidrs } from './scripts.js';
import { parseArgs } from '../src/cli/flags.js';
import { compile } from '../src/compile.js';
import { parseConfigText } from '../src/config/index.js';
import { renderInPlace } from '../src/nftables/change.js';
import { renderTable } from '../src/nftables/render.js';
import type { Table } from '../src/nftables/types.js';
import { plan } from '../src/options.js';

export type EditKind = 'added last' | 'removed last' | 'removed first' | 'added first';
export const EDIT_KINDS: readonly EditKind[] = [
  'added last',
  'removed last',
  'removed first',
  'added first',
];

export interface EditRow {
  cidrs: number;
  /** Where: `alone`, or beside another table's large plain interval set. */
  beside: string;
  kind: EditKind;
  /** Rename → /healthz shows the new generation, median. */
  agentMs: number;
  /** Of which the write (libnftables call or netlink batch), median; and the rest, median. */
  applyMs: number;
  ownMs: number;
  /** How the agent wrote it: `netlink` or `libnftables`. */
  via: string;
  /** Bare `nft -f` of the same transaction, median. */
  nftMs: number;
}

export interface EditMemory {
  /** RSS after whole changes at 100 000, and its anonymous part, by how node was run. */
  node: 'a copy of node' | "the system's node";
  /** 2 s after each change (the write's garbage not collected yet), the most. */
  rssMiB: number;
  anonMiB: number;
  /** 5 s after each change (once the agent's collection 2 s after a write ran), the most. */
  settledRssMiB: number;
  settledAnonMiB: number;
}

/** RSS along one-CIDR edits at 100 000, back to back (issue 47, item 3). */
export interface EditStream {
  edits: number;
  /**
   * 1 s after the first edit and 1 s after the last (each edit's audits, within the second, done:
   * the same point of the cycle); the most right after any edit between (sampled every 50, an
   * audit's whole load sometimes under way); 20 s after the last.
   */
  firstMiB: number;
  mostMiB: number;
  lastMiB: number;
  idleMiB: number;
}

export interface EditResults {
  rows: EditRow[];
  memory: EditMemory[];
  /** Absent in results recorded before it was measured. */
  stream?: EditStream;
  runs: number;
}

/** The first CIDR of the config (written first), and one after every other. */
const LAST = '14.255.255.0/24';

function listOf(count: number, kind: 'base' | 'with last' | 'without first'): string[] {
  const list = cidrs(count);
  if (kind === 'with last') return [...list, LAST];
  if (kind === 'without first') return list.slice(1);
  return list;
}

function text(list: readonly string[], count: number): string {
  return `cidrLimit: ${count + 16}\nresyncInterval: 3600s\nnonMasqueradeCIDRs:\n${list.map((c) => `  - ${c}`).join('\n')}\n`;
}

/** The tables the agent writes for this list with its defaults (`auto` layout). */
function tablesOf(list: readonly string[], count: number, generation: number): Table[] {
  const parsed = parseArgs([]);
  if (!parsed.ok) throw new Error(parsed.message);
  const stages = plan(parsed.options);
  const result = parseConfigText(text(list, count), 'bench', stages.load);
  if (!result.ok) throw result.error;
  return compile(result.config, stages.compile, generation, 'benchxxx.001');
}

/** The states the four edits go through, in order, from the base list and back. */
const STATES: ReadonlyArray<'base' | 'with last' | 'without first'> = [
  'with last',
  'base',
  'without first',
  'base',
];

/**
 * A table with a plain interval set of `count` /30s: another tool's (kube-proxy's and Calico's
 * nftables modes keep such sets).
 */
function foreignTable(count: number): string {
  const elements: string[] = [];
  for (let i = 0; i < count; i++) {
    const a = ((172 << 24) | (i * 4)) >>> 0;
    elements.push(`${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}/30`);
  }
  return `table ip other {\n  set s {\n    type ipv4_addr; flags interval\n    elements = { ${elements.join(',\n')} }\n  }\n}\n`;
}

/**
 * Bare `nft -f` of each edit's transaction, `runs` rounds of the four, in a namespace of its own.
 */
async function bareEdits(
  scope: Scope,
  count: number,
  runs: number,
  foreign: string | undefined,
): Promise<Map<EditKind, number[]>> {
  const dir = await tempDir(scope);
  const ns = await netns(scope, 'bench-edit0');
  if (foreign) await inNetns(ns, 'nft', ['-f', '-'], { input: foreign, timeoutMs: 300_000 });
  let generation = 1;
  let tables = tablesOf(listOf(count, 'base'), count, generation);
  const setup = join(dir, 'table.nft');
  await writeFile(setup, tables.map((table) => renderTable(table)).join(''));
  await timedIn(ns, 'nft', ['-f', setup], 300_000);
  const times = new Map<EditKind, number[]>(EDIT_KINDS.map((kind) => [kind, []]));
  for (let run = 0; run < runs; run++) {
    for (const [i, kind] of EDIT_KINDS.entries()) {
      const next = tablesOf(listOf(count, STATES[i]!), count, ++generation);
      // What libnftables is given for it: renderInPlace from the table the kernel holds.
      const script = next.map((table, f) => renderInPlace(table, tables[f]!).join('')).join('');
      const file = join(dir, `edit-${i}.nft`);
      await writeFile(file, script);
      times.get(kind)!.push(await timedInside(ns, 'nft', ['-f', file], 300_000));
      tables = next;
    }
  }
  return times;
}

/** The agent's four edits, `runs` rounds, swapped in as a ConfigMap update lands (a rename). */
async function agentEdits(
  scope: Scope,
  count: number,
  runs: number,
  foreign: string | undefined,
): Promise<Map<EditKind, Array<{ ms: number; applyMs: number; via: string }>>> {
  const prepare = foreign
    ? async (ns: string) => {
        await inNetns(ns, 'nft', ['-f', '-'], { input: foreign, timeoutMs: 300_000 });
        return [];
      }
    : undefined;
  const session = await AgentSession.start(scope, 0, ['--set-layout', 'auto'], 300_000, prepare);
  await session.swapText(text(listOf(count, 'base'), count), 300_000);
  // A few edits first: the first edit after a whole load also works out the sets' entries.
  for (const state of ['with last', 'base'] as const) {
    await sleep(250);
    await session.swapText(text(listOf(count, state), count), 60_000);
  }
  const times = new Map<EditKind, Array<{ ms: number; applyMs: number; via: string }>>(
    EDIT_KINDS.map((kind) => [kind, []]),
  );
  for (let run = 0; run < runs; run++) {
    for (const [i, kind] of EDIT_KINDS.entries()) {
      await sleep(250);
      const { ms, generation } = await session.swapText(
        text(listOf(count, STATES[i]!), count),
        60_000,
      );
      const line = session.agent.logs.find(
        (entry) => entry.msg === 'ruleset written to the kernel' && entry.generation === generation,
      );
      times.get(kind)!.push({
        ms,
        applyMs: typeof line?.applyMs === 'number' ? line.applyMs : Number.NaN,
        via: typeof line?.via === 'string' ? line.via : '?',
      });
    }
  }
  session.close();
  return times;
}

function rows(
  count: number,
  beside: string,
  agent: Map<EditKind, Array<{ ms: number; applyMs: number; via: string }>>,
  bare: Map<EditKind, number[]>,
): EditRow[] {
  return EDIT_KINDS.map((kind) => {
    const runs = agent.get(kind)!;
    const vias = [...new Set(runs.map((r) => r.via))].join(', ');
    return {
      cidrs: count,
      beside,
      kind,
      agentMs: median(runs.map((r) => r.ms)),
      applyMs: median(runs.map((r) => r.applyMs)),
      ownMs: median(runs.map((r) => r.ms - r.applyMs)),
      via: vias,
      nftMs: median(bare.get(kind)!),
    };
  });
}

/** RSS 2 s after each of `changes` whole changes at 100 000 (every CIDR replaced), the largest. */
async function memoryAfterWholeChanges(
  scope: Scope,
  node: string,
  label: EditMemory['node'],
  changes: number,
): Promise<EditMemory> {
  const session = await AgentSession.start(
    scope,
    64,
    ['--set-layout', 'auto'],
    300_000,
    undefined,
    node,
  );
  let most = { total: 0, anon: 0, file: 0 };
  let settled = { total: 0, anon: 0, file: 0 };
  for (let i = 0; i < changes; i++) {
    await session.swapText(text(cidrs(100_000, (i % 2) as 0 | 1), 100_000), 300_000);
    await sleep(2_000);
    const rss = session.rssKiB();
    if (rss.total > most.total) most = rss;
    await sleep(3_000);
    const later = session.rssKiB();
    if (later.total > settled.total) settled = later;
  }
  session.close();
  return {
    node: label,
    rssMiB: most.total / 1024,
    anonMiB: most.anon / 1024,
    settledRssMiB: settled.total / 1024,
    settledAnonMiB: settled.anon / 1024,
  };
}

/**
 * `edits` one-CIDR edits at 100 000 back to back (added, removed, …): RSS after the first, along,
 * after the last.
 */
export async function memoryAlongEdits(scope: Scope, edits: number): Promise<EditStream> {
  const session = await AgentSession.start(scope, 100_000, ['--set-layout', 'auto'], 300_000);
  const base = cidrs(100_000);
  const mib = () => session.rssKiB().total / 1024;
  let first = 0;
  let most = 0;
  let last = 0;
  for (let i = 1; i <= edits; i++) {
    await session.swapText(text(i % 2 === 1 ? [...base, LAST] : base, 100_000), 60_000);
    if (i % 50 === 0) most = Math.max(most, mib());
    if (i === 1 || i === edits) {
      await sleep(1_000);
      if (i === 1) first = mib();
      else last = mib();
    }
  }
  await sleep(19_000);
  const idle = mib();
  session.close();
  return { edits, firstMiB: first, mostMiB: most, lastMiB: last, idleMiB: idle };
}

export async function benchEdit(
  sizes: readonly number[] = [1_000, 10_000, 100_000],
  runs = 5,
  foreignSize = 200_000,
): Promise<EditResults> {
  return withScope(async (scope) => {
    const out: EditRow[] = [];
    for (const count of sizes) {
      const agent = await agentEdits(scope, count, runs, undefined);
      const bare = await bareEdits(scope, count, runs, undefined);
      out.push(...rows(count, 'alone', agent, bare));
      console.error(`bench: edit ${count}: done`);
    }
    const largest = Math.max(...sizes);
    const foreign = foreignTable(foreignSize);
    const beside = `beside a ${foreignSize.toLocaleString('en-US').replace(/,/g, ' ')}-element interval set`;
    // Beside it, the largest and a typical small config (plain interval sets): both element
    // batches.
    for (const count of [3, largest]) {
      const agent = await agentEdits(scope, count, runs, foreign);
      const bare = await bareEdits(scope, count, Math.min(runs, 3), foreign);
      out.push(...rows(count, beside, agent, bare));
    }
    const memory = [
      await memoryAfterWholeChanges(scope, copyOfNode(await tempDir(scope)), 'a copy of node', 6),
      await memoryAfterWholeChanges(scope, process.execPath, "the system's node", 6),
    ];
    const stream = await memoryAlongEdits(scope, 1_000);
    console.error('bench: edit stream: done');
    return { rows: out, memory, stream, runs };
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  benchEdit().then(
    (results) => console.log(JSON.stringify(results, null, 2)),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
