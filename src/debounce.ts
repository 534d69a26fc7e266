// One timer for work that a burst of events asks for once (README, "The everyday edit": the fast
// paths' audits): it runs `delayMs` after the last ask, and never later than `withinMs` after the
// first ask since it last ran, however the asks keep coming.
export class BoundedDebounce {
  readonly #fire: () => void;
  readonly #delayMs: number;
  readonly #withinMs: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** When it must run by (performance.now()), while asked. */
  #dueBy: number | undefined;

  constructor(fire: () => void, delayMs: number, withinMs: number) {
    this.#fire = fire;
    this.#delayMs = delayMs;
    this.#withinMs = withinMs;
  }

  ask(): void {
    const now = performance.now();
    this.#dueBy ??= now + this.#withinMs;
    if (this.#timer) clearTimeout(this.#timer);
    const wait = Math.max(0, Math.min(this.#delayMs, this.#dueBy - now));
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#dueBy = undefined;
      this.#fire();
    }, wait);
    // Never what keeps a process or a worker up.
    this.#timer.unref();
  }
}
