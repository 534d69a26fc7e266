// The look at other NAT (docs/observability.md, "Other NAT on the node") beside a foreign 100
// 000-element interval set: an idle resync's look must cost at most 10 ms of CPU more than without
// it. Three namespaces: a Flannel-like chain alone; the same beside another table's 100 000-element
// plain interval set; the set in the very table whose nat chain is looked at (its rules printed
// once, at the first look); beside a table whose one base chain jumps to 10 000 chains.
import { join } from 'node:path';
import { lookHeavyTable, startRuleWriter, wideTable } from '../harness/foreign-nat.js';
import { inNetns, packageRoot } from '../harness/netns.js';
import { AgentSession } from './agent-session.js';
import { median, netns, percentile, withScope } from './harness.js';

export interface OtherNatRow {
  readonly setting: string;
  readonly findings: number;
  readonly firstMs: number;
  readonly idleCpuMs: number;
  readonly idleCpuP99Ms: number;
}

const FLANNEL = `table ip flannel {
  chain postrtg {
    type nat hook postrouting priority srcnat + 10; policy accept;
    ip saddr 10.244.0.0/16 ip daddr != 10.244.0.0/16 masquerade
  }
}
`;

/** A table with a plain interval set of `count` /30s, and optionally a nat chain looking it up. */
function bigTable(name: string, count: number, withChain: boolean): string {
  const elements: string[] = [];
  for (let i = 0; i < count; i++) {
    const a = (10 << 24) | (i * 4);
    elements.push(`${a >>> 24}.${(a >> 16) & 255}.${(a >> 8) & 255}.${a & 255}/30`);
  }
  const chain = withChain
    ? `  chain post {\n    type nat hook postrouting priority srcnat + 20; policy accept;\n    ip saddr @s masquerade\n  }\n`
    : '';
  return `table ip ${name} {\n  set s {\n    type ipv4_addr; flags interval\n    elements = { ${elements.join(',\n')} }\n  }\n${chain}}\n`;
}

export async function benchOtherNat(size = 100_000, looks = 50): Promise<OtherNatRow[]> {
  const shown = size.toLocaleString('en-US').replace(/,/g, ' ');
  const settings: Array<[string, string[]]> = [
    ['a Flannel-like chain, nothing else', [FLANNEL]],
    [
      `the same beside another table's ${shown}-element interval set`,
      [FLANNEL, bigTable('big', size, false)],
    ],
    [
      `a nat chain in the table of a ${shown}-element interval set`,
      [FLANNEL, bigTable('big', size, true)],
    ],
    // The red team's wide neighbour (issue 51, item 6): an idle look beside it reads only the
    // generation id; the first look stops at its budget.
    [
      'the Flannel-like chain beside one base chain jumping to 10 000 chains',
      [FLANNEL, wideTable(10_000)],
    ],
  ];
  const rows: OtherNatRow[] = [];
  for (const [setting, scripts] of settings) {
    rows.push(
      await withScope(async (scope) => {
        const ns = await netns(scope, 'othernat');
        for (const script of scripts)
          await inNetns(ns, 'nft', ['-f', '-'], { input: script, timeoutMs: 120_000 });
        const { stdout } = await inNetns(
          ns,
          process.execPath,
          ['--import=tsx', join(packageRoot, 'bench', 'other-nat-probe.ts'), String(looks)],
          { timeoutMs: 300_000 },
        );
        return {
          setting,
          ...(JSON.parse(stdout.trim().split('\n').pop()!) as Omit<OtherNatRow, 'setting'>),
        };
      }),
    );
  }
  return rows;
}

/** Our writes and probes beside another table's look-heavy NAT (issue 51, item 1). */
export interface LookBeside {
  readonly setting: string;
  /** Start to generation 1 (the agent's start included). */
  readonly firstWriteMs: number;
  /** Config changes, each rename → /healthz showing its generation. */
  readonly changes: number;
  readonly changeMedianMs: number;
  readonly changeMaxMs: number;
  /** /readyz and /healthz probed every 100 ms meanwhile. */
  readonly probes: number;
  readonly probeP99Ms: number;
  readonly probeMaxMs: number;
  /** Probes answered other than 200, or not within 10 s. */
  readonly probesFailed: number;
}

/**
 * The red team's case: one foreign table with a `size`-element interval set and 4 nat postrouting
 * base chains sharing one jumped chain, a writer replacing that chain's rule every second (so each
 * look prints it again, downloading the set), resyncs every 2 s (a look each); meanwhile `changes`
 * config changes 1.5 s apart and /readyz and /healthz probed every 100 ms.
 */
export async function benchLookBeside(size = 200_000, changes = 10): Promise<LookBeside> {
  const shown = size.toLocaleString('en-US').replace(/,/g, ' ');
  const foreign = lookHeavyTable(size);
  const text = (extra: boolean) =>
    `resyncInterval: 2s\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16${extra ? ', 198.51.100.0/24' : ''}]\n`;
  return withScope(async (scope) => {
    const started = performance.now();
    const session = await AgentSession.start(scope, 3, [], 300_000, async (ns) => {
      await inNetns(ns, 'nft', ['-f', '-'], { input: foreign, timeoutMs: 300_000 });
      return [];
    });
    const firstWriteMs = performance.now() - started;
    await session.swapText(text(false), 60_000);
    const writer = startRuleWriter(session.ns);
    const seconds = changes * 1.5 + 3;
    const probing = session.probe(seconds, 100, ['/readyz', '/healthz']);
    const times: number[] = [];
    for (let i = 1; i <= changes; i++) {
      await sleep(1_500);
      times.push((await session.swapText(text(i % 2 === 1), 60_000)).ms);
    }
    const samples = await probing;
    await writer.stop();
    session.close();
    const latencies = samples.map(([, , ms]) => ms);
    return {
      setting: `4 nat base chains sharing a jumped chain in the table of a ${shown}-element interval set, that chain's rule replaced every second`,
      firstWriteMs,
      changes,
      changeMedianMs: median(times),
      changeMaxMs: Math.max(...times),
      probes: samples.length,
      probeP99Ms: percentile(latencies, 99),
      probeMaxMs: Math.max(...latencies),
      probesFailed: samples.filter(([, status]) => status !== 200).length,
    };
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

if (import.meta.url === `file://${process.argv[1]}`) {
  benchOtherNat().then(
    (rows) => console.log(JSON.stringify(rows, null, 2)),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
