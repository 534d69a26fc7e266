// --cleanup (README, "Flags"): deletes our ip/ip6 tables through the same Kernel port and ownership
// rule as a sync — a same-named table that is not ours is left, an error — then, with
// --remove-legacy-chain, the original agent's chain through the same LegacyChain step.
import type { Logger } from 'pino';
import { isStandIn, standInName, tableOwner } from '../nftables/ownership.js';
import { renderDelete } from '../nftables/render.js';
import type { LegacyPort, TablesPort } from '../kernel/ports.js';
import { LegacyChain, type LegacyOptions } from '../other-nat/legacy.js';

export interface CleanupDeps {
  readonly table: string;
  readonly legacy: LegacyOptions;
  readonly kernel: TablesPort & LegacyPort;
  readonly logger: Logger;
}

/** The exit code: 0 when every table of ours is gone, 1 otherwise. */
export async function cleanup(deps: CleanupDeps): Promise<number> {
  const { table, kernel, logger } = deps;
  let code = 0;
  // Our tables, then the stand-ins an interrupted upgrade left (reconcile/converge.ts, plan `upgrade`).
  const refs = [table, standInName(table)].flatMap((name) =>
    (['ip', 'ip6'] as const).map((family) => ({ family, name, standIn: name !== table })),
  );
  for (const { standIn, ...ref } of refs) {
    try {
      const listing = await kernel.listTable(ref);
      if (listing === null || (standIn && !isStandIn(listing))) continue;
      if (!standIn && tableOwner(listing).kind === 'foreign') {
        logger.error(
          { table: `${ref.family} ${ref.name}` },
          "not deleted: the table is not ipmasq-agent's (no ipmasq-agent comment)",
        );
        code = 1;
        continue;
      }
      await kernel.apply(renderDelete([ref]));
      logger.info({ table: `${ref.family} ${ref.name}` }, 'deleted');
    } catch (err) {
      logger.error({ err }, `could not delete table ${ref.family} ${ref.name}`);
      return 1;
    }
  }
  if (deps.legacy.remove) await new LegacyChain({ kernel, logger, options: deps.legacy }).remove();
  return code;
}
