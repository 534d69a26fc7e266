// What an idle agent costs beside a config directory of 10 000 ip-masq* files (over the limit of
// 1 000, so refused): the CPU share of resyncs every second, and how often they list the directory.
// A test asserted this share once (< 10 %); it moves with the machine, so it is measured here and the
// test asserts what the agent does (test/faults/big-directory.test.ts).
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { httpGet, metricValue, startAgent } from '../harness/agent.js';
import { CLOCK_TICKS, netns, sleep, tempDir, timedIn, withScope } from './harness.js';

export interface BigDirectoryResult {
  files: number;
  /** The agent's CPU over the window, in % of one core. */
  cpuPercent: number;
  resyncs: number;
  listingsPerResync: number;
  windowS: number;
}

const PORT = 9411;

function cpuTicks(pid: number, stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields.length < 13) throw new Error(`pid ${pid}: unreadable /proc stat`);
  return Number(fields[11]) + Number(fields[12]);
}

export async function benchBigDirectory(files = 10_000, windowS = 20): Promise<BigDirectoryResult> {
  return withScope(async (scope) => {
    const ns = await netns(scope, 'bench-bigdir');
    await timedIn(ns, 'ip', ['link', 'set', 'lo', 'up']);
    const dir = join(await tempDir(scope), 'config.d');
    await mkdir(dir);
    await writeFile(
      join(dir, 'ip-masq-agent'),
      'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n',
    );
    const agent = startAgent(scope, ns, ['--config', dir, '--listen', `127.0.0.1:${PORT}`]);
    const scrape = async () => (await httpGet(ns, PORT, '/metrics')).body;
    // Valid first, so that its resyncInterval of 1 s is the one kept; then the directory fills.
    const started0 = Date.now();
    while (!(await scrape().catch(() => '')).includes('ipmasq_generation 1')) {
      if (Date.now() > started0 + 60_000) throw new Error('the agent did not write within 60 s');
      await sleep(100);
    }
    for (let i = 0; i < files; i++)
      await writeFile(join(dir, `ip-masq-${String(i).padStart(5, '0')}`), `x${i}: 1\n`);
    const deadline = Date.now() + 60_000;
    while (!(await scrape().catch(() => '')).includes('ipmasq_config_valid 0')) {
      if (Date.now() > deadline) throw new Error('the directory was not refused within 60 s');
      await sleep(200);
    }
    await sleep(3_000); // the directory's last change settled, the first resyncs past
    const pid = agent.child.pid!;
    const ticks = async () => cpuTicks(pid, await readFile(`/proc/${pid}/stat`, 'utf8'));
    const total = (text: string, series: string) => metricValue(text, series) ?? 0;
    const syncs = (text: string) =>
      ['applied', 'unchanged', 'error'].reduce(
        (sum, r) => sum + total(text, `ipmasq_syncs_total{result="${r}"}`),
        0,
      );
    const listing = 'ipmasq_config_reads_total{what="listing"}';
    const before = await scrape();
    const cpuBefore = await ticks();
    const started = performance.now();
    await sleep(windowS * 1000);
    const cpu = (await ticks()) - cpuBefore;
    const elapsedS = (performance.now() - started) / 1000;
    const after = await scrape();
    const resyncs = syncs(after) - syncs(before);
    const result: BigDirectoryResult = {
      files,
      cpuPercent: (100 * cpu) / CLOCK_TICKS / elapsedS,
      resyncs,
      listingsPerResync: (total(after, listing) - total(before, listing)) / Math.max(resyncs, 1),
      windowS: elapsedS,
    };
    console.error(`bench: big directory: ${JSON.stringify(result)}`);
    return result;
  });
}
