// Another ipmasq-agent writing our tables otherwise than we would (another config or other flags), as
// during a rolling update with maxSurge (README, "Choices where the contract is silent"). Recognised
// by the latest write's mark (nftables/ownership.ts): another writer's, on tables that do not hold
// what we would write. A mark of our own writer is never another agent: an older write of ours put
// back (a restore of a saved ruleset) is drift, repaired at once. Of two agents the newer (the later
// start) wins: it writes its config at once; the older holds back for 1, 2, 4, at most 8 resync
// intervals before writing its own again, instead of rewriting at every resync.
import type { Logger } from 'pino';
import { isNewerWriter, type WriteMark } from '../nftables/ownership.js';
import type { NodeEvents } from '../kubernetes/events.js';
import type { AgentMetrics } from './metrics.js';

/** What a table's mark says wrote it. */
export type TableWriter = WriteMark;

/** The longest hold, in resync intervals; also how long our write must stay to end a conflict. */
export const MAX_HOLD_INTERVALS = 8;

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
   * Our tables do not hold what we would write, and the table found carries `found`. True while we
   * hold back from another agent's write; false when it is not one (our own last write, changed by
   * someone without an agent's comment: plain drift), or when it is time to write ours again.
   */
  holdBack(found: TableWriter): boolean {
    // Before our first write, a table of another config is simply the last run's.
    if (!this.lastWrite || this.isOurLastWrite(found)) return false;
    if (found.writer === this.deps.writer) return false;
    const now = this.deps.now();
    const conflict = this.conflict;
    if (conflict) conflict.lastSeen = now;
    if (!isNewerWriter(found.writer, this.deps.writer)) {
      // An older agent's write: ours wins, written again at once; the conflict is still open.
      if (!conflict) this.open(found, 0, now, undefined);
      return false;
    }
    if (conflict?.holdUntil !== undefined) {
      if (now < conflict.holdUntil) return true;
      conflict.holdUntil = undefined; // held long enough: write ours once more
      return false;
    }
    const rounds = conflict?.rounds ?? 0;
    const holdMs = this.deps.intervalMs() * Math.min(2 ** rounds, MAX_HOLD_INTERVALS);
    if (conflict) {
      conflict.rounds = rounds + 1;
      conflict.holdUntil = now + holdMs;
    } else this.open(found, rounds + 1, now, now + holdMs);
    return true;
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
