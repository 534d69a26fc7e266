// Reads the files of a config source (source.ts), each bounded in size, into one Config.
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { buildConfig } from './build.js';
import { type ConfigFragment, parseFragment } from './fragment.js';
import { type ConfigSource, errnoText, findConfigSource, sourceFile } from './source.js';
import type { ParseBudget } from './yaml.js';
import { ConfigError, type LoadOptions, type LoadResult } from './types.js';

export const MAX_CONFIG_BYTES = 16 * 1024 * 1024;

class ReadFailure extends Error {}

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
  readFrom: string,
  options: LoadOptions,
  warnings: string[],
  budget: ParseBudget | undefined,
): Promise<ConfigFragment | ConfigError> {
  let text: string;
  try {
    text = await readBounded(readFrom);
  } catch (err) {
    if (err instanceof ReadFailure) return new ConfigError(file, err.message);
    return new ConfigError(file, errnoText(err), 'unreadable');
  }
  const result = parseFragment(text, file, options, budget);
  warnings.push(...result.warnings);
  return result.ok ? result.fragment : result.error;
}

/**
 * Reads the files `source` names (config/source.ts). Missing path or no ip-masq* file: defaults.
 * Any unreadable or invalid file makes the whole result invalid. Never rejects for bad input; with
 * a budget, rejects with ParseDeferred for a file beyond it.
 */
export async function loadSource(
  source: ConfigSource,
  options: LoadOptions,
  budget?: ParseBudget,
): Promise<LoadResult> {
  if (source.kind === 'missing') return buildConfig([], options, source.path);
  if (source.kind === 'error') {
    return Object.freeze({
      ok: false,
      error: new ConfigError(
        source.path,
        source.message,
        source.unreadable ? 'unreadable' : 'invalid',
      ),
      warnings: Object.freeze([]),
    });
  }
  const warnings = [...source.warnings];
  const fragments: ConfigFragment[] = [];
  for (const file of source.files) {
    const fragment = await readFragment(file, sourceFile(source, file), options, warnings, budget);
    if (fragment instanceof ConfigError) {
      return Object.freeze({ ok: false, error: fragment, warnings: Object.freeze(warnings) });
    }
    fragments.push(fragment);
  }
  return buildConfig(fragments, options, source.path, warnings);
}

/** Loads the config at `path` (file or directory) in this thread. */
export async function loadConfig(path: string, options: LoadOptions): Promise<LoadResult> {
  return loadSource(await findConfigSource(path), options);
}
