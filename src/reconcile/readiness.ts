// /readyz answers from a look at the kernel made after the namespace's last nftables commit
// (docs/observability.md, "HTTP"): when the generation id moved since the kernel was last known to
// hold our tables, a sync looks now and the answer waits for it, within the probe's time. Such
// looks are at most one a second, however many probes ask: a flood of probes cannot make the agent
// read its tables back more often than that.
export interface ReadinessDeps {
  /** Whether the generation id is still where the kernel was last known to hold our tables. */
  readonly unchanged: () => Promise<boolean>;
  /** Asks the sync loop for a sync now. */
  readonly requestSync: (reason: string) => void;
  /** Resolves once a sync that starts after the call has ended. */
  readonly afterNextSync: () => Promise<void>;
  /** After that sync: whether it found (or made) the kernel hold our tables. */
  readonly verified: () => boolean;
  readonly now?: () => number;
}

/** How long a probe waits for the look it asked for: under the DaemonSet's 2 s probe timeout. */
export const READINESS_WAIT_MS = 1_500;
/** At most one look asked for by probes per this many ms. */
export const READINESS_GAP_MS = 1_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class ReadinessCheck {
  private readonly deps: ReadinessDeps;
  private readonly now: () => number;
  /** The look that probes now wait on. */
  private pending: Promise<boolean> | undefined;
  private lastAsked = -Infinity;

  constructor(deps: ReadinessDeps) {
    this.deps = deps;
    this.now = deps.now ?? (() => performance.now());
  }

  /**
   * True when the kernel is known to hold our tables as of now: at once when nothing was committed
   * since the last look, else once a new look says so. False when that look found otherwise or did
   * not end within READINESS_WAIT_MS (nor did the question whether anything was committed).
   */
  async fresh(waitMs = READINESS_WAIT_MS): Promise<boolean> {
    // The bound holds for the whole answer: amid a flood of commits, draining the notifications
    // heard so far may itself take longer than a probe waits.
    return Promise.race([this.answer(), sleep(waitMs).then(() => false)]);
  }

  private async answer(): Promise<boolean> {
    if (await this.deps.unchanged()) return true;
    this.pending ??= this.look().finally(() => (this.pending = undefined));
    return this.pending;
  }

  private async look(): Promise<boolean> {
    const wait = this.lastAsked + READINESS_GAP_MS - this.now();
    if (wait > 0) await sleep(wait);
    this.lastAsked = this.now();
    const synced = this.deps.afterNextSync();
    this.deps.requestSync('readiness check');
    await synced;
    return this.deps.verified();
  }
}
