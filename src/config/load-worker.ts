// Loading 100 000 CIDRs takes ~0.3–0.6 s of CPU, mostly parsing and garbage: run it on a worker
// thread so /healthz and /metrics keep answering while a large config is read.
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { isMainThread, parentPort, Worker } from 'node:worker_threads';
import { loadConfig } from './index.js';
import { ConfigError, type Config, type LoadOptions, type LoadResult } from './types.js';

interface Request {
  readonly path: string;
  readonly options: LoadOptions;
}

type Reply =
  | { ok: true; config: Config; warnings: string[] }
  | { ok: false; error: { file: string; message: string }; warnings: string[] };

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

/** A structured clone keeps data, not classes: give the error its class and the config its freeze back. */
function revive(reply: Reply): LoadResult {
  if (reply.ok) return { ok: true, config: deepFreeze(reply.config), warnings: reply.warnings };
  const error = new ConfigError(reply.error.file, '');
  error.message = reply.error.message;
  return { ok: false, error, warnings: reply.warnings };
}

interface Pending {
  resolve: (result: LoadResult) => void;
  reject: (err: unknown) => void;
}

// One long-lived worker (modules loaded once, so a change applies fast). It holds the process open
// only while a load is pending; if it dies, the calls waiting on it fail and the next starts a new one.
interface LoaderThread {
  readonly thread: Worker;
  readonly pending: Map<number, Pending>;
  idle?: NodeJS.Timeout;
}

let current: LoaderThread | undefined;
let nextId = 0;

function startThread(): LoaderThread {
  // Node flags that only make sense for the main script (--input-type with -e) would fail the worker.
  const execArgv = process.execArgv.filter((arg) => !arg.startsWith('--input-type'));
  const thread = new Worker(new URL(import.meta.url), { execArgv });
  const loader: LoaderThread = { thread, pending: new Map() };
  const fail = (err: unknown) => {
    if (current === loader) current = undefined;
    for (const waiting of loader.pending.values()) waiting.reject(err);
    loader.pending.clear();
  };
  loader.thread.on('message', ({ id, reply }: { id: number; reply: Reply }) => {
    const waiting = loader.pending.get(id);
    loader.pending.delete(id);
    if (loader.pending.size === 0) {
      loader.thread.unref();
      loader.idle = setTimeout(() => {
        if (current === loader) current = undefined;
        void loader.thread.terminate();
      }, IDLE_MS);
      loader.idle.unref();
    }
    waiting?.resolve(revive(reply));
  });
  loader.thread.once('error', fail);
  loader.thread.once('exit', (code) => fail(new Error(`config worker exited with code ${code}`)));
  return loader;
}

/** A worker idle this long is ended: its V8 isolate costs ~13 MiB of RSS. */
const IDLE_MS = 30_000;

/** A config that takes longer than this to parse is refused (the yaml parser has slow paths). */
export const LOAD_TIME_LIMIT_MS = 20_000;

/** loadConfig, run on the config worker thread, within timeLimitMs. */
export function loadConfigOffThread(
  path: string,
  options: LoadOptions,
  timeLimitMs = LOAD_TIME_LIMIT_MS,
): Promise<LoadResult> {
  const loader = (current ??= startThread());
  clearTimeout(loader.idle);
  const id = nextId++;
  const request: Request = { path, options };
  const result = new Promise<LoadResult>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Refuse the config and drop the busy thread; the next load starts a fresh one.
      if (current === loader) current = undefined;
      loader.pending.delete(id);
      void loader.thread.terminate();
      const error = new ConfigError(path, `reading took longer than ${timeLimitMs} ms; refused`);
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

/** Files up to this size are parsed in-thread: a worker's start costs more than their parse. */
export const IN_THREAD_MAX_BYTES = 4 * 1024;

async function configBytes(path: string): Promise<number> {
  const info = await stat(path).catch(() => undefined);
  if (!info?.isDirectory()) return info?.size ?? 0;
  const names = (await readdir(path).catch(() => [])).filter((name) => name.startsWith('ip-masq'));
  const sizes = await Promise.all(
    names.map((name) =>
      stat(join(path, name)).then(
        (s) => s.size,
        () => 0,
      ),
    ),
  );
  return sizes.reduce((a, b) => a + b, 0);
}

/**
 * The agent's loader: small configs (the usual few CIDRs) in-thread, where the slowest YAML of that
 * size parses in well under a second; anything larger on the worker, with its time limit.
 */
export async function loadConfigAdaptive(path: string, options: LoadOptions): Promise<LoadResult> {
  return (await configBytes(path)) <= IN_THREAD_MAX_BYTES
    ? loadConfig(path, options)
    : loadConfigOffThread(path, options);
}

if (!isMainThread && parentPort) {
  const port = parentPort;
  port.on('message', async ({ id, request }: { id: number; request: Request }) => {
    const result = await loadConfig(request.path, request.options);
    const reply: Reply = result.ok
      ? { ok: true, config: result.config, warnings: [...result.warnings] }
      : {
          ok: false,
          error: { file: result.error.file, message: result.error.message },
          warnings: [...result.warnings],
        };
    port.postMessage({ id, reply });
  });
}
