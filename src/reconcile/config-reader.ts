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
  private lastLoggedWarnings = '';

  constructor(deps: ConfigReaderDeps) {
    this.deps = deps;
  }

  /** Whether the config just read is valid. Rejects only when the loader itself failed. */
  async read(): Promise<boolean> {
    const { configPath, logger, metrics } = this.deps;
    const result = await this.deps.load(configPath, this.deps.loadOptions);
    const warnings = result.warnings.join('\n');
    if (warnings !== this.lastLoggedWarnings) {
      for (const warning of result.warnings) logger.warn({ config: configPath }, warning);
      this.lastLoggedWarnings = warnings;
    }
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
    this.good = result.config;
    metrics.setResyncInterval(result.config.resyncIntervalMs);
    return true;
  }
}
