// Makes the kernel hold the config's tables, writing only when they differ (docs/writes.md, "When
// it writes"): trusts the namespace's generation id to skip a read-back only when our own commit
// provably moved it, reads our tables back otherwise, and changes them in place — element additions
// and deletions, rules only where they differ — so that no packet sees a mix (docs/design.md,
// "Writes on the wire"). A table is written whole only where it is created or no longer has our
// shape.
import type { Logger } from 'pino';
import { compile, remark, type CompileOptions } from '../compile.js';
import { managedFamilies } from '../cidr/index.js';
import type { Config } from '../config/types.js';
import {
  elementDiff,
  elementEdit,
  filledApart,
  markedRule,
  needsNewSets,
  renderKeyChangeApart,
  renderInPlace,
  renderUpgrade,
  setChange,
} from '../nftables/change.js';
import { prerenderElements, renderDelete, renderReplace, renderTable } from '../nftables/render.js';
import {
  type CommitStep,
  type CounterValue,
  type ElementEdit,
  type NamedSet,
  type SetFill,
  type Table,
  type TableFamily,
  NO_ELEMENTS,
} from '../nftables/types.js';
import { NftError } from '../kernel/addon.js';
import { errorText } from '../errors.js';
import type { TablesPort, OthersPort } from '../kernel/ports.js';
import type { AgentMetrics, WriteFallbackReason } from './metrics.js';
import { reportMismatch } from './fast-path.js';
import { CommitSteps } from './commit-steps.js';
import { ElementWriteAudit, type ElementAudit } from './element-audit.js';
import { OtherAgentWatch } from './other-agent.js';
import {
  compareStructure,
  listedSetNames,
  listingIs,
  listingIsApartFromTransient,
  transientDrift,
  type TransientObjects,
} from '../nftables/listing.js';
import { holds, olderRelease, readTables, type KernelTables } from './read-back.js';
import { auditTables, ruleFingerprints } from './netlink-audit.js';
import { KnownTables } from './known-tables.js';
import { nextGeneration, standInName, type WriteMark } from '../nftables/ownership.js';

export interface ConvergeDeps {
  readonly kernel: TablesPort & OthersPort;
  readonly compileOptions: CompileOptions;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  readonly otherAgent: OtherAgentWatch;
  /** This process's writer id, recorded in every write's mark (nftables/ownership.ts). */
  readonly writer: string;
  /**
   * How long no other tool's commit must have been heard before a large write is made unheard
   * (Converger.unheard; default UNHEARD_AFTER_QUIET_MS).
   */
  readonly unheardAfterQuietMs?: number;
}

/** What a sync did: wrote, found the kernel holding the config, or held back from another agent. */
export type Converged = 'wrote' | 'in-place' | 'held-back';

/**
 * What a write starts from: the tables read back (none when the kernel was known not to have
 * changed), this config compiled with the mark found, the generation id the change is worked out
 * from (undefined: not known exactly), whether our tables drifted, and whether the kernel was read
 * to hold exactly what this process last wrote.
 */
interface Seen {
  readonly found?: KernelTables;
  readonly asFound?: readonly Table[];
  readonly base: number | undefined;
  readonly drift: boolean;
  readonly keptLast: boolean;
}

/** Runs one phase of a sync and records how long it took, for the log line of a write. */
export type Timed = <T>(phase: string, work: () => Promise<T>) => Promise<T>;

/**
 * How one family's table is written: changed from what the kernel holds exactly (`exact`), refilled
 * in place (ours, same objects, content not known), moved to another set key in steps (`key`),
 * created, replaced whole (not of our shape any more: a repair), or made anew beside a stand-in
 * (`upgrade`: an older release's table, whose comment cannot change in place; README, "Reading `nft
 * list table ip ipmasq`").
 */
type Plan =
  | { readonly kind: 'exact'; readonly old: Table; readonly remake?: TransientObjects }
  | {
      readonly kind: 'refill' | 'key';
      readonly present: ReadonlySet<string>;
      readonly remake?: TransientObjects;
    }
  | { readonly kind: 'create' | 'replace' | 'upgrade' };

/** The sets of a table of ours, by name, but for the transient ones (which every table has). */
function setNames(table: Table): ReadonlySet<string> {
  return new Set(table.sets.filter((set) => !set.transient).map((set) => set.name));
}

/**
 * Lets the event loop run between the steps of a large write (each tens of ms at 100 000 CIDRs), so
 * that /healthz and /metrics are answered during it, not after (docs/hardening.md, round 3).
 */
const breathe = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Rounds of one sync at most: a write, a read-back of what another commit around it may have
 * changed (and its repair), and one more look. A namespace busier than that is looked at again by
 * the next sync, soon (the reconciler retries), and the agent is not ready meanwhile.
 */
export const CONVERGE_ROUNDS = 3;

