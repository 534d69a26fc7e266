// Another ipmasq-agent writing our tables otherwise than we would (another config or other flags), as
// during a rolling update with maxSurge (README, "Choices where the contract is silent"). Recognised
// by the latest write's mark (nftables/ownership.ts): a writer other than this process whose
// generation has moved on since we last saw its mark is alive and writing (and its write, still in
// place while we hold back, is too). Anything else that is not what we would write is drift,
// repaired at once: a mark of this process that is not its last write, a mark seen for the first
// time, one older than one seen before, or one seen before that we had repaired — a restore of a
// saved ruleset, whichever process of ours wrote it. Of two live agents the newer (the later start) wins:
// it writes its config at once; the older holds back for 1, 2, 4, at most 8 resync intervals before
// writing its own again, instead of rewriting at every resync.
import type { Logger } from 'pino';
import { isNewerWriter, type WriteMark } from '../nftables/ownership.js';
import type { NodeEvents } from '../kubernetes/events.js';
import type { AgentMetrics } from './metrics.js';

/** What a table's mark says wrote it. */
export type TableWriter = WriteMark;

/** The longest hold, in resync intervals; also how long our write must stay to end a conflict. */
export const MAX_HOLD_INTERVALS = 8;

/** How many other writers' latest generations are remembered. */
const WRITERS_KEPT = 16;

/**
 * What to do about a table that does not hold what we would write: repair it as `drift`, `write`
 * our config over another live agent's (we are the newer), or `hold` back from it (it is newer).
 */
export type OtherWriterVerdict = 'drift' | 'write' | 'hold';

export interface OtherAgentDeps {
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  readonly now: () => number;
  readonly intervalMs: () => number;
  /** This process's writer id. */
  readonly writer: string;
  readonly events?: NodeEvents;
}

export class OtherAgentWatch {
  private readonly deps: OtherAgentDeps;
  private lastWrite: TableWriter | undefined;
  /** The highest generation seen in the marks of each other writer, by writer id. */
  private readonly seen = new Map<string, number>();
  /** How often another agent's write was seen, when last, and until when to hold back. */
  private conflict: { rounds: number; lastSeen: number; holdUntil: number | undefined } | undefined;

  constructor(deps: OtherAgentDeps) {
    this.deps = deps;
  }

  /** Another agent's write was seen lately: the agent is not ready, and reads back every resync. */
  get active(): boolean {
    return this.conflict !== undefined;
  }

  /** This process wrote the table. */
  wrote(writer: TableWriter): void {
    this.lastWrite = writer;
  }

  /**
   * Our tables do not hold what we would write, and the table found carries `found`: drift, to be
   * repaired; another live agent's write that we write over; or one we hold back from for now.
   */
  judge(found: TableWriter): OtherWriterVerdict {
    // A mark of ours, or of an older release (no writer): an older write put back, or a hand edit.
    if (found.writer === undefined || found.writer === this.deps.writer) return 'drift';
    const before = this.seen.get(found.writer);
    this.seen.delete(found.writer);
    this.seen.set(found.writer, Math.max(before ?? 0, found.generation));
    for (const oldest of this.seen.keys()) {
      if (this.seen.size <= WRITERS_KEPT) break;
      this.seen.delete(oldest);
    }
    const conflict = this.conflict;
    // Before our first write, a table of another config is simply the last run's to replace. A
    // writer not seen before, or gone back to an older generation, is a restore of a saved table;
    // so is the same write again once we had repaired it (no conflict open): drift.
    if (!this.lastWrite || before === undefined || found.generation < before) return 'drift';
    if (found.generation === before && !conflict) return 'drift';
    const now = this.deps.now();
    if (conflict) conflict.lastSeen = now;
    if (!isNewerWriter(found.writer, this.deps.writer)) {
      // An older agent's write: ours wins, written again at once; the conflict is still open.
      if (!conflict) this.open(found, 0, now, undefined);
      return 'write';
    }
    if (conflict?.holdUntil !== undefined) {
      if (now < conflict.holdUntil) return 'hold';
      conflict.holdUntil = undefined; // held long enough: write ours once more
      return 'write';
    }
    const rounds = conflict?.rounds ?? 0;
    const holdMs = this.deps.intervalMs() * Math.min(2 ** rounds, MAX_HOLD_INTERVALS);
    if (conflict) {
      conflict.rounds = rounds + 1;
      conflict.holdUntil = now + holdMs;
    } else this.open(found, rounds + 1, now, now + holdMs);
    return 'hold';
  }

  private open(found: TableWriter, rounds: number, now: number, holdUntil: number | undefined) {
    this.conflict = { rounds, lastSeen: now, holdUntil };
    const newer = holdUntil !== undefined;
    this.deps.logger.warn(
      {
        otherGeneration: found.generation,
        otherConfig: found.hash,
        otherWriter: found.writer ?? null,
        ...(newer ? { holdMs: holdUntil - now } : {}),
      },
      newer
        ? 'another ipmasq-agent is writing our table with another config; holding back instead of overwriting it (the newer agent wins)'
        : 'another ipmasq-agent is writing our table with another config; it started before this one, so ours wins',
    );
    this.deps.metrics.setConflictingWriter(true);
    this.deps.events?.(
      'ConflictingWriter',
      newer
        ? 'another ipmasq-agent is writing our table with another config; this one holds back (the newer agent wins)'
        : 'another ipmasq-agent is writing our table with another config; this one started later and keeps its own',
    );
  }

  /**
   * The table holds our config as `found` says. When that is our own last write and it has stayed
   * for the longest hold, long enough for a holding-back other agent to have come back, the
   * conflict is over.
   */
  inPlace(found: TableWriter): void {
    const conflict = this.conflict;
    if (!conflict || !this.isOurLastWrite(found)) return;
    if (this.deps.now() - conflict.lastSeen < this.deps.intervalMs() * MAX_HOLD_INTERVALS) return;
    this.conflict = undefined;
    this.deps.metrics.setConflictingWriter(false);
    this.deps.logger.info(
      'our write stayed in place: no other ipmasq-agent is writing our table now',
    );
  }

  private isOurLastWrite(found: TableWriter): boolean {
    return (
      found.generation === this.lastWrite?.generation &&
      found.hash === this.lastWrite.hash &&
      (found.writer === undefined || found.writer === this.lastWrite.writer)
    );
  }
}
