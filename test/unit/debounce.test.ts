// BoundedDebounce (src/debounce.ts), the one timer of the fast paths' audits, on a fake clock: once
// `delayMs` after the last ask, never later than `withinMs` after the first ask since it last ran,
// once per burst however many asks it had.
import t from 'tap';
import { BoundedDebounce, type DebounceClock } from '../../src/debounce.js';

/** A clock whose time moves only when told, running the timers that come due. */
function fakeClock(): DebounceClock & { advance(ms: number): void } {
  let now = 0;
  const timers = new Set<{ at: number; fire: () => void; unref(): unknown }>();
  return {
    now: () => now,
    setTimeout: (fire, ms) => {
      const timer = { at: now + ms, fire, unref: () => timer };
      timers.add(timer);
      return timer;
    },
    clearTimeout: (timer) => void timers.delete(timer as never),
    advance(ms) {
      const until = now + ms;
      for (;;) {
        const due = [...timers].filter((x) => x.at <= until).sort((a, b) => a.at - b.at)[0];
        if (!due) break;
        timers.delete(due);
        now = due.at;
        due.fire();
      }
      now = until;
    },
  };
}

t.test('one ask: it runs delayMs later, once', async (t) => {
  const clock = fakeClock();
  const fired: number[] = [];
  const debounce = new BoundedDebounce(() => fired.push(clock.now()), 200, 800, clock);
  debounce.ask();
  clock.advance(199);
  t.same(fired, [], 'not before delayMs');
  clock.advance(1_000);
  t.same(fired, [200], 'at delayMs, once');
});

t.test('a burst: after its last ask, unless withinMs of its first comes sooner', async (t) => {
  const clock = fakeClock();
  const fired: number[] = [];
  const debounce = new BoundedDebounce(() => fired.push(clock.now()), 200, 800, clock);
  // Three asks 100 ms apart: 200 ms after the last.
  for (let i = 0; i < 3; i++) {
    debounce.ask();
    clock.advance(100);
  }
  clock.advance(1_000);
  t.same(fired, [400], '200 ms after the third ask');
  // Asks every 100 ms for two seconds: never later than 800 ms after the first of each run.
  fired.length = 0;
  const start = clock.now();
  for (let i = 0; i < 20; i++) {
    debounce.ask();
    clock.advance(100);
  }
  clock.advance(1_000);
  t.same(
    fired.map((at) => at - start),
    [800, 1_600, 2_100],
    'at the bound while asks keep coming (800 ms after the first ask, then after the first since), then 200 ms after the last',
  );
});

t.test('an ask after it ran starts a new bound', async (t) => {
  const clock = fakeClock();
  const fired: number[] = [];
  const debounce = new BoundedDebounce(() => fired.push(clock.now()), 200, 800, clock);
  debounce.ask();
  clock.advance(300);
  debounce.ask();
  clock.advance(300);
  t.same(fired, [200, 500], 'each ran 200 ms after its own ask');
});
