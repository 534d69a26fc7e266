// The original agent's leftover chain in iptables-nft's `ip nat` table (docs/migration.md).
import { NftError, runNft } from '../nftables/addon.js';

const NAT_TABLE = 'ip nat';
const POSTROUTING = 'POSTROUTING';

interface JsonRule {
  rule?: { handle?: number; expr?: Array<Record<string, unknown>> };
}

/** Chain names the original agent may have left: ours (--masq-chain) and its older default. */
export function legacyChainNames(masqChain: string): string[] {
  return [...new Set([masqChain, 'IP-MASQ'])];
}

async function chainExists(name: string): Promise<boolean> {
  try {
    await runNft(`list chain ${NAT_TABLE} ${name}`);
    return true;
  } catch (err) {
    if (err instanceof NftError && err.isNotFound()) return false;
    throw err;
  }
}

/** Which of the candidate chains exist in `ip nat`. */
export async function findLegacyChains(names: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  for (const name of names) if (await chainExists(name)) found.push(name);
  return found;
}

/** Handles of POSTROUTING rules in `ip nat` that jump to `chain`. */
async function jumpRuleHandles(chain: string): Promise<number[]> {
  if (!(await chainExists(POSTROUTING))) return [];
  const listing = JSON.parse(
    await runNft(`list chain ${NAT_TABLE} ${POSTROUTING}`, { json: true }),
  ) as {
    nftables: JsonRule[];
  };
  return listing.nftables.flatMap((item) => {
    const jumps = item.rule?.expr?.some(
      (expr) => (expr.jump as { target?: string } | undefined)?.target === chain,
    );
    return jumps && typeof item.rule?.handle === 'number' ? [item.rule.handle] : [];
  });
}

/** Deletes exactly the chain and the POSTROUTING rules that jump to it, in one transaction. */
export async function removeLegacyChain(chain: string): Promise<number> {
  const handles = await jumpRuleHandles(chain);
  const script = [
    ...handles.map((handle) => `delete rule ${NAT_TABLE} ${POSTROUTING} handle ${handle}`),
    `flush chain ${NAT_TABLE} ${chain}`,
    `delete chain ${NAT_TABLE} ${chain}`,
  ].join('\n');
  await runNft(script);
  return handles.length;
}
