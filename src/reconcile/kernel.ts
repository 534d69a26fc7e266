// The reconciler's view of the kernel, all through the addon. Tests wrap it to count reads or stand
// in a fake; nothing else in the reconciler talks to nftables.
import { NftError, nftGenerationId, nftTableNames, runNft } from '../nftables/addon.js';
import type { TableRef } from '../nftables/types.js';

/** A table of any family, as the kernel names it (`inet`, `bridge`, … as well as ours). */
export interface AnyTableRef {
  readonly family: string;
  readonly name: string;
}

export interface Kernel {
  /** The table's listing as nft prints it, or null when it does not exist. */
  listTable(ref: TableRef): Promise<string | null>;
  /** Runs one script as one transaction. */
  apply(script: string): Promise<void>;
  /** The namespace's nftables generation id (moves on every commit by anyone). */
  generationId(): Promise<number>;
  /** Every table in the namespace, from plain netlink: works where libnftables cannot parse them. */
  tableNames(): Promise<AnyTableRef[]>;
  /** Whether libnftables can list this table (false when listing it crashes or hangs libnftables). */
  readable(ref: AnyTableRef): Promise<boolean>;
}

const PROBE_FAMILY = /^(ip|ip6|inet|arp|bridge|netdev)$/;
const PROBE_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,255}$/;

export const nftKernel: Kernel = {
  async listTable(ref) {
    try {
      return await runNft(`list table ${ref.family} ${ref.name}`);
    } catch (err) {
      if (err instanceof NftError && err.isNotFound()) return null;
      throw err;
    }
  },
  async apply(script) {
    await runNft(script);
  },
  generationId: nftGenerationId,
  tableNames: nftTableNames,
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
};