/**
 * How long a libnftables read of our tables may take while nftables' notifications are heard: on a
 * node whose other tools commit all the time, libnftables starts its listing again at every commit
 * and a large table's never ends; past this, our tables are written whole instead (docs/writes.md,
 * "Beside a busy node"). A quiet read of 100 000 CIDRs takes ~1.5 s.
 */
export const BUSY_READ_MS = 5_000;

/**
 * Writes of this many elements or more are made with our commit monitor out of nftables' group
 * (Converger.unheard): at 100 000 the kernel's notifications of each element cost about as much as
 * the elements (docs/performance.md).
 */
const UNHEARD_FROM = 2_000;
/** ... once no other tool's commit has been heard for this long. */
const UNHEARD_AFTER_QUIET_MS = 10_000;
/** A script's elements, reckoned from its length: the shortest element, `1.0.0.0/8, `, is 11. */
const SCRIPT_BYTES_PER_ELEMENT = 11;

/** Why the kernel refused a write, by the errno its message names: a label of the fallbacks. */
export function refusalReason(err: NftError): WriteFallbackReason {
  const message = err.nftMessage;
  if (/Device or resource busy/.test(message)) return 'EBUSY';
  if (/No such file or directory|does not exist/.test(message)) return 'ENOENT';
  if (/File exists/.test(message)) return 'EEXIST';
  if (/Invalid argument/.test(message)) return 'EINVAL';
  return 'other';
}

/** What the commit watch tells the converger of nf_tables' notifications. */
export interface HeardCommits {
  /** How to drain the notifications now (commit-watch.ts hearNow); false while none can be heard. */
  hearBy(drain: () => boolean): void;
  /** A commit heard to name one of our tables, ours or another's. */
  ours(genId: number): void;
  /** Another tool's commit, heard, that named none of our tables. */
  elsewhere(genId: number): void;
}

export class Converger {
  private readonly deps: ConvergeDeps;
  /** The generation id's steps it can explain: its own, and others' heard (commit-steps.ts). */
  private readonly commits = new CommitSteps();
  /** The audit of the last element-only write, and of sets filled over netlink. */
  private readonly audit: ElementWriteAudit;
  /**
   * What nf_tables' notifications tell it (commit-watch.ts): reads and writes are judged by the
   * notifications `drain` reads (docs/writes.md, "Beside a busy node").
   */
  readonly heard: HeardCommits = {
    hearBy: (drain) => this.commits.hearBy(drain),
    ours: (genId) => this.commits.noteOurs(genId),
    elsewhere: (genId) => this.commits.noteElsewhere(genId, this.known.at),
  };
  /** Generation of our last write, or of the table adopted at start; 0 before either. */
  generation = 0;
  /** How the last write went: an element-only batch over netlink, or libnftables scripts. */
  lastWrite: 'netlink' | 'libnftables' | undefined;
  /**
   * What the kernel is known to hold of our tables (known-tables.ts): the tables last written or
   * found in place, their content key, the generation id they were last known at (read back then,
   * or our write's own commit with no other commit around it), each chain's rules then.
   */
  private readonly known = new KnownTables();
  /** Families whose table this process has written: ours even if its comment was changed. */
  private readonly written = new Set<TableFamily>();
  /** The last audit found our own write wrong: its repair is not another's drift. */
  private ownFault = false;
  /**
   * An in-place write of ours was refused with no other commit in its way: our bug, so the next
   * write replaces our whole tables in one transaction, which no order of parts can fail
   * (docs/writes.md, "When a write fails"). Cleared by the next write that succeeds.
   */
  private replaceNext = false;
  /**
   * Whether the next read looks for stand-ins too: at the first read, and after a write failed (an
   * upgrade interrupted between its steps leaves one).
   */
  private lookForStandIns = true;
  /** Whether the mark's unreadability was warned about (once per process). */
  private warnedUnreadable = false;

  constructor(deps: ConvergeDeps) {
    this.deps = deps;
    this.audit = new ElementWriteAudit({
      kernel: deps.kernel,
      metrics: deps.metrics,
      explained: (from, to) => this.commits.explained(from, to),
    });
  }

  /**
   * Identifies the desired content without rendering it: the tables are a pure function of the
   * config's hash (which covers exactly what compile reads) and the compile options.
   */
  private contentKey(config: Config): string {
    return `${config.hash} ${JSON.stringify(this.deps.compileOptions)}`;
  }

  /** A restart continues the count from the generation our table carries. */
  private adoptGeneration(found: number | undefined): void {
    if (found !== undefined && found > this.generation) this.generation = found;
  }

  /** Whether the kernel is known to hold our last tables at generation id `genId`. */
  private knownAt(genId: number | undefined): boolean {
    const since = this.known.since;
    return genId !== undefined && since !== undefined && this.commits.pastOwn(since) === genId;
  }

  /** Whether the kernel was known to hold our tables when last looked at (false after a doubt). */
  get verified(): boolean {
    return this.known.at !== undefined;
  }

