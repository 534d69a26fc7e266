// One sync: read the config, converge the kernel on it, record the facts the status is derived
// from (status.ts), and log what an operator needs once. README, "What it does" and "When it
// writes".
import type { Logger } from 'pino';
import type { CompileOptions } from '../compile.js';
import { podPolicyName } from '../config/pods.js';
import { keyValue } from '../config/keys.js';
import type { Loader } from '../config/loader.js';
import {
  ELEMENT_AUDIT_DELAY_MS,
  ELEMENT_AUDIT_WITHIN_MS,
  ELEMENT_WRITE_AUDIT,
  FAST_PATH_MISMATCH,
  reportMismatch,
} from './fast-path.js';
import type { Config, LoadOptions } from '../config/types.js';
import { newWriterId } from '../nftables/ownership.js';
import { ConfigReader, type ClusterData } from './config-reader.js';
import type { NodeEvents } from '../kubernetes/events.js';
import { ConntrackFlush, type ConntrackFlushMode } from './conntrack.js';
import { Converger, type Converged, type HeardCommits, type Timed } from './converge.js';
import type { Kernel } from '../kernel/ports.js';
import { LegacyChain, type LegacyOptions } from '../other-nat/legacy.js';
import type { AgentMetrics } from './metrics.js';
import { describeKernelFailure, type KernelFailure } from './nft-failure.js';
import { OtherAgentWatch } from './other-agent.js';
import { OtherNatWatch, type LegacyNatReader } from '../other-nat/watch.js';
import { oursOrStandIn } from '../nftables/ownership.js';
import { SetSizes } from './set-sizes.js';
import type { SyncOutcome } from './runner.js';
import { agentStatus, initialFacts, type AgentStatus, type SyncFacts } from './status.js';
import { errorText } from '../errors.js';
import { BoundedDebounce } from '../debounce.js';

/** The syncs that read the config whole rather than from the last load. */
export const WHOLE_READS: ReadonlySet<string> = new Set([
  'start',
  'periodic',
  'SIGHUP',
  FAST_PATH_MISMATCH,
]);

export interface ReconcilerDeps {
  readonly configPath: string;
  readonly loadOptions: LoadOptions;
  readonly compileOptions: CompileOptions;
  readonly loadConfig: Loader;
  readonly kernel: Kernel;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  /**
   * What happens to existing flows whose decision a config change flips (the default is plan()'s).
   */
  readonly conntrackFlush: ConntrackFlushMode;
  /** How long a flipped flow with a query in flight keeps its entry (tests pass a short one). */
  readonly conntrackGraceMs?: number;
  /** The original agent's chain: warned about before the first sync, removed if asked. */
  readonly legacy: LegacyOptions;
  /** Effective set size above which other nftables users are measurably slowed. */
  readonly largeSetThreshold?: number;
  /** The clock for holding back from another agent (tests pass their own). */
  readonly now?: () => number;
  /** This process's writer id in every write's mark (default: made from the start time). */
  readonly writer?: string;
  /** --kubernetes: the Node's labels and the Nodes' pod CIDRs (src/kubernetes/cluster.ts). */
  readonly cluster?: ClusterData;
  /** --kubernetes: Events on this Node (src/kubernetes/events.ts). */
  readonly events?: NodeEvents;
  /** Which x_tables nat tables are loaded (tests pass their own; default: /proc/net). */
  readonly readLegacyNat?: LegacyNatReader;
  /** Asks the sync loop for a sync (the element-write audit's); without it none is asked. */
  readonly requestSync?: (reason: string) => void;
  /**
   * How long no other tool's commit must have been heard before a large write is made unheard
   * (ConvergeDeps; default 10 s).
   */
  readonly unheardAfterQuietMs?: number;
}

/** The config reader a reconciler's dependencies make. */
function configReaderOf(deps: ReconcilerDeps): ConfigReader {
  return new ConfigReader({
    configPath: deps.configPath,
    loadOptions: deps.loadOptions,
    load: deps.loadConfig,
    logger: deps.logger,
    metrics: deps.metrics,
    ...(deps.cluster ? { cluster: deps.cluster } : {}),
    ...(deps.events ? { events: deps.events } : {}),
  });
}

export class Reconciler {
  private readonly deps: ReconcilerDeps;
  private readonly config: ConfigReader;
  private readonly converger: Converger;
  private readonly otherAgent: OtherAgentWatch;
  private readonly legacy: LegacyChain;
  private readonly otherNat: OtherNatWatch;
  private readonly conntrack: ConntrackFlush;
  /** The config the kernel holds by our write or read-back; undefined while not known. */
  private inKernel: Config | undefined;
  private facts: SyncFacts = initialFacts;
  private readonly sizes: SetSizes;
  private lastLoggedFailure: string | undefined;

