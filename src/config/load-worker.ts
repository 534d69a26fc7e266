// A large config's load is mostly parsing and garbage (docs/design.md, "Figures"): it runs on a
// worker thread so /healthz and /metrics keep answering while it is read. Provenance (the
// operator's commands, which load in their own thread) is not carried: its prefixes are classes.
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { collectGarbage, holdYoungGrowth, keepYoungGeneration } from '../memory.js';
import { BoundedDebounce } from '../debounce.js';
import { startWorker } from '../worker.js';
import { familyLines, familyLists, splicedList, type FamilyLines } from '../cidr/index.js';
import {
  ConfigCache,
  linesText,
  type ConfigCacheOptions,
  type EditedRange,
  type SetsSplices,
} from './incremental.js';
import { loadFiles, loadSource, readSourceFiles, type FileBytes } from './load.js';
import {
  AUDIT_THREAD,
  compactDifference,
  compactOf,
  withoutSets,
  type AuditRequest,
} from './audit-thread.js';
import type { ConfigSource } from './source.js';
import {
  ConfigError,
  type Config,
  type ConfigErrorKind,
  type LoadOptions,
  type LoadResult,
} from './types.js';

interface Request {
  readonly source: ConfigSource;
  readonly options: LoadOptions;
  /** The answer whose config the agent's thread holds, from which a splice may be sent. */
  readonly have: number | undefined;
  /** Read whole, not from the last load (a resync: docs/writes.md, "The everyday edit"). */
  readonly whole?: boolean;
}

/**
 * A fast answer the whole path disagreed with (docs/writes.md, "The everyday edit"): where the
 * files were edited since the last audit, and the first difference found.
 */
export interface FastPathMismatch {
  /** "FILE lines A-B", one per edit since the last audit (at most AUDIT_EDITS_KEPT). */
  readonly edits: readonly string[];
  readonly difference: string;
}

/** What the worker says of an audit of its last fast answer. */
interface AuditReport {
  mismatch?: FastPathMismatch;
}

/**
 * The four sets of a config as one newline-joined string each: cloned as a copy, not 100 000
 * strings.
 */
type PackedSets = { nonMasquerade: FamilyLines; masquerade: FamilyLines };

type Reply =
  | {
      ok: true;
      config: Omit<Config, 'nonMasquerade' | 'masquerade'>;
      sets: PackedSets;
      warnings: string[];
    }
  | {
      /** The sets as splices of the config of answer `base` (config/incremental.ts). */
      ok: true;
      config: Omit<Config, 'nonMasquerade' | 'masquerade'>;
      base: number;
      splices: SetsSplices;
      warnings: string[];
    }
  | {
      ok: false;
      error: { file: string; message: string; kind: ConfigErrorKind };
      warnings: string[];
    };

