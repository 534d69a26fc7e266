// Commits by anyone else to our tables seen at once (docs/writes.md, "When it writes"): the agent
// hears nf_tables' own notifications (the netlink group `nft monitor` listens to), and when a
// commit names one of our tables — or notifications were dropped — it asks whether the kernel is
// still where it last knew it held our tables; if not, a sync reads them back and repairs them. A
// commit to other tables costs one drain of the socket: no read, no sync; its generation step is
// told on, so that a readiness probe need not read our tables back for it (docs/observability.md,
// "HTTP").
import type { CommitsHeard } from '../kernel/addon.js';

export interface CommitWatchDeps {
  /** Opens the notification socket (kernel/addon.ts openCommitMonitor). */
  readonly open: () => { drain(): CommitsHeard; close(): void };
  /** Whether a table ("ip ipmasq") is ours or our stand-in. */
  readonly ours: (table: string) => boolean;
  /** Whether the kernel is still known to hold our tables (the converger's generation check). */
  readonly unchanged: () => Promise<boolean>;
  /** Asks for the sync that reads back and repairs. */
  readonly requestSync: (reason: string) => void;
  /** Told of each commit heard that named none of our tables, by the generation id it made. */
  readonly elsewhere?: (genId: number) => void;
  /** Told of each commit heard that named one of ours (or may have), by the generation id it made. */
  readonly touched?: (genId: number) => void;
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
  /** Drains that said notifications were lost: dropped, or a write of ours made unheard (tests). */
  missed = 0;

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

  /** The check under way, if any (settles, never rejects). */
  private checkRun: Promise<void> | undefined;

  /**
   * Drains the socket now, without waiting: others' commits that named none of our tables are
   * told on at once (the converger judges its reads and writes by them, docs/writes.md "Beside a
   * busy node"); a commit naming ours, or a drop, starts the generation check. False when nothing
   * can be heard (no socket, or it failed): then no commit counts as elsewhere.
   */
  hearNow(): boolean {
    const monitor = this.monitor;
    if (!monitor) return false;
    let heard: CommitsHeard;
    try {
      heard = monitor.drain();
    } catch (err) {
      this.stop();
      this.deps.unavailable(err);
      return false;
    }
    let ours = false;
    for (const commit of heard.commits) {
      // A commit that named more tables than were kept may have named ours.
      if (commit.capped === true || commit.tables.some((t) => this.deps.ours(t))) {
        ours = true;
        this.deps.touched?.(commit.genId);
      } else this.deps.elsewhere?.(commit.genId);
    }
    if (heard.overflow) this.missed++;
    if (!ours && !heard.overflow) return true;
    if (ours) this.touched++;
    this.startCheck();
    return true;
  }

  /** Whether the socket is open: what it hears can be trusted for what it says. */
  get hearing(): boolean {
    return this.monitor !== undefined;
  }

  /** One drain, and the check it started, if any, to its end. */
  async poll(): Promise<void> {
    this.hearNow();
    await this.checkRun;
  }

  /** One check at a time: the sync it may ask for reads everything a burst of commits changed. */
  private startCheck(): void {
    if (this.checking) {
      this.again = true;
      return;
    }
    this.checking = true;
    this.checkRun = (async () => {
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
    })();
  }
}
