// Times loadConfig on a 100 000-CIDR YAML config (the largest size docs/bench.md measures).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadConfig } from '../src/config/index.js';

const CIDRS = 100_000;
const RUNS = 5;

/** Distinct, non-adjacent /24s spread over 10.0.0.0/8 and beyond, as a ConfigMap would list them. */
function configText(count: number): string {
  const lines = [`cidrLimit: ${count}`, 'nonMasqueradeCIDRs:'];
  for (let i = 0; i < count; i++) {
    const block = i * 2; // every other /24, so nothing merges
    lines.push(`  - ${10 + (block >> 16)}.${(block >> 8) & 255}.${block & 255}.0/24`);
  }
  return `${lines.join('\n')}\n`;
}

export async function benchConfigLoad(): Promise<{ cidrs: number; ms: number }> {
  const dir = await mkdtemp(join(tmpdir(), 'ipmasq-bench-'));
  try {
    const file = join(dir, 'ip-masq-agent');
    await writeFile(file, configText(CIDRS));
    const times: number[] = [];
    for (let run = 0; run < RUNS; run++) {
      const start = performance.now();
      const result = await loadConfig(file, { enableIPv6: false, nomasqAllReservedRanges: false });
      times.push(performance.now() - start);
      if (!result.ok) throw result.error;
      if (result.config.nonMasquerade.ipv4.length !== CIDRS + 1) {
        throw new Error(
          `expected ${CIDRS + 1} prefixes, got ${result.config.nonMasquerade.ipv4.length}`,
        );
      }
    }
    times.sort((a, b) => a - b);
    return { cidrs: CIDRS, ms: Math.round((times[Math.floor(RUNS / 2)] as number) * 10) / 10 };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { cidrs, ms } = await benchConfigLoad();
  console.log(`loadConfig: ${cidrs} CIDRs in ${ms} ms (median of ${RUNS})`);
}
