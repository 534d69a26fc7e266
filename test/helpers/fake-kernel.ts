// A transactional stand-in for the kernel, for fast reconciler tests: it understands the scripts
// the renderer writes (add/delete table, nested table blocks), keeps listings as nft would print
// them, and moves a generation id on every commit. Real behaviour is proven by the kernel tests.
import type { AnyTableRef, Kernel } from '../../src/reconcile/kernel.js';
import type { TableRef } from '../../src/nftables/types.js';
import type { Range } from '../../src/cidr/index.js';
import type { ConntrackFlushResult } from '../../src/nftables/addon.js';

export class FakeKernel implements Kernel {
  tables = new Map<string, string>();
  genId = 1;
  reads = 0;
  applies: string[] = [];
  failWrites: Error | undefined;
  /** Runs right after a commit, before the caller sees it returned: another tool's interleaving. */
  afterCommit: (() => void) | undefined;

  private static key(ref: TableRef): string {
    return `${ref.family} ${ref.name}`;
  }

  async listTable(ref: TableRef): Promise<string | null> {
    this.reads++;
    return this.tables.get(FakeKernel.key(ref)) ?? null;
  }

  async generationId(): Promise<number> {
    return this.genId;
  }

  /** Foreign tables the fake's libnftables "crashes" on when listing them. */
  unreadable = new Set<string>();

  async tableNames(): Promise<AnyTableRef[]> {
    const names = [...this.tables.keys(), ...this.unreadable];
    return names.map((key) => {
      const [family = '', name = ''] = key.split(' ');
      return { family, name };
    });
  }

  async readable(ref: AnyTableRef): Promise<boolean> {
    return !this.unreadable.has(`${ref.family} ${ref.name}`);
  }

  /** Chains of the original agent "in ip nat", by name, with how many jump rules point at each. */
  legacy = new Map<string, number>();

  async legacyChains(names: readonly string[]): Promise<string[]> {
    return names.filter((name) => this.legacy.has(name));
  }

  async removeLegacyChain(chain: string): Promise<number> {
    const rules = this.legacy.get(chain) ?? 0;
    this.legacy.delete(chain);
    this.genId++;
    return rules;
  }

  async setHas(): Promise<boolean> {
    throw new Error('fake kernel: setHas is proven against the real kernel only');
  }

  /** Conntrack flushes asked for, in order. */
  flushes: Array<{ family: 4 | 6; protocols: readonly number[]; ranges: readonly Range[] }> = [];

  async flushConntrack(
    family: 4 | 6,
    protocols: readonly number[],
    ranges: readonly Range[],
  ): Promise<ConntrackFlushResult> {
    this.flushes.push({ family, protocols, ranges });
    return { seen: 0, deleted: new Map(), error: undefined };
  }

  async apply(script: string): Promise<void> {
    if (this.failWrites) throw this.failWrites;
    const next = new Map(this.tables);
    const lines = script.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i] ?? '';
      let m: RegExpExecArray | null;
      if ((m = /^add table (ip6?) (\S+)$/.exec(line))) {
        const key = `${m[1]} ${m[2]}`;
        if (!next.has(key)) next.set(key, `table ${key} {\n}\n`);
      } else if ((m = /^delete table (ip6?) (\S+)$/.exec(line))) {
        const key = `${m[1]} ${m[2]}`;
        if (!next.delete(key)) throw new Error(`Error: No such file or directory\n${line}`);
      } else if ((m = /^table (ip6?) (\S+) \{$/.exec(line))) {
        const end = lines.indexOf('}', i);
        next.set(`${m[1]} ${m[2]}`, lines.slice(i, end + 1).join('\n') + '\n');
        i = end;
      } else if (line.trim() !== '') {
        throw new Error(`fake kernel: cannot run ${JSON.stringify(line)}`);
      }
    }
    this.tables = next;
    this.applies.push(script);
    this.genId++;
    this.afterCommit?.();
  }

  /** Another tool's commit: changes the generation id, and optionally our table. */
  tamper(ref: TableRef, edit?: (listing: string) => string | null): void {
    const key = FakeKernel.key(ref);
    const listing = this.tables.get(key);
    if (edit && listing !== undefined) {
      const edited = edit(listing);
      if (edited === null) this.tables.delete(key);
      else this.tables.set(key, edited);
    }
    this.genId++;
  }
}
