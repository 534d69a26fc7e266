// A transactional stand-in for the kernel, for fast reconciler tests: it understands the scripts
// the renderer writes (add/delete table, nested table blocks), keeps listings as nft would print
// them, and moves a generation id on every commit. Real behaviour is proven by the kernel tests.
import type { AnyTableRef, Kernel } from '../../src/kernel/ports.js';
import { renderElementEdit } from '../../src/nftables/change.js';
import { PRERENDER_SLICE, setBlock } from '../../src/nftables/render.js';
import type {
  ChainInfo,
  CommitStep,
  ElementEdit,
  Elements,
  CounterValue,
  NamedSet,
  RuleShape,
  SetAudit,
  TableRef,
  SetFill,
} from '../../src/nftables/types.js';
import type {
  DeletedFlows,
  FlowJudgement,
  FlowPlan,
  NatSample,
} from '../../src/kernel/conntrack.js';
import { parseAddress } from '../../src/cidr/index.js';
import { NftError } from '../../src/kernel/addon.js';
import { frozenElements } from '../../src/nftables/types.js';

export class FakeKernel implements Kernel {
  tables = new Map<string, string>();
  genId = 1;
  reads = 0;
  applies: string[] = [];
  failWrites: Error | undefined;
  /** Runs right after a commit, before the caller sees it returned: another tool's interleaving. */
  afterCommit: (() => void) | undefined;
  /** Runs as a commit of ours starts, before anything of it: another tool's commit just before it. */
  beforeCommit: (() => void) | undefined;

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

  /** Every chain: the original agent's, in `ip nat`, without hooks or rules (other-nat/chains.ts is proven on the kernel). */
  async chains(): Promise<ChainInfo[]> {
    this.chainDumps++;
    const legacy = [...this.legacy.keys()].map((name) => ({ family: 'ip', table: 'nat', name }));
    // Every table's chains as listed, a base chain with its hook (its priority is not modelled).
    const listed = [...this.tables].flatMap(([key, listing]) => {
      const [family = '', table = ''] = key.split(' ');
      return parseListing(listing).chains.map((chain) => {
        const hook = /hook (\w+)/.exec(chain.base ?? '')?.[1];
        const type = /type (\w+)/.exec(chain.base ?? '')?.[1] ?? 'filter';
        return {
          family,
          table,
          name: chain.name,
          ...(hook ? { hook: { name: hook, priority: 0, type } } : {}),
        };
      });
    });
    return [...legacy, ...listed];
  }
  chainDumps = 0;

  /** Counts the fake's tables hold, by `FAMILY NAME` (set by a test). */
  counts = new Map<string, CounterValue[]>();

  async counters(ref: TableRef): Promise<CounterValue[]> {
    const set = this.counts.get(FakeKernel.key(ref));
    if (set) return set;
    // Else the counters the table's listing declares, at zero.
    const listing = this.tables.get(FakeKernel.key(ref));
    return (listing ? parseListing(listing).counters : []).map(({ name }) => ({
      name,
      packets: 0,
      bytes: 0,
    }));
  }

  async natSample(): Promise<NatSample> {
    throw new Error('fake kernel: NAT samples are proven against the real kernel only');
  }

  async ruleShapes(): Promise<RuleShape[]> {
    return [];
  }

