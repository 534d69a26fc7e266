// The original agent's leftover chain in iptables-nft's `ip nat` table (docs/migration.md): found and
// warned about before the first sync, removed with --remove-legacy-chain only once our own table is
// in the kernel, so no flow goes out unmasqueraded meanwhile. Never fatal.
import type { Logger } from 'pino';
import type { Kernel } from '../nftables/kernel.js';
import type { NodeEvents } from '../kubernetes/events.js';
import type { AgentMetrics } from './metrics.js';

/** Where to look for the original agent's chain, and whether to remove it. */
export interface LegacyOptions {
  /** Chain names it may have left: ours (--masq-chain) and its older default. */
  readonly chains: readonly string[];
  /** --remove-legacy-chain: delete it once our table is in the kernel. */
  readonly remove: boolean;
}

export interface LegacyDeps {
  readonly kernel: Kernel;
  readonly options: LegacyOptions;
  readonly logger: Logger;
  /** Where `ipmasq_legacy_chain_present` is set; a one-shot --cleanup has none to serve. */
  readonly metrics?: AgentMetrics;
  readonly events?: NodeEvents;
}

export class LegacyChain {
  private readonly deps: LegacyDeps;
  private checked = false;
  private removalPending: boolean;

  constructor(deps: LegacyDeps) {
    this.deps = deps;
    this.removalPending = deps.options.remove;
  }

  /** Once, before the first sync: warns about each chain still there. */
  async checkOnce(): Promise<void> {
    if (this.checked) return;
    this.checked = true;
    await this.handle(false);
  }

  /** After a sync: removes the chain (once) when asked to and our table is in the kernel. */
  async afterSync(ourTableInPlace: boolean): Promise<void> {
    if (!this.removalPending || !ourTableInPlace) return;
    this.removalPending = false;
    await this.handle(true);
  }

  /** --cleanup --remove-legacy-chain: removes it now. */
  async remove(): Promise<void> {
    this.removalPending = false;
    await this.handle(true);
  }

  private async handle(remove: boolean): Promise<void> {
    const { kernel, options, logger, metrics } = this.deps;
    let remaining: string[] = [];
    try {
      remaining = await kernel.legacyChains(options.chains);
      for (const chain of [...remaining]) {
        if (!remove) {
          this.deps.events?.(
            'LegacyChainPresent',
            `the original ip-masq-agent's chain ${chain} is still in table ip nat: traffic we exempt may still be masqueraded there`,
          );
          logger.warn(
            { chain },
            "the original ip-masq-agent's chain is still in table ip nat: traffic we exempt may still be masqueraded there; " +
              (options.remove
                ? 'it is removed once our table is in the kernel'
                : 'run with --remove-legacy-chain to delete it'),
          );
          continue;
        }
        const rules = await kernel.removeLegacyChain(chain);
        remaining = remaining.filter((name) => name !== chain);
        logger.warn(
          { chain, jumpRulesDeleted: rules },
          "removed the original agent's chain from table ip nat",
        );
      }
    } catch (err) {
      logger.error({ err }, "could not check or remove the original agent's chain in table ip nat");
    }
    metrics?.setLegacyChainPresent(remaining.length > 0);
  }
}
