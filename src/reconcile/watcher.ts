// Tells the agent when the config at `path` (a file or a directory) may have changed.
// It watches the directory that holds the config, not the file: editors replace files by rename
// and a ConfigMap volume swaps a `..data` symlink, and neither shows up on a watch of the file's inode.
// It only says "look again"; the reader decides whether anything changed, and the periodic resync
// re-reads the config anyway, so a missed event costs latency, never correctness.
import { watch, statSync, type FSWatcher } from 'node:fs';
import { watchedDirectory } from '../config/source.js';

export interface WatchConfigOptions {
  /** Quiet time after the last event before onChange runs. Default 100. */
  debounceMs?: number;
  /** How often to look for the directory while it does not exist. Default 500. */
  pollMs?: number;
  /** Told when a watch cannot be set up for a reason other than the directory missing (e.g. inotify limits). */
  onError?: (err: unknown) => void;
}

export interface ConfigWatcher {
  close(): void;
}

const missingCodes = new Set(['ENOENT', 'ENOTDIR']);

function isDirectory(dir: string): boolean {
  try {
    return statSync(dir).isDirectory();
  } catch {
    return false;
  }
}

/**
 * Calls onChange (debounced) after anything changes in the directory holding the config. Keeps no
 * handle or timer ref'd: the sync runner's timer is what keeps the process alive.
 */
export function watchConfig(
  path: string,
  onChange: () => void,
  opts: WatchConfigOptions = {},
): ConfigWatcher {
  const debounceMs = opts.debounceMs ?? 100;
  // A steady stream of events must not postpone onChange forever.
  const maxWaitMs = debounceMs * 5;
  const pollMs = opts.pollMs ?? 500;
  const onError = opts.onError ?? (() => {});

  let closed = false;
  let watcher: FSWatcher | undefined;
  let debounceTimer: NodeJS.Timeout | undefined;
  let burstStartedAt = 0;
  let pollTimer: NodeJS.Timeout | undefined;
  let errorReported = false;

  const eventSeen = (): void => {
    if (closed) return;
    const now = performance.now();
    if (debounceTimer === undefined) burstStartedAt = now;
    else clearTimeout(debounceTimer);
    const delay = Math.max(0, Math.min(debounceMs, burstStartedAt + maxWaitMs - now));
    debounceTimer = setTimeout(settled, delay).unref();
  };

  const settled = (): void => {
    debounceTimer = undefined;
    if (closed) return;
    // The burst may have removed or replaced the watched directory, and a replacement can even
    // reuse its inode number (ext4 does), so watch afresh. Nothing is lost in between:
    // onChange runs after the new watch exists.
    if (pollTimer === undefined) rewatch();
    onChange();
  };

  const stopWatching = (): void => {
    watcher?.close();
    watcher = undefined;
  };

  /** Starts watching; false when the directory is not there (or cannot be watched) yet. */
  const establish = (): boolean => {
    const dir = watchedDirectory(path);
    if (!isDirectory(dir)) return false;
    try {
      watcher = watch(dir, { persistent: false }, eventSeen);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (!missingCodes.has(code ?? '') && !errorReported) {
        errorReported = true;
        onError(err);
      }
      return false;
    }
    errorReported = false;
    watcher.on('error', () => {
      stopWatching();
      eventSeen();
    });
    return true;
  };

  const rewatch = (): void => {
    stopWatching();
    if (establish()) return;
    pollTimer = setInterval(() => {
      if (closed || !establish()) return;
      clearInterval(pollTimer);
      pollTimer = undefined;
      // Whatever was written before the watch existed has not been reported yet.
      eventSeen();
    }, pollMs).unref();
  };

  rewatch();

  return {
    close(): void {
      closed = true;
      stopWatching();
      clearTimeout(debounceTimer);
      clearInterval(pollTimer);
      debounceTimer = pollTimer = undefined;
    },
  };
}
