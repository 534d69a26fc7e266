// The only module that loads the native addon. Each libnftables call runs in a child process the
// addon forks for it (docs/design.md, "libnftables"): a crash, abort or hang there is an NftError
// here, never the end of the agent. Writes and the reads of our own tables are serialised: one at
// a time keeps the libuv pool free for I/O, and the kernel serialises nftables commits per
// namespace anyway. Reads that only look (netlink dumps, the prints of other tables' chains) are
// not queued behind them: nothing of ours waits on another table's size (docs/observability.md,
// "Other NAT on the node"), and no write waits on a look.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  packRanges,
  PackedRanges,
  ipv4Number,
  parseCidr,
  prefixRange,
  type RangeList,
  familyOf,
} from '../cidr/index.js';
import {
  nftFailureKinds,
  NO_ELEMENTS,
  type ChainInfo,
  type CommitStep,
  type WriteOptions,
  type CounterValue,
  type ElementEdit,
  type Elements,
  type NamedSet,
  type NftFailureKind,
  type RuleShape,
  type SetAudit,
  type SetFill,
  type TableElementEdit,
  type TableRef,
} from '../nftables/types.js';
import type {
  DeletedFlows,
  FlowJudgement,
  FlowPlan,
  FlowPolicy,
  NatSample,
  NatSampleRequest,
} from './conntrack.js';
import { errorText } from '../errors.js';

export type { NftFailureKind } from '../nftables/types.js';

/** What the native judgement answers: counts, and the plan it keeps (an External). */
interface NativePlan {
  readonly seen: number;
  readonly unjudged: number;
  readonly now: number;
  readonly later: number;
  readonly hold: number;
  readonly plan: unknown;
}

interface NativePolicy {
  sources: Buffer | null;
  interfaces: string[] | null;
  snat: Buffer | null;
}

/** What nf_tables' notifications said since the last drain (native/netlink.h, DrainMonitor). */
export interface CommitsHeard {
  /**
   * Each commit's generation id and the tables its messages named ("ip ipmasq"); `capped`: it
   * named more than the reader keeps (4 096), so any table, ours too, may be among them.
   */
  readonly commits: ReadonlyArray<{
    readonly genId: number;
    readonly tables: readonly string[];
    readonly capped?: boolean;
  }>;
  /** Notifications were dropped (the socket's buffer was full): any table may have changed. */
  readonly overflow: boolean;
}

interface NativeAddon {
  run(
    script: string,
    dryRun: boolean,
    output: 'text' | 'json' | 'listing',
    timeoutMs: number,
  ): Promise<string>;
  generationId(): Promise<number>;
  monitorOpen(): number;
  monitorDrain(fd: number): CommitsHeard;
  monitorMute(fd: number, mute: boolean): void;
  monitorClose(fd: number): void;
  listTables(): Promise<Array<{ family: string; name: string }>>;
  listChains(): Promise<ChainInfo[]>;
  listRules(family: string, table: string, chain: string): Promise<RuleShape[]>;
  listCounters(family: string, table: string): Promise<CounterValue[]>;
  natSample(request: {
    family: 4 | 6;
    cpuBudgetS: number;
    bySource: boolean;
    from: Buffer;
    to: Buffer;
  }): Promise<NatSample>;
  conntrackJudge(request: {
    family: 4 | 6;
    protocols: number[];
    lost: Buffer;
    gained: Buffer;
    policyChanged: boolean;
    exemptAfter: Buffer;
    before: NativePolicy;
    after: NativePolicy;
    holdMax: number;
  }): Promise<NativePlan>;
  conntrackHold(plan: unknown, family: 4 | 6, table: string, set: string): Promise<number>;
  editElements(request: {
    generation?: number;
    tables: Array<{
      family: 4 | 6;
      table: string;
      chain: string;
      wasMark: string;
      mark: string;
      sets: Array<{
        name: string;
        keyLength: number;
        interval: boolean;
        refill: boolean;
        marker: boolean;
        removed: Buffer;
        added: Buffer;
      }>;
    }>;
  }): Promise<undefined>;
  auditSet(request: {
    family: 4 | 6;
    table: string;
    set: string;
    concat: boolean;
    expected: string;
  }): Promise<SetAudit>;
  ruleComments(family: 4 | 6, table: string, chain: string): Promise<string[]>;
  conntrackDelete(
    plan: unknown,
    which: 'now' | 'later',
  ): Promise<{ deleted: Array<[number, number]>; error?: string }>;
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
  /** Each rule with its handle, counters without their values: like `nft -a -s`. */
  listing?: boolean;
  /** The call's own time limit, below nftTimeoutMs (a read that may be abandoned). */
  timeoutMs?: number;
}

