// --flows' memory (docs/observability.md, "What the node's NAT does"; issue 51, item 7): a
// namespace's conntrack filled with 250 000 distinct (source, destination) groups by
// bench/ct-fill.c, and the peak RSS of `ipmasq-agent --flows` printing them as text and as JSON
// (wait4's rusage, through python3), its output read and counted as it comes. Goal: ≤ 64 MiB
// whatever the output's size (before: 528 and 583 MiB, the output and every group held).
import { readFileSync, writeFileSync } from 'node:fs';
import { buildConntrackFill, flowsPeak } from '../harness/flows.js';
import { inNetns } from '../harness/netns.js';
import { netns, tempDir, withScope } from './harness.js';

export interface FlowsMemoryRow {
  readonly output: 'text' | 'json';
  readonly groups: number;
  readonly bytes: number;
  readonly peakMiB: number;
}

const CONNTRACK_MAX = '/proc/sys/net/netfilter/nf_conntrack_max';

export async function benchFlowsMemory(groups = 250_000): Promise<FlowsMemoryRow[]> {
  const max = readFileSync(CONNTRACK_MAX, 'utf8').trim();
  try {
    // The limit is the host's (read-only in other namespaces): raised for the bench only.
    writeFileSync(CONNTRACK_MAX, String(Math.max(Number(max), groups + 100_000)));
    return await withScope(async (scope) => {
      const fill = buildConntrackFill(await tempDir(scope));
      const ns = await netns(scope, 'flowsmem');
      await inNetns(ns, fill, [String(groups)], { timeoutMs: 600_000 });
      const rows: FlowsMemoryRow[] = [];
      for (const output of ['text', 'json'] as const) {
        const { mib, bytes } = await flowsPeak(ns, output);
        rows.push({ output, groups, bytes, peakMiB: mib });
      }
      return rows;
    });
  } finally {
    writeFileSync(CONNTRACK_MAX, max);
  }
}
