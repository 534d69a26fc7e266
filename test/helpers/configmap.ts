// Writes a directory the way kubelet's atomic writer updates a ConfigMap volume, in its order and in
// one go: the keys into a new timestamped directory, a `..data_tmp` symlink to it renamed over
// `..data`, user-visible `key → ..data/key` symlinks for new keys, old keys' symlinks removed, then
// the previous timestamped directory.
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

let version = 0;

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Replaces the volume's content with `keys` (file name → content). With `gapMs`, waits that long
 * between the steps, as a busy node's kubelet may; without, runs them all before returning.
 */
export async function configMapWrite(
  dir: string,
  keys: Readonly<Record<string, string>>,
  gapMs = 0,
): Promise<void> {
  const step = async () => {
    if (gapMs > 0) await pause(gapMs);
  };
  const next = `..2026_12_01_00_00_00.${++version}`;
  mkdirSync(join(dir, next));
  for (const [key, content] of Object.entries(keys)) writeFileSync(join(dir, next, key), content);
  const data = join(dir, '..data');
  const previous = existsSync(data) ? readlinkSync(data) : undefined;
  const before = new Set(previous ? readdirSync(join(dir, previous)) : []);
  symlinkSync(next, join(dir, '..data_tmp'));
  await step();
  renameSync(join(dir, '..data_tmp'), data);
  for (const key of Object.keys(keys)) {
    if (before.has(key)) continue;
    await step();
    symlinkSync(join('..data', key), join(dir, key));
  }
  for (const key of before) {
    if (key in keys) continue;
    await step();
    unlinkSync(join(dir, key));
  }
  await step();
  if (previous) rmSync(join(dir, previous), { recursive: true });
}
