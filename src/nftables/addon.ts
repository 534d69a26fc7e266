// The only module that loads the native addon. Each libnftables call runs in a child process the
// addon forks for it (docs/design.md, "libnftables"): a crash, abort or hang there is an NftError
// here, never the end of the agent. Calls are serialised: one at a time keeps the libuv pool free
// for I/O, and the kernel serialises nftables commits per namespace anyway.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  formatAddress,
  packRanges,
  PackedRanges,
  parseAddress,
  type Range,
  type RangeList,
} from '../cidr/index.js';
import { nftFailureKinds, type CommitStep, type NftFailureKind, type ReplyTuple } from './types.js';
import { errorText } from '../errors.js';

export type { NftFailureKind } from './types.js';

/** What the native flush answers: counts, and with listOnly the reply tuples (inet_ntop's text). */
interface NativeFlush {
  readonly seen: number;
  readonly deleted: ReadonlyArray<readonly [protocol: number, count: number]>;
  readonly replies: ReadonlyArray<{
    readonly source: string;
    readonly sourcePort: number;
    readonly destination: string;
    readonly destinationPort: number;
  }>;
  readonly error?: string;
}

interface NativeAddon {
  run(script: string, dryRun: boolean, json: boolean, timeoutMs: number): Promise<string>;
  generationId(): Promise<number>;
  listTables(): Promise<Array<{ family: string; name: string }>>;
  conntrackFlush(
    family: 4 | 6,
    protocols: number[],
    ranges: Buffer,
    listOnly: boolean,
    sources: Buffer,
    translatedOnly: boolean,
  ): Promise<NativeFlush>;
  releaseMemory(): boolean;
  mapLargeAllocations(bytes: number): boolean;
  pageOutFileMappings(): Promise<number>;
  version: string;
  libnftablesVersion: string;
}

export interface RunOptions {
  /** Check only, like `nft -c`: nothing is committed. */
  dryRun?: boolean;
  /** JSON output, like `nft -j`. */
  json?: boolean;
}

/**
 * The longest one libnftables call may take before its process is killed. A 100 000-element
 * replace takes about a second here; IPMASQ_NFT_TIMEOUT_MS overrides it (tests use a short one).
 */
export function nftTimeoutMs(env: NodeJS.ProcessEnv = process.env): number {
  const value = Number(env.IPMASQ_NFT_TIMEOUT_MS);
  return Number.isSafeInteger(value) && value > 0 && value <= 3_600_000 ? value : 30_000;
}

/**
 * How a libnftables call failed: `error`, it refused the command (its own message); `crash`, its
 * process died (a signal, e.g. SIGSEGV on objects it cannot parse); `timeout`, it was killed after
 * the time limit; `spawn`, no process could be started for it (fork or pipe failed).
 */

/** An error from libnftables, carrying its own message text. */
export class NftError extends Error {
  readonly nftMessage: string;
  readonly kind: NftFailureKind;
  constructor(nftMessage: string, kind: NftFailureKind = 'error', options?: { cause?: unknown }) {
    super(`nftables: ${nftMessage.trim()}`, options);
    this.name = 'NftError';
    this.nftMessage = nftMessage;
    this.kind = kind;
  }
  isNotFound(): boolean {
    return /No such file or directory|does not exist/.test(this.nftMessage);
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
      '\nThe shared libraries libnftables1 and libnetfilter-conntrack3 must be installed, ' +
      'and the addon built (npm run build:native, which needs libnftables-dev and libnetfilter-conntrack-dev).',
  );
}

let queue: Promise<unknown> = Promise.resolve();

function serialised<T>(call: () => Promise<T>): Promise<T> {
  const result = queue.then(call, call);
  queue = result.catch(() => undefined);
  return result;
}

function runNative(native: NativeAddon, script: string, options: RunOptions): Promise<string> {
  return (
    native
      .run(script, options.dryRun ?? false, options.json ?? false, nftTimeoutMs())
      // Rethrown with a JS stack; the native error carries nothing more than its text and kind.
      .catch((err: unknown) => {
        const code = (err as { code?: unknown } | null)?.code;
        const kind = nftFailureKinds.find((k) => k === code) ?? 'error';
        throw new NftError(errorText(err), kind);
      })
  );
}

/** Run an nft script (what `nft -f` accepts) in one libnftables call, off the JS thread. */
export async function runNft(script: string, options: RunOptions = {}): Promise<string> {
  const native = addon();
  return serialised(() => runNative(native, script, options));
}

/**
 * Commits a script in one libnftables call, with the namespace's generation id read right before
 * and right after it in the same turn of the queue: no other call of ours comes between, so a step
 * other than one is another tool's commit.
 */
export async function commitNft(script: string): Promise<CommitStep> {
  const native = addon();
  const generation = () => native.generationId().catch(() => undefined);
  return serialised(async () => {
    const before = await generation();
    await runNative(native, script, {});
    return { before, after: await generation() };
  });
}

/** The network namespace's nftables generation id; it moves on every committed transaction. */
export async function nftGenerationId(): Promise<number> {
  const native = addon();
  return serialised(() => native.generationId());
}

/** Every table in the namespace as the kernel names it, from one netlink dump (no libnftables). */
export async function nftTableNames(): Promise<Array<{ family: string; name: string }>> {
  const native = addon();
  return serialised(() => native.listTables());
}

