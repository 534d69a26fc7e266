// Turns a failed kernel call into the words an operator needs. When libnftables crashed,
// the usual cause is an object it cannot parse that another tool wrote (docs/operations.md,
// "nftables versions"): the tables are named over plain netlink and each foreign one is listed on
// its own, each in its own libnftables process, to say which one it is.
import { libnftablesVersion, NftError } from '../kernel/addon.js';
import type { AnyTableRef, OthersPort } from '../kernel/ports.js';
import { oursOrStandIn } from '../nftables/ownership.js';
import { errorText } from '../errors.js';

export interface KernelFailure {
  /** For lastError and the log: stable for the same cause, so it is logged once. */
  readonly message: string;
  /** How libnftables failed, when it did; undefined for other errors. */
  readonly kind: NftError['kind'] | undefined;
  /** Foreign tables libnftables cannot list (crashes on), when that was the cause. */
  readonly unreadable: readonly AnyTableRef[];
}

export async function describeKernelFailure(
  err: unknown,
  kernel: OthersPort,
  ownTable: string,
): Promise<KernelFailure> {
  if (!(err instanceof NftError))
    return { message: errorText(err), kind: undefined, unreadable: [] };
  // Only a crash is diagnosed: after a hang, every probe could take the whole time limit again.
  if (err.kind !== 'crash') return { message: errorText(err), kind: err.kind, unreadable: [] };
  const unreadable: AnyTableRef[] = [];
  const ours = oursOrStandIn(ownTable);
  try {
    for (const ref of await kernel.tableNames()) {
      if (!ours(ref.family, ref.name) && !(await kernel.readable(ref))) unreadable.push(ref);
    }
  } catch {
    // The diagnosis is a courtesy: without it the failure is still reported as it happened.
  }
  if (unreadable.length === 0) return { message: errorText(err), kind: err.kind, unreadable };
  const names = unreadable.map((ref) => `${ref.family} ${ref.name}`).join(', ');
  return {
    message:
      `${errorText(err)}: libnftables ${libnftablesVersion()} cannot read table ${names} (not ours), ` +
      'likely written by a newer nftables: nothing can be written while it is there',
    kind: err.kind,
    unreadable,
  };
}
