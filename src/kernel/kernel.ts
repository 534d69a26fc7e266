// The agent's one view of the kernel, all through the addon: nothing else in src/ runs nftables
// commands. The port it fills is ports.ts; tests wrap it to count reads or stand in a fake
// (test/helpers/fake-kernel.ts).
import {
  auditSet,
  deleteFlows,
  holdReplies,
  judgeFlows,
  NftError,
  natSample,
  nftChains,
  nftCounters,
  nftGenerationId,
  nftRuleShapes,
  nftTableNames,
  commitNft,
  editElements,
  fillSets,
  readNft,
  ruleComments,
  runNft,
} from './addon.js';
import { legacyChainsIn, removeLegacyChain } from './legacy-chain.js';
import type { Kernel } from './ports.js';

const PROBE_FAMILY = /^(ip|ip6|inet|arp|bridge|netdev)$/;
const PROBE_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,255}$/;

export const nftKernel: Kernel = {
  async listTable(ref, timeoutMs) {
    try {
      return await runNft(
        `list table ${ref.family} ${ref.name}`,
        timeoutMs === undefined ? {} : { timeoutMs },
      );
    } catch (err) {
      if (err instanceof NftError && err.isNotFound()) return null;
      throw err;
    }
  },
  apply: commitNft,
  edit: editElements,
  fill: fillSets,
  auditSet,
  ruleComments,
  generationId: nftGenerationId,
  tableNames: nftTableNames,
  chains: nftChains,
  ruleShapes: nftRuleShapes,
  async counters(ref) {
    try {
      return await nftCounters(ref.family, ref.name);
    } catch (err) {
      if (err instanceof NftError && err.isNotFound()) return [];
      throw err;
    }
  },
  async listRules(chains) {
    // A call per chain: libnftables 1.0.6 fills its cache for the last of several `list chain`
    // commands only, and fails the others. Names are checked by the caller (other-nat/chains.ts).
    // Reads only, beside our writes: never queued before one (docs/observability.md, "Other NAT on
    // the node").
    let text = '';
    for (const c of chains)
      text += await readNft(`list chain ${c.family} ${c.table} ${c.chain}`, { listing: true });
    return text;
  },
  async readable(ref) {
    // Names come from the kernel's dump, not from us: only a plain identifier goes into a command
    // (nft accepts no quoted table names); any other name is not probed.
    if (!PROBE_FAMILY.test(ref.family) || !PROBE_NAME.test(ref.name)) return true;
    try {
      await runNft(`list table ${ref.family} ${ref.name}`);
      return true;
    } catch (err) {
      return !(err instanceof NftError && (err.kind === 'crash' || err.kind === 'timeout'));
    }
  },
  async legacyChains(names) {
    // From the chain dump the look at other NAT makes too (other-nat/watch.ts).
    return legacyChainsIn(await nftChains(), names);
  },
  removeLegacyChain,
  async setHas(ref, set, element) {
    try {
      await runNft(`get element ${ref.family} ${ref.name} ${set} { ${element} }`);
      return true;
    } catch (err) {
      if (err instanceof NftError && err.isNotFound()) return false;
      throw err;
    }
  },
  judgeFlows,
  natSample,
  holdReplies,
  deleteFlows,
};
