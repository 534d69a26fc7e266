// One timer for work that a burst of events asks for once (docs/writes.md, "The everyday edit": the
// fast paths' audits): it runs `delayMs` after the last ask, and never later than `withinMs` after
// the first ask since it last ran, however the asks keep coming.
/** The clock and timers a BoundedDebounce runs on (the tests give a fake). */
export interface DebounceClock {
  now(): number;
  setTimeout(fire: () => void, ms: number): { unref(): unknown };
  clearTimeout(timer: { unref(): unknown }): void;
}

const realClock: DebounceClock = {
  now: () => performance.now(),
  setTimeout: (fire, ms) => setTimeout(fire, ms),
  clearTimeout: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout>),
};

export class BoundedDebounce {
  readonly #fire: () => void;
  readonly #delayMs: number;
  readonly #withinMs: number;
  readonly #clock: DebounceClock;
  #timer: { unref(): unknown } | undefined;
  /** When it must run by (the clock's time), while asked. */
  #dueBy: number | undefined;

  constructor(fire: () => void, delayMs: number, withinMs: number, clock = realClock) {
    this.#fire = fire;
    this.#delayMs = delayMs;
    this.#withinMs = withinMs;
    this.#clock = clock;
  }

  ask(): void {
    const clock = this.#clock;
    const now = clock.now();
    this.#dueBy ??= now + this.#withinMs;
    if (this.#timer) clock.clearTimeout(this.#timer);
    const wait = Math.max(0, Math.min(this.#delayMs, this.#dueBy - now));
    this.#timer = clock.setTimeout(() => {
      this.#timer = undefined;
      this.#dueBy = undefined;
      this.#fire();
    }, wait);
    // Never what keeps a process or a worker up.
    this.#timer.unref();
  }
}
