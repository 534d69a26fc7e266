// Reads the config at each sync and keeps the last good one: an invalid config is reported, never
// applied (README, "Configuration"). Each distinct error and set of warnings is logged once.
import type { Logger } from 'pino';
import type { Loader } from '../config/loader.js';
import type { Config, LoadOptions } from '../config/types.js';
import type { AgentMetrics } from './metrics.js';

export interface ConfigReaderDeps {
  readonly configPath: string;
  readonly loadOptions: LoadOptions;
  readonly load: Loader;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
}

export class ConfigReader {
  private readonly deps: ConfigReaderDeps;
  /** The last valid config read, kept while later reads are invalid. */
  good: Config | undefined;
  /** Why the last read was invalid; null when it was valid. */
  error: string | null = null;
  private lastLoggedError: string | undefined;
  /** The warnings of the last read: only new ones are logged. */
  private lastWarnings: ReadonlySet<string> = new Set();

  constructor(deps: ConfigReaderDeps) {
    this.deps = deps;
  }

  /** Whether the config just read is valid. Rejects only when the loader itself failed. */
  async read(): Promise<boolean> {
    const { configPath, logger, metrics } = this.deps;
    const result = await this.deps.load(configPath, this.deps.loadOptions);
    this.logWarnings(result.warnings);
    metrics.setConfigValid(result.ok);
    if (!result.ok) {
      const message = result.error.message;
      this.error = message;
      if (message !== this.lastLoggedError) {
        logger.error({ config: configPath }, `invalid config, not applied: ${message}`);
        metrics.incConfigErrors();
        this.lastLoggedError = message;
      }
      return false;
    }
    if (this.lastLoggedError !== undefined) logger.info('config valid again');
    this.lastLoggedError = undefined;
    this.error = null;
    const skipped = result.config.skipped ?? [];
    // Once per config read anew (the loader answers from its cache while no file changed).
    if (skipped.length > 0 && result.config !== this.good)
      logger.debug({ config: configPath, skipped }, 'config files that do not apply on this node');
    this.good = result.config;
    metrics.setResyncInterval(result.config.resyncIntervalMs);
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
