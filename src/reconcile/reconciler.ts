// One sync: read the config, compile the desired tables, compare with the kernel when it may have
// moved, and write the whole tables in one transaction when they differ. CONTRACT §5 and §6.
import type { Logger } from 'pino';
import { Counter } from 'prom-client';
import { compile, parseTableComment, type CompileOptions } from '../compile.js';
import type { Config, LoadOptions, LoadResult } from '../config/types.js';
import { normaliseListing, renderReplace, renderTable } from '../nftables/render.js';
import type { Table, TableRef } from '../nftables/types.js';
import type { AgentMetrics } from '../server/metrics.js';
import type { AgentStatus } from '../server/index.js';
import type { Kernel } from './kernel.js';
import { describeKernelFailure, type KernelFailure } from './nft-failure.js';
import type { SyncOutcome } from './runner.js';

export interface ReconcilerDeps {
  readonly configPath: string;
  readonly loadOptions: LoadOptions;
  readonly compileOptions: CompileOptions;
  readonly loadConfig: (path: string, options: LoadOptions) => Promise<LoadResult>;
  readonly kernel: Kernel;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  /** Effective set size above which other nftables users are measurably slowed (issue 9). */
  readonly largeSetThreshold?: number;
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
  private readonly kernelReads: Counter;
  private goodConfig: Config | undefined;
  private generation = 0;
  /** Content key of what we last wrote or found right in the kernel. */
  private kernelKey: string | undefined;
  /** Generation id of the namespace when the kernel was last known to hold kernelKey. */
  private kernelGenId: number | undefined;
  /** Set when nft prints our tables differently from our renderer: compare with this instead. */
  private observedListing: { key: string; listings: Map<string, string> } | undefined;
  private rendererChecked = false;
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
    this.kernelReads = new Counter({
      name: 'ipmasq_kernel_reads_total',
      help: 'Read-backs of our tables from the kernel (skipped while the nftables generation id is unchanged)',
      registers: [deps.metrics.registry],
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
      this.state.ready = configValid;
      this.state.notReadyReason = configValid
        ? null
        : `config invalid, the kernel keeps the last good ruleset: ${this.state.configError}`;
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
      const found = await this.timed('readMs', () => this.readTables(config));
      stale = found.stale;
      if (found.matches) {
        this.kernelKey = key;
        this.kernelGenId = genId;
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
    this.generation = generation;
    this.kernelKey = key;
    this.kernelGenId = await kernel.generationId().catch(() => undefined);
    metrics.setGeneration(generation);
    this.setCounts(config);
    if (!this.rendererChecked) await this.checkRenderer(tables, key);
    return true;
  }

  /** Reads our tables back: do they hold `config` (at the generation they carry)? */
  private async readTables(config: Config): Promise<{ matches: boolean; stale: TableRef[] }> {
    const { kernel, compileOptions } = this.deps;
    // ip6 is read even with IPv6 off: a table of ours left there by an earlier run is deleted.
    const families: Table['family'][] = ['ip', 'ip6'];
    const listings = new Map<string, string | null>();
    for (const family of families) {
      this.kernelReads.inc();
      listings.set(family, await kernel.listTable({ family, name: compileOptions.table }));
    }
    const stale: TableRef[] =
      !compileOptions.enableIPv6 && listings.get('ip6')
        ? [{ family: 'ip6', name: compileOptions.table }]
        : [];
    // Adopt the generation a previous run left, so the count continues across restarts.
    const ipListing = listings.get('ip');
    const previous = ipListing ? parseTableComment(ipListing) : undefined;
    if (previous && previous.generation > this.generation) this.generation = previous.generation;
    const expected = compile(config, compileOptions, this.generation);
    const key = contentKey(config, compileOptions);
    const matches =
      stale.length === 0 &&
      expected.every((table) => {
        const listing = listings.get(table.family);
        if (!listing) return false;
        const observed =
          this.observedListing?.key === key
            ? this.observedListing.listings.get(table.family)
            : undefined;
        const reference = observed
          ? observed.replace(/generation \d+/, `generation ${this.generation}`)
          : renderTable(table);
        return normaliseListing(listing) === normaliseListing(reference);
      });
    return { matches, stale };
  }

  /**
   * Once per process, after a write: does nft print our tables exactly as we render them? If a
   * version prints differently, remember its listing so resyncs do not see drift that is not there.
   */
  private async checkRenderer(tables: readonly Table[], key: string): Promise<void> {
    const differing = new Map<string, string>();
    for (const table of tables) {
      this.kernelReads.inc();
      const listing = await this.deps.kernel.listTable(table);
      if (listing && normaliseListing(listing) !== normaliseListing(renderTable(table))) {
        differing.set(table.family, listing);
      }
    }
    this.rendererChecked = true;
    if (differing.size > 0) {
      this.deps.logger.warn(
        { families: [...differing.keys()] },
        'nft lists our tables differently from how the agent renders them; drift checks compare with the listing',
      );
      this.observedListing = { key, listings: differing };
    }
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
      this.deps.compileOptions.setLayout !== 'concat' &&
      counts.ipv4 + counts.ipv6 > threshold;
    if (large && !this.largeSetWarned) {
      this.deps.logger.warn(
        { elements: counts.ipv4 + counts.ipv6, threshold },
        'the non-masquerade set is large: every other nftables tool that adds or deletes elements now pays to download it; ' +
          'merge CIDRs, or consider --set-layout concat',
      );
    }
    this.largeSetWarned = large;
    this.deps.metrics.setLargeSetWarning(large);
  }
}
