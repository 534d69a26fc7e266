// Commits by anyone else to our tables seen at once (docs/writes.md, "When it writes"): the agent
// hears nf_tables' own notifications (the netlink group `nft monitor` listens to), and when a
// commit names one of our tables — or notifications were dropped — it asks whether the kernel is
// still where it last knew it held our tables; if not, a sync reads them back and repairs them. A
// commit to other tables costs one drain of the socket: no read, no sync; its generation step is
// told on, so that a readiness probe need not read our tables back for it (docs/observability.md,
// "HTTP").
import type { CommitsHeard } from '../nftables/addon.js';

export interface CommitWatchDeps {
  /** Opens the notification socket (nftables/addon.ts openCommitMonitor). */
  readonly open: () => { drain(): CommitsHeard; close(): void };
  /** Whether a table ("ip ipmasq") is ours or our stand-in. */
  readonly ours: (table: string) => boolean;
  /** Whether the kernel is still known to hold our tables (the converger's generation check). */
  readonly unchanged: () => Promise<boolean>;
  /** Asks for the sync that reads back and repairs. */
  readonly requestSync: (reason: string) => void;
  /** Told of each commit heard that named none of our tables, by the generation id it made. */
  readonly elsewhere?: (genId: number) => void;
  /** Told once when the socket cannot be made or read: the periodic resync is left. */
  readonly unavailable: (err: unknown) => void;
  /** How often the socket is drained (default POLL_MS). */
  readonly intervalMs?: number;
}

/** How often the socket is drained: a syscall that finds nothing costs about a microsecond. */
export const POLL_MS = 100;

/** The reason of the sync a foreign commit to our tables asks for. */
export const FOREIGN_COMMIT = 'foreign commit';

export class CommitWatch {
  private readonly deps: CommitWatchDeps;
  private monitor: { drain(): CommitsHeard; close(): void } | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;
  private checking = false;
  /** A commit naming our tables came while a check ran: check once more after it. */
  private again = false;
  /** Commits heard that named our tables (tests). */
  touched = 0;

  constructor(deps: CommitWatchDeps) {
    this.deps = deps;
  }

  start(): void {
    try {
      this.monitor = this.deps.open();
    } catch (err) {
      this.deps.unavailable(err);
      return;
    }
    this.timer = setInterval(() => void this.poll(), this.deps.intervalMs ?? POLL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.monitor?.close();
    this.monitor = undefined;
  }

  /** One drain; a commit naming our tables (or a drop) makes the generation check. */
  async poll(): Promise<void> {
    const monitor = this.monitor;
    if (!monitor) return;
    let heard: CommitsHeard;
    try {
      heard = monitor.drain();
    } catch (err) {
      this.stop();
      this.deps.unavailable(err);
      return;
    }
    let ours = false;
    for (const commit of heard.commits) {
      // A commit that named more tables than were kept may have named ours.
      if (commit.capped === true || commit.tables.some((t) => this.deps.ours(t))) ours = true;
      else this.deps.elsewhere?.(commit.genId);
    }
    if (!ours && !heard.overflow) return;
    if (ours) this.touched++;
    // One check at a time: the sync it may ask for reads everything a burst of commits changed.
    if (this.checking) {
      this.again = true;
      return;
    }
    this.checking = true;
    try {
      do {
        this.again = false;
        if (!(await this.deps.unchanged())) this.deps.requestSync(FOREIGN_COMMIT);
      } while (this.again);
    } catch {
      // The generation could not be read: the sync finds out what it can.
      this.deps.requestSync(FOREIGN_COMMIT);
    } finally {
      this.checking = false;
    }
  }
}
