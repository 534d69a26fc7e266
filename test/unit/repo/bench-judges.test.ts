// The bench's own judges (docs/performance.md): a figure is only as honest as the code that reads
// it off the raw measurements. Here: which edits the edits-on-packets bench counts as seen, and
// when (bench/edit-packets.ts), the layout `auto` writes at the bench's sizes, and how many rounds
// the per-flow rows say they are the median of.
import t from 'tap';
import { judge, type Flow } from '../../../bench/edit-packets.js';
import { autoLayoutOf } from '../../../bench/scripts.js';
import { flowRoundsText } from '../../../bench/report.js';

const MS = 1_000_000n;
/** Flows every 2 ms from `fromMs` to `toMs`, masqueraded while `masqueraded(ms)` says so. */
function flows(fromMs: number, toMs: number, masqueraded: (ms: number) => boolean): Flow[] {
  const out: Flow[] = [];
  for (let ms = fromMs; ms < toMs; ms += 2)
    out.push({ sentNs: BigInt(ms) * MS, masqueraded: masqueraded(ms) });
  return out;
}
const renames = [1_000n, 1_250n, 1_500n, 1_750n].map((ms) => ms * MS);

t.test(
  'each edit seen when the flows change to its decision, added and removed apart',
  async (t) => {
    // Added at 1 000 (seen 20 ms on), removed at 1 250 (seen 90 ms on), and so on.
    const state = (ms: number) =>
      ms < 1_020 ? true : ms < 1_340 ? false : ms < 1_520 ? true : ms < 1_850 ? false : true;
    const result = judge(renames, flows(900, 2_100, state));
    t.same(result.addedMs, [20, 20]);
    t.same(result.removedMs, [90, 100]);
    t.equal(result.notVisible, 0);
    t.equal(result.backslides, 0);
  },
);

t.test('an edit merged into the next write is not seen, and neither is the next', async (t) => {
  // The removal at 1 250 never shows: the kernel goes straight to the third edit's state (the same
  // as the first's), so a flow with the third edit's decision right after its rename proves nothing.
  const state = (ms: number) => (ms < 1_020 ? true : ms < 1_760 ? false : true);
  const result = judge(renames, flows(900, 2_100, state));
  t.same(result.addedMs, [20]);
  t.same(result.removedMs, [10], 'the fourth edit, once the previous one was in force');
  t.equal(result.notVisible, 2);
});

t.test('a flow with the old decision after the new one was seen is counted', async (t) => {
  const state = (ms: number) => (ms >= 1_020 && ms < 1_250 && ms !== 1_100 ? false : true);
  const result = judge(renames.slice(0, 1), flows(900, 1_250, state));
  t.same(result.addedMs, [20]);
  t.equal(result.backslides, 1);
});

t.test('the layout auto writes: interval up to 2 000 elements, concatenated above', async (t) => {
  t.equal(autoLayoutOf(64), 'interval');
  t.equal(autoLayoutOf(1_999), 'interval', '1 999 CIDRs and 169.254.0.0/16: 2 000 elements');
  t.equal(autoLayoutOf(2_000), 'concat');
});

t.test(
  "the per-flow rows' rounds, read off the baselines: one per round of each row",
  async (t) => {
    const rows = (n: number) => Array.from({ length: n }, () => ({}));
    const baselines = (n: number) => Array.from({ length: n }, () => 7.5);
    t.match(flowRoundsText({ rows: rows(30), baselines: baselines(90) }), /median of 3 rounds/);
    t.match(flowRoundsText({ rows: rows(9), baselines: baselines(9) }), /each from one round/);
    t.notMatch(flowRoundsText({ rows: rows(9), baselines: baselines(9) }), /median/);
  },
);
