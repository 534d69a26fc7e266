// The SNAT port sample (docs/observability.md, "What the node's NAT does") at 100 000 and 1 000 000
// conntrack entries, every one source-translated (the worst case: the kernel filters the dump by
// status, so untranslated entries cost ~0.3 µs each, translated ones ~2 µs). Entries are made with
// ctnetlink by bench/ct-fill.c (built here with cc). Per size: one sample's CPU (its thread's, the
// kernel's dump included) and wall time and the peak RSS it adds, run in a probe process; then the
// agent itself sampling every second while /healthz is asked every 20 ms: the answers' p99.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { metricValue, startHealthProbe } from '../harness/agent.js';
import { buildConntrackFill } from '../harness/flows.js';
import { inNetns, packageRoot } from '../harness/netns.js';
import { AgentSession } from './agent-session.js';
import { netns, percentile, tempDir, withScope } from './harness.js';

export interface NatSampleRow {
  readonly entries: number;
  readonly sampleCpuS: number;
  readonly sampleWallMs: number;
  /** The probe process's peak RSS added by the sample. */
  readonly rssDeltaMiB: number;
  /** With the default interval (30 s), stretched to keep 2 % (src/reconcile/nat-sampler.ts). */
  readonly averageCorePercent: number;
  readonly healthzP99Ms: number;
  readonly healthzAnswers: number;
}

const CONNTRACK_MAX = '/proc/sys/net/netfilter/nf_conntrack_max';

const PROBE = `
const a = require(${JSON.stringify(join(packageRoot, 'build/Release/nftables_napi.node'))});
const hwm = () => Number(/VmHWM:\\s+(\\d+)/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'))[1]);
(async () => {
  const empty = Buffer.alloc(0);
  await a.natSample({ family: 4, cpuBudgetS: 5, bySource: false, from: empty, to: empty });
  const before = hwm();
  const started = Date.now();
  const r = await a.natSample({ family: 4, cpuBudgetS: 5, bySource: false, from: empty, to: empty });
  console.log(JSON.stringify({ cpuS: r.cpuS, wallMs: Date.now() - started, translated: r.translated,
    complete: r.complete, rssDeltaMiB: (hwm() - before) / 1024 }));
})();
`;

export async function benchNatSample(
  sizes: readonly number[] = [100_000, 1_000_000],
): Promise<NatSampleRow[]> {
  const max = readFileSync(CONNTRACK_MAX, 'utf8').trim();
  const rows: NatSampleRow[] = [];
  try {
    // The limit is the host's (it is read-only in other namespaces): raised for the bench only.
    // Two namespaces' entries may briefly coexist (one's are released after it is deleted).
    writeFileSync(CONNTRACK_MAX, String(Math.max(Number(max), 2 * Math.max(...sizes) + 100_000)));
    for (const entries of sizes) {
      rows.push(
        await withScope(async (scope) => {
          const fill = buildConntrackFill(await tempDir(scope));
          const probe = await withScope(async (inner) => {
            const ns = await netns(inner, 'natsample');
            await inNetns(ns, fill, [String(entries)], { timeoutMs: 600_000 });
            const { stdout } = await inNetns(ns, process.execPath, ['-e', PROBE], {
              timeoutMs: 120_000,
            });
            const result = JSON.parse(stdout.trim()) as {
              cpuS: number;
              wallMs: number;
              translated: number;
              complete: boolean;
              rssDeltaMiB: number;
            };
            if (!result.complete || result.translated !== entries)
              throw new Error(`sample of ${entries}: ${stdout}`);
            return result;
          });
          // The agent beside the same table, sampling every second: /healthz during samples.
          const session = await AgentSession.start(
            scope,
            64,
            ['--nat-stats-interval', '1s'],
            120_000,
            async (agentNs) => {
              await inNetns(agentNs, fill, [String(entries)], { timeoutMs: 600_000 });
              return [];
            },
          );
          const health = await startHealthProbe(scope, session.ns, 9410, {
            maxRequests: 1_000,
            maxSeconds: 20,
            gapS: 0.02,
          });
          await new Promise((resolve) => setTimeout(resolve, 15_000));
          const { samples } = await health.stop();
          const seen = metricValue(
            (await session.get('/metrics')).body,
            'ipmasq_snat_flows{family="ipv4",protocol="udp"}',
          );
          if (seen !== entries) throw new Error(`the agent's sample saw ${seen} of ${entries}`);
          const latencies = samples.map(([, ms]) => ms);
          const interval = Math.max(30, probe.cpuS / 0.02);
          return {
            entries,
            sampleCpuS: probe.cpuS,
            sampleWallMs: probe.wallMs,
            rssDeltaMiB: probe.rssDeltaMiB,
            averageCorePercent: (probe.cpuS / interval) * 100,
            healthzP99Ms: percentile(latencies, 99),
            healthzAnswers: latencies.length,
          };
        }),
      );
      console.error(`bench: NAT sample at ${entries}: ${JSON.stringify(rows.at(-1))}`);
    }
  } finally {
    writeFileSync(CONNTRACK_MAX, max);
  }
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  benchNatSample().then(
    (rows) => console.log(JSON.stringify(rows, null, 2)),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
