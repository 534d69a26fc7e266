// The bound on how long a write holds the event loop (docs/hardening.md, round 3, item 9), end to end:
// whole syncs of the reconciler, from the config to the scripts a (fake) kernel takes, at 100 000
// CIDRs — the layout switch both ways, every CIDR replaced, one added. Measured as work, not time:
// no element list is rendered in one piece beyond a prerender slice, whichever path a write takes
// (a list rendered ahead and then not found again would be rendered whole when written).
import { pino } from 'pino';
import t from 'tap';
import { parseConfigText } from '../../../src/config/index.js';
import type { LoadResult } from '../../../src/config/types.js';
import { PRERENDER_SLICE } from '../../../src/nftables/render.js';
import { watchRenders } from '../../helpers/render-watch.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';
import { Reconciler } from '../../../src/reconcile/reconciler.js';
import { FakeKernel } from '../../helpers/fake-kernel.js';
import { compileOptions } from '../../helpers/compile-options.js';

/** `count` non-adjacent /32s from `from` on: merging keeps every one of them. */
function cidrs(count: number, from = 11 * 2 ** 24): string {
  const lines: string[] = [];
  for (let i = 0; i < count; i++) {
    const n = from + 2 * i;
    lines.push(`  - ${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}/32`);
  }
  return `cidrLimit: 200000\nnonMasqueradeCIDRs:\n${lines.join('\n')}\n`;
}

function loaded(text: string): LoadResult {
  const result = parseConfigText(text, 'cfg', {
    enableIPv6: false,
    nomasqAllReservedRanges: false,
  });
  if (!result.ok) throw result.error;
  return result;
}

t.test('no write renders more than a slice of elements in one piece', async (t) => {
  const renders = watchRenders(t);
  const kernel = new FakeKernel();
  let current = loaded(cidrs(64));
  const reconciler = new Reconciler({
    configPath: '/cfg',
    loadOptions: { enableIPv6: false, nomasqAllReservedRanges: false },
    compileOptions: compileOptions(),
    loadConfig: async () => current,
    kernel,
    logger: pino({ level: 'silent' }),
    metrics: new AgentMetrics(),
    conntrackFlush: 'none',
    legacy: { chains: [], remove: false },
  });
  t.same(await reconciler.sync(), { ok: true });
  const steps: Array<[string, string]> = [
    ['64 → 100 000: the layout switch', cidrs(100_000)],
    ['every one of 100 000 replaced', cidrs(100_000, 12 * 2 ** 24)],
    ['one added to 100 000', cidrs(100_001, 12 * 2 ** 24)],
    ['100 000 → 64: the switch back', cidrs(64)],
  ];
  let seen = 0;
  for (const [what, text] of steps) {
    current = loaded(text);
    renders.most = 0;
    const applied = kernel.applies.length;
    t.same(await reconciler.sync(), { ok: true }, `${what}: written`);
    t.ok(kernel.applies.length > applied, `${what}: something was written`);
    t.ok(
      renders.most <= PRERENDER_SLICE,
      `${what}: at most ${renders.most} elements rendered in one piece`,
    );
    seen = Math.max(seen, renders.most);
  }
  t.equal(seen, PRERENDER_SLICE, 'the watch saw the layout switch rendered a slice at a time');
});
