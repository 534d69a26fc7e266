// Which files a config path names (README, "Configuration"): the file itself, or a directory's
// regular `ip-masq*` files in name order. Found once per read, with a stamp of each, and used by
// the loader, the resync cache, the in-thread/worker size choice and the watcher alike.
import { statSync, type Stats } from 'node:fs';
import { lstat, readdir, realpath, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { escapeUnprintable } from '../cidr/index.js';

/** The files a config directory's merge reads: `ip-masq*`. */
export const FILE_PREFIX = 'ip-masq';
/** Where the agent reads its config by default: the original's ConfigMap mount. */
export const DEFAULT_CONFIG_PATH = '/etc/config/ip-masq-agent';
/**
 * More ip-masq* files than this in a config directory are refused before any is opened (a
 * ConfigMap holds 1 MiB in all): thousands stat'ed at every resync made an idle agent busy
 * (docs/hardening.md, round 3).
 */
export const MAX_DIRECTORY_FILES = 1000;

export type ConfigSource =
  /** Nothing at the path: the defaults apply. */
  | { readonly kind: 'missing'; readonly path: string; readonly stamp: string }
  /** The path (or its directory listing) cannot be used; `message` says why. */
  | {
      readonly kind: 'error';
      readonly path: string;
      readonly stamp: string;
      readonly message: string;
      /** A failure to read (errno), not a verdict on the path: tried again at the next read. */
      readonly unreadable: boolean;
    }
  | {
      readonly kind: 'file' | 'directory';
      readonly path: string;
      /** Identity of every file read and every candidate skipped: equal stamps, equal input. */
      readonly stamp: string;
      /** The regular files to read, in order (in `snapshot` when there is one: sourceFile()). */
      readonly files: readonly string[];
      /** Their total size in bytes. */
      readonly bytes: number;
      /** Candidates skipped (dangling symlinks, non-regular files). */
      readonly warnings: readonly string[];
      /**
       * A ConfigMap volume's current version (kubelet's `..data` resolved): the files were found
       * there, so they are of one version whatever kubelet swaps meanwhile.
       */
      readonly snapshot?: string;
    };

export function errnoText(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'EACCES' || code === 'EPERM') return `cannot be read: permission denied (${code})`;
  return `cannot be read: ${code ?? (err as Error).message}`;
}

function unreadable(path: string, message: string): ConfigSource {
  return { kind: 'error', path, stamp: `error:${message}`, message, unreadable: true };
}

function stampOf(info: Stats): string {
  return `${info.dev}:${info.ino}:${info.size}:${info.mtimeMs}:${info.ctimeMs}:${info.mode}`;
}

/** A directory's own identity: its entries added, removed or renamed move its mtime and ctime. */
function directoryStamp(info: Stats): string {
  return `${info.dev}:${info.ino}:${info.mtimeMs}:${info.ctimeMs}:${info.mode}:${info.nlink}`;
}

/** A directory's `ip-masq*` names as listed, where (a ConfigMap version or itself), and its stamp. */
interface Listed {
  readonly dir: string;
  readonly names: readonly string[];
  /** The stamps of the directory (and of the version `..data` named) taken before listing. */
  readonly stamp: string;
}

/**
 * How long a directory's listing may be used again while its own metadata stays, before it is
 * listed again all the same and compared (the audit of this fast path, docs/writes.md "When it
 * writes").
 */
export const LISTING_AUDIT_MS = 60_000;
/**
 * A listing is used again only when the directory's last change is this much older than the
 * listing: a later change then has a later mtime whatever the filesystem's timestamp granularity
 * (a change in the same clock tick as the one listed would otherwise leave the stamp as it was).
 */
export const LISTING_SETTLED_MS = 1_000;

/** What a `DirectoryListings` counts and reports (the metrics, through the agent), and lists with. */
export interface ListingDeps {
  /** A directory was listed (`readdir`). */
  readonly listed?: () => void;
  /** A listing used again differed from a fresh one though the directory's stamp had not moved. */
  readonly mismatch?: (details: { directory: string; difference: string }) => void;
  /** Lists a directory (node:fs's readdir; a test may put a fault in). */
  readonly readdir?: (dir: string) => Promise<string[]>;
  /** The wall clock, in ms (the directories' timestamps are on it). */
  readonly now?: () => number;
}

/**
 * The last listing of a config directory, used again while the directory's own metadata (and the
 * ConfigMap version `..data` names) stays and its last change had settled when it was listed
 * (docs/writes.md, "When it writes"): an idle resync of a directory of many files then lists
 * nothing. Every LISTING_AUDIT_MS it is listed again and compared; a difference is reported.
 */
export class DirectoryListings {
  private last:
    | (Listed & { readonly path: string; readonly settled: boolean; readonly at: number })
    | undefined;
  private readonly deps: ListingDeps;

  constructor(deps: ListingDeps = {}) {
    this.deps = deps;
  }

  /** The names in `path` (its current ConfigMap version's), listed or as last listed. */
  async list(path: string, info: Stats): Promise<Listed> {
    const started = (this.deps.now ?? Date.now)();
    const version = await currentVersionDir(path);
    const infos = version === path ? [info] : [info, await stat(version)];
    const stamp = `${version}|${infos.map(directoryStamp).join('|')}`;
    const last = this.last;
    const reusable =
      last !== undefined && last.path === path && last.stamp === stamp && last.settled;
    if (reusable && started - last.at < LISTING_AUDIT_MS) return last;
    this.deps.listed?.();
    const names = (await (this.deps.readdir ?? readdir)(version))
      .filter((name) => name.startsWith(FILE_PREFIX))
      .sort();
    if (reusable) this.audit(path, last.names, names);
    const changed = Math.max(...infos.map((i) => Math.max(i.mtimeMs, i.ctimeMs)));
    const settled = started - changed >= LISTING_SETTLED_MS;
    this.last = { path, dir: version, names, stamp, settled, at: started };
    return this.last;
  }

