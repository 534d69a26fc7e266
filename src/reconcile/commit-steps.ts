// The steps of the namespace's generation id that the agent can explain (docs/writes.md, "Beside a
// busy node"): its own commits that leave our tables as they were (the flush's held replies),
// other tools' commits heard to name none of our tables, and commits heard to name ours. The
// converger (converge.ts) asks whether a span of steps left our tables alone; what it knows of the
// kernel stays its own. Bookkeeping alone: no reads, no writes.
import type { CommitStep } from '../nftables/types.js';

/** How many of our own commits besides the writes (the flush's held replies) are remembered. */
export const OWN_STEPS_KEPT = 64;
/** How many other tools' commits elsewhere are remembered (kube-proxy commits often). */
export const ELSEWHERE_STEPS_KEPT = 1_024;

const next = (genId: number) => (genId + 1) >>> 0;
const pause = () => new Promise((resolve) => setTimeout(resolve, 1));

/** Each map trimmed to its newest `kept` entries (a Map and a Set keep insertion order). */
function trim(keys: Map<number, number> | Set<number>, kept: number): void {
  for (const oldest of keys.keys()) {
    if (keys.size <= kept) break;
    keys.delete(oldest);
  }
}

export class CommitSteps {
  /** Our own commits that leave the tables' content as it was (held replies): before → after. */
  private readonly own = new Map<number, number>();
  /**
   * Other tools' commits heard from nf_tables' notifications naming none of our tables: before →
   * after.
   */
  private readonly elsewhere = new Map<number, number>();
  /**
   * Commits heard to name one of our tables, by the generation id each made: on a busy node
   * another tool's commit may land between the generation id read before a commit of ours and the
   * commit itself, and then ours is the one step in between that named our tables.
   */
  private readonly touched = new Set<number>();
  /** Our commits besides the writes whose step was not one alone: told apart when heard. */
  private readonly pendingOwn: CommitStep[] = [];
  /** When another tool's commit was last heard, or found around a write of ours. */
  private heardElsewhereAt = -Infinity;
  /**
   * How far from `verified` (where the kernel was known to hold our tables then) the steps heard
   * so far lead by our held replies and others' commits that named none of our tables.
   */
  private heardFrom: { verified: number; reached: number } | undefined;
  /**
   * Drains nftables' notifications now (commit-watch.ts hearNow), so that the commits they name
   * are noted before a step is judged. False while nothing can be heard: then only our own steps
   * explain the generation id.
   */
  private drain: () => boolean = () => false;

  /** Judges by the notifications `drain` reads. */
  hearBy(drain: () => boolean): void {
    this.drain = drain;
  }

  /** Drains the notifications now; false while nothing can be heard. */
  hear(): boolean {
    return this.drain();
  }

  /** How long since another tool's commit was heard, or found around a write of ours. */
  quietMs(): number {
    return performance.now() - this.heardElsewhereAt;
  }

  /** Another tool committed around a write of ours. */
  heardAround(): void {
    this.heardElsewhereAt = performance.now();
  }

  /** A commit heard to name one of our tables, ours or another's (commit-watch.ts). */
  noteOurs(genId: number): void {
    this.touched.add(genId);
    trim(this.touched, ELSEWHERE_STEPS_KEPT);
  }

  /**
   * Another tool's commit, heard, that named none of our tables (commit-watch.ts); `verified`: the
   * generation id where the kernel was last known to hold our tables, if it is known.
   */
  noteElsewhere(genId: number, verified: number | undefined): void {
    this.heardElsewhereAt = performance.now();
    this.elsewhere.set((genId - 1) >>> 0, genId);
    trim(this.elsewhere, ELSEWHERE_STEPS_KEPT);
    // Followed on from where our tables were last known right, as the steps are heard: however
    // many come before the next look (100 a second for a minute), the walk stays one step.
    if (verified === undefined) return;
    const from = this.heardFrom?.verified === verified ? this.heardFrom.reached : verified;
    if (this.pastOwn(from) === (genId - 1) >>> 0) this.heardFrom = { verified, reached: genId };
  }

