// A large config's load is mostly parsing and garbage (docs/design.md, "Figures"): it runs on a worker
// thread so /healthz and /metrics keep answering while it is read. Provenance (the
// operator's commands, which load in their own thread) is not carried: its prefixes are classes.
import { isMainThread, parentPort, Worker } from 'node:worker_threads';
import { collectGarbage } from '../memory.js';
import { startWorker } from '../worker.js';
import { familyLines, familyLists, type FamilyLines } from '../cidr/index.js';
import { loadSource } from './load.js';
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
}

/** The four sets of a config as one newline-joined string each: cloned as a copy, not 100 000 strings. */
type PackedSets = { nonMasquerade: FamilyLines; masquerade: FamilyLines };

type Reply =
  | {
      ok: true;
      config: Omit<Config, 'nonMasquerade' | 'masquerade'>;
      sets: PackedSets;
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

/** A structured clone keeps data, not classes: give the error its class and the config its sets and freeze back. */
function revive(reply: Reply): LoadResult {
  if (reply.ok) {
    const config: Config = Object.freeze({
      ...deepFreeze(reply.config),
      nonMasquerade: familyLists(reply.sets.nonMasquerade),
      masquerade: familyLists(reply.sets.masquerade),
    });
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
}

let current: LoaderThread | undefined;
let nextId = 0;

function startThread(): LoaderThread {
  const thread = startWorker(new URL(import.meta.url));
  const loader: LoaderThread = { thread, pending: new Map() };
  const fail = (err: unknown) => {
    if (current === loader) current = undefined;
    for (const waiting of loader.pending.values()) waiting.reject(err);
    loader.pending.clear();
  };
  loader.thread.on('message', ({ id, reply }: { id: number; reply: Reply }) => {
    const waiting = loader.pending.get(id);
    loader.pending.delete(id);
    if (loader.pending.size === 0) loader.thread.unref();
    waiting?.resolve(revive(reply));
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

/** loadSource, run on the config worker thread, within timeLimitMs. */
export function loadSourceOffThread(
  source: ConfigSource,
  options: LoadOptions,
  timeLimitMs = LOAD_TIME_LIMIT_MS,
): Promise<LoadResult> {
  // Provenance's prefixes would lose their class on the way back: the operator's commands load here.
  if (options.provenance) return loadSource(source, options);
  const loader = (current ??= startThread());
  const id = nextId++;
  const request: Request = { source, options };
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

if (!isMainThread && parentPort) {
  const port = parentPort;
  port.on('message', async ({ id, request }: { id: number; request: Request }) => {
    const result = await loadSource(request.source, request.options);
    const reply: Reply = result.ok
      ? { ok: true, ...packed(result.config), warnings: [...result.warnings] }
      : {
          ok: false,
          error: {
            file: result.error.file,
            message: result.error.message,
            kind: result.error.kind,
          },
          warnings: [...result.warnings],
        };
    port.postMessage({ id, reply });
    // The reply is copied out: what the parse left behind goes before the worker waits for the next.
    setImmediate(collectGarbage);
  });
}
