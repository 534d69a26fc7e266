// The incremental load (config/incremental.ts) against a whole load over what happens to a config
// directory on a node: ConfigMap volume swaps (kubelet's `..data` symlink moved to a new version
// holding edited, added or removed keys), files renamed (which changes the merge's order), moved
// out of the directory and back, edited in place. Each step is read as the config worker reads it
// (findConfigSource, readSourceFiles) and the warm answer compared with a cold load of the same
// bytes.
import { deepStrictEqual } from 'node:assert';
import { mkdirSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { tempDir } from '../../../harness/netns.js';
import { ConfigCache } from '../../../src/config/incremental.js';
import { loadFiles, readSourceFiles } from '../../../src/config/load.js';
import { findConfigSource } from '../../../src/config/source.js';
import type { LoadOptions } from '../../../src/config/types.js';

const OPTIONS: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };

function cidr(i: number): string {
  const b = i * 2;
  return `10.${(b >> 8) & 255}.${b & 255}.0/24`;
}

/** A key's text: a block list of `count` CIDRs from `from`, some lines edited by `edit`. */
function keyText(from: number, count: number, edit: number): string {
  const items = Array.from({ length: count }, (_, i) => `  - ${cidr(from + i)}`);
  if (edit % 5 === 1) items.splice(edit % items.length, 1); // one removed
  if (edit % 5 === 2) items.push(`  - ${cidr(from + count + (edit % 7))}`); // one added
  if (edit % 5 === 3) items[edit % items.length] = `#${items[edit % items.length]}`; // commented
  if (edit % 5 === 4) items.push('  - 10.0.0.1/8'); // invalid
  return `nonMasqueradeCIDRs:\n${items.join('\n')}\n`;
}

type Step =
  | { op: 'swap'; keys: number[]; edit: number } // a new ConfigMap version with these keys
  | { op: 'in-place'; key: number; edit: number } // a key's file rewritten where it is
  | { op: 'rename'; key: number; to: number } // a plain directory's file renamed
  | { op: 'move-out'; key: number } // moved out of the directory
  | { op: 'move-in' }; // the last one moved out comes back

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    op: fc.constant('swap' as const),
    keys: fc.uniqueArray(fc.nat({ max: 3 }), { minLength: 1, maxLength: 3 }),
    edit: fc.nat(),
  }),
  fc.record({ op: fc.constant('in-place' as const), key: fc.nat({ max: 3 }), edit: fc.nat() }),
  fc.record({
    op: fc.constant('rename' as const),
    key: fc.nat({ max: 3 }),
    to: fc.nat({ max: 3 }),
  }),
  fc.record({ op: fc.constant('move-out' as const), key: fc.nat({ max: 3 }) }),
  fc.constant({ op: 'move-in' as const }),
);

const counted = { loads: 0, spliced: 0 };

/** One sequence in a fresh directory; `volume`: a ConfigMap volume, else a plain directory. */
async function run(root: string, volume: boolean, steps: readonly Step[]): Promise<void> {
  const dir = join(root, 'config');
  const aside = join(root, 'aside');
  rmSync(root, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  mkdirSync(aside);
  const cache = new ConfigCache();
  let version = 0;
  const name = (key: number) => `ip-masq-${key}`;
  /** A new version holding `keys`, `..data` moved to it atomically, the old one removed. */
  const swap = (keys: readonly number[], edit: number) => {
    version++;
    const next = `..v${version}`;
    mkdirSync(join(dir, next));
    for (const key of keys)
      writeFileSync(join(dir, next, name(key)), keyText(key * 40, 20, edit + key));
    symlinkSync(next, join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
    for (const entry of readdirSync(dir)) {
      if (entry.startsWith('..v') && entry !== next) rmSync(join(dir, entry), { recursive: true });
      if (entry.startsWith('ip-masq-')) rmSync(join(dir, entry));
    }
    for (const key of keys) symlinkSync(join('..data', name(key)), join(dir, name(key)));
  };
  const check = async () => {
    const source = await findConfigSource(dir);
    if (source.kind !== 'file' && source.kind !== 'directory') return;
    const files = await readSourceFiles(source);
    const cold = loadFiles(source, files, OPTIONS);
    const warm = cache.load(source, files, OPTIONS);
    deepStrictEqual(warm.result, cold);
    counted.loads++;
    if (warm.splices) counted.spliced++;
    if (Math.random() < 0.7) cache.prepare(OPTIONS);
  };
  if (volume) swap([0, 1], 0);
  else for (const key of [0, 1]) writeFileSync(join(dir, name(key)), keyText(key * 40, 20, 0));
  await check();
  const movedOut: string[] = [];
  for (const s of steps) {
    if (s.op === 'swap') {
      if (volume) swap(s.keys, s.edit);
      else
        for (const key of s.keys)
          writeFileSync(join(dir, name(key)), keyText(key * 40, 20, s.edit));
    } else if (s.op === 'in-place') {
      const path = volume ? join(dir, '..data', name(s.key)) : join(dir, name(s.key));
      const real = volume ? join(dir, `..v${version}`, name(s.key)) : path;
      try {
        writeFileSync(`${real}.tmp`, keyText(s.key * 40, 20, s.edit));
        renameSync(`${real}.tmp`, real);
      } catch {
        // The key is not in this version.
      }
    } else if (volume) {
      continue; // a volume's files are kubelet's: renamed and moved only in a plain directory
    } else if (s.op === 'rename') {
      try {
        renameSync(join(dir, name(s.key)), join(dir, name(s.to)));
      } catch {
        // Not there.
      }
    } else if (s.op === 'move-out') {
      try {
        renameSync(join(dir, name(s.key)), join(aside, name(s.key)));
        movedOut.push(name(s.key));
      } catch {
        // Not there.
      }
    } else {
      const back = movedOut.pop();
      if (back) renameSync(join(aside, back), join(dir, back));
    }
    await check();
  }
}

t.test('ConfigMap volume swaps and directory moves load as a whole load does', async (t) => {
  const root = tempDir(t, 'incremental-fs');
  let n = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.boolean(),
      fc.array(step, { minLength: 1, maxLength: 8 }),
      (volume, steps) => run(join(root, `case-${n++}`), volume, steps),
    ),
    { numRuns: Number(process.env.IPMASQ_PROPERTY_RUNS ?? 0) || 200 },
  );
  t.ok(counted.loads > 0, `${counted.loads} loads compared`);
  t.ok(counted.spliced > 0, `${counted.spliced} of them answered from the last load`);
});