function packed(config: Config): {
  config: Omit<Config, 'nonMasquerade' | 'masquerade'>;
  sets: PackedSets;
} {
  const { nonMasquerade, masquerade, ...rest } = config;
  return {
    config: rest,
    sets: { nonMasquerade: familyLines(nonMasquerade), masquerade: familyLines(masquerade) },
  };
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

/**
 * A structured clone keeps data, not classes: give the error its class and the config its sets and
 * freeze back. A splice is made on the config of the answer it names, which `base` is.
 */
function revive(reply: Reply, base: Config | undefined): LoadResult {
  if (reply.ok) {
    let sets: Pick<Config, 'nonMasquerade' | 'masquerade'>;
    if ('splices' in reply) {
      if (!base) throw new Error(`config worker: a splice of answer ${reply.base}, not held`);
      const of = (name: 'nonMasquerade' | 'masquerade') =>
        Object.freeze({
          ipv4: splicedList(base[name].ipv4, reply.splices[name].ipv4),
          ipv6: splicedList(base[name].ipv6, reply.splices[name].ipv6),
        });
      sets = { nonMasquerade: of('nonMasquerade'), masquerade: of('masquerade') };
    } else {
      sets = {
        nonMasquerade: familyLists(reply.sets.nonMasquerade),
        masquerade: familyLists(reply.sets.masquerade),
      };
    }
    const config: Config = Object.freeze({ ...deepFreeze(reply.config), ...sets });
    return { ok: true, config, warnings: reply.warnings };
  }
  const error = new ConfigError(reply.error.file, '', reply.error.kind);
  error.message = reply.error.message;
  return { ok: false, error, warnings: reply.warnings };
}

interface Pending {
  resolve: (result: LoadResult) => void;
  reject: (err: unknown) => void;
}

// One long-lived worker (modules loaded once, code optimized by the first load, so a change applies
// fast). It lives while the config needs it: a load that fits the agent's own thread ends it
// (endLoaderThread, from loader.ts). It holds the process open only while a load is pending; if it
// dies, the calls waiting on it fail and the next starts a new one.
interface LoaderThread {
  readonly thread: Worker;
  readonly pending: Map<number, Pending>;
  /** The last answer with a config, and that config: what the next answer may splice. */
  held?: { readonly id: number; readonly config: Config };
}

let current: LoaderThread | undefined;

/**
 * How the worker's answers with a config came: whole, or as splices of the last; how many audits
 * of the fast ones it made (tests, bench).
 */
export const workerAnswers = { whole: 0, spliced: 0, audited: 0 };

const mismatchListeners = new Set<(mismatch: FastPathMismatch) => void>();

/**
 * Calls `listener` whenever the audit of a fast answer disagreed with a whole load of the same
 * bytes; the worker then loads whole until its state is made again from a whole load. Returns
 * the function that removes it.
 */
export function onFastPathMismatch(listener: (mismatch: FastPathMismatch) => void): () => void {
  mismatchListeners.add(listener);
  return () => mismatchListeners.delete(listener);
}
let nextId = 0;

/** Test faults a worker's cache is made with (never by the agent: harness/agent-with-parts.js). */
export type LoadFaults = Pick<ConfigCacheOptions, 'dropFirstAddition'>;

function startThread(faults: LoadFaults): LoaderThread {
  const thread = startWorker(
    new URL(import.meta.url),
    faults.dropFirstAddition ? faults : undefined,
  );
  const loader: LoaderThread = { thread, pending: new Map() };
  const fail = (err: unknown) => {
    if (current === loader) current = undefined;
    for (const waiting of loader.pending.values()) waiting.reject(err);
    loader.pending.clear();
  };
  loader.thread.on('message', (message: { id: number; reply: Reply } | { audit: AuditReport }) => {
    if ('audit' in message) {
      workerAnswers.audited++;
      if (message.audit.mismatch) {
        // The held config is the fast answer: never a base for a splice again.
        loader.held = undefined;
        for (const listener of mismatchListeners) listener(message.audit.mismatch);
      }
      return;
    }
    const { id, reply } = message;
    const waiting = loader.pending.get(id);
    loader.pending.delete(id);
    if (loader.pending.size === 0) loader.thread.unref();
    let result: LoadResult;
    try {
      const base =
        'base' in reply && loader.held?.id === reply.base ? loader.held.config : undefined;
      result = revive(reply, base);
    } catch (err) {
      loader.held = undefined;
      waiting?.reject(err);
      return;
    }
    // Answers come in the order asked: the one held is the last with a config.
    if (result.ok) {
      loader.held = { id, config: result.config };
      workerAnswers['splices' in reply ? 'spliced' : 'whole']++;
    }
    waiting?.resolve(result);
  });
  loader.thread.once('error', fail);
  loader.thread.once('exit', (code) => fail(new Error(`config worker exited with code ${code}`)));
  return loader;
}

/**
 * Ends the worker unless a load is pending on it: the config fits the agent's own thread again, and
 * the worker's V8 isolate costs memory while it lives (docs/bench.md).
 */
export function endLoaderThread(): void {
  const loader = current;
  if (loader === undefined || loader.pending.size > 0) return;
  current = undefined;
  void loader.thread.terminate();
}

/** A config that takes longer than this to parse is refused (the yaml parser has slow paths). */
export const LOAD_TIME_LIMIT_MS = 20_000;

/**
 * loadSource, run on the config worker thread, within timeLimitMs; `faults` are a test's, given
 * to the worker when this call starts it.
 */
export function loadSourceOffThread(
  source: ConfigSource,
  options: LoadOptions,
  timeLimitMs = LOAD_TIME_LIMIT_MS,
  whole = false,
  faults: LoadFaults = {},
): Promise<LoadResult> {
  // Provenance's prefixes would lose their class on the way back: the operator's commands load
  // here.
  if (options.provenance) return loadSource(source, options);
  const loader = (current ??= startThread(faults));
  const id = nextId++;
  const request: Request = { source, options, have: loader.held?.id, ...(whole ? { whole } : {}) };
  const result = new Promise<LoadResult>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Refuse the config and drop the busy thread; the next load starts a fresh one.
      if (current === loader) current = undefined;
      loader.pending.delete(id);
      void loader.thread.terminate();
      const error = new ConfigError(
        source.path,
        `reading took longer than ${timeLimitMs} ms; refused`,
      );
      resolve({ ok: false, error, warnings: [] });
    }, timeLimitMs);
    timer.unref();
    loader.pending.set(id, {
      resolve: (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      reject: (err) => {
        clearTimeout(timer);
        reject(err);
      },
    });
  });
  loader.thread.ref();
  loader.thread.postMessage({ id, request });
  return result;
}