  /** Whether the namespace's generation id is where we last knew the kernel held our tables. */
  async unchangedSinceVerified(): Promise<boolean> {
    const since = this.known.since;
    if (since === undefined) return false;
    // Our own commits and others' that named none of our tables leave them as we knew them.
    const genId = await this.deps.kernel.generationId().catch(() => undefined);
    return this.commits.explained(since, genId);
  }

  /**
   * Whether a write of about `elements` elements is made unheard (kernel/addon.ts, committed):
   * a large one, while no other tool has committed for a while. Another tool's commit during it
   * goes unheard, so its step is never explained: what it did to our tables is read back, as after
   * any commit not heard (docs/writes.md, "When it writes").
   */
  private unheard(elements: number): boolean {
    return (
      elements >= UNHEARD_FROM &&
      this.commits.hear() &&
      this.commits.quietMs() >= (this.deps.unheardAfterQuietMs ?? UNHEARD_AFTER_QUIET_MS)
    );
  }

  /**
   * Whether `genId` is reached from where the kernel was known to hold our tables by steps that
   * left them alone.
   */
  private reachedElsewhere(genId: number | undefined): boolean {
    const since = this.known.since;
    if (genId === undefined || since === undefined) return false;
    return this.commits.leftAlone(since, genId);
  }

  /**
   * For a readiness probe: whether nothing but our own held replies and other tools' commits that
   * named none of our tables came since the kernel was last known to hold our tables.
   */
  async unchangedForProbe(): Promise<boolean> {
    if (this.known.at === undefined) return false;
    return this.reachedElsewhere(await this.deps.kernel.generationId().catch(() => undefined));
  }

  /**
   * Makes the kernel hold `config`'s tables and knows that it does: after its own write, a
   * generation step other than its own commits' means another tool committed around it, and the
   * tables are read back and repaired in this same sync (docs/writes.md, "When it writes"). Rejects
   * when the kernel cannot be read or written.
   */
  async converge(config: Config, timed: Timed, audit = true): Promise<Converged> {
    const key = this.contentKey(config);
    let wrote = false;
    for (let round = 1; ; round++) {
      const last = round >= CONVERGE_ROUNDS;
      const genId = await this.deps.kernel.generationId().catch(() => undefined);
      // An audit (a periodic resync, a commit that named our tables) reads back whenever the
      // generation moved; any other sync trusts what the notifications said of the steps since.
      const known =
        this.knownAt(genId) ||
        (!audit &&
          this.known.since !== undefined &&
          (await this.commits.explained(this.known.since, genId)));
      if (known && this.known.key === key) return wrote ? 'wrote' : 'in-place';
      // An audit while the notifications say nobody else touched our tables: over netlink,
      // object by object (a libnftables listing beside a busy writer may never end).
      if (!known && audit && this.known.key === key && (await this.heardUntouched(genId))) {
        const { verdict, at } = await timed('readMs', () => this.auditByNetlink(genId));
        if (verdict === 'agrees') return wrote ? 'wrote' : 'in-place';
        if (verdict === 'differs') {
          // Written whole from what the audit ended at: no listing needed, none trusted.
          this.replaceNext = true;
          const seen: Seen = { base: at, drift: true, keptLast: false };
          const written = await this.write(config, key, seen, false, last, timed);
          wrote ||= written !== 'refused';
          if (written === 'wrote') return 'wrote';
          continue;
        }
      }
      let seen: Seen = { base: known ? genId : undefined, drift: false, keptLast: false };
      if (!known) {
        const read = await this.readBack(config, key, genId, last, timed);
        if (read === 'held-back') return read;
        if (read === 'in-place') return wrote ? 'wrote' : 'in-place';
        if (read === 'again') continue;
        seen = read;
      }
      const written = await this.write(config, key, seen, known, last, timed);
      if (written === 'refused') continue;
      wrote = true;
      if (written === 'wrote') return 'wrote';
      // Another tool committed around our write: read back now and repair what it changed.
    }
  }

  /**
   * Whether notifications are heard and say that only our own commits and others' that named none
   * of our tables came since the kernel was last known to hold them.
   */
  private async heardUntouched(genId: number | undefined): Promise<boolean> {
    const since = this.known.since;
    if (since === undefined || !this.commits.hear()) return false;
    return this.commits.explained(since, genId);
  }

  /**
   * The periodic audit over netlink (netlink-audit.ts) of the tables this process last wrote:
   * `agrees`, and known at the generation id it ended at; `differs`, logged as a mismatch of the
   * notifications and counted; `moved`, a commit came during it that the notifications do not
   * explain (the libnftables read follows).
   */
  private async auditByNetlink(
    genId: number | undefined,
  ): Promise<{ verdict: 'agrees' | 'differs' | 'moved'; at: number | undefined }> {
    const { kernel, logger, metrics } = this.deps;
    metrics.incKernelReads();
    const tables = [...this.known.tables.values()];
    // An object it cannot read (a set gone) is a difference too: the tables are written whole.
    const differences = await auditTables(kernel, tables, this.known.rules).catch(
      (err: unknown) => [`the audit could not read them: ${errorText(err)}`],
    );
    const at = await kernel.generationId().catch(() => undefined);
    if (!(await this.commits.explained(genId, at))) return { verdict: 'moved', at };
    if (differences.length === 0) {
      this.known.confirm(at);
      return { verdict: 'agrees', at };
    }
    this.known.doubt();
    reportMismatch(logger, metrics, 'commit-notifications', {
      generation: this.generation,
      difference: `the notifications heard since generation id ${genId} named no table of ours, yet over netlink: ${differences.slice(0, 3).join('; ')}`,
    });
    return { verdict: 'differs', at };
  }

