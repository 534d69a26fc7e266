// What an idle resync costs the agent (CPU, kernel writes and reads)
// and the agent's resident memory once settled, per config size.
import { AgentSession } from './agent-session.js';
import { CLOCK_TICKS, sleep, withScope } from './harness.js';

export interface IdleRow {
  cidrs: number;
  resyncs: number;
  cpuMsPerResync: number;
  /** Agent CPU over an equal window with no resync, per resync slot: what the above includes anyway. */
  idleCpuMsPerSlot: number;
  writesPerResync: number;
  readsPerResync: number;
  /** Mean sync duration from the agent's histogram. */
  syncMs: number;
  rssMiB: number;
  rssAnonMiB: number;
  rssFileMiB: number;
  /** V8 heap in use and reserved, from prom-client's default metrics, after settling. */
  heapUsedMiB: number;
  heapTotalMiB: number;
}

const SETTLE_MS = 3_000;
const SYNCS = 'ipmasq_syncs_total';

function totalSyncs(value: (series: string) => number): number {
  return ['applied', 'unchanged', 'error']
    .map((result) => value(`${SYNCS}{result="${result}"}`))
    .reduce((a, b) => a + b, 0);
}

/** SIGHUPs once and waits (bounded) for the sync it causes; returns its duration in ms. */
async function calibrate(session: AgentSession): Promise<number> {
  const before = await session.metrics();
  process.kill(session.pid, 'SIGHUP');
  const deadline = Date.now() + 60_000;
  for (;;) {
    await sleep(200);
    const after = await session.metrics();
    if (totalSyncs(after) > totalSyncs(before)) {
      const sum = 'ipmasq_sync_duration_seconds_sum';
      return (after(sum) - before(sum)) * 1000;
    }
    if (Date.now() > deadline) throw new Error('SIGHUP caused no sync within 60 s');
  }
}

async function measureIdle(count: number, resyncs: number): Promise<IdleRow> {
  return withScope(async (scope) => {
    const session = await AgentSession.start(scope, count);
    await sleep(SETTLE_MS);
    const rss = session.rssKiB();
    const settled = await session.metrics();
    const syncMs = await calibrate(session);
    // Spaced so that no SIGHUP lands while the previous resync runs (the runner would coalesce).
    const spacingMs = Math.max(150, 2 * syncMs + 100);

    const idleStart = session.cpuTicks();
    await sleep(spacingMs * resyncs);
    const idleTicks = session.cpuTicks() - idleStart;

    const before = await session.metrics();
    const cpuBefore = session.cpuTicks();
    for (let i = 0; i < resyncs; i++) {
      process.kill(session.pid, 'SIGHUP');
      await sleep(spacingMs);
    }
    await sleep(spacingMs);
    const cpuTicks = session.cpuTicks() - cpuBefore;
    const after = await session.metrics();

    const syncs = totalSyncs(after) - totalSyncs(before);
    if (syncs === 0) throw new Error(`no resyncs happened at ${count}`);
    const perTickMs = 1000 / CLOCK_TICKS;
    const row: IdleRow = {
      cidrs: count,
      resyncs: syncs,
      cpuMsPerResync: (cpuTicks * perTickMs) / syncs,
      idleCpuMsPerSlot: (idleTicks * perTickMs) / resyncs,
      writesPerResync:
        (after(`${SYNCS}{result="applied"}`) - before(`${SYNCS}{result="applied"}`)) / syncs,
      readsPerResync:
        (after('ipmasq_kernel_reads_total') - before('ipmasq_kernel_reads_total')) / syncs,
      syncMs,
      rssMiB: rss.total / 1024,
      rssAnonMiB: rss.anon / 1024,
      rssFileMiB: rss.file / 1024,
      heapUsedMiB: settled('nodejs_heap_size_used_bytes') / 2 ** 20,
      heapTotalMiB: settled('nodejs_heap_size_total_bytes') / 2 ** 20,
    };
    console.error(`bench: idle ${count}: ${JSON.stringify(row)}`);
    return row;
  });
}

export async function benchIdle(
  sizes: readonly number[],
  resyncsFor: (count: number) => number,
): Promise<IdleRow[]> {
  const rows: IdleRow[] = [];
  for (const count of sizes) rows.push(await measureIdle(count, resyncsFor(count)));
  return rows;
}
