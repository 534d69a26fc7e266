// Resyncs re-read the config (README, "When it writes"), but parsing 100 000 CIDRs costs ~300 ms of CPU. A stat of
// each file the loader would read is enough to know nothing changed; only then is the last result reused.
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { LoadOptions, LoadResult } from '../config/types.js';

type Loader = (path: string, options: LoadOptions) => Promise<LoadResult>;

async function fileStamp(path: string): Promise<string> {
  try {
    const s = await stat(path);
    return `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}:${s.mode}`;
  } catch (err) {
    return `error:${(err as NodeJS.ErrnoException).code ?? 'unknown'}`;
  }
}

/** Identity of what the loader would read at `path`: the file, or the directory's ip-masq* files. */
export async function configStamp(path: string): Promise<string> {
  const directory = await stat(path).then(
    (s) => s.isDirectory(),
    () => false,
  );
  if (!directory) return fileStamp(path);
  const names = (await readdir(path)).filter((name) => name.startsWith('ip-masq')).sort();
  const stamps = await Promise.all(
    names.map(async (name) => `${name}=${await fileStamp(join(path, name))}`),
  );
  return `dir|${stamps.join('|')}`;
}

/**
 * A failure to read (errno: EACCES, EMFILE, …) may pass with the file unchanged, so it is tried again;
 * a file that was read and found invalid stays invalid while its stamp is unchanged.
 */
function worthCaching(result: LoadResult): boolean {
  return result.ok || !/: cannot be read: /.test(result.error.message);
}

/**
 * Wraps a loader: while the stamp is unchanged, the last result is returned again without reading,
 * an invalid one too (a pathological file is not parsed again at every resync).
 */
export function cachingLoader(load: Loader): Loader {
  let last: { path: string; options: LoadOptions; stamp: string; result: LoadResult } | undefined;
  return async (path, options) => {
    const stamp = await configStamp(path);
    if (last && last.path === path && last.options === options && last.stamp === stamp)
      return last.result;
    const result = await load(path, options);
    last = worthCaching(result) ? { path, options, stamp, result } : undefined;
    return result;
  };
}
