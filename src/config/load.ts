// Reads the files of a config source (source.ts), each bounded in size, into one Config.
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { buildConfig } from './build.js';
import { type ConfigFragment, parseFragment } from './fragment.js';
import type { ListRegion } from './yaml-fast.js';
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
export async function readBoundedBytes(file: string): Promise<Buffer> {
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
    return buffer.subarray(0, length);
  } finally {
    await handle.close();
  }
}

/**
 * The file's text as its bytes say it, a byte order mark included: the parse takes one off
 * (fragment.ts), so a file reads exactly as its text does (a second mark is content).
 */
function decoded(bytes: Buffer): string {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new ReadFailure('is not valid UTF-8 text');
  }
}

/** readBoundedBytes, as text: anything but UTF-8 is refused. */
export async function readBounded(file: string): Promise<string> {
  return decoded(await readBoundedBytes(file));
}

/** One file of a source as read: its bytes, or why they cannot be used. */
export type FileBytes =
  | { readonly file: string; readonly bytes: Buffer }
  | { readonly file: string; readonly error: ConfigError };

/**
 * The bytes of each file `source` names, in order, up to the first that cannot be read (whose
 * error ends the list: nothing after it is read).
 */
export async function readSourceFiles(
  source: ConfigSource & { kind: 'file' | 'directory' },
): Promise<FileBytes[]> {
  const read: FileBytes[] = [];
  for (const file of source.files) {
    try {
      read.push({ file, bytes: await readBoundedBytes(sourceFile(source, file)) });
    } catch (err) {
      const error =
        err instanceof ReadFailure
          ? new ConfigError(file, err.message)
          : new ConfigError(file, errnoText(err), 'unreadable');
      read.push({ file, error });
      break;
    }
  }
  return read;
}

/** What the files' text said beside the result: where the fast path found each file's lists. */
export interface TextFacts {
  /** Per file read: its lists' regions, or undefined when the fast path did not read it. */
  regions: (ListRegion[] | undefined)[];
  /** The fragments merged. */
  fragments: ConfigFragment[];
}

/**
 * The config of files read (readSourceFiles): each decoded and parsed in order, the first error the
 * result. `facts`, when given, gets what config/incremental.ts keeps of a load.
 */
export function loadFiles(
  source: ConfigSource & { kind: 'file' | 'directory' },
  files: readonly FileBytes[],
  options: LoadOptions,
  budget?: ParseBudget,
  facts?: TextFacts,
): LoadResult {
  const warnings = [...source.warnings];
  const fragments: ConfigFragment[] = [];
  for (const read of files) {
    if ('error' in read) {
      return Object.freeze({ ok: false, error: read.error, warnings: Object.freeze(warnings) });
    }
    let text: string;
    try {
      text = decoded(read.bytes);
    } catch (err) {
      if (!(err instanceof ReadFailure)) throw err;
      const error = new ConfigError(read.file, err.message);
      return Object.freeze({ ok: false, error, warnings: Object.freeze(warnings) });
    }
    const regions: ListRegion[] = [];
    const result = parseFragment(text, read.file, options, budget, regions);
    warnings.push(...result.warnings);
    if (!result.ok) {
      return Object.freeze({ ok: false, error: result.error, warnings: Object.freeze(warnings) });
    }
    // Offsets in the text are offsets in the bytes only where every character is one byte.
    facts?.regions.push(
      regions.length > 0 && text.length === read.bytes.length ? regions : undefined,
    );
    fragments.push(result.fragment);
  }
  facts?.fragments.push(...fragments);
  return buildConfig(fragments, options, source.path, warnings);
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
  return loadFiles(source, await readSourceFiles(source), options, budget);
}

/** Loads the config at `path` (file or directory) in this thread. */
export async function loadConfig(path: string, options: LoadOptions): Promise<LoadResult> {
  return loadSource(await findConfigSource(path), options);
}