/**
 * How long after a fast answer its audit runs when no other edit follows: edits in between are
 * audited together, by the last one's answer (each answer builds on the one before). The audit runs
 * on its own thread (audit-thread.ts), so the next edit's load does not wait for it (docs/writes.md,
 * "The everyday edit")...
 */
export const AUDIT_DELAY_MS = 50;
/** ...and never later than this after the first answer not yet audited: the contract's second. */
export const AUDIT_WITHIN_MS = 800;
/** How long the audit thread stays without an audit to make before it ends. */
const AUDIT_THREAD_IDLE_MS = 2_000;
/** Edits named in one mismatch's log line at most. */
const AUDIT_EDITS_KEPT = 8;

/** The first difference between a fast answer and a whole load's, or undefined when they agree. */
export function differenceOf(fast: LoadResult, whole: LoadResult): string | undefined {
  return compactDifference(compactOf(fast), compactOf(whole));
}

/** A fast answer not yet audited: what it was loaded from, and what it said. */
interface Unaudited {
  readonly source: ConfigSource & { kind: 'file' | 'directory' };
  readonly files: readonly FileBytes[];
  readonly options: LoadOptions;
  readonly result: LoadResult;
}

/**
 * The worker's audit of its fast answers by a whole load of the same bytes, the last answer for
 * every edit since the one before (docs/writes.md, "The everyday edit").
 */
class FastAnswerAudit {
  private unaudited: Unaudited | undefined;
  private edits: EditedRange[] = [];
  private running = false;
  private auditThread: Worker | undefined;
  private idle: NodeJS.Timeout | undefined;
  private readonly debounce = new BoundedDebounce(
    () => this.run(),
    AUDIT_DELAY_MS,
    AUDIT_WITHIN_MS,
  );

  constructor(
    private readonly port: NonNullable<typeof parentPort>,
    /** Called when the whole load disagreed: the state is made again from a whole load. */
    private readonly forget: () => void,
  ) {}

  /** A fast answer given, and the edits it made: audited soon. */
  answered(target: Unaudited, edits: readonly EditedRange[]): void {
    this.unaudited = target;
    this.edits.push(...edits);
    if (this.edits.length > AUDIT_EDITS_KEPT) this.edits = this.edits.slice(-AUDIT_EDITS_KEPT);
    this.debounce.ask();
  }

  /** A whole load was its own audit: what came before it is no longer what the agent holds. */
  clear(): void {
    this.unaudited = undefined;
    this.edits = [];
  }

  /**
   * The audit of the last answer not yet audited, on the audit thread, while this one answers the
   * next edits; one at a time (an answer given meanwhile is audited after). Files that could not be
   * read, or a thread that failed, are audited here.
   */
  private run(): void {
    if (this.running) return;
    const target = this.unaudited;
    this.unaudited = undefined;
    if (!target) return;
    const edits = this.edits.slice(-AUDIT_EDITS_KEPT);
    this.edits = [];
    const files = target.files.flatMap((f) => ('bytes' in f ? [f] : []));
    if (files.length !== target.files.length) {
      const whole = loadFiles(target.source, target.files, target.options);
      this.report(differenceOf(target.result, whole), edits);
      return;
    }
    const request: AuditRequest = {
      source: target.source,
      files,
      options: target.options,
      fast: compactOf(target.result),
    };
    this.running = true;
    const thread = this.thread();
    const done = (difference: string | undefined) => {
      thread.off('message', answered);
      thread.off('error', failed);
      thread.off('exit', failed);
      this.running = false;
      this.idle = setTimeout(() => this.endThread(), AUDIT_THREAD_IDLE_MS).unref();
      this.report(difference, edits);
      if (this.unaudited) this.debounce.ask();
    };
    const answered = (message: { difference: string | null }) =>
      done(message.difference ?? undefined);
    const failed = () => {
      this.auditThread = undefined;
      done(differenceOf(target.result, loadFiles(target.source, target.files, target.options)));
    };
    thread.on('message', answered);
    // A thread that failed or ended answers nothing: this audit is made here, the next starts one.
    thread.once('error', failed);
    thread.once('exit', failed);
    thread.postMessage(request);
  }

