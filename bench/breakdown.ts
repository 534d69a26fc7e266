// Where the agent's time goes on the JavaScript side of a write, in-process: reading and merging
// the config, compiling and rendering the script. Explains the gap between the agent and bare nft -f.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from '../src/cli/flags.js';
import { compile } from '../src/compile.js';
import { loadConfig } from '../src/config/index.js';
import { renderReplace } from '../src/nftables/render.js';
import { plan } from '../src/options.js';
import { median } from './harness.js';
import { configText } from './scripts.js';

export interface BreakdownRow {
  cidrs: number;
  loadConfigMs: number;
  compileRenderMs: number;
  scriptBytes: number;
}

/** The agent's own options for the interval layout, through flags → plan like every mode. */
function compileOptions() {
  const parsed = parseArgs(['--set-layout', 'interval']);
  if (!parsed.ok) throw new Error(parsed.message);
  return plan(parsed.options).compile;
}

export async function benchBreakdown(
  sizes: readonly number[],
  runs: number,
): Promise<BreakdownRow[]> {
  const dir = await mkdtemp(join(tmpdir(), 'ipmasq-bench-'));
  try {
    const rows: BreakdownRow[] = [];
    for (const count of sizes) {
      const file = join(dir, `ip-masq-agent-${count}`);
      await writeFile(file, configText(count));
      const load: number[] = [];
      const render: number[] = [];
      let scriptBytes = 0;
      for (let run = 0; run < runs; run++) {
        const started = performance.now();
        const result = await loadConfig(file, {
          enableIPv6: false,
          nomasqAllReservedRanges: false,
        });
        load.push(performance.now() - started);
        if (!result.ok) throw result.error;
        const renderStart = performance.now();
        // The agent renders once per write: its content key is the config hash plus the options.
        const script = renderReplace(compile(result.config, compileOptions(), 1));
        render.push(performance.now() - renderStart);
        scriptBytes = script.length;
      }
      rows.push({
        cidrs: count,
        loadConfigMs: median(load),
        compileRenderMs: median(render),
        scriptBytes,
      });
    }
    return rows;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
