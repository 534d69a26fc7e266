// One-CIDR edits back to back, judged on packets (issue 61, item 3): the agent with its defaults in
// the node of a pod ── node ── remote topology at 100 000 CIDRs; every 250 ms one CIDR, the /24 of
// a destination on the remote, is added to the config or removed from it again (a rename, as a
// ConfigMap update lands). Meanwhile the pod opens a fresh UDP flow to that destination every 2 ms,
// each carrying its send time; the remote records the source each arrived with (the pod's: not
// masqueraded; the node's: masqueraded). An edit is visible at the first flow sent after its rename
// that arrives with its decision; one whose decision no flow showed before the next rename counts as
// not visible (merged into the next write, or late), and so does the edit after it unless the flows
// just before its rename show the previous edit in force. Writes are counted from the agent's log.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import {
  makeTopology,
  NODE_IPV4,
  POD_IPV4,
  python,
  REMOTE_TARGETS_IPV4,
} from '../harness/topology.js';
import { AgentSession } from './agent-session.js';
import { median, percentile, sleep, withScope, type Scope } from './harness.js';
import { configText } from './scripts.js';

const proberScript = join(dirname(fileURLToPath(import.meta.url)), 'edit-prober.py');
const DESTINATION = REMOTE_TARGETS_IPV4.outsideDefaultsA;
/** The edited CIDR: the destination's /24, outside every bench CIDR (bench/scripts.ts, cidrs). */
const EDITED = '198.19.0.0/24';
const PORT = 40_000;
const PROBE_EVERY_MS = 2;

export interface EditPacketsResult {
  cidrs: number;
  /** The agent's `--set-layout`. */
  layout: string;
  edits: number;
  spacingMs: number;
  /** From the rename to the first flow sent with the edit's decision, of those visible in time. */
  addedMs: number[];
  removedMs: number[];
  /** Edits whose decision no flow showed before the next rename. */
  notVisible: number;
  /** Flows sent after an edit was visible, before the next rename, with the decision before it. */
  backslides: number;
  /** The agent's writes logged from the first rename to the end, one per edit if none merged. */
  writes: number;
  flows: number;
}

