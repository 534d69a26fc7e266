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
  return new DirectoryWatch(path, onChange, opts);
}

/** The watch of the config's directory, made again after each burst of events. */
class DirectoryWatch implements ConfigWatcher {
  private readonly debounceMs: number;
  /** A steady stream of events must not postpone onChange forever. */
  private readonly maxWaitMs: number;
  private readonly pollMs: number;
  private readonly onError: (err: unknown) => void;
  private closed = false;
  private watcher: FSWatcher | undefined;
  private debounceTimer: NodeJS.Timeout | undefined;
  private burstStartedAt = 0;
  private pollTimer: NodeJS.Timeout | undefined;
  private errorReported = false;

  constructor(
    private readonly path: string,
    private readonly onChange: () => void,
    opts: WatchConfigOptions,
  ) {
    this.debounceMs = opts.debounceMs ?? 100;
    this.maxWaitMs = this.debounceMs * 5;
    this.pollMs = opts.pollMs ?? 500;
    this.onError = opts.onError ?? (() => {});
    this.rewatch();
  }

  close(): void {
    this.closed = true;
    this.stopWatching();
    clearTimeout(this.debounceTimer);
    clearInterval(this.pollTimer);
    this.debounceTimer = this.pollTimer = undefined;
  }

  private readonly eventSeen = (): void => {
    if (this.closed) return;
    const now = performance.now();
    if (this.debounceTimer === undefined) this.burstStartedAt = now;
    else clearTimeout(this.debounceTimer);
    const delay = Math.max(
      0,
      Math.min(this.debounceMs, this.burstStartedAt + this.maxWaitMs - now),
    );
    this.debounceTimer = setTimeout(() => this.settled(), delay).unref();
  };

  private settled(): void {
    this.debounceTimer = undefined;
    if (this.closed) return;
    // The burst may have removed or replaced the watched directory, and a replacement can even
    // reuse its inode number (ext4 does), so watch afresh. Nothing is lost in between:
    // onChange runs after the new watch exists.
    if (this.pollTimer === undefined) this.rewatch();
    this.onChange();
  }

  private stopWatching(): void {
    this.watcher?.close();
    this.watcher = undefined;
  }

  /** Starts watching; false when the directory is not there (or cannot be watched) yet. */
  private establish(): boolean {
    const dir = watchedDirectory(this.path);
    if (!isDirectory(dir)) return false;
    try {
      this.watcher = watch(dir, { persistent: false }, this.eventSeen);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (!missingCodes.has(code ?? '') && !this.errorReported) {
        this.errorReported = true;
        this.onError(err);
      }
      return false;
    }
    this.errorReported = false;
    this.watcher.on('error', () => {
      this.stopWatching();
      this.eventSeen();
    });
    return true;
  }

  private rewatch(): void {
    this.stopWatching();
    if (this.establish()) return;
    this.pollTimer = setInterval(() => {
      if (this.closed || !this.establish()) return;
      clearInterval(this.pollTimer);
      this.pollTimer = undefined;
      // Whatever was written before the watch existed has not been reported yet.
      this.eventSeen();
    }, this.pollMs).unref();
  }
}