  /** Each chain's rules as they are now, kept when nobody but us committed since `genId`. */
  private async takeRules(tables: readonly Table[], genId: number | undefined): Promise<void> {
    this.known.takeRules(undefined);
    try {
      const rules = await ruleFingerprints(this.deps.kernel, tables);
      const at = await this.deps.kernel.generationId().catch(() => undefined);
      if (await this.commits.explained(genId, at)) this.known.takeRules(rules);
    } catch {
      // Not taken: the netlink audit compares the rules' comments alone.
    }
  }

  /**
   * The kernel's tables read back at `genId` and judged against `config`: in place (nothing to
   * write), held back from another live agent's write, to be read again (a commit came during the
   * read), or what a write starts from.
   */
  private async readBack(
    config: Config,
    key: string,
    genId: number | undefined,
    last: boolean,
    timed: Timed,
  ): Promise<Seen | 'in-place' | 'held-back' | 'again'> {
    const { kernel, compileOptions, logger, metrics, otherAgent } = this.deps;
    const read = await this.readFound(timed);
    if ('unread' in read) return read.unread;
    const { found } = read;
    // What was listed is the kernel at genId only if nothing but our own held replies was
    // committed while it was read.
    // Or nothing but others' commits that named none of our tables (docs/writes.md, "Beside a
    // busy node"): our tables were the same at every step, so the listing is theirs at readAt.
    const readAt = await kernel.generationId().catch(() => undefined);
    const stable = await this.commits.explained(genId, readAt);
    const owner = found.ip?.kind === 'ours' ? found.ip : undefined;
    const mark = owner?.mark;
    if (owner?.unreadableMark && !this.warnedUnreadable) {
      this.warnedUnreadable = true;
      logger.warn(
        { generation: this.generation },
        "the mark on our table does not parse (a generation past 15 digits?): the count goes on from this process's own (from 1 at its start)",
      );
    }
    this.adoptGeneration(mark?.generation);
    // What we would write with the mark found: a table of this config from another process of
    // ours (the last run's, before a restart) is in place too.
    await breathe();
    const asFound = compile(config, compileOptions, this.generation, mark?.writer);
    await breathe();
    // An older release's table holding what we would write is made anew all the same, once:
    // its comment shows a mark that is no longer current (README, "Reading `nft list table ip
    // ipmasq`").
    const same = holds(found, asFound);
    const inPlace = same && !olderRelease(found);
    // Not what we would write: drift, or another live agent's write, which we hold back from
    // for a while rather than fight (other-agent.ts). Read again at every resync meanwhile.
    const verdict = same ? undefined : mark ? otherAgent.judge(mark) : 'drift';
    if (verdict === 'hold') {
      this.known.doubt();
      return 'held-back';
    }
    if (inPlace) return this.foundInPlace(asFound, mark, key, { stable, readAt, last });
    // A commit came during the read: what was listed may be gone already.
    if (!stable && !last) return 'again';
    const base = stable ? readAt : undefined;
    // Drift: the kernel no longer holds the config we wrote, changed by anyone but another
    // live agent: by hand, by a commit around our own write, or by a restore of a saved table.
    // Or a change of ours refused because another commit came first: drift when that commit
    // left our tables other than we last wrote them (compared only then: it renders them).
    const changedUnder = () =>
      this.known.tables.size > 0 && !holds(found, [...this.known.tables.values()]);
    const drift =
      verdict === 'drift' && !this.ownFault && (this.known.key === key || changedUnder());
    // The notifications said only others' tables changed, and ours did: a readiness probe
    // trusted them meanwhile. Not the drift's repair, which follows as ever: counted and
    // logged.
    if (drift && this.reachedElsewhere(readAt))
      reportMismatch(logger, metrics, 'commit-notifications', {
        generation: this.generation,
        difference: `the notifications heard since generation id ${this.known.at} named no table of ours, yet ours changed by ${readAt}`,
      });
    // Another tool committed, elsewhere: the kernel still holds exactly what this process last
    // wrote, as read at `base`. The change is worked out from that, as when nothing was
    // committed: an element-only change stays one (libnftables' element commands would download
    // every plain interval set in the namespace first, docs/writes.md "The everyday edit").
    const keptLast = base !== undefined && !drift && (await this.holdsLast(found));
    return { found, asFound, base, drift, keptLast };
  }