/**
 * The longest one libnftables call may take before its process is killed: far beyond the largest
 * write (docs/bench.md); IPMASQ_NFT_TIMEOUT_MS overrides it (tests use a short one).
 */
export function nftTimeoutMs(env: NodeJS.ProcessEnv = process.env): number {
  const value = Number(env.IPMASQ_NFT_TIMEOUT_MS);
  return Number.isSafeInteger(value) && value > 0 && value <= 3_600_000 ? value : 30_000;
}

/**
 * An error from a native call, carrying its own message text, and how the call failed (`kind`):
 * `error`, it refused the command (its own message); `crash`, its process died (a signal, e.g.
 * SIGSEGV on objects it cannot parse); `timeout`, it was killed after the time limit; `spawn`, no
 * process could be started for it (fork or pipe failed). Its message names what failed: nftables,
 * or conntrack for the flush's and the sample's dumps.
 */
export class NftError extends Error {
  readonly nftMessage: string;
  readonly kind: NftFailureKind;
  constructor(
    nftMessage: string,
    kind: NftFailureKind = 'error',
    options?: { cause?: unknown; subsystem?: 'nftables' | 'conntrack' },
  ) {
    super(`${options?.subsystem ?? 'nftables'}: ${nftMessage.trim()}`, options);
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

/** One libnftables call; its time limit is read when the call is asked for (nftTimeoutMs). */
function runNative(
  native: NativeAddon,
  script: string,
  options: RunOptions,
  timeoutMs: number,
): Promise<string> {
  return native
    .run(
      script,
      options.dryRun ?? false,
      options.json ? 'json' : options.listing ? 'listing' : 'text',
      timeoutMs,
    )
    .catch(asNftError);
}

/**
 * Every failure of a native call as one NftError (rethrown with a JS stack; the native error
 * carries nothing more than its text and its kind, the addon's `code`, else `error`).
 */
function asNftError(err: unknown): never {
  throw nativeError(err, 'nftables');
}

/** The same for a conntrack call: its message says conntrack. */
function asConntrackError(err: unknown): never {
  throw nativeError(err, 'conntrack');
}

function nativeError(err: unknown, subsystem: 'nftables' | 'conntrack'): NftError {
  const code = (err as { code?: unknown } | null)?.code;
  const kind = nftFailureKinds.find((k) => k === code) ?? 'error';
  return new NftError(errorText(err), kind, { subsystem });
}

/** Run an nft script (what `nft -f` accepts) in one libnftables call, off the JS thread. */
export async function runNft(script: string, options: RunOptions = {}): Promise<string> {
  const native = addon();
  const timeoutMs = Math.min(options.timeoutMs ?? Infinity, nftTimeoutMs());
  return serialised(() => runNative(native, script, options, timeoutMs));
}

/**
 * A libnftables call that only reads (a print of another table's chains), not queued behind our
 * writes and not holding them back: it runs in a child process of its own beside them.
 */
export async function readNft(script: string, options: RunOptions = {}): Promise<string> {
  return runNative(addon(), script, options, nftTimeoutMs());
}

/**
 * Commits a script in one libnftables call, with the namespace's generation id read right before
 * and right after it in the same turn of the queue: no other call of ours comes between, so a step
 * other than one is another tool's commit.
 */
export async function commitNft(script: string, options: WriteOptions = {}): Promise<CommitStep> {
  const timeoutMs = nftTimeoutMs();
  return committed((native) => runNative(native, script, {}, timeoutMs), options);
}

/**
 * A commit of ours in the queue's turn, with the namespace's generation id read right before and
 * right after it (undefined where it cannot be read): every write goes through here. `unheard`:
 * this process's commit monitors leave nftables' group for the commit (while nobody listens, the
 * kernel makes no notification of each element, which costs it as much as the element itself), and
 * their next drain says notifications were lost.
 */
function committed(
  write: (native: NativeAddon) => Promise<unknown>,
  { unheard = false }: WriteOptions = {},
): Promise<CommitStep> {
  const native = addon();
  const generation = () => native.generationId().catch(() => undefined);
  return serialised(async () => {
    const before = await generation();
    const muted = unheard ? muteMonitors(native) : [];
    try {
      await write(native);
    } finally {
      for (const fd of muted) unmute(native, fd);
    }
    return { before, after: await generation() };
  });
}

/** The commit monitors this process has open (openCommitMonitor). */
const monitors = new Set<number>();

/** Every open monitor out of nftables' group; one that cannot leave it stays, hearing. */
function muteMonitors(native: NativeAddon): number[] {
  const muted: number[] = [];
  for (const fd of monitors) {
    try {
      native.monitorMute(fd, true);
      muted.push(fd);
    } catch {
      // Still hearing: the commit costs the kernel its notifications, nothing else.
    }
  }
  return muted;
}

/** Back in the group; one that cannot join again is closed, and its next drain throws. */
function unmute(native: NativeAddon, fd: number): void {
  try {
    native.monitorMute(fd, false);
  } catch {
    monitors.delete(fd);
    native.monitorClose(fd);
  }
}

/**
 * The network namespace's nftables generation id; it moves on every committed transaction. Queued
 * with our writes: read while one of ours is in flight (a conntrack flush's held replies), it would
 * be the step before it, and a change pinned to it refused.
 */
export async function nftGenerationId(): Promise<number> {
  const native = addon();
  return serialised(() => native.generationId().catch(asNftError));
}

/**
 * Every table in the namespace as the kernel names it, from one netlink dump (no libnftables). Not
 * queued.
 */
export async function nftTableNames(): Promise<Array<{ family: string; name: string }>> {
  return addon().listTables().catch(asNftError);
}

/**
 * Every chain in the namespace, with its hook when it has one, from one netlink dump. Not queued.
 */
export async function nftChains(): Promise<ChainInfo[]> {
  return addon().listChains().catch(asNftError);
}

/**
 * One chain's rules, each reduced to what its expressions show (native/netlink.h, RuleShape):
 * from the kernel's own rule dump, without libnftables and without any set's elements. Not queued.
 */
export async function nftRuleShapes(
  family: string,
  table: string,
  chain: string,
): Promise<RuleShape[]> {
  return addon().listRules(family, table, chain).catch(asNftError);
}

/**
 * A table's named counters with their counts, from one netlink dump (no rules, no set elements).
 * Not queued behind our writes: a scrape must not wait for one (a read changes nothing).
 */
export async function nftCounters(family: string, table: string): Promise<CounterValue[]> {
  return addon().listCounters(family, table).catch(asNftError);
}

/**
 * One dump of the family's source-translated conntrack entries, aggregated on a pool thread
 * (native/nat-stats.h): flows and the busiest destination by protocol, and by source with
 * `bySource`. Not queued behind our writes: it changes nothing.
 */
export async function natSample(request: NatSampleRequest): Promise<NatSample> {
  const { family } = request;
  return addon()
    .natSample({
      family,
      cpuBudgetS: request.cpuBudgetS,
      bySource: request.bySource,
      from: rangeBuffer(family, request.from ?? []),
      to: rangeBuffer(family, request.to ?? []),
    })
    .catch(asConntrackError);
}

/**
 * The ranges as the addon takes them (cidr/ranges.ts, PackedRanges): as they are when the caller
 * packed them (the changed ranges' worker does), else packed here.
 */
function rangeBuffer(family: 4 | 6, ranges: RangeList): Buffer {
  const { bytes } = ranges instanceof PackedRanges ? ranges : packRanges(family, ranges);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function nativePolicy(family: 4 | 6, policy: FlowPolicy): NativePolicy {
  return {
    sources: policy.sources === null ? null : rangeBuffer(family, policy.sources),
    interfaces: policy.interfaces === null ? null : [...policy.interfaces],
    snat: policy.snat === null ? null : rangeBuffer(family, [policy.snat]),
  };
}

/**
 * Dumps the family's conntrack entries on a pool thread and finds those a config change must delete
 * (native/conntrack.h): judged one by one by both configs' decisions, the egress interface from the
 * routing where a decision depends on it. Deletes nothing: see holdReplies and deleteFlows. Never
 * rejects for a kernel without conntrack.
 */
export async function judgeFlows(request: FlowJudgement): Promise<FlowPlan> {
  const { family } = request;
  const answer = await addon()
    .conntrackJudge({
      family,
      protocols: [...request.protocols],
      lost: rangeBuffer(family, request.lost),
      gained: rangeBuffer(family, request.gained),
      policyChanged: request.exemptAfter !== null,
      exemptAfter: rangeBuffer(family, request.exemptAfter ?? []),
      before: nativePolicy(family, request.before),
      after: nativePolicy(family, request.after),
      holdMax: request.holdMax,
    })
    .catch(asConntrackError);
  const { seen, unjudged, now, later, hold } = answer;
  return { family, seen, unjudged, now, later, hold, handle: answer.plan };
}

/**
 * Replaces what our table's set of late replies holds with the plan's reply tuples, as one commit
 * through netlink (no libnftables: the tuples never leave the addon), with the generation ids read
 * around it in the same turn of the queue as every commit of ours.
 */
export async function holdReplies(plan: FlowPlan, table: string, set: string): Promise<CommitStep> {
  return committed((native) =>
    native.conntrackHold(plan.handle, plan.family, table, set).catch(asNftError),
  );
}

/**
 * Each element of a set of address ranges as its first and last key, in the kernel's layout: the
 * address's first and last in network order, and for a set keyed `ADDR daddr . meta l4proto`
 * (`concat`, ` . 0-255`) the protocol padded to 4 bytes after each (0, then 255). A plain interval
 * set's end element (one past the last) is made by the addon. Elements are the agent's own
 * formatted prefixes, parsed again.
 */
function rangeElementBytes(family: 4 | 6, elements: Elements, concat: boolean): Buffer {
  const width = family === 4 ? 4 : 16;
  const key = width + (concat ? 4 : 0);
  const out = Buffer.alloc(elements.length * 2 * key);
  elements.forEach((element, i) => {
    const prefix = parseCidr(element);
    if (prefix.family !== family) throw new Error(`${element}: not an IPv${family} prefix`);
    const at = i * 2 * key;
    if (family === 4) {
      // In numbers: a refill writes every element, and bigints cost ~1 µs each here.
      const first = ipv4Number(prefix);
      out.writeUInt32BE(first, at);
      out.writeUInt32BE((first | (2 ** (32 - prefix.len) - 1)) >>> 0, at + key);
      if (concat) out[at + key + width] = 255;
      return;
    }
    const [first, last] = prefixRange(prefix);
    for (let b = 0; b < width; b++) {
      const shift = BigInt(8 * (width - 1 - b));
      out[at + b] = Number((first >> shift) & 0xffn);
      out[at + key + b] = Number((last >> shift) & 0xffn);
    }
    if (concat) out[at + key + width] = 255; // meta l4proto's range 0-255: 0 first, 255 last
  });
  return out;
}

/**
 * Writes an element-only change of our tables as one netlink transaction, without libnftables
 * (docs/writes.md, "The everyday edit"), with the generation ids read around it in the same turn of
 * the queue as every commit of ours. Refused whole (an NftError) when the kernel's tables are not
 * as the change was worked out from: the marked rule missing, an element missing or there already,
 * or (with `generation`) another commit since.
 */
export async function editElements(
  edit: ElementEdit,
  options: WriteOptions = {},
): Promise<CommitStep> {
  const tables = edit.tables.map((table) => {
    const family = familyOf(table.family).number;
    return {
      family,
      table: table.table,
      chain: table.chain,
      wasMark: table.wasMark,
      mark: table.mark,
      sets: table.sets.map((change) => nativeSetEdit(family, change)),
    };
  });
  const request = {
    tables,
    ...(edit.generation !== undefined ? { generation: edit.generation } : {}),
  };
  return committed((native) => native.editElements(request).catch(asNftError), options);
}

/**
 * Sets no rule refers to yet filled in one transaction over netlink, moving no mark (SetFill):
 * only concatenated range sets, whose elements need no marker (a plain interval set filled from
 * empty gets libnftables' marker, which is libnftables' to write).
 */
export async function fillSets(fill: SetFill, options: WriteOptions = {}): Promise<CommitStep> {
  const tables = fill.tables.map((table) => {
    const family = familyOf(table.family).number;
    return {
      family,
      table: table.table,
      chain: '',
      wasMark: '',
      mark: '',
      sets: table.sets.map((set) => {
        if (set.key.elementSuffix === '')
          throw new Error(`set ${set.name}: only concatenated range sets are filled over netlink`);
        return nativeSetEdit(family, { set, removed: NO_ELEMENTS, added: set.elements });
      }),
    };
  });
  return committed((native) => native.editElements({ tables }).catch(asNftError), options);
}

/** One set's part of an element write, as the addon takes it. */
function nativeSetEdit(
  family: 4 | 6,
  { set, removed, added, refill }: TableElementEdit['sets'][number],
) {
  const interval = set.key.elementSuffix === '';
  if (set.key.elements === 'names' || (interval && !set.flags.includes('interval')))
    throw new Error(`set ${set.name}: only sets of address ranges are edited over netlink`);
  const bytes = (elements: Elements) => rangeElementBytes(family, elements, !interval);
  return {
    name: set.name,
    keyLength: (family === 4 ? 4 : 16) + (interval ? 0 : 4),
    interval,
    refill: refill === true,
    // libnftables' end element at the first address, which it adds with any additions to a plain
    // interval set none of which starts there (docs/writes.md, "The everyday edit").
    marker:
      interval &&
      added.length > 0 &&
      !added.some((e) => e.startsWith('0.0.0.0/') || e.startsWith('::/')),
    removed: bytes(removed),
    added: bytes(added),
  };
}

/**
 * What the kernel's set holds compared with `elements`, the agent's own prefixes (the audit of an
 * element-only write, docs/writes.md "The everyday edit"): read over netlink and compared on a pool
 * thread, the prefixes parsed there on their own, not by the write's packing (rangeElementBytes).
 * Not queued behind our writes: a read, judged by the generation ids its caller reads around it.
 */
export async function auditSet(
  ref: TableRef,
  set: NamedSet,
  elements: Elements,
): Promise<SetAudit> {
  const interval = set.key.elementSuffix === '';
  if (set.key.elements === 'names' || (interval && !set.flags.includes('interval')))
    throw new Error(`set ${set.name}: only sets of address ranges are audited over netlink`);
  return addon()
    .auditSet({
      family: familyOf(ref.family).number,
      table: ref.name,
      set: set.name,
      concat: !interval,
      expected: elements.join('\n'),
    })
    .catch(asNftError);
}

/**
 * The comments of a chain's rules in order ("" for a rule without one), over netlink. Not queued.
 */
export async function ruleComments(ref: TableRef, chain: string): Promise<string[]> {
  return addon().ruleComments(familyOf(ref.family).number, ref.name, chain).catch(asNftError);
}

/** Deletes the plan's entries, `now` or `later`, each only if it is still the same entry. */
export async function deleteFlows(plan: FlowPlan, which: 'now' | 'later'): Promise<DeletedFlows> {
  const answer = await addon().conntrackDelete(plan.handle, which).catch(asConntrackError);
  return { deleted: new Map(answer.deleted), error: answer.error };
}

/**
 * A socket hearing nf_tables' notifications, as `nft monitor` does (src/reconcile/commit-watch.ts):
 * drained without waiting, closed once. Throws when it cannot be made.
 */
export function openCommitMonitor(): { drain(): CommitsHeard; close(): void } {
  const native = addon();
  const fd = native.monitorOpen();
  monitors.add(fd);
  return {
    drain: () => {
      if (!monitors.has(fd)) throw new Error('the commit monitor could not join its group again');
      return native.monitorDrain(fd);
    },
    close: () => {
      if (monitors.delete(fd)) native.monitorClose(fd);
    },
  };
}

/**
 * Returns the C heap's free pages to the system (glibc's malloc_trim): the pool threads' and V8
 * helpers' arenas keep what they freed otherwise (docs/design.md, "Memory"). Quick enough for the
 * JS thread; false when nothing was released or the addon is missing.
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
 * default threshold rises to the largest block freed so far, after which large blocks stay in the
 * arenas (docs/design.md, "Memory"). False without the addon.
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

/**
 * The libnftables version the addon was built against, e.g. `1.0.6`; `unknown` without the addon.
 */
export function libnftablesVersion(): string {
  try {
    return addon().libnftablesVersion;
  } catch {
    return 'unknown';
  }
}
