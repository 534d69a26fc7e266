// Reads the config at each sync and keeps the last good one: an invalid config is reported, never
// applied (README, "Configuration"). Each distinct error and set of warnings is logged once.
import type { Logger } from 'pino';
import { withNodePodCIDRs, type NodePrefixes } from '../config/build.js';
import type { Loader, ReadMode } from '../config/loader.js';
import type { Config, LoadOptions } from '../config/types.js';
import type { NodeEvents } from '../kubernetes/events.js';
import type { AgentMetrics } from './metrics.js';

/** What the config takes from the API server (src/kubernetes/cluster.ts), when the agent reads it. */
export interface ClusterData {
  /** This Node's labels; undefined until read. */
  readonly labels: ReadonlyMap<string, string> | undefined;
  /** Every Node's pod CIDRs; undefined until wanted and first listed. */
  podCIDRs(): ReadonlyMap<string, NodePrefixes> | undefined;
  /** Whether the valid config asks for them: they are listed and watched only while it does. */
  wantPodCIDRs(want: boolean): void;
  /** Moves whenever podCIDRs() may answer differently. */
  readonly podCIDRsVersion: number;
}

export interface ConfigReaderDeps {
  readonly configPath: string;
  readonly loadOptions: LoadOptions;
  readonly load: Loader;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  readonly cluster?: ClusterData;
  readonly events?: NodeEvents;
}

export class ConfigReader {
  private readonly deps: ConfigReaderDeps;
  /** The last valid config read, kept while later reads are invalid. */
  good: Config | undefined;
  /** Why the last read was invalid; null when it was valid. */
  error: string | null = null;
  /** What the last read waits for from the API server; null when nothing. */
  waiting: string | null = null;
  /** The options loaded with while these labels stay (the loader's cache keys on the object). */
  private options:
    { labels: ReadonlyMap<string, string> | undefined; load: LoadOptions } | undefined;
  private joined: { from: Config; version: number; config: Config } | undefined;
  private lastLoggedError: string | undefined;
  /** The warnings of the last read: only new ones are logged. */
  private lastWarnings: ReadonlySet<string> = new Set();

  constructor(deps: ConfigReaderDeps) {
    this.deps = deps;
  }

  /** The load options with this Node's labels as now known: the same object while they stay. */
  private loadOptions(): LoadOptions {
    const { cluster } = this.deps;
    if (!cluster) return this.deps.loadOptions;
    const labels = cluster.labels;
    if (this.options === undefined || this.options.labels !== labels) {
      this.options = {
        labels,
        load: {
          ...this.deps.loadOptions,
          kubernetes: true,
          ...(labels ? { nodeLabels: labels } : {}),
        },
      };
    }
    return this.options.load;
  }

  /** The files' config with the Nodes' pod CIDRs joined, or why it must wait for them. */
  private withCluster(config: Config): Config | string {
    const { cluster } = this.deps;
    cluster?.wantPodCIDRs(config.nodePodCIDRs === true);
    if (!config.nodePodCIDRs || !cluster) return config;
    const nodes = cluster.podCIDRs();
    if (!nodes)
      return 'nonMasqueradeNodePodCIDRs: waiting for the first list of Nodes from the API server';
    const version = cluster.podCIDRsVersion;
    if (this.joined?.from !== config || this.joined.version !== version)
      this.joined = { from: config, version, config: withNodePodCIDRs(config, nodes) };
    return this.joined.config;
  }

  /**
   * Whether the config just read is valid. Rejects only when the loader itself failed. `whole`: read
   * from the bytes, not from the last load (a resync).
   */
  async read(mode: ReadMode = {}): Promise<boolean> {
    const { configPath, logger, metrics } = this.deps;
    const result = await this.deps.load(configPath, this.loadOptions(), mode);
    this.logWarnings(result.warnings);
    const pending = !result.ok && result.error.kind === 'pending';
    metrics.setConfigValid(result.ok || pending);
    if (!result.ok && !pending) {
      const message = result.error.message;
      this.error = message;
      this.waiting = null;
      if (message !== this.lastLoggedError) {
        logger.error({ config: configPath }, `invalid config, not applied: ${message}`);
        metrics.incConfigErrors();
        this.deps.events?.('ConfigInvalid', `invalid config, not applied: ${message}`);
        this.lastLoggedError = message;
      }
      return false;
    }
    const config = result.ok ? this.withCluster(result.config) : result.error.message;
    if (typeof config === 'string') {
      if (config !== this.waiting) logger.info({ config: configPath }, config);
      this.waiting = config;
      this.error = null;
      return false;
    }
    this.waiting = null;
    if (this.lastLoggedError !== undefined) {
      logger.info('config valid again');
      this.deps.events?.('ConfigRecovered', 'the config is valid again and applied');
    }
    this.lastLoggedError = undefined;
    this.error = null;
    const skipped = config.skipped ?? [];
    // Once per config read anew (the loader answers from its cache while no file changed).
    if (skipped.length > 0 && config !== this.good)
      logger.debug({ config: configPath, skipped }, 'config files that do not apply on this node');
    this.good = config;
    metrics.setResyncInterval(config.resyncIntervalMs);
    return true;
  }

  /**
   * Each warning once while it lasts: a directory filling up file by file is read again and again,
   * each time with the warnings of every file so far. A burst of new ones is cut to a few lines.
   */
  private logWarnings(warnings: readonly string[]): void {
    const { configPath, logger } = this.deps;
    const fresh = warnings.filter((w) => !this.lastWarnings.has(w));
    for (const warning of fresh.slice(0, WARNINGS_PER_READ)) {
      logger.warn({ config: configPath }, warning);
    }
    if (fresh.length > WARNINGS_PER_READ) {
      logger.warn(
        { config: configPath },
        `and ${fresh.length - WARNINGS_PER_READ} more config warnings (--check PATH lists them all)`,
      );
    }
    this.lastWarnings = new Set(warnings);
  }
}

/** New warnings logged from one read; the rest are counted in one line. */
const WARNINGS_PER_READ = 10;
