// /readyz's look at the kernel (src/reconcile/readiness.ts): at once while nothing was committed,
// else after a sync that started after the probe; at most one such sync a second however many
// probes ask; no longer than the probe's time, the question whether anything was committed included.
import t from 'tap';
import { READINESS_GAP_MS, ReadinessCheck } from '../../../src/reconcile/readiness.js';

function harness() {
  let unchanged = true;
  let verified = true;
  const syncs: string[] = [];
  let release: (() => void) | undefined;
  let clock = 0;
  const check = new ReadinessCheck({
    unchanged: async () => unchanged,
    requestSync: (reason) => syncs.push(reason),
    afterNextSync: () => new Promise<void>((resolve) => (release = resolve)),
    verified: () => verified,
    now: () => clock,
  });
  return {
    check,
    syncs,
    set: (u: boolean, v: boolean) => ((unchanged = u), (verified = v)),
    finishSync: () => release?.(),
    advance: (ms: number) => (clock += ms),
  };
}

const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

t.test('nothing committed since the last look: fresh at once, no sync', async (t) => {
  const h = harness();
  t.equal(await h.check.fresh(), true);
  t.same(h.syncs, []);
});

t.test('another commit since: one sync for all probes, and its verdict', async (t) => {
  const h = harness();
  h.set(false, true);
  const probes = [h.check.fresh(), h.check.fresh(), h.check.fresh()];
  await settle();
  t.same(h.syncs, ['readiness check'], 'one sync asked for');
  h.finishSync();
  t.same(await Promise.all(probes), [true, true, true]);
  h.set(false, false);
  h.advance(READINESS_GAP_MS);
  const found = h.check.fresh();
  await settle();
  h.finishSync();
  t.equal(await found, false, 'a look that found the kernel otherwise says so');
});

t.test('no verdict within the wait: not fresh', async (t) => {
  const h = harness();
  h.set(false, true);
  t.equal(await h.check.fresh(20), false);
});

t.test('looks asked for by probes are a second apart at least', async (t) => {
  const h = harness();
  h.set(false, true);
  const first = h.check.fresh();
  await settle();
  h.finishSync();
  await first;
  const second = h.check.fresh(50);
  await settle();
  t.same(h.syncs.length, 1, 'the second look waits for the gap');
  t.equal(await second, false, 'and the probe does not wait that long');
});

t.test('the question whether anything was committed is inside the wait too', async (t) => {
  // Amid a flood of commits, draining what the notifications heard can outlast a probe.
  let answer: ((unchanged: boolean) => void) | undefined;
  const check = new ReadinessCheck({
    unchanged: () => new Promise<boolean>((resolve) => (answer = resolve)),
    requestSync: () => undefined,
    afterNextSync: () => new Promise<void>(() => undefined),
    verified: () => true,
  });
  t.equal(await check.fresh(20), false, 'not fresh when the question has no answer in time');
  answer?.(true);
});
