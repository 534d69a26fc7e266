// The audit of an element-only write by the whole path (docs/writes.md, "The everyday edit"): the
// sets the write changed read back over netlink and compared with the whole lists it meant, and
// the chain it marked read for the new mark. The converger (converge.ts) hands each such write
// here and is told the verdict; what a verdict means for what it knows of the kernel stays its own.
import type { AgentMetrics } from './metrics.js';
import type { ElementEdit } from '../nftables/types.js';
import type { TablesPort } from '../kernel/ports.js';

/** What the audit of an element-only write found. */
export type ElementAudit =
  /** No element-only write waits for its audit. */
  | 'none'
  /** The kernel holds what the write meant. */
  | 'agrees'
  /** Another commit came since: not the write's to judge (the next sync reads back and repairs). */
  | 'moved'
  /** The kernel does not hold what the write meant, though nobody else committed: its fault. */
  | 'differs';

/**
 * How many times the audit of one element-only write is tried when another commit was in its way.
 */
const AUDIT_TRIES = 3;

/** `COUNT WHAT (first, …)`, or nothing when none: a part of an audit's difference. */
function named(what: string, count: number, list: readonly string[]): string[] {
  return count === 0
    ? []
    : [`${count} ${what} (${list.join(', ')}${count > list.length ? ', …' : ''})`];
}

export interface ElementAuditDeps {
  readonly kernel: Pick<TablesPort, 'generationId' | 'auditSet' | 'ruleComments'>;
  readonly metrics: Pick<AgentMetrics, 'incKernelReads'>;
  /** Whether every step of the generation id between the two is explained (commit-steps.ts). */
  readonly explained: (from: number | undefined, to: number | undefined) => Promise<boolean>;
}

export class ElementWriteAudit {
  /**
   * The last element-only write and the generation id after it, until its audit reads it back;
   * `tries`: audits that found another commit in the way (at most AUDIT_TRIES).
   */
  private pending: { genId: number; edit: ElementEdit; tries: number } | undefined;

  constructor(private readonly deps: ElementAuditDeps) {}

  /** Whether a write waits for its audit. */
  get due(): boolean {
    return this.pending !== undefined;
  }

  /** The write to audit next (replacing any before it: each builds on the one before), or none. */
  expect(edit: ElementEdit | undefined, genId: number | undefined): void {
    this.pending = edit && genId !== undefined ? { genId, edit, tries: 0 } : undefined;
  }

  /**
   * The audit, when nothing but our own commits and others' that named none of our tables came
   * since the write: each set it changed read back over netlink and compared with the whole list
   * the write meant (on a pool thread: the audit::AuditSet of the addon, which parses that list on
   * its own rather than by the write's packing), and the chain it marked read for the new mark.
   * Neither a libnftables call nor queued behind our writes: a write committed meanwhile makes it
   * `moved`. Rejects when a read fails (not audited).
   */
  async run(): Promise<{ verdict: ElementAudit; differences: string[] }> {
    const { kernel, metrics, explained } = this.deps;
    const pending = this.pending;
    this.pending = undefined;
    if (pending === undefined) return { verdict: 'none', differences: [] };
    const moved = () => {
      // Tried again a little later (by then nftables' notifications may say whose commit it was),
      // unless a newer write is to be audited instead.
      if (this.pending === undefined && pending.tries + 1 < AUDIT_TRIES)
        this.pending = { ...pending, tries: pending.tries + 1 };
      return { verdict: 'moved' as const, differences: [] };
    };
    // Others' commits that named none of our tables (nftables' notifications) leave the write's
    // sets alone: on a node whose other tools commit often, the write is audited all the same.
    const at = await kernel.generationId().catch(() => undefined);
    if (!(await explained(pending.genId, at))) return moved();
    const differences: string[] = [];
    for (const table of pending.edit.tables) {
      const ref = { family: table.family, name: table.table };
      for (const { set } of table.sets) {
        metrics.incKernelReads();
        const found = await kernel.auditSet(ref, set, set.elements);
        if (found.missingCount === 0 && found.extraCount === 0) continue;
        differences.push(
          `set ${table.family} ${table.table} ${set.name}: holds ${found.held} elements, the write meant ${found.meant}; ` +
            [
              ...named('missing', found.missingCount, found.missing),
              ...named('not meant', found.extraCount, found.extra),
            ].join('; '),
        );
      }
      const comments = await kernel.ruleComments(ref, table.chain);
      if (!comments.includes(table.mark))
        differences.push(
          `chain ${table.family} ${table.table} ${table.chain}: no rule carries the write's mark`,
        );
    }
    const readAt = await kernel.generationId().catch(() => undefined);
    if (!(await explained(at, readAt))) return moved();
    return { verdict: differences.length === 0 ? 'agrees' : 'differs', differences };
  }
}