  /**
   * Our tables as the kernel holds them; or, when other tools' steady commits kept the listing from
   * ending while notifications are heard, what a whole write of tables this process wrote starts
   * from, without reading them.
   */
  private async readFound(timed: Timed): Promise<{ found: KernelTables } | { unread: Seen }> {
    const { kernel, compileOptions, logger, metrics } = this.deps;
    const hearing = this.commits.hear();
    try {
      const found = await timed('readMs', () =>
        readTables(
          kernel,
          compileOptions,
          this.written,
          () => metrics.incKernelReads(),
          this.lookForStandIns,
          hearing ? BUSY_READ_MS : undefined,
        ),
      );
      return { found };
    } catch (err) {
      const ours = managedFamilies(compileOptions.enableIPv6).every((f) =>
        this.written.has(f.table),
      );
      if (!(hearing && ours && err instanceof NftError && err.kind === 'timeout')) throw err;
      logger.warn(
        { readMs: BUSY_READ_MS },
        "our tables could not be read back: other tools' commits kept libnftables' listing from ending; writing them whole instead",
      );
      this.replaceNext = true;
      // Written whole whatever they hold: the write is judged from the generation id now.
      const now = await kernel.generationId().catch(() => undefined);
      return { unread: { base: now, drift: false, keptLast: false } };
    }
  }

  /**
   * The kernel holds what we would write (`asFound`, with the mark found): nothing to write. Known
   * to hold it from `readAt` on when nothing but explained commits came during the read; else read
   * again, but on the last round.
   */
  private async foundInPlace(
    asFound: readonly Table[],
    mark: WriteMark | undefined,
    key: string,
    read: { stable: boolean; readAt: number | undefined; last: boolean },
  ): Promise<'in-place' | 'again'> {
    const { metrics, otherAgent } = this.deps;
    const { stable, readAt, last } = read;
    if (mark) otherAgent.inPlace(mark);
    this.lookForStandIns = false;
    // While a conflict is open, always read: that our write stayed is how it ends.
    this.known.hold(asFound, key, stable && !otherAgent.active ? readAt : undefined);
    if (this.known.at !== undefined && this.known.rules === undefined)
      await this.takeRules(asFound, readAt);
    metrics.setGeneration(this.generation);
    return stable || last ? 'in-place' : 'again'; // a commit came during the read: look again
  }

  /**
   * One write of `config`'s tables from what was `seen`: `wrote`, known to hold; `around`, another
   * tool committed around it (read back and repaired next); `refused`, a change worked out from
   * what the kernel was known to hold was refused, since someone changed our table under it.
   */
  private async write(
    config: Config,
    key: string,
    seen: Seen,
    known: boolean,
    last: boolean,
    timed: Timed,
  ): Promise<'wrote' | 'around' | 'refused'> {
    const { compileOptions, logger, metrics, otherAgent, writer } = this.deps;
    const { found, asFound, base, drift, keptLast } = seen;
    const generation = nextGeneration(this.generation);
    if (generation < this.generation) {
      logger.warn(
        { generation, past: this.generation },
        'the generation reached its bound (15 digits): counting restarts at 1',
      );
    }
    await breathe();
    // Compiled once per round: the tables compared with the kernel, marked for this write.
    const tables = asFound
      ? remark(asFound, compileOptions, generation, config.hash, writer)
      : compile(config, compileOptions, generation, writer);
    if (drift)
      logger.warn({ generation }, 'our tables in the kernel drifted from the config; repairing');
    // From what the kernel is known to hold, an element-only change goes over netlink, pinned to
    // the generation it was worked out at; anything else through libnftables.
    const replacing = this.replaceNext;
    // Pinned to `base` (the kernel refuses it if anyone committed since) only while nothing can
    // be heard: with the notifications, another commit in between is judged by what it named.
    const pin = this.commits.hear() ? undefined : base;
    const edit =
      !replacing && (found === undefined || keptLast) ? this.elementEdit(tables, pin) : undefined;
    const steps = edit ? [] : await this.steps(tables, found, asFound);
    this.lastWrite = edit ? 'netlink' : 'libnftables';
    let chain: number | undefined;
    try {
      chain = await timed('applyMs', () => this.commit(edit, steps, base));
    } catch (err) {
      return this.refused(err, { base, replacing, known: known || keptLast, last });
    }
    this.replaceNext = false;
    this.ownFault = false;
    this.lookForStandIns = false;
    if (drift) metrics.incDriftRepairs();
    for (const table of tables) this.written.add(table.family);
    otherAgent.wrote({ generation, hash: config.hash, writer });
    this.generation = generation;
    metrics.setGeneration(generation);
    // While another agent writes our table, read back at every resync: that our write stayed is
    // how the conflict ends.
    this.known.hold(tables, key, otherAgent.active ? undefined : chain);
    // An element-only write, or sets filled over netlink, audited by the whole compare.
    const audited = edit ?? fillAudit(steps, tables);
    this.audit.expect(audited, chain);
    // An element-only write leaves every rule but the marked one's comment as it was.
    if (chain !== undefined && (!edit || this.known.rules === undefined))
      await this.takeRules(tables, chain);
    return chain !== undefined || otherAgent.active || last ? 'wrote' : 'around';
  }

