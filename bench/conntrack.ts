// The conntrack flush after a config change: its time and the agent's CPU with many unrelated
// entries and some whose decision the change flips, against the same write with
// --conntrack-flush=none. Entries come from one local socket, sent out of a veth pair whose far
// end answers nothing.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { python } from '../harness/topology.js';
import { AgentSession } from './agent-session.js';
import { CLOCK_TICKS, median, timedIn, withScope } from './harness.js';

const flowsScript = join(dirname(fileURLToPath(import.meta.url)), 'flows.py');

export interface ConntrackRow {
  mode: 'udp' | 'none';
  unrelated: number;
  matching: number;
  /** Rename → /healthz at the next generation (the flush runs after the write is reported). */
  writeMs: number;
  /** The flush, from the agent's log line; undefined with none. */
  flushMs: number | undefined;
  deleted: number;
  /** Agent CPU from the rename until the sync is over, flush included. */
  cpuMs: number;
}

async function entriesIn(ns: string): Promise<number> {
  const { stdout } = await timedIn(ns, 'conntrack', ['-C']);
  return Number(stdout.trim());
}

async function run(mode: 'udp' | 'none', unrelated: number, matching: number, runs: number) {
  return withScope(async (scope) => {
    // 64 CIDRs, every other /24 of 10.0.0.0/16; variant 1 takes the others: every one flips.
    const session = await AgentSession.start(scope, 64, [`--conntrack-flush=${mode}`]);
    const ns = session.ns;
    for (const args of [
      ['link', 'add', 'ct0', 'type', 'veth', 'peer', 'name', 'ct1'],
      ['link', 'set', 'ct0', 'up'],
      ['link', 'set', 'ct1', 'up'],
      ['address', 'add', '192.0.2.1/24', 'dev', 'ct0'],
      ['neigh', 'add', '192.0.2.2', 'lladdr', '02:00:00:00:00:02', 'dev', 'ct0'],
      ['route', 'add', '10.0.0.0/16', 'via', '192.0.2.2'],
      ['route', 'add', '198.18.0.0/15', 'via', '192.0.2.2'],
    ])
      await timedIn(ns, 'ip', args);
    await timedIn(ns, 'sysctl', ['-q', '-w', 'net.netfilter.nf_conntrack_udp_timeout=600']);
    await timedIn(ns, python, [flowsScript, '198.18.0.1', String(unrelated)], 120_000);
    const rows: ConntrackRow[] = [];
    for (let i = 0; i < runs; i++) {
      // In 10.0.0.0–10.0.3.255: every /24 there flips at each swap between the two variants.
      await timedIn(ns, python, [flowsScript, '10.0.0.1', String(matching)]);
      const before = session.cpuTicks();
      const swap = await session.swapConfig(64, i % 2 === 0 ? 1 : 0);
      const logged = () =>
        session.agent.logs.find(
          (l) =>
            l.msg?.startsWith('deleted the conntrack entries') && l.generation === swap.generation,
        );
      const deadline = Date.now() + 10_000;
      while (mode === 'udp' && !logged() && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 5));
      await new Promise((r) => setTimeout(r, 200)); // let the sync finish before reading its CPU
      const line = logged();
      const deleted = Object.values((line?.deleted ?? {}) as Record<string, Record<string, number>>)
        .flatMap((byProtocol) => Object.values(byProtocol))
        .reduce((a, b) => a + b, 0);
      rows.push({
        mode,
        unrelated,
        matching,
        writeMs: swap.ms,
        flushMs: typeof line?.durationMs === 'number' ? line.durationMs : undefined,
        deleted,
        cpuMs: ((session.cpuTicks() - before) * 1000) / CLOCK_TICKS,
      });
    }
    return { rows, entriesLeft: await entriesIn(ns) };
  });
}

export interface ConntrackSummary extends Omit<ConntrackRow, 'flushMs'> {
  flushMs: number | null;
  /** Entries in the namespace after the last swap: the unrelated ones, untouched. */
  entriesLeft: number;
}

/** Median of `runs` swaps per mode; each swap flips the /24s that hold `matching` fresh entries. */
export async function benchConntrack(
  unrelated: number,
  matching: number,
  runs: number,
): Promise<ConntrackSummary[]> {
  const summary: ConntrackSummary[] = [];
  for (const mode of ['udp', 'none'] as const) {
    const { rows, entriesLeft } = await run(mode, unrelated, matching, runs);
    const pick = (f: (r: ConntrackRow) => number) => median(rows.map(f));
    summary.push({
      mode,
      unrelated,
      matching,
      writeMs: pick((r) => r.writeMs),
      flushMs: mode === 'udp' ? pick((r) => r.flushMs ?? NaN) : null,
      deleted: pick((r) => r.deleted),
      cpuMs: pick((r) => r.cpuMs),
      entriesLeft,
    });
    console.error(`bench: conntrack ${mode}: ${JSON.stringify(summary.at(-1))}`);
  }
  return summary;
}
