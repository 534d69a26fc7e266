// Runs the one sync function that talks to the kernel: never twice at once, coalescing requests,
// resyncing periodically and retrying failures with backoff. Modelled on kube-proxy's
// BoundedFrequencyRunner, reduced to one timer and a dirty flag.

export type SyncOutcome = { ok: true } | { ok: false; error: unknown };

/** Time source and timers; injectable so tests can drive the runner deterministically. */
export interface RunnerClock {
  now(): number;
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface RunnerOptions {
  /** The one function that talks to the kernel; never called concurrently. Gets why it runs. */
  sync: (reason: string) => Promise<SyncOutcome>;
  /** Periodic resync interval, read at each use because a config change may change it. */
  intervalMs: () => number;
  /** Minimum gap between the starts of two syncs, so a burst of triggers becomes one sync. Default 100. */
  minIntervalMs?: number;
  /** First retry delay after a failure; doubles per consecutive failure, capped at intervalMs(). Default 1000. */
  backoffInitialMs?: number;
  /** A sync running longer than this marks the loop as wedged (`alive` turns false). Default 60000. */
  stallTimeoutMs?: number;
  onError?: (err: unknown) => void;
  clock?: RunnerClock;
}

const realClock: RunnerClock = {
  now: () => performance.now(),
  // Deliberately ref'd: while the runner is started, its pending timer keeps the process alive.
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export class SyncRunner {
  readonly #sync: (reason: string) => Promise<SyncOutcome>;
  readonly #intervalMs: () => number;
  readonly #minIntervalMs: number;
  readonly #backoffInitialMs: number;
  readonly #stallTimeoutMs: number;
  readonly #onError: (err: unknown) => void;
  readonly #clock: RunnerClock;

  #started = false;
  #stopped = false;
  #inFlight: Promise<void> | undefined;
  #inFlightSince = 0;
  #lastStart = -Infinity;
  #consecutiveFailures = 0;
  /** Set by trigger(): a sync was requested that has not started yet. */
  #pendingReason: string | undefined;
  #timer: unknown;
  #timerDue = Infinity;
  #lastReason: string | undefined;
  /** How many syncs have started; waiters of afterNextSync, by the start they wait to see end. */
  #starts = 0;
  #waiters: Array<{ start: number; resolve: () => void }> = [];

  constructor(opts: RunnerOptions) {
    this.#sync = opts.sync;
    this.#intervalMs = opts.intervalMs;
    this.#minIntervalMs = opts.minIntervalMs ?? 100;
    this.#backoffInitialMs = opts.backoffInitialMs ?? 1000;
    this.#stallTimeoutMs = opts.stallTimeoutMs ?? 60_000;
    this.#onError = opts.onError ?? (() => {});
    this.#clock = opts.clock ?? realClock;
  }

  /** Started, not stopped, and no sync has been running for longer than the stall timeout. */
  get alive(): boolean {
    if (!this.#started || this.#stopped) return false;
    if (this.#inFlight === undefined) return true;
    return this.#clock.now() - this.#inFlightSince <= this.#stallTimeoutMs;
  }

  /** Why the most recent sync was started: 'start', 'periodic', 'retry', or a trigger's reason. */
  get lastReason(): string | undefined {
    return this.#lastReason;
  }

  get consecutiveFailures(): number {
    return this.#consecutiveFailures;
  }

  /** Runs a first sync at once, then keeps syncing until stop(). Calling it twice does nothing. */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    this.#run(this.#pendingReason ?? 'start');
  }

  /** Asks for a sync soon. Triggers during a running sync collapse into one sync after it. */
  trigger(reason: string): void {
    if (this.#stopped) return;
    this.#pendingReason = reason;
    // Before start(), the first sync covers it; during a sync, #finish() picks it up.
    if (!this.#started || this.#inFlight !== undefined) return;
    this.#schedule(this.#untilMinIntervalPassed(), reason);
  }

  /**
   * Resolves once a sync that starts after this call has ended (or the runner has stopped): pair it
   * with trigger() to know that the state it reports was looked at after now.
   */
  afterNextSync(): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ start: this.#starts + 1, resolve }));
  }

  /** No new syncs after this; resolves once a sync in flight has finished. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#cancelTimer();
    await this.#inFlight;
    for (const waiter of this.#waiters.splice(0)) waiter.resolve();
  }

  #untilMinIntervalPassed(): number {
    return Math.max(0, this.#lastStart + this.#minIntervalMs - this.#clock.now());
  }

  /** Arms the timer to run in delayMs, unless it is already armed to run sooner. */
  #schedule(delayMs: number, reason: string): void {
    const due = this.#clock.now() + delayMs;
    if (this.#timer !== undefined && this.#timerDue <= due) return;
    this.#cancelTimer();
    this.#timerDue = due;
    this.#timer = this.#clock.setTimeout(() => {
      this.#timer = undefined;
      this.#timerDue = Infinity;
      this.#run(reason);
    }, delayMs);
  }

  #cancelTimer(): void {
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerDue = Infinity;
  }

  #run(scheduledReason: string): void {
    if (this.#stopped) return;
    if (this.#inFlight !== undefined) {
      this.#pendingReason ??= scheduledReason;
      return;
    }
    this.#cancelTimer();
    // A pending trigger is more telling than the timer's own reason, and this sync covers it.
    const reason = this.#pendingReason ?? scheduledReason;
    this.#pendingReason = undefined;
    this.#lastReason = reason;
    this.#lastStart = this.#inFlightSince = this.#clock.now();
    const start = ++this.#starts;
    this.#inFlight = this.#attempt(reason).then((outcome) => this.#finish(outcome, start));
  }

  async #attempt(reason: string): Promise<SyncOutcome> {
    try {
      return await this.#sync(reason);
    } catch (error) {
      return { ok: false, error };
    }
  }

  #finish(outcome: SyncOutcome, start: number): void {
    this.#inFlight = undefined;
    const waiting = this.#waiters;
    this.#waiters = waiting.filter((waiter) => waiter.start > start);
    for (const waiter of waiting) if (waiter.start <= start) waiter.resolve();
    if (outcome.ok) {
      this.#consecutiveFailures = 0;
    } else {
      this.#consecutiveFailures++;
      try {
        this.#onError(outcome.error);
      } catch {
        // A faulty error reporter must not stop the loop.
      }
    }
    if (this.#stopped) return;
    if (this.#pendingReason !== undefined) {
      this.#schedule(this.#untilMinIntervalPassed(), this.#pendingReason);
    } else if (!outcome.ok) {
      this.#schedule(this.#backoffMs(), 'retry');
    } else {
      this.#schedule(Math.max(this.#intervalMs(), this.#minIntervalMs), 'periodic');
    }
  }

  /** 1 s, 2 s, 4 s, … for the 1st, 2nd, 3rd… consecutive failure, never above the resync interval. */
  #backoffMs(): number {
    const exponent = Math.min(this.#consecutiveFailures - 1, 40);
    return Math.min(this.#backoffInitialMs * 2 ** exponent, this.#intervalMs());
  }
}
