// List, then watch from the list's resourceVersion, forever (docs/kubernetes.md, "Kubernetes API
// (opt-in)"): what client-go calls a reflector, for one kind (Nodes) and a small extract of each
// object. The last known items stay whatever the API does; a 410 Gone relists; every failure waits
// a backoff with full jitter, or the server's Retry-After.
import { record } from '../record.js';
import { ApiError, WatchCut, type ApiClient } from './client.js';

export type WatchOp = 'list' | 'watch';

export interface ReflectorTimings {
  /** First backoff; doubled per failure in a row up to backoffMaxMs, a random part of it waited. */
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  /** Asked of the server per watch (it ends the watch then, and we watch again). */
  readonly watchTimeoutSeconds: number;
  /** No byte, not even a bookmark, for this long: the watch is stalled. */
  readonly idleMs: number;
  /** Items per list page (limit/continue). */
  readonly pageSize: number;
}

export const DEFAULT_TIMINGS: ReflectorTimings = {
  backoffBaseMs: 1_000,
  backoffMaxMs: 60_000,
  watchTimeoutSeconds: 300,
  // The server ends a watch at its timeout and sends a bookmark about every minute.
  idleMs: 330_000,
  pageSize: 100,
};

export interface ReflectorOptions<T> {
  readonly client: ApiClient;
  /** The collection, e.g. /api/v1/nodes. */
  readonly path: string;
  readonly fieldSelector?: string;
  /** What is kept of one object (undefined: nothing, the object is left out). */
  readonly extract: (object: Record<string, unknown>) => T | undefined;
  /** After a list or a watch event changed the items. */
  readonly onChange: () => void;
  /** Whether two extracts are the same: a MODIFIED that changes nothing kept is not a change. */
  readonly same?: (a: T, b: T) => boolean;
  /** Each failure, with the call it failed in. */
  readonly onError: (op: WatchOp, err: unknown) => void;
  /** The watch went live (true) or was lost (false). */
  readonly onUp: (up: boolean) => void;
  readonly timings: ReflectorTimings;
  readonly random?: () => number;
}

/** An object's key among the items: its name, `namespace/name` for a namespaced one (a Pod). */
function nameOf(object: Record<string, unknown>): string | undefined {
  const metadata = record(object.metadata);
  const { name, namespace } = metadata;
  if (typeof name !== 'string') return undefined;
  return typeof namespace === 'string' && namespace !== '' ? `${namespace}/${name}` : name;
}

function resourceVersionOf(object: unknown): string | undefined {
  const rv = record(record(object).metadata).resourceVersion;
  return typeof rv === 'string' && rv !== '' ? rv : undefined;
}

/**
 * How long to wait after `failures` failures in a row: full jitter, a random wait up to the base
 * doubled per failure (at most backoffMaxMs), so that thousands of agents do not come back in step;
 * at least the server's Retry-After. The first 410 relists at once: the data is not wrong, only
 * old.
 */
/**
 * The longest wait after a refusal (401, 403) before asking again: a permission given back (RBAC
 * applied again, a token rotated) is then used within 10 s (docs/kubernetes.md). A refusal costs
 * the server little.
 */
export const REFUSED_BACKOFF_MAX_MS = 8_000;

export function backoffDelay(
  failures: number,
  err: unknown,
  timings: Pick<ReflectorTimings, 'backoffBaseMs' | 'backoffMaxMs'>,
  random: () => number = Math.random,
): number {
  if (err instanceof ApiError && err.status === 410 && failures <= 1) return 0;
  const exponent = Math.min(Math.max(failures - 1, 0), 20);
  // Refused (401, 403): a permission given back is used within seconds, not after a minute.
  const refused = err instanceof ApiError && (err.status === 401 || err.status === 403);
  const ceiling = Math.min(
    refused ? REFUSED_BACKOFF_MAX_MS : timings.backoffMaxMs,
    timings.backoffBaseMs * 2 ** exponent,
  );
  const r = random();
  const jittered = Math.round(r * ceiling);
  // The server's Retry-After (capped by the client at RETRY_AFTER_MAX_MS), spread by up to a
  // second.
  const asked = err instanceof ApiError ? err.retryAfterMs : undefined;
  return asked !== undefined ? Math.max(asked + Math.round(r * 1000), jittered) : jittered;
}