  /** Forgets the last listing (a read that failed part way). */
  forget(): void {
    this.last = undefined;
  }

  private audit(path: string, kept: readonly string[], listed: readonly string[]): void {
    if (kept.length === listed.length && kept.every((name, i) => name === listed[i])) return;
    const gone = kept.filter((name) => !listed.includes(name));
    const added = listed.filter((name) => !kept.includes(name));
    this.deps.mismatch?.({
      directory: escapeUnprintable(path),
      difference: `listed again with its stamp unchanged: ${added.length} name(s) added (${added.slice(0, 3).map(escapeUnprintable).join(', ')}), ${gone.length} gone (${gone.slice(0, 3).map(escapeUnprintable).join(', ')})`,
    });
  }
}

/**
 * Where a directory's current files are: a ConfigMap volume's `..data` symlink resolved to the
 * version it points at (kubelet swaps it atomically, then adds and removes the keys' own symlinks
 * one by one: read there, a swap is seen whole or not at all, however slow its steps), else the
 * directory itself.
 */
async function currentVersionDir(path: string): Promise<string> {
  const data = join(path, '..data');
  const link = await lstat(data).catch(() => undefined);
  return link?.isSymbolicLink() ? realpath(data) : path;
}

async function directorySource(
  path: string,
  info: Stats,
  listings: DirectoryListings,
): Promise<ConfigSource> {
  let listed: Listed | undefined;
  // A version removed between resolving and listing is a swap under way: resolve again.
  for (let attempt = 0; listed === undefined; attempt++) {
    try {
      listed = await listings.list(path, info);
    } catch (err) {
      listings.forget();
      const retry = (err as NodeJS.ErrnoException).code === 'ENOENT' && attempt < 2;
      if (!retry) return unreadable(path, errnoText(err));
    }
  }
  const { dir, names } = listed;
  if (names.length > MAX_DIRECTORY_FILES) {
    // One message however many there are: a directory filling up is one error, logged once.
    const message = `holds more than ${MAX_DIRECTORY_FILES} ip-masq* files (the limit): merge them`;
    return { kind: 'error', path, stamp: `error:${message}`, message, unreadable: false };
  }
  const files: string[] = [];
  const warnings: string[] = [];
  const stamps: string[] = [];
  let bytes = 0;
  for (const name of names) {
    // Named as the directory shows it, found in the version read.
    const file = join(path, name);
    let info: Stats;
    try {
      info = await stat(join(dir, name)); // a key's own symlink would follow ..data anew
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ELOOP') {
        return unreadable(path, `${escapeUnprintable(name)}: ${errnoText(err)}`);
      }
      // A symlink to nothing, or round in a loop: no file there, as when it is absent.
      const what = code === 'ELOOP' ? 'a symlink loop' : 'a dangling symlink';
      warnings.push(`${escapeUnprintable(file)}: skipped: ${what}`);
      stamps.push(`${name}=${code}`);
      continue;
    }
    stamps.push(`${name}=${stampOf(info)}`);
    if (!info.isFile()) {
      warnings.push(`${escapeUnprintable(file)}: skipped: not a regular file`);
      continue;
    }
    files.push(file);
    bytes += info.size;
  }
  const snapshot = dir === path ? {} : { snapshot: dir };
  const stamp = `dir|${dir === path ? '' : dir}|${stamps.join('|')}`;
  return { kind: 'directory', path, stamp, files, bytes, warnings, ...snapshot };
}

/** Where to read one of the source's files: in the ConfigMap version found, when there is one. */
export function sourceFile(source: ConfigSource, file: string): string {
  return source.kind === 'directory' && source.snapshot
    ? join(source.snapshot, basename(file))
    : file;
}

/**
 * Looks at `path` once. Never rejects: an unusable path is a source of kind `error`. A directory's
 * listing comes from `listings` (one per reader: the loader keeps its own).
 */
export async function findConfigSource(
  path: string,
  listings: DirectoryListings = new DirectoryListings(),
): Promise<ConfigSource> {
  let info: Stats;
  try {
    info = await stat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      return { kind: 'missing', path, stamp: 'missing' };
    }
    return unreadable(path, errnoText(err));
  }
  if (info.isDirectory()) return directorySource(path, info, listings);
  if (info.isFile()) {
    const stamp = `file|${stampOf(info)}`;
    return { kind: 'file', path, stamp, files: [path], bytes: info.size, warnings: [] };
  }
  const message = 'is neither a regular file nor a directory';
  const stamp = `error:${message}|${stampOf(info)}`;
  return { kind: 'error', path, stamp, message, unreadable: false };
}

/**
 * The directory to watch for changes: the config itself in directory mode, else the directory
 * holding the file (a missing file may appear there later).
 */
export function watchedDirectory(path: string): string {
  try {
    if (statSync(path).isDirectory()) return path;
  } catch {
    // Missing: watch where it would appear.
  }
  return dirname(path);
}
