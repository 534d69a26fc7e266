// One sync: read the config, compile the desired tables, compare with the kernel when it may have
// moved, and write the whole tables in one transaction when they differ. README, "What it does" and "When it writes".
import type { Logger } from 'pino';
import { compile, tableOwner, type CompileOptions, type TableOwner } from '../compile.js';
import type { Config, LoadOptions, LoadResult } from '../config/types.js';
import { normaliseListing, renderReplace, renderTable } from '../nftables/render.js';
import type { Family, TableRef } from '../nftables/types.js';
import type { AgentMetrics } from '../server/metrics.js';
import type { AgentStatus } from '../server/index.js';
import type { Kernel } from './kernel.js';
import { describeKernelFailure, type KernelFailure } from './nft-failure.js';
import { OtherAgentWatch } from './other-agent.js';
import type { SyncOutcome } from './runner.js';

export interface ReconcilerDeps {
  readonly configPath: string;
  readonly loadOptions: LoadOptions;
  readonly compileOptions: CompileOptions;
  readonly loadConfig: (path: string, options: LoadOptions) => Promise<LoadResult>;
  readonly kernel: Kernel;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  /** Effective set size above which other nftables users are measurably slowed. */
  readonly largeSetThreshold?: number;
  /** The clock for holding back from another agent (tests pass their own). */
  readonly now?: () => number;
}

const DEFAULT_RESYNC_MS = 60_000;

/**
 * Identifies the desired content without rendering it: the tables are a pure function of the
 * config's meaning (its hash) and the compile options, so equal keys mean equal rulesets.
 */