  constructor(deps: ReconcilerDeps) {
    this.deps = deps;
    const ask = deps.requestSync;
    this.auditing = ask
      ? new BoundedDebounce(
          () => void this.auditBeside(ask),
          ELEMENT_AUDIT_DELAY_MS,
          ELEMENT_AUDIT_WITHIN_MS,
        )
      : undefined;
    const { logger, metrics, kernel } = deps;
    const writer = deps.writer ?? newWriterId();
    this.config = configReaderOf(deps);
    this.otherAgent = new OtherAgentWatch({
      logger,
      metrics,
      now: deps.now ?? Date.now,
      intervalMs: () => this.resyncIntervalMs,
      writer,
      ...(deps.events ? { events: deps.events } : {}),
    });
    this.converger = new Converger({
      kernel,
      compileOptions: deps.compileOptions,
      logger,
      metrics,
      otherAgent: this.otherAgent,
      writer,
      ...(deps.unheardAfterQuietMs !== undefined
        ? { unheardAfterQuietMs: deps.unheardAfterQuietMs }
        : {}),
    });
    this.legacy = new LegacyChain({
      kernel,
      options: deps.legacy,
      logger,
      metrics,
      ...(deps.events ? { events: deps.events } : {}),
    });
    const table = deps.compileOptions.table;
    this.otherNat = new OtherNatWatch({
      kernel,
      logger,
      metrics,
      ...(deps.events ? { events: deps.events } : {}),
      ...(deps.readLegacyNat ? { readLegacyNat: deps.readLegacyNat } : {}),
      ours: oursOrStandIn(table),
      chainsSeen: (scan) => this.legacy.observe(scan.all),
      intervalMs: () => this.resyncIntervalMs,
      ...(deps.now ? { now: deps.now } : {}),
      // A print waits for the sync under way, if any: our write goes first.
      beforePrint: async () => {
        while (this.syncing) await this.syncing;
      },
    });
    this.sizes = new SetSizes({
      compileOptions: deps.compileOptions,
      logger,
      metrics,
      threshold: deps.largeSetThreshold,
    });
    this.conntrack = new ConntrackFlush({
      kernel,
      mode: deps.conntrackFlush,
      ...(deps.conntrackGraceMs !== undefined ? { graceMs: deps.conntrackGraceMs } : {}),
      enableIPv6: deps.compileOptions.enableIPv6,
      flags: deps.compileOptions,
      table: deps.compileOptions.table,
      logger,
      metrics,
      onCommit: (step) => this.converger.noteCommit(step),
    });
  }

  /**
   * A fast path's answer was found wrong: the next sync reads the config whole, whatever its
   * reason.
   */
  private wholeNext = false;

  /**
   * The next sync reads the config whole (after a fast path's mismatch: docs/writes.md, "The
   * everyday edit").
   */
  readWholeNext(): void {
    this.wholeNext = true;
  }

  /** Runs the element-write audit (undefined without requestSync: the next sync audits). */
  private readonly auditing: BoundedDebounce | undefined;
  /** Without requestSync (--once, tests): the next sync audits the last element-only write. */
  private auditAsked = false;
  /** An audit reading our tables back beside the syncs. */
  private auditRunning = false;

  /**
   * The element-write audit beside the syncs, not in one: its read of the sets the write changed
   * (over netlink, compared on a pool thread: tens of ms at 100 000 elements) must not hold back
   * the next edit's write, which runs meanwhile (the audit's calls are not queued behind our
   * writes). A write committed during the read makes it `moved`: that write is audited in turn. A
   * disagreement asks for a sync, which reads back and repairs (the converger no longer trusts the
   * kernel).
   */
  private async auditBeside(ask: (reason: string) => void): Promise<void> {
    // A write since this audit began is audited once this one ends (below).
    if (this.auditRunning) return;
    if (!this.converger.auditDue) return;
    this.auditRunning = true;
    try {
      await this.auditElementWrite();
      if (!this.converger.verified) ask(ELEMENT_WRITE_AUDIT);
    } finally {
      this.auditRunning = false;
    }
    // A newer write, or this one again when another commit was in the way (at most a few times).
    if (this.converger.auditDue) this.auditing?.ask();
  }

  /** The last element-only write read back and compared; a disagreement reported. */
  private async auditElementWrite(): Promise<void> {
    try {
      const { verdict, differences } = await this.converger.auditElementWrite();
      if (verdict === 'differs') {
        reportMismatch(this.deps.logger, this.deps.metrics, 'element-write', {
          generation: this.converger.generation,
          difference: differences.join('\n'),
        });
      }
    } catch (err) {
      // Not read: the next converge reads back anyway when it cannot trust the kernel.
      this.deps.logger.debug({ err: errorText(err) }, 'the element-write audit could not read');
    }
  }

