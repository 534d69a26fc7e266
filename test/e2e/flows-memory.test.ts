// --flows in bounded memory (docs/observability.md, "What the node's NAT does"; issue 51, item 7):
// 250 000 distinct groups in a namespace's conntrack (bench/ct-fill.c) printed as text and as JSON
// — 16 MB and 60 MB of output — by a process whose peak RSS stays far from what it was (528 and 583
// MiB): the records are kept compact in the addon and the output is written a piece at a time. The
// bound here is generous for any machine; `npm run bench` measures the figure against the 64 MiB
// goal.
import { readFileSync, writeFileSync } from 'node:fs';
import t from 'tap';
import { buildConntrackFill, flowsPeak } from '../../harness/flows.js';
import { inNetns, makeNetns, requireRoot, tempDir } from '../../harness/netns.js';

const GROUPS = 250_000;
const BOUND_MIB = 96;
const CONNTRACK_MAX = '/proc/sys/net/netfilter/nf_conntrack_max';

if (requireRoot(t)) {
  t.test(`--flows over ${GROUPS} groups: memory flat, text and JSON`, async (t) => {
    const fill = buildConntrackFill(tempDir(t, 'flows-memory'));
    // The limit is the host's (read-only in other namespaces): raised for this test if too low.
    const max = readFileSync(CONNTRACK_MAX, 'utf8').trim();
    if (Number(max) < GROUPS + 50_000) {
      writeFileSync(CONNTRACK_MAX, String(GROUPS + 50_000));
      t.teardown(() => writeFileSync(CONNTRACK_MAX, max));
    }
    const ns = await makeNetns(t, 'flowsmem');
    const made = await inNetns(ns, fill, [String(GROUPS)], { timeoutMs: 600_000 });
    t.equal(Number(made.stdout.trim()), GROUPS, 'entries written');
    for (const output of ['text', 'json'] as const) {
      const { mib, bytes } = await flowsPeak(ns, output);
      t.ok(bytes > 10_000_000, `${output}: ${bytes} bytes printed`);
      t.ok(mib <= BOUND_MIB, `peak RSS ${mib.toFixed(1)} MiB (≤ ${BOUND_MIB}; was 528 and 583)`);
    }
  });
}