/** Starts a prober process in `ns`; resolves once it prints `ready` (its first line). */
async function prober(
  scope: Scope,
  ns: string,
  args: string[],
  ready: string,
): Promise<{ child: ChildProcessWithoutNullStreams; lines: string[] }> {
  const child = spawn('ip', ['netns', 'exec', ns, python, proberScript, ...args]);
  scope.teardown(() => child.kill('SIGKILL'));
  const lines: string[] = [];
  const reader = createInterface({ input: child.stdout });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${args[0]} prober not ${ready}`)), 10_000);
    reader.on('line', (line) => {
      if (line === ready) {
        clearTimeout(timer);
        resolve();
      } else lines.push(line);
    });
  });
  return { child, lines };
}

export interface Flow {
  sentNs: bigint;
  masqueraded: boolean;
}

function parseFlows(lines: readonly string[]): Flow[] {
  return lines
    .map((line) => line.split(' '))
    .filter(([, source]) => source === NODE_IPV4 || source === POD_IPV4)
    .map(([sent, source]) => ({ sentNs: BigInt(sent!), masqueraded: source === NODE_IPV4 }))
    .sort((a, b) => (a.sentNs < b.sentNs ? -1 : a.sentNs > b.sentNs ? 1 : 0));
}

/** Each edit's visibility from the flows sent between its rename and the next one. */
export function judge(
  renames: readonly bigint[],
  flows: readonly Flow[],
): Pick<EditPacketsResult, 'addedMs' | 'removedMs' | 'notVisible' | 'backslides'> {
  const result = {
    addedMs: [] as number[],
    removedMs: [] as number[],
    notVisible: 0,
    backslides: 0,
  };
  let f = 0;
  for (const [i, at] of renames.entries()) {
    const next = renames[i + 1] ?? at + 250_000_000n;
    // Odd edits (the 1st, 3rd, …) add the CIDR: its flows then leave unmasqueraded.
    const masqueraded = i % 2 === 1;
    while (f < flows.length && flows[f]!.sentNs < at) f++;
    // The previous edit in force when this one comes, or a flow with this edit's decision could be
    // an older edit's write landing late: then this edit is not seen either.
    const before = flows[f - 1];
    if (i > 0 && (before === undefined || before.masqueraded === masqueraded)) {
      result.notVisible++;
      continue;
    }
    let seen: bigint | undefined;
    for (; f < flows.length && flows[f]!.sentNs < next; f++) {
      const flow = flows[f]!;
      if (seen === undefined && flow.masqueraded === masqueraded) seen = flow.sentNs;
      else if (seen !== undefined && flow.masqueraded !== masqueraded) result.backslides++;
    }
    if (seen === undefined) result.notVisible++;
    else (masqueraded ? result.removedMs : result.addedMs).push(Number(seen - at) / 1e6);
  }
  return result;
}

export async function benchEditPackets(
  count = 100_000,
  edits = 1_000,
  spacingMs = 250,
  layout: 'auto' | 'interval' | 'concat' = 'auto',
): Promise<EditPacketsResult> {
  return withScope(async (scope) => {
    const topo = await makeTopology(scope, { ipv6: false });
    const session = await AgentSession.startIn(
      scope,
      topo.node,
      count,
      ['--set-layout', layout],
      300_000,
    );
    const seconds = (edits * spacingMs) / 1000 + 30;
    const receiver = await prober(
      scope,
      topo.remote,
      ['receive', String(PORT), String(seconds)],
      'ready',
    );
    const sender = await prober(
      scope,
      topo.pod,
      ['send', DESTINATION, String(PORT), String(PROBE_EVERY_MS), String(seconds)],
      'sending',
    );
    // The two configs the edits alternate between, made once: at 100 000 CIDRs each is ~2 MB of
    // text, not to be rebuilt in the paced loop.
    const [added, removed] = [configText(count, 0, '3600s', [EDITED]), configText(count)];
    // The first edit after a whole load also works out the sets' entries: one edit and back first.
    for (const text of [added, removed]) {
      await session.swapText(text, 60_000);
      await sleep(spacingMs);
    }
    const writesBefore = session.agent.logs.length;
    const renames: bigint[] = [];
    const started = Date.now();
    for (let i = 0; i < edits; i++) {
      // Paced from the start, so a slow write does not stretch the spacing of the rest.
      const due = started + i * spacingMs;
      if (due > Date.now()) await sleep(due - Date.now());
      renames.push(session.swapWithoutWaiting(i % 2 === 0 ? added : removed));
    }
    await sleep(2 * spacingMs);
    sender.child.kill('SIGTERM');
    receiver.child.kill('SIGTERM');
    await sleep(200);
    const flows = parseFlows(receiver.lines);
    const writes = session.agent.logs
      .slice(writesBefore)
      .filter((entry) => entry.msg === 'ruleset written to the kernel').length;
    session.close();
    const judged = judge(renames, flows);
    console.error(
      `bench: edits on packets at ${count} (${layout}): added p50 ${median(judged.addedMs).toFixed(1)} ms, removed p50 ${median(judged.removedMs).toFixed(1)} ms, max ${Math.max(...judged.addedMs, ...judged.removedMs).toFixed(1)} ms, p99 ${percentile([...judged.addedMs, ...judged.removedMs], 99).toFixed(1)} ms; ${judged.notVisible} not visible, ${judged.backslides} backslides, ${writes} writes for ${edits} edits, ${flows.length} flows`,
    );
    return { cidrs: count, layout, edits, spacingMs, ...judged, writes, flows: flows.length };
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [count, edits] = process.argv.slice(2, 4).map(Number);
  const layout = (process.argv[4] ?? 'auto') as 'auto' | 'interval' | 'concat';
  benchEditPackets(count || undefined, edits || undefined, 250, layout).then(
    (result) =>
      console.log(JSON.stringify({ ...result, addedMs: undefined, removedMs: undefined })),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