  /**
   * Asks for the audit of the last element-only write ELEMENT_AUDIT_DELAY_MS after it, or after the
   * last of a burst, and never later than ELEMENT_AUDIT_WITHIN_MS after the first: it reads our
   * tables back, so a burst of edits is audited by its last write (each builds on the one before).
   */
  private scheduleAudit(): void {
    if (this.auditing) this.auditing.ask();
    else this.auditAsked = true; // audited by the next sync (--once, tests)
  }

  /**
   * The pod policies' names, in order, of the config last read valid (docs/egress-policy.md, "Pod
   * policies").
   */
  podPolicyNames(): string[] {
    return (this.config.good?.podPolicies ?? []).map(podPolicyName);
  }

  get resyncIntervalMs(): number {
    return keyValue(this.config.good?.keys ?? {}, 'resyncInterval');
  }

  /**
   * Resolves when the conntrack flushes of the writes so far have ended (they run beside the
   * syncs).
   */
  flushesSettled(): Promise<void> {
    return this.conntrack.settled();
  }

  /** Whether nothing was committed since the kernel was last known to hold our tables. */
  kernelUnchanged(): Promise<boolean> {
    return this.converger.unchangedSinceVerified();
  }

  /**
   * For readiness: as kernelUnchanged, other tools' commits heard to name none of our tables
   * aside (`heard.elsewhere`). Every sync still reads back after them.
   */
  kernelUnchangedForProbe(): Promise<boolean> {
    return this.converger.unchangedForProbe();
  }

  /** What nf_tables' notifications tell the converger (commit-watch.ts). */
  get heard(): HeardCommits {
    return this.converger.heard;
  }

  /** Whether the last sync found, or made, the kernel hold our tables, and knows it. */
  get kernelVerified(): boolean {
    return this.converger.verified;
  }

  status(alive: boolean): AgentStatus {
    return agentStatus(this.facts, alive);
  }

  private record(changes: Partial<SyncFacts>): void {
    this.facts = { ...this.facts, ...changes, lastSyncTime: new Date() };
  }

  /**
   * What the last look at other tables' nat chains reported (docs/observability.md, "Other NAT on
   * the node").
   */
  get otherNatFindings() {
    return this.otherNat.findings;
  }

  /**
   * One sync. `reason` is the runner's: at start, at a periodic resync, on SIGHUP and after a fast
   * path's mismatch the config is read whole (docs/writes.md, "The everyday edit").
   */
  async sync(reason = 'start'): Promise<SyncOutcome> {
    const once = this.syncOnce(reason);
    this.syncing = once.then(
      () => undefined,
      () => undefined,
    );
    try {
      return await once;
    } finally {
      this.syncing = undefined;
      // At start and at each resync (periodic or SIGHUP), once the write is made
      // (docs/observability.md, "Other NAT on the node"): who else translates. Beside the syncs,
      // never holding the next one back: libnftables may take seconds to print another table's
      // chains (it downloads that table's sets), and a config change must not wait for it.
      this.lookBeside(WHOLE_READS.has(reason) && reason !== FAST_PATH_MISMATCH);
    }
  }

  /** The sync under way, if any (settles, never rejects). */
  private syncing: Promise<void> | undefined;
  /**
   * The look at other NAT under way, and whether another was asked for meanwhile (and if `now`).
   */
  private looking: Promise<void> | undefined;
  private lookAsked: boolean | undefined;

  private lookBeside(now: boolean): void {
    if (this.looking) {
      this.lookAsked = (this.lookAsked ?? false) || now;
      return;
    }
    this.looking = (async () => {
      let asked: boolean | undefined = now;
      while (asked !== undefined) {
        this.lookAsked = undefined;
        await this.otherNat.lookIfDue(asked).catch(() => undefined);
        asked = this.lookAsked;
      }
    })().finally(() => (this.looking = undefined));
  }

  /**
   * Resolves when the look at other NAT under way, if any, has ended (tests, one-shot commands).
   */
  async lookSettled(): Promise<void> {
    while (this.looking) await this.looking;
  }

