// Reading our tables back from the kernel (compared with what we would write by nftables/listing.ts).
// Reading changes nothing: what the caller does with the generation found is its own, explicit step.
import { managedFamilies } from '../cidr/index.js';
import type { CompileOptions } from '../compile.js';
import { listingIs } from '../nftables/listing.js';
import { isStandIn, standInName, tableOwner, type TableOwner } from '../nftables/ownership.js';
import type { Table, TableFamily, TableRef } from '../nftables/types.js';
import type { TablesPort } from '../kernel/ports.js';

export interface KernelTables {
  readonly listings: ReadonlyMap<TableFamily, string | null>;
  /** Tables of ours the config no longer wants (ip6 with IPv6 off): deleted with the next write. */
  readonly stale: readonly TableRef[];
  /** Who wrote our ip table, by its comment. */
  readonly ip: TableOwner | undefined;
  readonly owners: ReadonlyMap<TableFamily, TableOwner>;
  /**
   * The stand-ins found (looked for when asked): `ours` is one an upgrade left behind (a crash in
   * the middle), deleted with the next write; `foreign` is another's table of that name, which an
   * upgrade must not touch.
   */
  readonly standIns: ReadonlyMap<TableFamily, 'ours' | 'foreign'>;
}

/** Whether a table of ours in a managed family was written by an older release (mark in its comment). */
export function olderRelease(found: KernelTables): boolean {
  return [...found.owners.values()].some((owner) => owner.kind === 'ours' && owner.olderRelease);
}

/**
 * Lists our tables (ip6 too with IPv6 off: a table of ours left there is deleted). A same-named
 * table that is not ours is an error and left untouched, unless this process created it
 * (`written`: ours even if its comment was changed).
 */
export async function readTables(
  kernel: TablesPort,
  options: CompileOptions,
  written: ReadonlySet<TableFamily>,
  onRead: () => void,
  lookForStandIns = false,
  timeoutMs?: number,
): Promise<KernelTables> {
  const listings = new Map<TableFamily, string | null>();
  const owners = new Map<TableFamily, TableOwner>();
  for (const family of ['ip', 'ip6'] as const) {
    onRead();
    const listing = await kernel.listTable({ family, name: options.table }, timeoutMs);
    listings.set(family, listing);
    if (listing !== null) owners.set(family, tableOwner(listing));
  }
  for (const { table: family } of managedFamilies(options.enableIPv6)) {
    if (owners.get(family)?.kind === 'foreign' && !written.has(family)) {
      throw new Error(
        `table ${family} ${options.table} exists and is not ipmasq-agent's (no ` +
          'ipmasq-agent comment): left untouched; choose another --table',
      );
    }
  }
  const ip6 = owners.get('ip6');
  const stale: TableRef[] =
    !options.enableIPv6 && ip6 && (ip6.kind !== 'foreign' || written.has('ip6'))
      ? [{ family: 'ip6', name: options.table }]
      : [];
  const standIns = new Map<TableFamily, 'ours' | 'foreign'>();
  for (const family of lookForStandIns ? (['ip', 'ip6'] as const) : []) {
    onRead();
    const listing = await kernel.listTable({ family, name: standInName(options.table) }, timeoutMs);
    if (listing === null) continue;
    standIns.set(family, isStandIn(listing) ? 'ours' : 'foreign');
  }
  return { listings, stale, ip: owners.get('ip'), owners, standIns };
}

/** Whether the listings are exactly the rendering of `tables` (but for the tables' own comments). */
export function holds(found: KernelTables, tables: readonly Table[]): boolean {
  if (found.stale.length > 0 || [...found.standIns.values()].includes('ours')) return false;
  return tables.every((table) => {
    const listing = found.listings.get(table.family);
    return listing ? listingIs(listing, table) : false;
  });
}
