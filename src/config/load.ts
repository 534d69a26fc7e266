// Reads --config: one file, or every regular `ip-masq*` file of a directory (ConfigMap volume layout).
import { constants, type Stats } from 'node:fs';
import { open, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { buildConfig } from './build.js';
import { type ConfigFragment, parseFragment } from './fragment.js';
import { ConfigError, type LoadOptions, type LoadResult } from './types.js';

export const MAX_CONFIG_BYTES = 16 * 1024 * 1024;
const FILE_PREFIX = 'ip-masq';

class ReadFailure extends Error {}

function errnoText(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'EACCES' || code === 'EPERM') return `cannot be read: permission denied (${code})`;
  return `cannot be read: ${code ?? (err as Error).message}`;
}

function tooLarge(bytes: number): ReadFailure {
  return new ReadFailure(
    `is ${bytes} bytes, above the ${MAX_CONFIG_BYTES}-byte (16 MiB) limit for a config file`,
  );
}

/**
 * Reads at most MAX_CONFIG_BYTES + 1 bytes: a huge or growing file is refused, not slurped. Opened
 * non-blocking and checked on the descriptor, never stat-then-open: a FIFO swapped in for the file
 * would otherwise hold a pool thread in open() for good.
 */
export async function readBounded(file: string): Promise<string> {
  const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const info = await handle.stat();
    if (!info.isFile()) throw new ReadFailure('is not a regular file');
    if (info.size > MAX_CONFIG_BYTES) throw tooLarge(info.size);
    let buffer = Buffer.allocUnsafe(info.size + 1);
    let length = 0;
    for (;;) {
      if (length === buffer.length) {
        if (buffer.length > MAX_CONFIG_BYTES) throw tooLarge(length);
        const grown = Buffer.allocUnsafe(Math.min(buffer.length * 2, MAX_CONFIG_BYTES + 1));
        buffer.copy(grown, 0, 0, length);
        buffer = grown;
      }
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(buffer.subarray(0, length));
    } catch {
      throw new ReadFailure('is not valid UTF-8 text');
    }
  } finally {
    await handle.close();
  }
}

async function readFragment(
  file: string,
  options: LoadOptions,
  warnings: string[],
): Promise<ConfigFragment | ConfigError> {
  let text: string;
  try {
    text = await readBounded(file);
  } catch (err) {
    return new ConfigError(file, err instanceof ReadFailure ? err.message : errnoText(err));
  }
  const result = parseFragment(text, file, options);
  warnings.push(...result.warnings);
  return result.ok ? result.fragment : result.error;
}

/** Regular files (symlinks followed) named ip-masq*, dot-names skipped, in name order. */
async function listConfigFiles(dir: string, warnings: string[]): Promise<string[]> {
  const names = (await readdir(dir))
    .filter((name) => !name.startsWith('.') && name.startsWith(FILE_PREFIX))
    .sort();
  const files: string[] = [];
  for (const name of names) {
    const path = join(dir, name);
    let info: Stats;
    try {
      info = await stat(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      warnings.push(`${path}: skipped: a dangling symlink`);
      continue;
    }
    if (info.isFile()) files.push(path);
    else warnings.push(`${path}: skipped: not a regular file`);
  }
  return files;
}

function failure(file: string, message: string, warnings: string[]): LoadResult {
  return Object.freeze({
    ok: false,
    error: new ConfigError(file, message),
    warnings: Object.freeze(warnings),
  });
}

/**
 * Loads the config at `path` (file or directory). Missing path or no ip-masq* file: defaults.
 * Any unreadable or invalid file makes the whole result invalid. Never rejects for bad input.
 */
export async function loadConfig(path: string, options: LoadOptions): Promise<LoadResult> {
  const warnings: string[] = [];
  let info: Stats;
  try {
    info = await stat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return buildConfig([], options, path);
    return failure(path, errnoText(err), warnings);
  }
  let files: string[];
  if (info.isDirectory()) {
    try {
      files = await listConfigFiles(path, warnings);
    } catch (err) {
      return failure(path, errnoText(err), warnings);
    }
  } else if (info.isFile()) {
    files = [path];
  } else {
    return failure(path, 'is neither a regular file nor a directory', warnings);
  }
  const fragments: ConfigFragment[] = [];
  for (const file of files) {
    const fragment = await readFragment(file, options, warnings);
    if (fragment instanceof ConfigError) {
      return Object.freeze({ ok: false, error: fragment, warnings: Object.freeze(warnings) });
    }
    fragments.push(fragment);
  }
  return buildConfig(fragments, options, path, warnings);
}
