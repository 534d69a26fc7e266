// The notifications' fast path against the whole path (docs/writes.md, "Beside a busy node"): a
// readiness probe trusts what nf_tables' notifications say other commits touched, and reads nothing
// back when they named none of our tables. A random walk of other tools' commits — to their own
// tables (an element, kube-proxy's table rewritten, an ip6 table, 300 tables in one commit) and to
// ours (an element deleted, alone or among 300 other tables; an element added; a rule inserted; a
// set flushed; the table declared again) — and config changes, on the real kernel
// (fixtures/heard-walk.ts). After each step the probe's answer is checked against our tables read
// back whole: it never says "unchanged" while they are wrong, it says so after every commit that
// left them alone (else the fast path would be no path), and a sync repairs every wrong one. Large
// config changes (2 500 CIDRs) are written with the agent's notifications off (a write made
// unheard, docs/performance.md) while another tool's commit to our tables races them: whatever it
// does unheard is never taken as left alone.
import { join } from 'node:path';
import t from 'tap';
import { makeNetns, requireRoot, runNodeInNetns } from '../../harness/netns.js';
import type { WalkStep } from './fixtures/heard-walk.js';

const fixture = join(import.meta.dirname, 'fixtures', 'heard-walk.ts');
/** Steps per seed (800 in all under CI; a step is a commit, the probe and a read back). */
const STEPS = process.env.CI === 'true' ? 400 : 200;
const SEEDS = [20261206, 59];

if (requireRoot(t)) {
  // Two seeds of 400 steps under CI, large config changes among them: past tap's default 120 s.
  t.setTimeout(900_000);
  for (const seed of SEEDS) {
    t.test(`seed ${seed}: ${STEPS} steps`, async (t) => {
      const ns = await makeNetns(t, 'heard');
      const run = await runNodeInNetns(ns, fixture, [String(seed), String(STEPS)], {
        timeoutMs: 600_000,
      });
      t.equal(run.code, 0, `the walk ran to its end: ${run.stderr.slice(-2000)}`);
      const lines = run.stdout.trim().split('\n');
      const steps = lines
        .filter((l) => l.startsWith('{"step"'))
        .map((l) => JSON.parse(l) as WalkStep);
      t.equal(steps.length, STEPS, 'every step answered');

      const show = (s: WalkStep) => `step ${s.step} (${s.kind})`;
      const unsound = steps.filter((s) => s.probeUnchanged && !s.wholeHolds).map(show);
      t.same(unsound, [], 'the probe never said unchanged while our tables were wrong');

      const leftAlone = steps.filter(
        (s) =>
          s.kind === 'config change' ||
          (s.kind.startsWith('other:') && !s.kind.endsWith('(refused)')),
      );
      t.ok(leftAlone.length > STEPS / 4, `${leftAlone.length} steps left our tables alone`);
      t.same(
        leftAlone.filter((s) => !s.probeUnchanged || !s.wholeHolds).map(show),
        [],
        'after each, the probe needed no read: the notifications said ours were left alone',
      );

      const changed = steps.filter(
        (s) => s.kind.startsWith('ours:') && s.changesOurs && !s.kind.endsWith('(refused)'),
      );
      t.ok(changed.length > STEPS / 4, `${changed.length} steps changed our tables`);
      t.same(
        changed.filter((s) => s.wholeHolds).map(show),
        [],
        'each of those really left them wrong (the check above is not empty)',
      );
      t.same(
        steps.filter((s) => !s.wholeHolds && s.repaired !== true).map(show),
        [],
        'a sync repaired every wrong one',
      );
      const large = steps.filter((s) => s.unheard !== undefined);
      t.ok(large.length >= STEPS / 25, `${large.length} large config changes with a commit racing`);
      t.same(
        large.filter((s) => !s.unheard).map(show),
        [],
        'each written unheard: the drain after it said notifications were lost',
      );
      const kinds = new Set(steps.map((s) => s.kind.replace(' (refused)', '')));
      t.ok(kinds.size >= 10, `${kinds.size} kinds of step taken`);
    });
  }
}
