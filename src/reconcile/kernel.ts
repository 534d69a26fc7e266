// The reconciler's view of the kernel: three operations, all through the addon. Tests wrap it to
// count reads; nothing else in the agent talks to nftables.
import { NftError, nftGenerationId, runNft } from '../nftables/addon.js';
import type { TableRef } from '../nftables/types.js';

export interface Kernel {
  /** The table's listing as nft prints it, or null when it does not exist. */
  listTable(ref: TableRef): Promise<string | null>;
  /** Runs one script as one transaction. */
  apply(script: string): Promise<void>;
  /** The namespace's nftables generation id (moves on every commit by anyone). */
  generationId(): Promise<number>;
}

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
};