/** A list page over the client's size bound. */
/** A 410 Gone: a continue token or resourceVersion compacted away. */
const isExpired = (err: unknown) => err instanceof ApiError && err.status === 410;

/**
 * The most one list answer may take: an unpaged list of thousands of large Nodes is hundreds of
 * MiB (streamed, not held), read in seconds on a healthy server; beyond this it is cut and retried.
 */
const LIST_TIMEOUT_MS = 120_000;

/** How long past its timeoutSeconds a watch is left to the server to end. */
const WATCH_DEADLINE_GRACE_MS = 30_000;

/** A watch open this long was a working one: the backoff starts again from its base. */
const WATCH_LASTED_MS = 5_000;

/** A watch ERROR event carries a Status; 410 means our resourceVersion is compacted away. */
class WatchStatus extends ApiError {}

export class Reflector<T> {
  /** name → what was kept of it; the last known, kept while the API is away. */
  readonly items = new Map<string, T>();
  /** The first list succeeded: items describe the cluster. */
  listed = false;
  private resourceVersion: string | undefined;
  private failures = 0;
  /** When the current watch was answered; a watch that lasted ends a run of failures. */
  private openedAt: number | undefined;
  private readonly stopper = new AbortController();
  private wake: (() => void) | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly options: ReflectorOptions<T>) {}

  start(): void {
    this.running ??= this.loop();
  }

  /** One list and no watch (the one-shot commands); rejects with the first failure. */
  listOnce(): Promise<void> {
    return this.list();
  }

  async stop(): Promise<void> {
    this.stopper.abort();
    this.wake?.();
    await this.running;
  }

  private get stopped(): boolean {
    return this.stopper.signal.aborted;
  }

  private query(extra: Record<string, string>): string {
    const params = new URLSearchParams();
    if (this.options.fieldSelector) params.set('fieldSelector', this.options.fieldSelector);
    for (const [key, value] of Object.entries(extra)) params.set(key, value);
    return `${this.options.path}?${params.toString()}`;
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      let op: WatchOp = 'list';
      this.openedAt = undefined;
      try {
        if (this.resourceVersion === undefined) await this.list();
        op = 'watch';
        await this.watchOnce();
        // A server that ends watches at once must not be asked again in a tight loop.
        if (this.lastedLong()) this.failures = 0;
        else {
          this.failures += 1;
          await this.sleep(this.delayAfter(undefined));
        }
      } catch (err) {
        if (this.stopped) break;
        if (this.lastedLong()) this.failures = 0;
        this.options.onUp(false);
        this.options.onError(op, err);
        // Compacted away, or a watch this side had to cut: the next one starts from a list.
        if ((err instanceof ApiError && err.status === 410) || err instanceof WatchCut)
          this.resourceVersion = undefined;
        this.failures += 1;
        await this.sleep(this.delayAfter(err));
      }
    }
    this.options.onUp(false);
  }

  private lastedLong(): boolean {
    return this.openedAt !== undefined && Date.now() - this.openedAt >= WATCH_LASTED_MS;
  }

  private delayAfter(err: unknown): number {
    return backoffDelay(this.failures, err, this.options.timings, this.options.random);
  }

  private sleep(ms: number): Promise<void> {
    if (ms <= 0 || this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }

  /**
   * Every page, then the items replaced at once: a failed page, or a stop, changes nothing. As
   * client-go lists: first from the API server's watch cache (`resourceVersion=0`, no read of etcd
   * per agent); where its continue token expired, from etcd in pages, and a continue token of
   * etcd's that expired replaced by one full list, as client-go's pager does. Each answer is
   * decoded as it streams (list-stream.ts): only what `extract` keeps of each item stays, however
   * large the items or an answer the cache did not page.
   */
  private async list(): Promise<void> {
    let listed: { items: Map<string, T>; version: string } | undefined;
    const { pageSize } = this.options.timings;
    try {
      listed = await this.pagedList('0', pageSize, false);
    } catch (err) {
      if (this.stopped || !isExpired(err)) throw err;
    }
    if (listed === undefined && !this.stopped) listed = await this.pagedList('', pageSize, true);
    if (this.stopped || listed === undefined) return;
    this.items.clear();
    for (const [name, value] of listed.items) this.items.set(name, value);
    this.resourceVersion = listed.version;
    this.listed = true;
    this.options.onChange();
  }

  /** One list at `resourceVersion` in pages of `limit` (0: unpaged); undefined when stopped. */
  private async pagedList(
    resourceVersion: string,
    limit: number,
    fullIfExpired: boolean,
  ): Promise<{ items: Map<string, T>; version: string } | undefined> {
    const fresh = new Map<string, T>();
    let token: string | undefined;
    let version: string | undefined;
    for (;;) {
      const extra: Record<string, string> = limit > 0 ? { limit: String(limit) } : {};
      if (token) extra.continue = token;
      else if (resourceVersion !== '') extra.resourceVersion = resourceVersion;
      let meta: Record<string, unknown>;
      try {
        meta = await this.options.client.list(
          this.query(extra),
          (item) => this.keep(fresh, record(item)),
          { signal: this.stopper.signal, timeoutMs: LIST_TIMEOUT_MS },
        );
      } catch (err) {
        if (this.stopped) return undefined;
        // The snapshot the pages were read from is gone: all of it again, in one answer.
        if (fullIfExpired && token !== undefined && isExpired(err)) {
          return this.pagedList('', 0, false);
        }
        throw err;
      }
      token = typeof meta.continue === 'string' && meta.continue !== '' ? meta.continue : undefined;
      version = typeof meta.resourceVersion === 'string' ? meta.resourceVersion : version;
      if (token === undefined || this.stopped) break;
    }
    if (this.stopped) return undefined;
    if (version === undefined) throw new Error('list: the answer has no resourceVersion');
    return { items: fresh, version };
  }

  private keep(into: Map<string, T>, object: Record<string, unknown>): void {
    const name = nameOf(object);
    if (name === undefined) return;
    const value = this.options.extract(object);
    if (value === undefined) into.delete(name);
    else into.set(name, value);
  }

  private async watchOnce(): Promise<void> {
    const { timings } = this.options;
    // Spread over the agents so that their watches do not all end together.
    const timeoutSeconds = Math.round(
      timings.watchTimeoutSeconds * (1 + (this.options.random ?? Math.random)()),
    );
    const path = this.query({
      watch: '1',
      resourceVersion: this.resourceVersion ?? '',
      allowWatchBookmarks: 'true',
      timeoutSeconds: String(timeoutSeconds),
    });
    await this.options.client.watch(path, (event) => this.apply(record(event)), {
      idleMs: timings.idleMs,
      // The timeout asked is kept by this side too: a server that never ends the watch is left.
      deadlineMs: timeoutSeconds * 1000 + Math.min(WATCH_DEADLINE_GRACE_MS, timings.idleMs),
      signal: this.stopper.signal,
      onOpen: () => {
        this.openedAt = Date.now();
        this.options.onUp(true);
      },
    });
  }

  private apply(event: Record<string, unknown>): void {
    const object = record(event.object);
    const type = event.type;
    if (type === 'ERROR') {
      const code = typeof object.code === 'number' ? object.code : 500;
      const message = typeof object.message === 'string' ? object.message.slice(0, 300) : '';
      throw new WatchStatus(code, `${code}: ${message}`);
    }
    const version = resourceVersionOf(object);
    if (type === 'BOOKMARK') {
      if (version) this.resourceVersion = version;
      return;
    }
    const name = nameOf(object);
    if (name === undefined) return;
    if (version) this.resourceVersion = version;
    if (type === 'DELETED') {
      if (!this.items.delete(name)) return;
    } else if (type === 'ADDED' || type === 'MODIFIED') {
      const before = this.items.get(name);
      this.keep(this.items, object);
      const after = this.items.get(name);
      const { same } = this.options;
      if (before !== undefined && after !== undefined && same?.(before, after)) return;
      if (before === undefined && after === undefined) return;
    } else return;
    this.options.onChange();
  }
}
