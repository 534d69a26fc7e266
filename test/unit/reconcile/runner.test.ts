import t from 'tap';
import { SyncRunner, type RunnerClock, type SyncOutcome } from '../../../src/reconcile/runner.js';

/** A manual clock: time moves only through advance(), which fires due timers in order. */
class FakeClock implements RunnerClock {
  #now = 0;
  #nextId = 1;
  readonly timers = new Map<number, { due: number; callback: () => void }>();

  now(): number {
    return this.#now;
  }
  setTimeout(callback: () => void, ms: number): unknown {
    const id = this.#nextId++;
    this.timers.set(id, { due: this.#now + ms, callback });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.timers.delete(handle as number);
  }
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    for (let fired = 0; fired < 10_000; fired++) {
      await settle();
      const next = [...this.timers.entries()].sort((a, b) => a[1].due - b[1].due)[0];
      if (next === undefined || next[1].due > target) break;
      this.timers.delete(next[0]);
      this.#now = next[1].due;
      next[1].callback();
    }
    this.#now = target;
    await settle();
  }
}

/** Lets every pending promise continuation run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

interface Deferred {
  promise: Promise<SyncOutcome>;
  resolve: (outcome: SyncOutcome) => void;
}
function deferred(): Deferred {
  let resolve!: (outcome: SyncOutcome) => void;
  const promise = new Promise<SyncOutcome>((r) => (resolve = r));
  return { promise, resolve };
}

/** A sync whose calls are recorded with their start time and finish only when the test says so. */
function manualSync(clock: FakeClock) {
  const calls: { at: number; reason: string; done: Deferred }[] = [];
  let running = 0;
  let maxRunning = 0;
  const sync = async (reason: string): Promise<SyncOutcome> => {
    const done = deferred();
    calls.push({ at: clock.now(), reason, done });
    running++;
    maxRunning = Math.max(maxRunning, running);
    try {
      return await done.promise;
    } finally {
      running--;
    }
  };
  return { sync, calls, maxRunning: () => maxRunning };
}

/** A sync that finishes at once with the next scripted outcome (ok once the script runs out). */
function scriptedSync(clock: FakeClock, outcomes: boolean[]) {
  const starts: number[] = [];
  const sync = async (): Promise<SyncOutcome> => {
    starts.push(clock.now());
    const ok = outcomes.shift() ?? true;
    return ok ? { ok: true } : { ok: false, error: new Error('kernel said no') };
  };
  return { sync, starts };
}

t.test('start runs a first sync at once', async (t) => {
  const clock = new FakeClock();
  const { sync, starts } = scriptedSync(clock, []);
  const runner = new SyncRunner({ sync, intervalMs: () => 60_000, clock });
  t.equal(runner.alive, false, 'not alive before start');
  runner.start();
  await settle();
  t.same(starts, [0]);
  t.equal(runner.lastReason, 'start');
  t.equal(runner.alive, true);
  await runner.stop();
});

t.test('10 triggers during a slow sync give exactly one more sync, never concurrent', async (t) => {
  const clock = new FakeClock();
  const { sync, calls, maxRunning } = manualSync(clock);
  const runner = new SyncRunner({ sync, intervalMs: () => 60_000, minIntervalMs: 100, clock });
  runner.start();
  await settle();
  t.equal(calls.length, 1);
  for (let i = 0; i < 10; i++) {
    runner.trigger(`change ${i}`);
    await clock.advance(50);
  }
  t.equal(calls.length, 1, 'nothing starts while the first sync runs');
  calls[0]!.done.resolve({ ok: true });
  await clock.advance(0);
  t.equal(calls.length, 2, 'one sync follows');
  t.equal(calls[1]!.reason, 'change 9', 'it carries the latest reason');
  calls[1]!.done.resolve({ ok: true });
  await clock.advance(1000);
  t.equal(calls.length, 2, 'and only one');
  t.equal(maxRunning(), 1);
  await runner.stop();
});

t.test('triggers while idle are coalesced within the minimum interval', async (t) => {
  const clock = new FakeClock();
  const { sync, starts } = scriptedSync(clock, []);
  const runner = new SyncRunner({ sync, intervalMs: () => 60_000, minIntervalMs: 100, clock });
  runner.start();
  await clock.advance(30);
  runner.trigger('a');
  runner.trigger('b');
  await clock.advance(30);
  runner.trigger('c');
  await clock.advance(200);
  t.same(
    starts,
    [0, 100],
    'the three triggers run as one sync, 100 ms after the first sync started',
  );
  t.equal(runner.lastReason, 'c');
  runner.trigger('d');
  await clock.advance(0);
  t.same(starts, [0, 100, 260], 'a trigger after the minimum interval runs at once');
  await runner.stop();
});

t.test(
  'periodic resync re-arms from the end of each sync and reads the interval each time',
  async (t) => {
    const clock = new FakeClock();
    const { sync, calls } = manualSync(clock);
    let interval = 1000;
    const runner = new SyncRunner({ sync, intervalMs: () => interval, clock });
    runner.start();
    await clock.advance(300);
    calls[0]!.done.resolve({ ok: true }); // ends at 300
    await clock.advance(999);
    t.equal(calls.length, 1, 'not before a full interval after the end');
    await clock.advance(1);
    t.equal(calls.length, 2, 'at end + interval');
    t.equal(calls[1]!.at, 1300);
    t.equal(calls[1]!.reason, 'periodic');
    interval = 5000;
    calls[1]!.done.resolve({ ok: true });
    await clock.advance(4999);
    t.equal(calls.length, 2, 'a changed interval applies to the next wait');
    await clock.advance(1);
    t.equal(calls.length, 3);
    calls[2]!.done.resolve({ ok: true });
    await runner.stop();
  },
);

t.test(
  'backoff after failures: 1, 2, 4, 8 s… capped at the interval, reset by a success',
  async (t) => {
    const clock = new FakeClock();
    const failures = Array.from({ length: 7 }, () => false);
    const { sync, starts } = scriptedSync(clock, [...failures, true, false, false]);
    const errors: unknown[] = [];
    const runner = new SyncRunner({
      sync,
      intervalMs: () => 30_000,
      clock,
      onError: (err) => errors.push(err),
    });
    runner.start();
    await clock.advance(200_000);
    const gaps = starts.slice(1).map((at, i) => at - starts[i]!);
    // 7 failures, then a success (periodic 30 s), then failures again starting from 1 s.
    t.same(
      gaps.slice(0, 10),
      [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 1000, 2000],
      'gaps between sync starts',
    );
    t.equal(errors.length, 9, 'onError sees each failure');
    t.equal(runner.lastReason, 'periodic');
    t.equal(runner.consecutiveFailures, 0);
    await runner.stop();
  },
);

t.test(
  'a sync that throws counts as a failure and is retried, even if onError throws',
  async (t) => {
    const clock = new FakeClock();
    const starts: number[] = [];
    const errors: unknown[] = [];
    const sync = async (): Promise<SyncOutcome> => {
      starts.push(clock.now());
      if (starts.length === 1) throw new Error('boom');
      return { ok: true };
    };
    const runner = new SyncRunner({
      sync,
      intervalMs: () => 60_000,
      clock,
      onError: (err) => {
        errors.push(err);
        throw new Error('the error reporter broke too');
      },
    });
    runner.start();
    await clock.advance(1000);
    t.same(starts, [0, 1000]);
    t.equal((errors[0] as Error).message, 'boom');
    t.equal(runner.lastReason, 'retry');
    t.equal(runner.alive, true);
    await runner.stop();
  },
);

t.test(
  'a trigger during backoff runs a sync soon instead of waiting out the backoff',
  async (t) => {
    const clock = new FakeClock();
    const { sync, starts } = scriptedSync(clock, [false, false, false, false]);
    const runner = new SyncRunner({ sync, intervalMs: () => 60_000, minIntervalMs: 100, clock });
    runner.start();
    await clock.advance(1000 + 2000 + 4000); // failures at 0, 1000, 3000, 7000; next retry at 15000
    t.same(starts, [0, 1000, 3000, 7000]);
    await clock.advance(500);
    runner.trigger('config changed');
    await clock.advance(0);
    t.same(starts, [0, 1000, 3000, 7000, 7500]);
    t.equal(runner.lastReason, 'config changed');
    await runner.stop();
  },
);

t.test('stop waits for the sync in flight and prevents any further sync', async (t) => {
  const clock = new FakeClock();
  const { sync, calls } = manualSync(clock);
  const runner = new SyncRunner({ sync, intervalMs: () => 1000, clock });
  runner.start();
  await settle();
  runner.trigger('pending');
  let stopped = false;
  const stopping = runner.stop().then(() => (stopped = true));
  await settle();
  t.equal(stopped, false, 'stop has not resolved while the sync runs');
  t.equal(runner.alive, false, 'not alive once stopping');
  calls[0]!.done.resolve({ ok: true });
  await stopping;
  t.equal(stopped, true);
  t.equal(clock.timers.size, 0, 'no timer left behind');
  runner.trigger('after stop');
  await clock.advance(100_000);
  t.equal(calls.length, 1, 'no sync after stop, not even for the pending trigger');
  runner.start();
  await settle();
  t.equal(calls.length, 1, 'a stopped runner cannot be restarted');
});

t.test('a sync stuck longer than the stall timeout makes the runner not alive', async (t) => {
  const clock = new FakeClock();
  const { sync, calls } = manualSync(clock);
  const runner = new SyncRunner({ sync, intervalMs: () => 1000, stallTimeoutMs: 5000, clock });
  runner.start();
  await clock.advance(5000);
  t.equal(runner.alive, true, 'alive up to the timeout');
  await clock.advance(1);
  t.equal(runner.alive, false, 'wedged after it');
  calls[0]!.done.resolve({ ok: true });
  await clock.advance(0);
  t.equal(runner.alive, true, 'alive again once the sync returns');
  await runner.stop();
});

t.test('with real timers, the loop runs and stop clears its timer', async (t) => {
  let syncs = 0;
  const runner = new SyncRunner({
    sync: async () => {
      syncs++;
      return { ok: true };
    },
    intervalMs: () => 20,
    minIntervalMs: 0,
  });
  runner.start();
  const deadline = Date.now() + 2000;
  while (syncs < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  t.ok(syncs >= 3, `periodic syncs ran (${syncs})`);
  await runner.stop();
  const afterStop = syncs;
  await new Promise((r) => setTimeout(r, 100));
  t.equal(syncs, afterStop, 'none after stop');
});

t.test('afterNextSync resolves when a sync that started after the call has ended', async (t) => {
  const clock = new FakeClock();
  const { sync, calls } = manualSync(clock);
  const runner = new SyncRunner({ sync, intervalMs: () => 60_000, minIntervalMs: 100, clock });
  runner.start();
  await settle();
  let ended = false;
  const waiting = runner.afterNextSync().then(() => (ended = true));
  runner.trigger('readiness check');
  calls[0]!.done.resolve({ ok: true });
  await clock.advance(0);
  t.equal(ended, false, 'the sync running at the call does not count');
  await clock.advance(100);
  t.equal(calls.length, 2);
  t.equal(ended, false, 'not before the next one ends');
  calls[1]!.done.resolve({ ok: true });
  await waiting;
  t.equal(ended, true);
  const atStop = runner.afterNextSync();
  await runner.stop();
  await atStop;
  t.pass('stop releases whoever waits');
});