  /**
   * The write's commits, in order: the generation id after the last when each followed on from
   * `base` one step (our held replies aside), else undefined: another tool's commit came between,
   * which may have changed what we wrote.
   */
  private async commit(
    edit: ElementEdit | undefined,
    steps: readonly WriteStep[],
    base: number | undefined,
  ): Promise<number | undefined> {
    const { kernel } = this.deps;
    const commits: Array<() => Promise<CommitStep>> = edit
      ? [() => kernel.edit(edit, { unheard: this.unheard(this.editSize(edit)) })]
      : steps.map((step) =>
          'fill' in step
            ? () => kernel.fill(step.fill, { unheard: this.unheard(fillSize(step.fill)) })
            : () =>
                kernel.apply(step.script, {
                  unheard: this.unheard(step.script.length / SCRIPT_BYTES_PER_ELEMENT),
                }),
        );
    let chain = base;
    for (const step of commits) {
      const { before, after } = await step();
      // One step alone is ours; with others' commits around it (a busy node), ours is the
      // one that named our tables, the rest named none.
      const alone = before !== undefined && after === (before + 1) >>> 0;
      const follows =
        before !== undefined &&
        after !== undefined &&
        (await this.commits.explained(chain, before)) &&
        (alone || (await this.commits.heardOursAmong(before, after)));
      chain = follows ? after : undefined;
      if (!alone) this.commits.heardAround();
    }
    return chain;
  }

  /**
   * A write that failed: `refused` when the kernel refused a change and the round goes on (read
   * back and written again; whole, when the fault was ours); thrown otherwise — a failure of another
   * kind, or a refusal of the last round or of a whole replace (the next write is then whole).
   */
  private async refused(
    err: unknown,
    write: {
      base: number | undefined;
      replacing: boolean;
      /** The change was worked out from what the kernel was known to hold. */
      known: boolean;
      last: boolean;
    },
  ): Promise<'refused'> {
    const { kernel, logger, metrics } = this.deps;
    const { base, replacing, known, last } = write;
    this.known.doubt();
    this.lookForStandIns = true;
    if (!(err instanceof NftError) || err.kind !== 'error') throw err;
    // Refused by the kernel. With no other commit since what the change was worked out from,
    // the fault is ours (an order of parts the kernel cannot take): not drift, a fallback.
    // (Others' commits that named none of our tables, heard, change nothing of ours.)
    const now = await kernel.generationId().catch(() => undefined);
    const othersCommitted = !(await this.commits.explained(base, now));
    if (!replacing && !othersCommitted) {
      const reason = refusalReason(err);
      metrics.incWriteFallback(reason);
      logger.error(
        { err: errorText(err), reason },
        'our in-place write was refused though nobody else committed (a bug of the agent: please report it); replacing our tables whole in one transaction',
      );
      this.replaceNext = true;
      return 'refused';
    }
    // A change worked out from what the kernel was known to hold, refused ("element does not
    // exist"): someone changed our table under it. Read it back and repair it now; should the
    // repair be refused too, the write after it replaces our tables whole.
    if (known && !last && !replacing) {
      logger.warn(
        { err: errorText(err) },
        'our change was refused: our table changed under it; reading it back to repair it',
      );
      return 'refused';
    }
    if (!replacing) this.replaceNext = true;
    throw err;
  }

  /**
   * Whether the tables read back are exactly those this process last wrote (large sets rendered a
   * slice at a time).
   */
  private async holdsLast(found: KernelTables): Promise<boolean> {
    if (this.known.tables.size === 0) return false;
    const last: Table[] = [];
    for (const table of this.known.tables.values()) {
      const sets: NamedSet[] = [];
      for (const set of table.sets) sets.push(await prerenderElements(set, table.family, breathe));
      last.push({ ...table, sets });
    }
    return holds(found, last);
  }

  /** Whether an element-only write waits for its audit. */
  get auditDue(): boolean {
    return this.audit.due;
  }

  /**
   * The audit of the last element-only write (element-audit.ts). A difference, or a read that
   * failed, makes the next converge read back rather than trust the write, and a difference is our
   * own fault: its repair is not another's drift.
   */
  async auditElementWrite(): Promise<{ verdict: ElementAudit; differences: string[] }> {
    try {
      const result = await this.audit.run();
      if (result.verdict === 'differs') {
        this.known.doubt();
        this.ownFault = true;
      }
      return result;
    } catch (err) {
      this.known.doubt();
      throw err;
    }
  }

  /**
   * Another commit of ours besides the writes (the conntrack flush's held replies), which leaves
   * the tables' content as it was: the kernel is still known to hold the tables past it.
   */
  noteCommit(step: CommitStep): void {
    this.commits.noteOwn(step);
  }