  async listRules(): Promise<string> {
    return '';
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

  /** Conntrack judgements asked for, in order, and what each plan found (set by the test). */
  judgements: FlowJudgement[] = [];
  plan: Omit<FlowPlan, 'family' | 'handle'> = { seen: 0, unjudged: 0, now: 0, later: 0, hold: 0 };
  /** Holds written and deletions made, in order. */
  holds: Array<{ family: 4 | 6; table: string; set: string; hold: number }> = [];
  deletions: Array<{ family: 4 | 6; which: 'now' | 'later'; count: number }> = [];

  async judgeFlows(request: FlowJudgement): Promise<FlowPlan> {
    this.judgements.push(request);
    return { ...this.plan, family: request.family, handle: this.judgements.length };
  }

  async holdReplies(plan: FlowPlan, table: string, set: string): Promise<CommitStep> {
    const before = this.genId++;
    this.holds.push({ family: plan.family, table, set, hold: plan.hold });
    return { before, after: this.genId };
  }

  async deleteFlows(plan: FlowPlan, which: 'now' | 'later'): Promise<DeletedFlows> {
    const count = which === 'now' ? plan.now : plan.later;
    this.deletions.push({ family: plan.family, which, count });
    return { deleted: new Map(count > 0 ? [[17, count]] : []), error: undefined };
  }

  /** Element-only changes written, in order (their scripts also go through apply). */
  edits: ElementEdit[] = [];

  /** The same change as the script libnftables would be given: the real path is proven on the kernel. */
  async edit(edit: ElementEdit): Promise<CommitStep> {
    this.beforeCommit?.();
    // What runs at the next commit (a hook may have taken itself away).
    const hook = this.beforeCommit;
    // Pinned to the generation it was worked out at, as the kernel takes a batch (NFNL_BATCH_GENID).
    if (edit.generation !== undefined && edit.generation !== this.genId)
      throw new NftError(
        'our tables: another commit came since the generation it was worked out at',
      );
    this.edits.push(edit);
    this.beforeCommit = undefined;
    try {
      return await this.apply(renderElementEdit(edit.tables));
    } finally {
      this.beforeCommit = hook;
    }
  }

  /** Sets filled apart, in order (their scripts also go through apply). */
  fills: SetFill[] = [];

  /** A fill as the script libnftables would be given: the real path is proven on the kernel. */
  async fill(fill: SetFill): Promise<CommitStep> {
    this.fills.push(fill);
    // The kernel adds elements only to a set that is there: the whole batch is refused otherwise.
    for (const { family, table, sets } of fill.tables) {
      const listing = this.tables.get(FakeKernel.key({ family, name: table }));
      const held = listing ? parseListing(listing).sets.map((set) => set.name) : [];
      for (const set of sets)
        if (!held.includes(set.name))
          throw new NftError(`set ${set.name} of table ${table}: No such file or directory`);
    }
    return this.apply(renderSetFill(fill));
  }

  /** Audits read, in order (the element-write audit's reads of our sets). */
  audits: string[] = [];

  /** The set's elements from the fake's listing, compared as text (the real compare is the addon's). */
  async auditSet(ref: TableRef, set: NamedSet, elements: Elements): Promise<SetAudit> {
    this.audits.push(set.name);
    const listing = this.tables.get(FakeKernel.key(ref));
    const held = listing ? parseListing(listing).sets.find((s) => s.name === set.name) : undefined;
    if (!held) throw new NftError(`Error: No such file or directory\nset ${set.name}`);
    const suffix = set.key.elementSuffix;
    // As prefixes: nft lists a single address without its length, as the fake does.
    const prefix = (e: string) => (e.includes('/') ? e : `${e}/${e.includes(':') ? 128 : 32}`);
    const have = new Set(
      held.elements.map((e) =>
        prefix(suffix && e.endsWith(suffix) ? e.slice(0, -suffix.length) : e),
      ),
    );
    const want = new Set(elements.map(prefix));
    const missing = [...want].filter((e) => !have.has(e));
    const extra = [...have].filter((e) => !want.has(e));
    return {
      held: have.size,
      meant: want.size,
      missingCount: missing.length,
      extraCount: extra.length,
      missing: missing.slice(0, 8),
      extra: extra.slice(0, 8),
    };
  }

  async ruleComments(ref: TableRef, chain: string): Promise<string[]> {
    const listing = this.tables.get(FakeKernel.key(ref));
    const found = listing ? parseListing(listing).chains.find((c) => c.name === chain) : undefined;
    if (!found) throw new NftError(`Error: No such file or directory\nchain ${chain}`);
    return found.rules.map((rule) => /comment "(.*)"$/.exec(rule)?.[1] ?? '');
  }

  async apply(script: string): Promise<CommitStep> {
    this.beforeCommit?.();
    const before = this.genId;
    if (this.failWrites) throw this.failWrites;
    const next = new Map<string, FakeTable>();
    for (const [key, listing] of this.tables) next.set(key, parseListing(listing));
    const lines = script.split('\n');
    const table = (family: string | undefined, name: string | undefined, line: string) => {
      const found = next.get(`${family} ${name}`);
      if (!found) throw new NftError(`Error: No such file or directory\n${line}`);
      return found;
    };
    const set = (t: FakeTable, name: string | undefined, line: string) => {
      const found = t.sets.find((s) => s.name === name);
      if (!found) throw new NftError(`Error: No such file or directory\n${line}`);
      return found;
    };
    const chain = (t: FakeTable, name: string | undefined, line: string) => {
      const found = t.chains.find((c) => c.name === name);
      if (!found) throw new NftError(`Error: No such file or directory\n${line}`);
      return found;
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i] ?? '';
      let m: RegExpExecArray | null;
      if ((m = /^add table (ip6?) (\S+)$/.exec(line))) {
        const key = `${m[1]} ${m[2]}`;
        if (!next.has(key))
          next.set(key, { header: `table ${key} {`, counters: [], sets: [], chains: [] });
      } else if ((m = /^delete table (ip6?) (\S+)$/.exec(line))) {
        if (!next.delete(`${m[1]} ${m[2]}`))
          throw new NftError(`Error: No such file or directory\n${line}`);
      } else if ((m = /^table (ip6?) (\S+) \{$/.exec(line))) {
        const end = lines.indexOf('}', i);
        const block = parseListing(lines.slice(i, end + 1).join('\n'));
        const key = `${m[1]} ${m[2]}`;
        const existing = next.get(key);
        if (existing) mergeInto(existing, block);
        else next.set(key, block);
        i = end;
      } else if ((m = /^flush set (ip6?) (\S+) (\S+)$/.exec(line))) {
        set(table(m[1], m[2], line), m[3], line).elements = [];
      } else if ((m = /^delete set (ip6?) (\S+) (\S+)$/.exec(line))) {
        const t = table(m[1], m[2], line);
        set(t, m[3], line);
        t.sets = t.sets.filter((s) => s.name !== m?.[3]);
      } else if ((m = /^delete element (ip6?) (\S+) (\S+) \{ (.*) \}$/.exec(line))) {
        const s = set(table(m[1], m[2], line), m[3], line);
        for (const element of m[4]?.split(', ') ?? []) {
          if (!s.elements.includes(element))
            throw new NftError(`Error: Could not process rule: No such file or directory\n${line}`);
          s.elements = s.elements.filter((e) => e !== element);
        }
      } else if ((m = /^delete chain (ip6?) (\S+) (\S+)$/.exec(line))) {
        const t = table(m[1], m[2], line);
        if (chain(t, m[3], line).rules.length > 0)
          throw new NftError(`Error: Could not process rule: Device or resource busy\n${line}`);
        t.chains = t.chains.filter((c) => c.name !== m?.[3]);
      } else if ((m = /^flush chain (ip6?) (\S+) (\S+)$/.exec(line))) {
        chain(table(m[1], m[2], line), m[3], line).rules = [];
      } else if ((m = /^add rule (ip6?) (\S+) (\S+) (.+)$/.exec(line))) {
        chain(table(m[1], m[2], line), m[3], line).rules.push(m[4] ?? '');
      } else if (line.trim() !== '') {
        throw new Error(`fake kernel: cannot run ${JSON.stringify(line)}`);
      }
    }
    this.tables = new Map([...next].map(([key, t]) => [key, printListing(t)]));
    this.applies.push(script);
    this.genId++;
    this.afterCommit?.();
    return { before, after: this.genId };
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

/** A table as the fake holds it: what nft lists, in the renderer's layout. */
interface FakeTable {
  header: string;
  comment?: string;
  /** Named counters with their packet and byte counts, as nft lists them. */
  counters: Array<{ name: string; counts: string }>;
  sets: Array<{ name: string; declaration: string[]; elements: string[] }>;
  chains: Array<{ name: string; base?: string; rules: string[] }>;
}

function parseListing(listing: string): FakeTable {
  const lines = listing.split('\n');
  const table: FakeTable = { header: lines[0] ?? '', counters: [], sets: [], chains: [] };
  let counter: FakeTable['counters'][number] | undefined;
  let set: FakeTable['sets'][number] | undefined;
  let chain: FakeTable['chains'][number] | undefined;
  for (const line of lines.slice(1)) {
    let m: RegExpExecArray | null;
    if ((m = /^\tcomment "(.*)"$/.exec(line))) table.comment = m[1];
    else if ((m = /^\tcounter (\S+) \{$/.exec(line))) {
      counter = { name: m[1] ?? '', counts: 'packets 0 bytes 0' };
      table.counters.push(counter);
    } else if (counter && (m = /^\t\t(packets \d+ bytes \d+)$/.exec(line))) counter.counts = m[1]!;
    else if ((m = /^\tset (\S+) \{$/.exec(line))) {
      set = { name: m[1] ?? '', declaration: [], elements: [] };
      table.sets.push(set);
    } else if ((m = /^\tchain (\S+) \{$/.exec(line))) {
      chain = { name: m[1] ?? '', rules: [] };
      table.chains.push(chain);
    } else if (line === '\t}') {
      counter = undefined;
      set = undefined;
      chain = undefined;
    } else if (set && (m = /^\t\telements = \{ (.*) \}$/.exec(line))) {
      set.elements.push(...(m[1]?.split(', ') ?? []));
    } else if (set && line.startsWith('\t\t')) set.declaration.push(line);
    else if (chain && line.startsWith('\t\ttype ')) chain.base = line;
    else if (chain && line.startsWith('\t\t')) chain.rules.push(line.slice(2));
  }
  return table;
}

/** nft keeps a table's first comment, adds elements to an existing set, appends rules to a chain. */
function mergeInto(table: FakeTable, block: FakeTable): void {
  table.comment ??= block.comment;
  // Declaring a counter that exists changes nothing.
  for (const counter of block.counters)
    if (!table.counters.some((c) => c.name === counter.name)) table.counters.push(counter);
  for (const set of block.sets) {
    const existing = table.sets.find((s) => s.name === set.name);
    if (!existing) table.sets.push(set);
    else {
      if (existing.declaration.join() !== set.declaration.join())
        throw new Error(`Error: Could not process rule: File exists\nset ${set.name}`);
      const held = new Set(existing.elements);
      for (const e of set.elements) {
        if (held.has(e)) throw new Error(`Error: Could not process rule: File exists\n${e}`);
        held.add(e);
        existing.elements.push(e);
      }
    }
  }
  for (const chain of block.chains) {
    const existing = table.chains.find((c) => c.name === chain.name);
    if (!existing) table.chains.push(chain);
    else existing.rules.push(...chain.rules);
  }
}

/** Elements in address order, as nft lists an interval set. */
function elementKey(element: string): bigint {
  const address = element.split(/[/ ]/)[0] ?? '';
  return parseAddress(address).addr;
}

function printListing(table: FakeTable): string {
  const lines = [table.header];
  if (table.comment !== undefined) lines.push(`\tcomment "${table.comment}"`);
  for (const counter of table.counters)
    lines.push(`\tcounter ${counter.name} {`, `\t\t${counter.counts}`, '\t}');
  for (const set of table.sets) {
    lines.push(`\tset ${set.name} {`, ...set.declaration);
    // Interface names (quoted) in text order, as nft lists them; addresses in address order.
    const sorted = [...set.elements].sort((a, b) => {
      if (a.startsWith('"') || b.startsWith('"')) return a < b ? -1 : a > b ? 1 : 0;
      const d = elementKey(a) - elementKey(b);
      return d < 0n ? -1 : d > 0n ? 1 : 0;
    });
    if (sorted.length > 0) lines.push(`\t\telements = { ${sorted.join(', ')} }`);
    lines.push('\t}');
  }
  for (const chain of table.chains) {
    lines.push(`\tchain ${chain.name} {`);
    if (chain.base) lines.push(chain.base);
    lines.push(...chain.rules.map((rule) => `\t\t${rule}`), '\t}');
  }
  lines.push('}');
  return lines.join('\n') + '\n';
}

/**
 * A fill as an nft script (what libnftables would be given), a set block per slice of its elements:
 * the fake's
 * fill.
 */
function renderSetFill(fill: SetFill): string {
  const lines: string[] = [];
  for (const { family, table, sets } of fill.tables) {
    lines.push(`table ${family} ${table} {`);
    for (const set of sets)
      for (let start = 0; start < set.elements.length; start += PRERENDER_SLICE)
        lines.push(
          ...setBlock(
            set,
            family,
            frozenElements(set.elements.slice(start, start + PRERENDER_SLICE)),
          ),
        );
    lines.push('}');
  }
  return lines.join('\n') + '\n';
}
