// The only module that loads the native addon. Calls are serialised here: libnftables is not safe
// for concurrent use, and queueing one call at a time keeps the rest of the libuv pool free for I/O.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

interface NativeAddon {
  run(script: string, dryRun: boolean, json: boolean): Promise<string>;
  generationId(): Promise<string>;
  version: string;
}

export interface RunOptions {
  /** Check only, like `nft -c`: nothing is committed. */
  dryRun?: boolean;
  /** JSON output, like `nft -j`. */
  json?: boolean;
}

/** An error from libnftables, carrying its own message text. */
export class NftError extends Error {
  readonly nftMessage: string;
  constructor(nftMessage: string, options?: { cause?: unknown }) {
    super(`nftables: ${nftMessage.trim()}`, options);
    this.name = 'NftError';
    this.nftMessage = nftMessage;
  }
  isNotFound(): boolean {
    return /No such file or directory|does not exist/.test(this.nftMessage);
  }
  isAlreadyExists(): boolean {
    return /File exists/.test(this.nftMessage);
  }
}

const packageRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const addonPaths = [
  join(packageRoot, 'build', 'Release', 'nftables_napi.node'),
  join(packageRoot, 'build', 'Debug', 'nftables_napi.node'),
];

let loaded: NativeAddon | undefined;

function addon(): NativeAddon {
  if (loaded) return loaded;
  const require = createRequire(import.meta.url);
  const failures: string[] = [];
  for (const path of addonPaths) {
    try {
      loaded = require(path) as NativeAddon;
      return loaded;
    } catch (err) {
      failures.push(`  ${path}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(
    'cannot load the nftables_napi addon. Tried:\n' +
      failures.join('\n') +
      '\nThe shared library libnftables1 must be installed (apt-get install libnftables1), ' +
      'and the addon built (npm run build:native, which needs libnftables-dev).',
  );
}

let queue: Promise<unknown> = Promise.resolve();

function serialised<T>(call: () => Promise<T>): Promise<T> {
  const result = queue.then(call, call);
  queue = result.catch(() => undefined);
  return result;
}

/** Run an nft script (what `nft -f` accepts) in one libnftables call, off the JS thread. */
export async function runNft(script: string, options: RunOptions = {}): Promise<string> {
  const native = addon();
  return serialised(() =>
    // Rethrown with a JS stack; the native error carries nothing more than its text.
    native.run(script, options.dryRun ?? false, options.json ?? false).catch((err: unknown) => {
      throw new NftError(err instanceof Error ? err.message : String(err));
    }),
  );
}

/** The network namespace's nftables generation id; it moves on every committed transaction. */
export async function nftGenerationId(): Promise<number> {
  const native = addon();
  return Number(await serialised(() => native.generationId()));
}
