// The original agent's leftover chain in iptables-nft's `ip nat` table (docs/migration.md): found by
// the look at other NAT (watch.ts) and warned about before the first sync's write, removed with --remove-legacy-chain only once our own table is
// in the kernel, so no flow goes out unmasqueraded meanwhile. Never fatal.
import type { Logger } from 'pino';
import { legacyChainsIn } from '../kernel/legacy-chain.js';
import type { LegacyPort } from '../kernel/ports.js';
import type { ChainInfo } from '../nftables/types.js';
import type { NodeEvents } from '../kubernetes/events.js';

/** Where to look for the original agent's chain, and whether to remove it. */
export interface LegacyOptions {
  /** Chain names it may have left: ours (--masq-chain) and its older default. */
  readonly chains: readonly string[];
  /** --remove-legacy-chain: delete it once our table is in the kernel. */
  readonly remove: boolean;
}

export interface LegacyDeps {
  readonly kernel: LegacyPort;
  readonly options: LegacyOptions;
  readonly logger: Logger;
  /** Where `ipmasq_legacy_chain_present` is set; a one-shot --cleanup has none to serve. */
  readonly metrics?: { setLegacyChainPresent(present: boolean): void };
  readonly events?: NodeEvents;
}

export class LegacyChain {
  private readonly deps: LegacyDeps;
  private removalPending: boolean;
  /** The chains the last look found: each is warned about once while it stays. */
  private present = new Set<string>();

  constructor(deps: LegacyDeps) {
    this.deps = deps;
    this.removalPending = deps.options.remove;
  }

  /** At each look at the namespace's chains (watch.ts), before the first sync's write too. */
  observe(all: readonly ChainInfo[]): void {
    const { options, logger, metrics } = this.deps;
    const found = legacyChainsIn(all, options.chains);
    for (const chain of found) {
      if (this.present.has(chain)) continue;
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
    }
    this.present = new Set(found);
    metrics?.setLegacyChainPresent(found.length > 0);
  }

  /** After a sync: removes the chain (once) when asked to and our table is in the kernel. */
  async afterSync(ourTableInPlace: boolean): Promise<void> {
    if (!this.removalPending || !ourTableInPlace) return;
    this.removalPending = false;
    await this.removeNow();
  }

  /** --cleanup --remove-legacy-chain: removes it now. */
  async remove(): Promise<void> {
    this.removalPending = false;
    await this.removeNow();
  }

  private async removeNow(): Promise<void> {
    const { kernel, options, logger, metrics } = this.deps;
    let remaining: string[] = [];
    try {
      remaining = await kernel.legacyChains(options.chains);
      for (const chain of [...remaining]) {
        const rules = await kernel.removeLegacyChain(chain);
        remaining = remaining.filter((name) => name !== chain);
        this.present.delete(chain);
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
