// The agent's one config loader (docs/design.md). Each call looks at the config path once
// (source.ts); while the source's stamp is unchanged the last result is returned without reading
// (a resync re-reads the config, docs/writes.md "When it writes", and a large one is costly to
// parse); otherwise small configs parse in this thread and larger ones on the worker
// (load-worker.ts).
import { loadSource } from './load.js';
import { endLoaderThread, loadSourceOffThread } from './load-worker.js';
import { type ConfigSource, DirectoryListings, findConfigSource } from './source.js';
import { loadOptionsKey } from './base.js';
import type { LoadOptions, LoadResult } from './types.js';
import { ParseDeferred, type ParseBudget } from './yaml.js';

/** How a read is made: `whole`, not from the last load nor from the stamp's cache (a resync). */
export interface ReadMode {
  readonly whole?: boolean;
}
export type SourceLoader = (
  source: ConfigSource,
  options: LoadOptions,
  mode?: ReadMode,
) => Promise<LoadResult>;
export type Loader = (path: string, options: LoadOptions, mode?: ReadMode) => Promise<LoadResult>;

/**
 * What the agent's own thread parses (the rest goes to the worker): any file up to 4 KiB (the usual
 * few CIDRs), and up to 64 KiB the shapes parsed in linear time (JSON, or YAML lists of CIDRs one
 * per line beside a few plain keys: yaml-fast.ts). Below these a worker's start and memory would
 * cost more than the parse (docs/design.md, "Figures").
 */
export const IN_THREAD_BUDGET: ParseBudget = { maxBytes: 64 * 1024, fullParserMaxBytes: 4 * 1024 };

/**
 * In-thread within IN_THREAD_BUDGET, else on the worker (`offThread`) with its time limit. The
 * worker stays while loads go to it (the next change of a large config finds it warm, its code
 * optimized) and ends at the first load that fits in-thread.
 */
export async function loadAdaptive(
  source: ConfigSource,
  options: LoadOptions,
  offThread: SourceLoader = (s, o, mode) =>
    loadSourceOffThread(s, o, undefined, mode?.whole === true),
  mode: ReadMode = {},
): Promise<LoadResult> {
  const bytes = source.kind === 'file' || source.kind === 'directory' ? source.bytes : 0;
  if (bytes <= IN_THREAD_BUDGET.maxBytes) {
    try {
      const result = await loadSource(source, options, IN_THREAD_BUDGET);
      endLoaderThread();
      return result;
    } catch (err) {
      if (!(err instanceof ParseDeferred)) throw err;
    }
  }
  return offThread(source, options, mode);
}

/**
 * A failure to read (errno: EACCES, EMFILE, …) may pass with the file unchanged, so it is tried
 * again; a file that was read and found invalid stays invalid while its stamp is unchanged.
 */
function worthCaching(result: LoadResult): boolean {
  return result.ok || result.error.kind !== 'unreadable';
}

/**
 * The loader: the last result again while the stamp is unchanged, an invalid one too (a
 * pathological file is not parsed again at every resync), but for a read asked `whole`, which
 * reads a valid config again from its bytes. `load` is replaceable for tests. A directory is listed
 * through `listings` (used again while it stays: source.ts); `loaded` is told of each read of the
 * files' bytes.
 */
export function configLoader(
  load: SourceLoader = (source, options, mode) => loadAdaptive(source, options, undefined, mode),
  listings: DirectoryListings = new DirectoryListings(),
  loaded: () => void = () => {},
): Loader {
  let last: { path: string; options: string; stamp: string; result: LoadResult } | undefined;
  return async (path, loadOptions, mode = {}) => {
    // Compared by value: a caller may build the options anew for every read (the Node's labels).
    const options = loadOptionsKey(loadOptions);
    let source = await findConfigSource(path, listings);
    // A resync reads a valid config whole again (docs/writes.md, "The everyday edit"); an invalid
    // result came from a whole load already, and a pathological file is not parsed again.
    if (
      last &&
      last.path === path &&
      last.options === options &&
      last.stamp === source.stamp &&
      !(mode.whole && last.result.ok)
    )
      return last.result;
    loaded();
    let result = await load(source, loadOptions, mode);
    // A ConfigMap version removed while its files were read: kubelet swapped in the next one.
    if (!result.ok && result.error.kind === 'unreadable' && 'snapshot' in source) {
      source = await findConfigSource(path, listings);
      loaded();
      result = await load(source, loadOptions, mode);
    }
    const { stamp } = source;
    last = worthCaching(result) ? { path, options, stamp, result } : undefined;
    return result;
  };
}
