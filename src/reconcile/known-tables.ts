// What this process knows the kernel holds of our tables (docs/writes.md, "When it writes"), as one
// value: the tables it last wrote or found in place, the content key they render, the generation
// id at which the kernel was last known to hold them, and each chain's rules then. The converger
// (converge.ts) moves it by the named transitions below and by no other way; whether a generation
// id reached since is explained stays the commit steps' (commit-steps.ts).
import type { TableFamily } from '../cidr/index.js';
import type { Table } from '../nftables/types.js';
import type { RuleFingerprints } from './netlink-audit.js';

export class KnownTables {
  private held = new Map<TableFamily, Table>();
  private contentKey: string | undefined;
  private knownAt: number | undefined;
  private chainRules: RuleFingerprints | undefined;

  /**
   * Our tables are in the kernel as `tables` (the content `key` renders): written by us, or found
   * in place. `at`: the generation id the kernel is known to hold them at, or undefined when that
   * is not known (another commit around, another agent writing).
   */
  hold(tables: readonly Table[], key: string, at: number | undefined): void {
    this.held = new Map(tables.map((table) => [table.family, table]));
    this.contentKey = key;
    this.knownAt = at;
  }

  /** An audit found the kernel holding them at `at`. */
  confirm(at: number | undefined): void {
    this.knownAt = at;
  }

  /** They may have changed since (a refused write, an audit that differs or failed, another agent). */
  doubt(): void {
    this.knownAt = undefined;
  }

  /** Each chain's rules as read right after `hold` (undefined: not taken). */
  takeRules(rules: RuleFingerprints | undefined): void {
    this.chainRules = rules;
  }

  /** The tables as last written or found; empty before either. */
  get tables(): ReadonlyMap<TableFamily, Table> {
    return this.held;
  }

  /** The content key the tables render (config hash and compile options). */
  get key(): string | undefined {
    return this.contentKey;
  }

  get rules(): RuleFingerprints | undefined {
    return this.chainRules;
  }

  /** The generation id at which the kernel was last known to hold them; undefined: in doubt. */
  get at(): number | undefined {
    return this.knownAt;
  }

  /** Where the kernel was last known to hold tables of ours, when it holds any. */
  get since(): number | undefined {
    return this.held.size > 0 ? this.knownAt : undefined;
  }
}