function contentKey(config: Config, options: CompileOptions): string {
  return `${config.hash} ${JSON.stringify(options)}`;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export class Reconciler {
  private readonly deps: ReconcilerDeps;
  private goodConfig: Config | undefined;
  private generation = 0;
  /** Content key of what we last wrote or found right in the kernel. */
  private kernelKey: string | undefined;
  /** Generation id of the namespace when the kernel was last known to hold kernelKey. */
  private kernelGenId: number | undefined;
  private readonly otherAgent: OtherAgentWatch;
  /** Families whose table this process has written: ours even if its comment was changed. */
  private readonly written = new Set<Family>();
  private largeSetWarned = false;
  private lastLoggedConfigError: string | undefined;
  private lastLoggedKernelError: string | undefined;
  private lastLoggedWarnings = '';
  private state = {
    lastWriteOk: true,
    lastSyncTime: null as Date | null,
    lastError: null as string | null,
    configError: null as string | null,
    ready: false,
    notReadyReason: 'no sync yet' as string | null,
    counts: { ipv4: 0, ipv6: 0 },
  };

  constructor(deps: ReconcilerDeps) {
    this.deps = deps;
    this.otherAgent = new OtherAgentWatch({
      logger: deps.logger,
      metrics: deps.metrics,
      now: deps.now ?? Date.now,
      intervalMs: () => this.resyncIntervalMs,
    });
  }

  get resyncIntervalMs(): number {
    return this.goodConfig?.resyncIntervalMs ?? DEFAULT_RESYNC_MS;
  }

  status(alive: boolean): AgentStatus {
    return {
      alive,
      lastWriteOk: this.state.lastWriteOk,
      generation: this.generation,
      configHash: this.goodConfig?.hash ?? null,
      lastSyncTime: this.state.lastSyncTime,
      lastError: this.state.lastError,
      configError: this.state.configError,
      nonMasqueradeCIDRs: { ...this.state.counts },
      ready: this.state.ready,
      notReadyReason: this.state.ready ? null : this.state.notReadyReason,
    };
  }

  /** Where the last sync spent its time, for the log line of a write. */
  private phases: Record<string, number> = {};

  private async timed<T>(phase: string, work: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await work();
    } finally {
      this.phases[phase] = Math.round(performance.now() - started);
    }
  }

  async sync(): Promise<SyncOutcome> {
    const started = process.hrtime.bigint();
    const seconds = () => Number(process.hrtime.bigint() - started) / 1e9;
    this.phases = {};
    let configValid: boolean;
    try {
      configValid = await this.timed('loadMs', () => this.readConfig());
    } catch (err) {
      // The loader itself failed (its worker died): not a verdict on the config; retried with backoff.
      this.state.lastError = `loading the config failed: ${errorText(err)}`;
      if (this.state.lastError !== this.lastLoggedKernelError) {
        this.deps.logger.error(`${this.state.lastError}; retrying with backoff`);
        this.lastLoggedKernelError = this.state.lastError;
      }
      this.state.lastSyncTime = new Date();
      this.deps.metrics.recordSync('error', seconds());
      return { ok: false, error: err };
    }
    const config = this.goodConfig;
    if (!config) {
      this.state.ready = false;
      this.state.notReadyReason = `config invalid, nothing applied: ${this.state.configError}`;
      this.state.lastSyncTime = new Date();
      this.deps.metrics.recordSync('unchanged', seconds());
      return { ok: true };
    }
    try {
      const wrote = await this.converge(config);
      this.logKernelFailure(undefined);
      this.state.lastWriteOk = true;
      this.state.lastError = null;
      this.state.lastSyncTime = new Date();
      this.state.ready = configValid && !this.otherAgent.active;
      this.state.notReadyReason = !configValid
        ? `config invalid, the kernel keeps the last good ruleset: ${this.state.configError}`
        : this.otherAgent.active
          ? 'another ipmasq-agent is writing our table with another config; holding back'
          : null;
      const elapsed = seconds();
      this.deps.metrics.recordSync(wrote ? 'applied' : 'unchanged', elapsed);
      this.deps.metrics.setLastSuccess(this.state.lastSyncTime);
      if (wrote) {
        this.deps.logger.info(
          {
            generation: this.generation,
            nonMasqueradeCIDRs: this.state.counts,
            durationMs: Math.round(elapsed * 1000),
            ...this.phases,
          },
          'ruleset written to the kernel',
        );
      }
      return { ok: true };
    } catch (err) {
      const failure = await describeKernelFailure(
        err,
        this.deps.kernel,
        this.deps.compileOptions.table,
      );
      if (failure.kind) this.deps.metrics.incNftFailure(failure.kind);
      this.state.lastWriteOk = false;
      this.state.lastError = failure.message;
      this.state.ready = false;
      this.state.notReadyReason = `kernel write failed: ${this.state.lastError}`;
      this.state.lastSyncTime = new Date();
      this.deps.metrics.recordSync('error', seconds());
      this.logKernelFailure(failure);
      return { ok: false, error: err };
    }
  }

  /** One error line per distinct cause, not one per retry; one info line when writes work again. */
  private logKernelFailure(failure: KernelFailure | undefined): void {
    const message = failure?.message;
    if (message === this.lastLoggedKernelError) return;
    if (failure) {
      this.deps.logger.error(
        {
          kind: failure.kind,
          unreadableTables: failure.unreadable.map((ref) => `${ref.family} ${ref.name}`),
        },
        `kernel write failed: ${failure.message}`,
      );
    } else {
      this.deps.logger.info('kernel writes work again');
    }
    this.lastLoggedKernelError = message;
  }

  /** Loads the config; keeps the last good one when it is invalid. Logs each distinct error once. */
  private async readConfig(): Promise<boolean> {
    const { logger, metrics } = this.deps;
    const result = await this.deps.loadConfig(this.deps.configPath, this.deps.loadOptions);
    const warnings = result.warnings.join('\n');
    if (warnings !== this.lastLoggedWarnings) {
      for (const warning of result.warnings) logger.warn({ config: this.deps.configPath }, warning);
      this.lastLoggedWarnings = warnings;
    }
    metrics.setConfigValid(result.ok);
    if (!result.ok) {
      const message = result.error.message;
      this.state.configError = message;
      if (message !== this.lastLoggedConfigError) {
        logger.error({ config: this.deps.configPath }, `invalid config, not applied: ${message}`);
        metrics.incConfigErrors();
        this.lastLoggedConfigError = message;
      }
      return false;
    }
    if (this.lastLoggedConfigError !== undefined) logger.info('config valid again');
    this.lastLoggedConfigError = undefined;
    this.state.configError = null;
    this.goodConfig = result.config;
    return true;
  }

  /** Makes the kernel hold the config's tables. Returns whether it wrote. */
  private async converge(config: Config): Promise<boolean> {
    const { kernel, compileOptions, logger, metrics } = this.deps;
    const key = contentKey(config, compileOptions);
    const genId = await kernel.generationId().catch(() => undefined);
    const kernelUnmoved = genId !== undefined && genId === this.kernelGenId;
    if (kernelUnmoved && this.kernelKey === key) {
      this.setCounts(config);
      return false;
    }

    let drift = false;
    let stale: TableRef[] = [];
    if (!kernelUnmoved) {
      const found = await this.timed('readMs', () => this.readTables());
      stale = found.stale;
      const writer = found.ip?.kind === 'ours' ? found.ip : undefined;
      this.adoptGeneration(writer?.generation);
      const inPlace = stale.length === 0 && this.holds(found.listings, config);
      // Not what we would write, and written by another agent: hold back for a while rather than
      // fight (other-agent.ts). The kernel is read again at every resync meanwhile.
      if (!inPlace && writer && this.otherAgent.holdBack(writer)) {
        this.kernelGenId = undefined;
        return false;
      }
      if (inPlace) {
        if (writer) this.otherAgent.inPlace(writer);
        this.kernelKey = key;
        // The listings are at least as new as genId: if another commit came between, the id has
        // moved past it and the next sync reads again. While a conflict is open, always read.
        this.kernelGenId = this.otherAgent.active ? undefined : genId;
        metrics.setGeneration(this.generation);
        this.setCounts(config);
        return false;
      }
      drift = this.kernelKey === key;
    }
    const generation = this.generation + 1;
    const tables = compile(config, compileOptions, generation);
    if (drift)
      logger.warn({ generation }, 'our tables in the kernel drifted from the config; repairing');
    const script = renderReplace(tables, stale);
    await this.timed('applyMs', () => kernel.apply(script));
    if (drift) metrics.incDriftRepairs();
    for (const table of tables) this.written.add(table.family);
    this.otherAgent.wrote({ generation, hash: config.hash });
    this.generation = generation;
    this.kernelKey = key;
    // "The kernel holds what we wrote at id G" only when G is provably our commit's: our one
    // transaction moves the id by exactly one, so any other step means another commit came before
    // or after ours, and the next sync reads the tables back instead of trusting them.
    const after = await kernel.generationId().catch(() => undefined);
    // While another agent writes our table, read back at every resync: that our write stayed is
    // how the conflict ends.
    this.kernelGenId =
      !this.otherAgent.active &&
      genId !== undefined &&
      after !== undefined &&
      after === (genId + 1) >>> 0
        ? after
        : undefined;
    metrics.setGeneration(generation);
    this.setCounts(config);
    return true;
  }

  /**
   * Lists our tables (ip6 too with IPv6 off: a table of ours left there is deleted). A same-named
   * table that is not ours is an error and left untouched, unless this process created it.
   */
  private async readTables(): Promise<{
    listings: Map<Family, string | null>;
    stale: TableRef[];
    ip: TableOwner | undefined;
  }> {
    const { kernel, compileOptions } = this.deps;
    const listings = new Map<Family, string | null>();
    const owners = new Map<Family, TableOwner>();
    for (const family of ['ip', 'ip6'] as const) {
      this.deps.metrics.incKernelReads();
      const listing = await kernel.listTable({ family, name: compileOptions.table });
      listings.set(family, listing);
      if (listing !== null) owners.set(family, tableOwner(listing));
    }
    const managed: readonly Family[] = compileOptions.enableIPv6 ? ['ip', 'ip6'] : ['ip'];
    for (const family of managed) {
      if (owners.get(family)?.kind === 'foreign' && !this.written.has(family)) {
        throw new Error(
          `table ${family} ${compileOptions.table} exists and is not ipmasq-agent's (no ` +
            '"ipmasq-agent generation" comment): left untouched; choose another --table',
        );
      }
    }
    const ip6 = owners.get('ip6');
    const stale: TableRef[] =
      !compileOptions.enableIPv6 && ip6 && (ip6.kind !== 'foreign' || this.written.has('ip6'))
        ? [{ family: 'ip6', name: compileOptions.table }]
        : [];
    return { listings, stale, ip: owners.get('ip') };
  }

  /** A restart continues the count from the generation our table carries. */
  private adoptGeneration(found: number | undefined): void {
    if (found !== undefined && found > this.generation) this.generation = found;
  }

  /** Whether the listings are exactly our rendering of `config` at the current generation. */
  private holds(listings: ReadonlyMap<Family, string | null>, config: Config): boolean {
    return compile(config, this.deps.compileOptions, this.generation).every((table) => {
      const listing = listings.get(table.family);
      return listing ? normaliseListing(listing) === normaliseListing(renderTable(table)) : false;
    });
  }

  /** Counts of what the kernel now holds: called only once a write or a read-back confirmed it. */
  private setCounts(config: Config): void {
    const counts = {
      ipv4: config.nonMasquerade.ipv4.length,
      ipv6: this.deps.compileOptions.enableIPv6 ? config.nonMasquerade.ipv6.length : 0,
    };
    this.state.counts = counts;
    this.deps.metrics.setNonMasqueradeCount('ipv4', counts.ipv4);
    this.deps.metrics.setNonMasqueradeCount('ipv6', counts.ipv6);
    const threshold = this.deps.largeSetThreshold;
    // Concatenated sets are not downloaded by other tools' element commands: no neighbour cost.
    const large =
      threshold !== undefined &&
      // Only an explicit interval layout can be large: auto switches to concat above the crossover.
      this.deps.compileOptions.setLayout === 'interval' &&
      counts.ipv4 + counts.ipv6 > threshold;
    if (large && !this.largeSetWarned) {
      this.deps.logger.warn(
        { elements: counts.ipv4 + counts.ipv6, threshold },
        'the non-masquerade set is large: every other nftables tool that adds or deletes elements now pays to download it; ' +
          'merge CIDRs, or use --set-layout auto (the default) or concat',
      );
    }
    this.largeSetWarned = large;
    this.deps.metrics.setLargeSetWarning(large);
  }
}
