// Shared by the incremental load's property tests (test/unit/config/incremental*.test.ts).
import { deepStrictEqual } from 'node:assert';
import { splicedList } from '../../src/cidr/index.js';
import type { SetsSplices } from '../../src/config/incremental.js';
import type { ConfigSource } from '../../src/config/source.js';
import type { LoadResult } from '../../src/config/types.js';

export type FileOrDirectory = ConfigSource & { kind: 'file' | 'directory' };

/** One file, or a directory of several, with these names (never read: the tests give the bytes). */
export function sourceOf(files: readonly string[]): FileOrDirectory {
  return files.length === 1
    ? { kind: 'file', path: '/cfg/ip-masq-agent', stamp: '', files, bytes: 0, warnings: [] }
    : { kind: 'directory', path: '/cfg', stamp: '', files, bytes: 0, warnings: [] };
}

/** Throws unless the splices made on `before`'s sets give `after`'s, list for list. */
export function assertSplicesRebuild(
  before: LoadResult | undefined,
  splices: SetsSplices | undefined,
  after: LoadResult,
): void {
  if (!splices || !before?.ok || !after.ok) return;
  for (const set of ['nonMasquerade', 'masquerade'] as const) {
    for (const family of ['ipv4', 'ipv6'] as const) {
      deepStrictEqual(
        [...splicedList(before.config[set][family], splices[set][family])],
        [...after.config[set][family]],
      );
    }
  }
}