  /**
   * The change from the tables last written, when it only adds and deletes elements of
   * address sets (concatenated or plain interval) and moves the mark (nftables/change.ts,
   * elementEdit); else undefined.
   */
  private elementEdit(tables: readonly Table[], generation: number | undefined) {
    if (tables.length !== this.known.tables.size) return undefined;
    const edits = [];
    for (const table of tables) {
      const old = this.known.tables.get(table.family);
      const edit = old && elementEdit(table, old);
      if (!edit) return undefined;
      edits.push(edit);
    }
    const edit: ElementEdit = {
      tables: edits,
      ...(generation !== undefined ? { generation } : {}),
    };
    return edit;
  }

  /** The elements an element-only write adds and deletes, a refilled set's old ones among them. */
  private editSize(edit: ElementEdit): number {
    let count = 0;
    for (const table of edit.tables) {
      const last = this.known.tables.get(table.family);
      for (const { set, added, removed, refill } of table.sets) {
        const flushed = refill
          ? (last?.sets.find((s) => s.name === set.name)?.elements.length ?? 0)
          : 0;
        count += added.length + removed.length + flushed;
      }
    }
    return count;
  }

  /**
   * How each family's table is written, from what the kernel was found to hold (or is known to).
   */
  private plan(table: Table, found: KernelTables | undefined, asFound?: Table): Plan {
    if (this.replaceNext) return { kind: 'replace' };
    const last = this.known.tables.get(table.family);
    // New sets where the key changes, or where the change is cheaper made that way
    // (nftables/change.ts).
    const fromLast = (old: Table): Plan =>
      old.sets.every((set) => {
        const next = table.sets.find((s) => s.name === set.name);
        return next === undefined || next.key.expression === set.key.expression;
      }) && !needsNewSets(table, old)
        ? { kind: 'exact', old }
        : { kind: 'key', present: setNames(old) };
    if (!found) return last ? fromLast(last) : { kind: 'create' };
    const listing = found.listings.get(table.family) ?? null;
    if (listing === null) return { kind: 'create' };
    const owner = found.owners.get(table.family);
    if (owner?.kind === 'ours' && owner.olderRelease) {
      // Another's table under the stand-in's name is never touched: replaced whole instead, once.
      return found.standIns.get(table.family) === 'foreign'
        ? { kind: 'replace' }
        : { kind: 'upgrade' };
    }
    if (last && listingIs(listing, last)) return fromLast(last);
    if (found.owners.get(table.family)?.kind !== 'ours') return { kind: 'replace' };
    // Where only the transient objects differ (an older release's), only they are made anew.
    const remake = transientDrift(listing, table);
    if (asFound && listingIsApartFromTransient(listing, asFound))
      return { kind: 'exact', old: asFound, ...(remake ? { remake } : {}) };
    const structure = compareStructure(listing, table);
    const present = listedSetNames(listing);
    const withRemake = remake ? { remake } : {};
    if (structure === 'same')
      return needsNewSets(table, undefined, present)
        ? { kind: 'key', present, ...withRemake }
        : { kind: 'refill', present, ...withRemake };
    return structure === 'key' ? { kind: 'key', present, ...withRemake } : { kind: 'replace' };
  }

  /**
   * The counts of our table's counters, for a write that makes it whole again
   * (docs/observability.md, "What the node's NAT does": the decisions' counters never go back while
   * the table lives). Read right before the write; what is counted between the read and the commit
   * is lost. None from a table not ours (one not read back is ours when this process wrote it).
   */
  private async counts(table: Table, found: KernelTables | undefined): Promise<CounterValue[]> {
    // Not read back: the table is the one this process wrote (a fallback's replace).
    const ours = found
      ? found.owners.get(table.family)?.kind === 'ours'
      : this.written.has(table.family);
    if (!ours) return [];
    return this.deps.kernel.counters(table).catch(() => []);
  }