  private endThread(): void {
    const thread = this.auditThread;
    if (this.running || !thread) return;
    this.auditThread = undefined;
    void thread.terminate();
  }

  private report(difference: string | undefined, edits: readonly EditedRange[]): void {
    const report: AuditReport = {};
    if (difference !== undefined) {
      // Loaded whole from now on, until a whole load makes the state again.
      this.forget();
      report.mismatch = { edits: edits.map((e) => `${e.file} ${linesText(e)}`), difference };
    }
    this.port.postMessage({ audit: report });
  }

  /**
   * The audit thread, started at an audit and ended once no audit came for AUDIT_THREAD_IDLE_MS (its
   * isolate is ~30 MiB of RSS); it never keeps the process alive.
   */
  private thread(): Worker {
    clearTimeout(this.idle);
    if (!this.auditThread) {
      // The module beside this one, as this one is run (built, or from the sources in tests).
      const ext = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
      this.auditThread = startWorker(
        new URL(`./audit-thread${ext}`, import.meta.url),
        AUDIT_THREAD,
      );
      this.auditThread.unref();
    }
    return this.auditThread;
  }
}

/** The worker's reply: splices of answer `base` where the agent holds it, else the whole config. */
function replyOf(
  result: LoadResult,
  splices: SetsSplices | undefined,
  base: number | undefined,
  have: number | undefined,
): Reply {
  const warnings = [...result.warnings];
  if (result.ok && splices && base !== undefined && have === base)
    return { ok: true, config: withoutSets(result.config), base, splices, warnings };
  if (result.ok) return { ok: true, ...packed(result.config), warnings };
  const { file, message, kind } = result.error;
  return { ok: false, error: { file, message, kind }, warnings };
}

/** The worker's side: loads from the last where it can (incremental.ts), answering with splices. */
function serve(port: NonNullable<typeof parentPort>, faults: LoadFaults): void {
  // This thread's start set V8's flags back to their defaults: the young generation grows here only
  // during a whole load answering the agent (src/memory.ts), not for an edit's splice or an audit.
  keepYoungGeneration();
  const cache = new ConfigCache({
    ...faults,
    aroundWholeLoad: (load) => {
      const done = holdYoungGrowth();
      try {
        return load();
      } finally {
        done();
      }
    },
  });
  /** The answer whose config the cache holds (a splice is of that one). */
  let cached: number | undefined;
  const audit = new FastAnswerAudit(port, () => {
    cache.forget();
    cached = undefined;
  });
  port.on('message', async ({ id, request }: { id: number; request: Request }) => {
    const { source, options } = request;
    let result: LoadResult;
    let splices: SetsSplices | undefined;
    if (source.kind === 'file' || source.kind === 'directory') {
      if (request.whole) cache.forget();
      const files = await readSourceFiles(source);
      const loaded = cache.load(source, files, options);
      result = loaded.result;
      splices = loaded.splices;
      if (splices) audit.answered({ source, files, options, result }, cache.lastEdits);
      else audit.clear();
    } else {
      cache.forget();
      audit.clear();
      result = await loadSource(source, options);
    }
    const base = cached;
    cached = result.ok ? id : undefined;
    port.postMessage({ id, reply: replyOf(result, splices, base, request.have) });
    // After the answer: the sets' entries for the next edit, then what a whole load left behind
    // goes before the worker waits for the next (an edit leaves little: no collection).
    setImmediate(() => {
      cache.prepare(options);
      if (!splices) collectGarbage();
    });
  });
}

if (!isMainThread && parentPort) serve(parentPort, (workerData ?? {}) as LoadFaults);