  private async syncOnce(reason: string): Promise<SyncOutcome> {
    const started = performance.now();
    const seconds = () => (performance.now() - started) / 1000;
    // Without a runner to ask (--once, tests): the last element-only write audited here, first.
    const audit = this.auditAsked && this.converger.auditDue;
    this.auditAsked = false;
    if (audit) await this.auditElementWrite();
    const phases: Record<string, number> = {};
    const timed: Timed = async (phase, work) => {
      const begun = performance.now();
      try {
        return await work();
      } finally {
        phases[phase] = Math.round(performance.now() - begun);
      }
    };
    const whole = WHOLE_READS.has(reason) || this.wholeNext;
    this.wholeNext = false;
    try {
      await timed('loadMs', () => this.config.read({ whole }));
    } catch (err) {
      return this.loadFailed(err, whole, seconds);
    }
    const config = this.config.good;
    this.facts = {
      ...this.facts,
      configError: this.config.error,
      waiting: this.config.waiting,
      configHash: config?.hash ?? null,
    };
    if (!config) {
      this.record({});
      this.deps.metrics.recordSync('unchanged', seconds());
      return { ok: true };
    }
    let converged: Converged;
    try {
      // A periodic resync (and start, SIGHUP, a mismatch) reads back whenever the generation
      // moved: the audit of what the notifications said. Any other sync, one for a commit heard to
      // name our tables too, reads back when a step since the last look is not explained by our
      // own commits and others' that named none of our tables.
      const audit = WHOLE_READS.has(reason);
      converged = await this.converger.converge(config, timed, audit);
    } catch (err) {
      return this.kernelFailed(err, seconds);
    }
    return this.converged(config, converged, phases, seconds);
  }

  /**
   * The loader itself failed (its worker died): not a verdict on the config; retried with backoff,
   * read whole when retried too.
   */
  private loadFailed(err: unknown, whole: boolean, seconds: () => number): SyncOutcome {
    this.wholeNext ||= whole;
    const lastError = `loading the config failed: ${errorText(err)}`;
    this.logFailure(lastError, () => this.deps.logger.error(`${lastError}; retrying with backoff`));
    this.record({ lastError });
    this.deps.metrics.recordSync('error', seconds());
    return { ok: false, error: err };
  }

  /**
   * What follows a converge: the status and the metrics, existing flows made to follow a change of
   * the decisions, the element write's audit scheduled, the write's log line, the original's chain.
   */
  private async converged(
    config: Config,
    converged: Converged,
    phases: Readonly<Record<string, number>>,
    seconds: () => number,
  ): Promise<SyncOutcome> {
    if (this.lastLoggedFailure !== undefined) this.deps.logger.info('kernel writes work again');
    this.lastLoggedFailure = undefined;
    const counts = converged === 'held-back' ? this.facts.counts : this.sizes.confirm(config);
    // Written, but other tools' commits came around every look at it: not known to be right yet.
    const unverified =
      converged !== 'held-back' && !this.converger.verified && !this.otherAgent.active;
    this.record({
      kernel: unverified ? 'unverified' : 'in-sync',
      kernelError: null,
      lastError: null,
      otherAgent: this.otherAgent.active,
      generation: this.converger.generation,
      counts,
    });
    const { metrics, logger } = this.deps;
    metrics.recordSync(converged === 'wrote' ? 'applied' : 'unchanged', seconds());
    metrics.setLastSuccess(this.facts.lastSyncTime ?? new Date());
    const before = this.inKernel;
    this.inKernel = converged === 'held-back' ? undefined : config;
    // The kernel's decisions changed, by our write or (rarely) by another commit that made it hold
    // this config already: existing flows follow.
    if (converged !== 'held-back' && before !== undefined && before.hash !== config.hash)
      this.conntrack.afterWrite(before, config, this.facts.generation);
    if (converged === 'wrote' && this.converger.auditDue) this.scheduleAudit();
    if (converged === 'wrote') {
      logger.info(
        {
          generation: this.facts.generation,
          nonMasqueradeCIDRs: counts,
          durationMs: Math.round(seconds() * 1000),
          ...phases,
          via: this.converger.lastWrite,
        },
        'ruleset written to the kernel',
      );
    }
    await this.legacy.afterSync(this.facts.generation > 0);
    if (unverified) {
      return {
        ok: false,
        error: new Error(
          'other nftables commits came around each look at our tables; looking again soon',
        ),
      };
    }
    return { ok: true };
  }

  private async kernelFailed(err: unknown, seconds: () => number): Promise<SyncOutcome> {
    const { kernel, compileOptions, metrics, logger } = this.deps;
    const failure: KernelFailure = await describeKernelFailure(err, kernel, compileOptions.table);
    if (failure.kind) metrics.incNftFailure(failure.kind);
    this.record({ kernel: 'failed', kernelError: failure.message, lastError: failure.message });
    metrics.recordSync('error', seconds());
    this.logFailure(failure.message, () => {
      this.deps.events?.('KernelWriteFailed', `kernel write failed: ${failure.message}`);
      logger.error(
        {
          kind: failure.kind,
          unreadableTables: failure.unreadable.map((ref) => `${ref.family} ${ref.name}`),
        },
        `kernel write failed: ${failure.message}`,
      );
    });
    return { ok: false, error: err };
  }

  /** One error line per distinct cause, not one per retry. */
  private logFailure(message: string, log: () => void): void {
    if (message === this.lastLoggedFailure) return;
    log();
    this.lastLoggedFailure = message;
  }
}
