// The look at other NAT (README, "Other NAT on the node") beside a foreign 100 000-element interval
// set: an idle resync's look must cost at most 10 ms of CPU more than without it. Three namespaces:
// a Flannel-like chain alone; the same beside another table's 100 000-element plain interval set;
// the set in the very table whose nat chain is looked at (its rules printed once, at the first look).
import { join } from 'node:path';
import { inNetns, packageRoot } from '../harness/netns.js';
import { netns, withScope } from './harness.js';

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

if (import.meta.url === `file://${process.argv[1]}`) {
  benchOtherNat().then(
    (rows) => console.log(JSON.stringify(rows, null, 2)),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
