// The sizes of the sets the kernel holds, once a write or a read-back confirmed them: their series,
// and the warning when an interval set is large enough to slow other nftables users
// (docs/performance.md, "Performance").
import type { Logger } from 'pino';
import type { CompileOptions } from '../compile.js';
import type { Config } from '../config/types.js';
import type { AgentMetrics } from './metrics.js';
import type { SyncFacts } from './status.js';

export interface SetSizesDeps {
  readonly compileOptions: CompileOptions;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  /** Effective set size above which other nftables users are measurably slowed. */
  readonly threshold: number | undefined;
}

export class SetSizes {
  private readonly deps: SetSizesDeps;
  private warned = false;

  constructor(deps: SetSizesDeps) {
    this.deps = deps;
  }

  /** The kernel now holds `config`: its counts, set in the series; warns once per large stretch. */
  confirm(config: Config): SyncFacts['counts'] {
    const { compileOptions, metrics, logger, threshold } = this.deps;
    const counts = {
      ipv4: config.nonMasquerade.ipv4.length,
      ipv6: compileOptions.enableIPv6 ? config.nonMasquerade.ipv6.length : 0,
    };
    metrics.setNonMasqueradeCount('ipv4', counts.ipv4);
    metrics.setNonMasqueradeCount('ipv6', counts.ipv6);
    // Only an explicit interval layout can be large: auto switches to concat above the crossover,
    // and other tools' element commands do not download concatenated sets.
    const large =
      threshold !== undefined &&
      compileOptions.setLayout === 'interval' &&
      counts.ipv4 + counts.ipv6 > threshold;
    if (large && !this.warned) {
      logger.warn(
        { elements: counts.ipv4 + counts.ipv6, threshold },
        'the non-masquerade set is large: every other nftables tool that adds or deletes elements now pays to download it; ' +
          'merge CIDRs, or use --set-layout auto (the default) or concat',
      );
    }
    this.warned = large;
    metrics.setLargeSetWarning(large);
    return counts;
  }
}
