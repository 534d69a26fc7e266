// The original agent's chain in iptables-nft's `ip nat` (docs/migration.md): found in a chain
// dump, and removed with the POSTROUTING rules that jump to it when the operator asks.
import { commitNft, NftError, runNft } from './addon.js';
import type { ChainInfo } from '../nftables/types.js';

/**
 * Which of these names are chains of iptables-nft's `ip nat` in a chain dump (the original agent's,
 * docs/migration.md).
 */
export function legacyChainsIn(chains: readonly ChainInfo[], names: readonly string[]): string[] {
  return names.filter((name) =>
    chains.some((c) => c.family === 'ip' && c.table === 'nat' && c.name === name),
  );
}

const NAT_TABLE = 'ip nat';
const POSTROUTING = 'POSTROUTING';

interface JsonRule {
  rule?: { handle?: number; expr?: Array<Record<string, unknown>> };
}

async function natChainExists(name: string): Promise<boolean> {
  try {
    await runNft(`list chain ${NAT_TABLE} ${name}`);
    return true;
  } catch (err) {
    if (err instanceof NftError && err.isNotFound()) return false;
    throw err;
  }
}

/** Handles of POSTROUTING rules in `ip nat` that jump to `chain`. */
async function jumpRuleHandles(chain: string): Promise<number[]> {
  if (!(await natChainExists(POSTROUTING))) return [];
  const listing = JSON.parse(
    await runNft(`list chain ${NAT_TABLE} ${POSTROUTING}`, { json: true }),
  ) as { nftables: JsonRule[] };
  return listing.nftables.flatMap((item) => {
    const jumps = item.rule?.expr?.some(
      (expr) => (expr.jump as { target?: string } | undefined)?.target === chain,
    );
    return jumps && typeof item.rule?.handle === 'number' ? [item.rule.handle] : [];
  });
}

/**
 * Deletes `chain` of `ip nat` and the POSTROUTING rules jumping to it, in one transaction: the rules
 * deleted.
 */
export async function removeLegacyChain(chain: string): Promise<number> {
  const handles = await jumpRuleHandles(chain);
  await commitNft(
    [
      ...handles.map((handle) => `delete rule ${NAT_TABLE} ${POSTROUTING} handle ${handle}`),
      `flush chain ${NAT_TABLE} ${chain}`,
      `delete chain ${NAT_TABLE} ${chain}`,
    ].join('\n'),
  );
  return handles.length;
}