  /**
   * Another commit of ours besides the writes (the conntrack flush's held replies), which leaves
   * the tables' content as it was: a step of exactly one is ours alone.
   */
  noteOwn(step: CommitStep): void {
    const { before, after } = step;
    if (before === undefined || after === undefined) return;
    if (after !== next(before)) {
      // Others committed around it: told apart once their notifications are heard.
      this.pendingOwn.push(step);
      if (this.pendingOwn.length > OWN_STEPS_KEPT) this.pendingOwn.shift();
      return;
    }
    this.ownOnly(before, after);
  }

  /** The generation id reached from `genId` through our own commits that left the tables as they were. */
  pastOwn(genId: number): number {
    let at = genId;
    for (let hop = 0; hop < OWN_STEPS_KEPT; hop++) {
      const to = this.own.get(at);
      if (to === undefined) break;
      at = to;
    }
    return at;
  }

  /**
   * Whether every step of the generation id from `from` to `to` is ours or another tool's commit
   * that named none of our tables. A commit's notification may come a moment after its generation
   * id shows: drained again, briefly, before a step is taken as unexplained.
   */
  async explained(from: number | undefined, to: number | undefined): Promise<boolean> {
    if (from === undefined || to === undefined) return false;
    if (this.leftAlone(from, to)) return true;
    for (let attempt = 0; attempt < 3; attempt++) {
      if (!this.hear()) return false;
      this.settlePendingOwn();
      if (this.leftAlone(from, to)) return true;
      await pause();
    }
    return false;
  }

  /** oursAmong, once the notifications up to `after` are heard (drained again, briefly). */
  async heardOursAmong(before: number, after: number): Promise<boolean> {
    for (let attempt = 0; attempt < 3; attempt++) {
      if (!this.hear()) return false;
      if (this.oursAmong(before, after)) return true;
      await pause();
    }
    return false;
  }

  /**
   * Whether `to` is reached from `from` by our held replies and others' commits that named none of
   * our tables.
   */
  leftAlone(from: number, to: number | undefined): boolean {
    if (this.walk(from, to)) return true;
    const heard = this.heardFrom;
    return heard !== undefined && heard.verified === from && this.walk(heard.reached, to);
  }

  /** The steps from `from` to `to`, one by one, as far as they are remembered. */
  private walk(from: number, to: number | undefined): boolean {
    let at = from;
    for (let hop = 0; hop <= ELSEWHERE_STEPS_KEPT + OWN_STEPS_KEPT; hop++) {
      if (at === to) return true;
      const step = this.own.get(at) ?? this.elsewhere.get(at);
      if (step === undefined) return false;
      at = step;
    }
    return false;
  }

  /**
   * Whether the steps from `before` to `after` (one commit of ours among others') are ours and
   * others' that named none of our tables: ours is the one that named our tables.
   */
  private oursAmong(before: number, after: number): boolean {
    let touched = 0;
    for (let at = before; at !== after; at = next(at)) {
      const step = next(at);
      if (this.touched.has(step)) touched++;
      else if (this.elsewhere.get(at) !== step && this.own.get(at) !== step) return false;
      if (touched > 1 || step - before > ELSEWHERE_STEPS_KEPT) return false;
    }
    return touched === 1;
  }

  /** A step of ours that left our tables' content as it was. */
  private ownOnly(before: number, after: number): void {
    this.own.set(before, after);
    trim(this.own, OWN_STEPS_KEPT);
  }

  /**
   * Our held replies' commits that others' came around, each the one step between its generation
   * ids that named our tables: ours, and it left them as they were.
   */
  private settlePendingOwn(): void {
    for (let i = this.pendingOwn.length - 1; i >= 0; i--) {
      const { before, after } = this.pendingOwn[i]!;
      if (before === undefined || after === undefined || !this.oursAmong(before, after)) continue;
      this.pendingOwn.splice(i, 1);
      for (let at = before; at !== after; at = next(at))
        if (this.touched.has(next(at))) this.ownOnly(at, next(at));
    }
  }
}