  /**
   * The transactions of one write, in order: the last one carries the write's mark. A change made
   * on new sets fills its large ones apart, over netlink, each right after the transaction that
   * makes it empty and before any rule refers to it (filledApart).
   */
  private async steps(
    tables: readonly Table[],
    found: KernelTables | undefined,
    asFound?: readonly Table[],
  ): Promise<WriteStep[]> {
    const before: WriteStep[][] = [];
    let last = '';
    const upgraded = new Set<TableFamily>();
    for (const compiled of tables) {
      await breathe();
      const plan = this.plan(
        compiled,
        found,
        asFound?.find((t) => t.family === compiled.family),
      );
      await breathe();
      const table = await prerendered(compiled, plan);
      // Earlier transactions of each family's change go together, step by step; the last steps
      // of all go in the final one, with the mark.
      const staged = (steps: ReadonlyArray<string | WriteStep>) => {
        steps.slice(0, -1).forEach((step, i) => {
          before[i] = [...(before[i] ?? []), typeof step === 'string' ? { script: step } : step];
        });
        // The last step is always a script: the one with the mark.
        const final = steps.at(-1);
        if (final !== undefined) last += typeof final === 'string' ? final : scriptOf(final);
      };
      switch (plan.kind) {
        case 'exact':
          staged(renderInPlace(table, plan.old, undefined, plan.remake));
          break;
        case 'refill':
          staged(renderInPlace(table, undefined, plan.present, plan.remake));
          break;
        case 'key':
          staged(keyChangeSteps(table, plan.present, plan.remake));
          break;
        case 'create':
          last += renderTable(table);
          break;
        case 'replace':
          last += renderReplace(
            [table],
            [],
            new Map([[table.family, await this.counts(table, found)]]),
          );
          break;
        case 'upgrade':
          this.deps.logger.info(
            { table: `${table.family} ${table.name}` },
            'our table was written by an older release: made anew beside a stand-in, once',
          );
          staged(
            renderUpgrade(
              table,
              found?.standIns.get(table.family) === 'ours',
              await this.counts(table, found),
            ),
          );
          upgraded.add(table.family);
          break;
      }
    }
    if (found) {
      // Stand-ins an interrupted upgrade left behind; an upgrade deletes its own.
      const standIns = [...found.standIns]
        .filter(([family, whose]) => whose === 'ours' && !upgraded.has(family))
        .map(([family]) => ({ family, name: standInName(this.deps.compileOptions.table) }));
      last += renderDelete([...found.stale, ...standIns]);
    }
    return [...before.flatMap(mergeStep), { script: last }];
  }
}

/**
 * The write's own copy of a table, what it renders of large sets — whole sets, or a delta's
 * additions — rendered ahead, a slice at a time; sets filled apart are not rendered.
 */
async function prerendered(compiled: Table, plan: Plan): Promise<Table> {
  const sets: NamedSet[] = [];
  for (const set of compiled.sets) {
    if (plan.kind === 'key' && filledApart(set)) {
      sets.push(set);
      continue;
    }
    const before =
      plan.kind === 'exact' ? plan.old.sets.find((s) => s.name === set.name) : undefined;
    const delta = before !== undefined && setChange(set, before) === 'delta';
    const elements = delta ? elementDiff(before.elements, set.elements).added : set.elements;
    sets.push(await prerenderElements(set, compiled.family, breathe, elements));
  }
  return { ...compiled, sets };
}

/** One commit of a libnftables write: a script, or sets filled apart over netlink (SetFill). */
type WriteStep = { readonly script: string } | { readonly fill: SetFill };

/**
 * The families' parts of one step: their scripts as one transaction, then their fills as another
 * (a family's fill never shares a step with its own script: keyChangeSteps).
 */
function mergeStep(parts: readonly WriteStep[]): WriteStep[] {
  const scripts = parts.flatMap((part) => ('script' in part ? [part.script] : []));
  const fills = parts.flatMap((part) => ('fill' in part ? part.fill.tables : []));
  return [
    ...(scripts.length > 0 ? [{ script: scripts.join('') }] : []),
    ...(fills.length > 0 ? [{ fill: { tables: fills } }] : []),
  ];
}

/**
 * A change made on new sets: renderKeyChange's transactions with the large sets filled apart over
 * netlink (nftables/change.ts, renderKeyChangeApart).
 */
function keyChangeSteps(
  table: Table,
  present?: ReadonlySet<string>,
  remake?: TransientObjects,
): WriteStep[] {
  return renderKeyChangeApart(table, present, remake).map((step) =>
    typeof step === 'string' ? { script: step } : { fill: step },
  );
}

function scriptOf(step: WriteStep): string {
  if ('fill' in step) throw new Error('a write ends with a script, which carries its mark');
  return step.script;
}

/** The elements a fill writes. */
function fillSize(fill: SetFill): number {
  let count = 0;
  for (const table of fill.tables) for (const set of table.sets) count += set.elements.length;
  return count;
}

/**
 * What the element-write audit compares after a write that filled sets over netlink: each filled
 * set under its own name with every element the write meant, and the chain its mark is on.
 */
function fillAudit(steps: readonly WriteStep[], tables: readonly Table[]): ElementEdit | undefined {
  const audited: ElementEdit['tables'][number][] = [];
  for (const table of tables) {
    const filled = new Set(
      steps.flatMap((step) =>
        'fill' in step
          ? step.fill.tables
              .filter((t) => t.family === table.family)
              .flatMap((t) => t.sets.map((set) => set.name))
          : [],
      ),
    );
    const sets = table.sets.filter((set) => filled.has(set.name));
    const marked = markedRule(table);
    if (sets.length === 0 || !marked) continue;
    audited.push({
      family: table.family,
      table: table.name,
      sets: sets.map((set) => ({ set, removed: NO_ELEMENTS, added: NO_ELEMENTS })),
      chain: marked.chain,
      wasRule: marked.rule,
      rule: marked.rule,
      wasMark: marked.mark,
      mark: marked.mark,
    });
  }
  return audited.length > 0 ? { tables: audited } : undefined;
}