/** What one conntrack flush did: entries of the family seen, deleted per protocol, what failed. */
export interface ConntrackFlushResult {
  readonly seen: number;
  readonly deleted: ReadonlyMap<number, number>;
  readonly error: string | undefined;
}

/** Packed buffers by range list: a flush passes the same list to the addon twice. */
const packedLists = new WeakMap<object, PackedRanges>();

/** The ranges as the addon takes them (cidr/ranges.ts, PackedRanges), packed once per list. */
function rangeBuffer(family: 4 | 6, ranges: RangeList): Buffer {
  let packed = ranges instanceof PackedRanges ? ranges : packedLists.get(ranges);
  if (!packed) {
    packed = packRanges(family, ranges);
    packedLists.set(ranges, packed);
  }
  const { bytes } = packed;
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** The native flush's answer, its reply addresses parsed and formatted by the agent itself. */
function flushAnswer(answer: NativeFlush): ConntrackFlushResult & { replies: ReplyTuple[] } {
  const replies = answer.replies.map((reply) => {
    // Re-formatted by the agent's own parser: only addresses it formatted reach nftables.
    const source = parseAddress(reply.source);
    const destination = parseAddress(reply.destination);
    return {
      source: formatAddress(source.family, source.addr),
      sourcePort: port(reply.sourcePort),
      destination: formatAddress(destination.family, destination.addr),
      destinationPort: port(reply.destinationPort),
    };
  });
  return { seen: answer.seen, deleted: new Map(answer.deleted), error: answer.error, replies };
}

function port(value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 65_535) throw new Error(`bad port ${value}`);
  return value;
}

/**
 * Deletes the conntrack entries of `family` whose reply comes from one of `ranges` (sorted,
 * disjoint [first, last]) — the destination after any DNAT, the one postrouting decided on — and
 * whose protocol is one of `protocols` (every one when empty), through libnetfilter_conntrack on a
 * pool thread. Never rejects for a kernel without conntrack.
 */
/**
 * Which entries a flush takes besides their destination (the reply's source): those whose sender
 * is in `sources` (any when absent), and only the translated ones with `translatedOnly` (README,
 * "Egress policy": a changed sourceCIDRs or snatAddress).
 */
export interface FlowSelection {
  readonly sources?: readonly Range[];
  readonly translatedOnly?: boolean;
}

export async function conntrackFlush(
  family: 4 | 6,
  protocols: readonly number[],
  ranges: RangeList,
  selection: FlowSelection = {},
): Promise<ConntrackFlushResult> {
  const answer = await addon().conntrackFlush(
    family,
    [...protocols],
    rangeBuffer(family, ranges),
    false,
    rangeBuffer(family, selection.sources ?? []),
    selection.translatedOnly ?? false,
  );
  const { seen, deleted, error } = flushAnswer(answer);
  return { seen, deleted, error };
}

/**
 * The reply directions of the UDP entries conntrackFlush would delete whose replies go to the pod's
 * own address (no SNAT): deletes nothing. Their late replies are dropped while the flush happens
 * (README, "Existing flows").
 */
export async function conntrackReplies(
  family: 4 | 6,
  ranges: RangeList,
  selection: FlowSelection = {},
): Promise<ReplyTuple[]> {
  const answer = await addon().conntrackFlush(
    family,
    [17],
    rangeBuffer(family, ranges),
    true,
    rangeBuffer(family, selection.sources ?? []),
    selection.translatedOnly ?? false,
  );
  const { replies, error } = flushAnswer(answer);
  if (error !== undefined) throw new Error(error);
  return replies;
}

/**
 * Returns the C heap's free pages to the system (glibc's malloc_trim): the pool threads' and V8
 * helpers' arenas keep what they freed otherwise (docs/design.md, "Memory").
 * Takes well under a millisecond; false when nothing was released or the addon is missing.
 */
export function releaseMemory(): boolean {
  try {
    return addon().releaseMemory();
  } catch {
    return false;
  }
}

/**
 * Blocks of at least `bytes` (default 128 KiB) get their own mapping, unmapped when freed. glibc's
 * default threshold rises to the largest block freed so far, after which large blocks stayed in the
 * arenas (~16 MiB after a 100 000-CIDR config; docs/design.md, "Memory"). False without the addon.
 */
export function mapLargeAllocations(bytes = 128 * 1024): boolean {
  try {
    return addon().mapLargeAllocations(bytes);
  } catch {
    return false;
  }
}

/**
 * Asks the kernel to reclaim the resident pages of the process's file-backed mappings that no other
 * process maps (MADV_PAGEOUT), on a pool thread: the program's code that a large config's work ran
 * stays resident otherwise (docs/design.md, "Memory"). A hint only: a page comes back from its file
 * when next used. Resolves with the bytes of the mappings advised: 0 without the addon or on a
 * kernel before 5.4.
 */
export async function pageOutFileMappings(): Promise<number> {
  try {
    return await addon().pageOutFileMappings();
  } catch {
    return 0;
  }
}

/** The libnftables version the addon was built against, e.g. `1.0.6`; `unknown` without the addon. */
export function libnftablesVersion(): string {
  try {
    return addon().libnftablesVersion;
  } catch {
    return 'unknown';
  }
}
