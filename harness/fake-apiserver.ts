// A fake Kubernetes API server for Nodes and Events, behaving as the real one does rather than as a
// client expects: lists with resourceVersion and limit/continue, watches with ADDED/MODIFIED/DELETED
// and BOOKMARK from a resourceVersion (410 Gone as an ERROR event once it is compacted away), bearer
// tokens (401 without, 403 by a switch), Events create/patch, and faults on demand: connections cut
// mid-stream, watches that stall, 5xx and 429 with Retry-After, the whole server unreachable.
import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import type { Connection } from '../src/kubernetes/connection.js';

export interface NodeSpec {
  podCIDRs?: unknown[];
  labels?: Record<string, string>;
  /** Extra bytes of status.images, beyond a realistic object's (~16 KiB). */
  padBytes?: number;
}

interface Stored {
  object: Record<string, unknown>;
  rv: number;
}

interface HistoryEntry {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  object: Record<string, unknown>;
}

interface Watcher {
  res: http.ServerResponse;
  selector: string | undefined;
  queue: string[];
  bookmarks: boolean;
  timers: NodeJS.Timeout[];
}

export interface FakeOptions {
  token?: string;
  /**
   * A list at resourceVersion=0 is served from the watch cache; as API servers before paginated
   * cache lists, the cache ignores `limit` (true unless set false).
   */
  cacheIgnoresLimit?: boolean;
  /** How often a watch gets a BOOKMARK (the real server: about a minute). */
  bookmarkMs?: number;
  tls?: { cert: string; key: string };
}

export interface RecordedEvent {
  name: string;
  namespace: string;
  reason: string;
  message: string;
  type: string;
  count: number;
  involvedObject: { kind?: string; name?: string; uid?: string };
  source: { component?: string; host?: string };
  writes: number;
}

/** A Node as kubelet and the controllers fill it: ~16 KiB, most of it status.images. */
export function realisticNode(name: string, spec: NodeSpec): Record<string, unknown> {
  const images = Array.from({ length: 40 }, (_, i) => ({
    names: [
      `registry.example.com/team-${i}/service-${i}@sha256:${'0123456789abcdef'.repeat(4)}`,
      `registry.example.com/team-${i}/service-${i}:v1.${i}.0`,
    ],
    sizeBytes: 100_000_000 + i,
  }));
  if (spec.padBytes) images.push({ names: ['x'.repeat(spec.padBytes)], sizeBytes: 1 });
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      uid: `uid-${name}`,
      labels: {
        'kubernetes.io/hostname': name,
        'kubernetes.io/os': 'linux',
        ...(spec.labels ?? {}),
      },
      annotations: { 'node.alpha.kubernetes.io/ttl': '0' },
    },
    spec: {
      ...(spec.podCIDRs ? { podCIDRs: spec.podCIDRs } : {}),
      ...(Array.isArray(spec.podCIDRs) && typeof spec.podCIDRs[0] === 'string'
        ? { podCIDR: spec.podCIDRs[0] }
        : {}),
      providerID: `fake://${name}`,
    },
    status: {
      capacity: { cpu: '8', memory: '32Gi', pods: '110' },
      allocatable: { cpu: '7900m', memory: '31Gi', pods: '110' },
      conditions: ['Ready', 'MemoryPressure', 'DiskPressure', 'PIDPressure'].map((type) => ({
        type,
        status: type === 'Ready' ? 'True' : 'False',
        lastHeartbeatTime: '2026-12-02T00:00:00Z',
        lastTransitionTime: '2026-12-01T00:00:00Z',
        reason: `Kubelet${type}`,
        message: `kubelet reports ${type}`,
      })),
      addresses: [
        { type: 'InternalIP', address: '192.0.2.10' },
        { type: 'Hostname', address: name },
      ],
      nodeInfo: {
        kernelVersion: '6.1.0-28-amd64',
        osImage: 'Debian GNU/Linux 12 (bookworm)',
        containerRuntimeVersion: 'containerd://1.7.24',
        kubeletVersion: 'v1.31.4',
        architecture: 'amd64',
        operatingSystem: 'linux',
      },
      images,
    },
  };
}

function status(code: number, reason: string, message: string) {
  return { kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message };
}

function fieldName(selector: string | undefined): string | undefined {
  const match = /^metadata\.name=(.*)$/.exec(selector ?? '');
  return match ? match[1] : undefined;
}

export class FakeApiServer {
  token: string;
  private readonly nodes = new Map<string, Stored>();
  private history: HistoryEntry[] = [];
  private rv = 1000;
  /** Watches from before this resourceVersion get 410 Gone. */
  private compactedBefore = 0;
  private readonly watchers = new Set<Watcher>();
  private readonly sockets = new Set<Socket>();
  private server: http.Server | undefined;
  private port = 0;
  private host = '127.0.0.1';
  private forbidden = false;
  private stalled = false;
  private failures: Array<{ status: number; retryAfter?: number; paths?: string }> = [];
  readonly events = new Map<string, RecordedEvent>();
  /** Requests by kind: list, watch, get, event-create, event-patch, refused. */
  readonly counts = new Map<string, number>();
  private readonly bookmarkMs: number;
  /** Every continue token answered 410 Gone (compaction faster than the list). */
  expireContinue = false;
  /** Watches get this one byte (a space) every `trickleMs` and nothing else; 0: off. */
  trickleMs = 0;
  /** Watches are never ended at their timeoutSeconds. */
  ignoreTimeout = false;
  /** Each list page is answered this much later. */
  listDelayMs = 0;
  /** The User-Agent of every request, in order. */
  readonly userAgents: string[] = [];

  constructor(private readonly options: FakeOptions = {}) {
    this.token = options.token ?? 'fake-token';
    this.bookmarkMs = options.bookmarkMs ?? 60_000;
  }

  get url(): string {
    return `${this.options.tls ? 'https' : 'http'}://${this.host}:${this.port}`;
  }

  async listen(port = 0, host = '127.0.0.1'): Promise<number> {
    this.host = host;
    const handler = (req: http.IncomingMessage, res: http.ServerResponse) => this.handle(req, res);
    const server = this.options.tls
      ? https.createServer({ cert: this.options.tls.cert, key: this.options.tls.key }, handler)
      : http.createServer(handler);
    server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    server.on('secureConnection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port || this.port, host, () => resolve());
    });
    this.server = server;
    this.port = (server.address() as { port: number }).port;
    return this.port;
  }

  /** The token accepted from now on: the old one gets 401 (a rotated service account token). */
  rotateToken(token: string): void {
    this.token = token;
  }

  /** Serves another certificate from now on (a CA rotation): every connection reset. */
  async replaceTls(tls: { cert: string; key: string }): Promise<void> {
    await this.down();
    this.options.tls = tls;
    await this.up();
  }

  /** Unreachable: the listener closed, every connection reset. The data stays (etcd does). */
  async down(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const watcher of this.watchers) this.endWatch(watcher);
    for (const socket of this.sockets) socket.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Reachable again on the same port. */
  async up(): Promise<void> {
    if (!this.server) await this.listen(this.port, this.host);
  }

  async close(): Promise<void> {
    await this.down();
  }

  // ---- data ----

  /** Pods by `namespace/name`: the node they run on and their addresses (GET /api/v1/pods). */
  private readonly pods = new Map<string, { node: string; ips: string[] }>();
  /** `list pods` is refused with 403, as for a ClusterRole without it. */
  podsForbidden = false;

  setPod(namespace: string, name: string, node: string, ips: string[]): void {
    this.pods.set(`${namespace}/${name}`, { node, ips });
  }

  setPodsForbidden(on: boolean): void {
    this.podsForbidden = on;
  }

  setNode(name: string, spec: NodeSpec): number {
    const existed = this.nodes.has(name);
    const object = realisticNode(name, spec);
    this.store(name, object, existed ? 'MODIFIED' : 'ADDED');
    return this.rv;
  }

  /** A Node object exactly as given (hostile input). */
  setRawNode(name: string, object: Record<string, unknown>): number {
    const existed = this.nodes.has(name);
    this.store(
      name,
      { ...object, metadata: { ...(object.metadata as object), name } },
      existed ? 'MODIFIED' : 'ADDED',
    );
    return this.rv;
  }

  /** Many Nodes at once, without history (as if they had been there before any watch). */
  seedNodes(count: number, spec: (i: number) => { name: string } & NodeSpec): void {
    for (let i = 0; i < count; i++) {
      const { name, ...rest } = spec(i);
      this.rv += 1;
      const object = realisticNode(name, rest);
      (object.metadata as Record<string, unknown>).resourceVersion = String(this.rv);
      this.nodes.set(name, { object, rv: this.rv });
    }
    this.compactedBefore = this.rv;
  }

  /**
   * `count` Nodes node-0… with one /24 pod CIDR each from 10.128.0.0/9, in order (as an IPAM
   * controller hands them out), each a realistic object; without history.
   */
  seedPodNodes(count: number): void {
    this.seedNodes(count, (i) => ({
      name: `node-${i}`,
      podCIDRs: [`10.${128 + (i >> 8)}.${i & 255}.0/24`],
    }));
  }

  /**
   * What a cluster's Node watch carries most: status updates (heartbeats, conditions) that leave
   * spec.podCIDRs as it was, `perSecond` of them for `seconds`, on Nodes picked in turn.
   */
  churn(perSecond: number, seconds: number): Promise<number> {
    const names = [...this.nodes.keys()];
    const tickMs = 50;
    const perTick = Math.max(1, Math.round((perSecond * tickMs) / 1000));
    let sent = 0;
    let next = 0;
    return new Promise((resolve) => {
      const started = Date.now();
      const timer = setInterval(() => {
        for (let i = 0; i < perTick && names.length > 0; i++) {
          const name = names[next++ % names.length]!;
          const stored = this.nodes.get(name);
          if (!stored) continue;
          const object = structuredClone(stored.object);
          const status = object.status as { conditions: Array<{ lastHeartbeatTime: string }> };
          for (const c of status.conditions) c.lastHeartbeatTime = new Date().toISOString();
          this.store(name, object, 'MODIFIED');
          sent++;
        }
        if (Date.now() - started >= seconds * 1000) {
          clearInterval(timer);
          resolve(sent);
        }
      }, tickMs);
    });
  }

  deleteNode(name: string): boolean {
    const stored = this.nodes.get(name);
    if (!stored) return false;
    this.nodes.delete(name);
    this.rv += 1;
    const object = {
      ...stored.object,
      metadata: { ...(stored.object.metadata as object), resourceVersion: String(this.rv) },
    };
    this.record({ rv: this.rv, type: 'DELETED', object });
    return true;
  }

  nodeNames(): string[] {
    return [...this.nodes.keys()];
  }

  private store(name: string, object: Record<string, unknown>, type: 'ADDED' | 'MODIFIED'): void {
    this.rv += 1;
    (object.metadata as Record<string, unknown>).resourceVersion = String(this.rv);
    this.nodes.set(name, { object, rv: this.rv });
    this.record({ rv: this.rv, type, object });
  }

  private record(entry: HistoryEntry): void {
    this.history.push(entry);
    if (this.history.length > 100_000) this.history.splice(0, 50_000);
    const line = `${JSON.stringify({ type: entry.type, object: entry.object })}\n`;
    const name = String((entry.object.metadata as { name: string }).name);
    for (const watcher of this.watchers) {
      const only = fieldName(watcher.selector);
      if (only !== undefined && only !== name) continue;
      this.send(watcher, line);
    }
  }

  // ---- faults ----

  /** Every resourceVersion before now is gone: watches from one get 410, continue tokens too. */
  compact(): void {
    this.compactedBefore = this.rv;
    this.history = [];
  }

  /** Cuts every watch connection mid-stream. */
  dropWatches(): number {
    const n = this.watchers.size;
    for (const watcher of [...this.watchers]) {
      watcher.res.socket?.destroy();
      this.endWatch(watcher);
    }
    return n;
  }

  /** Watches get nothing more (not even bookmarks) while stalled; data is queued. */
  stall(on: boolean): void {
    this.stalled = on;
    if (!on) for (const watcher of this.watchers) this.flush(watcher);
  }

  setForbidden(on: boolean): void {
    this.forbidden = on;
  }

  /** The next `count` requests (of paths containing `paths`, if given) get `status`. */
  failNext(count: number, statusCode: number, retryAfter?: number, paths?: string): void {
    for (let i = 0; i < count; i++)
      this.failures.push({
        status: statusCode,
        ...(retryAfter !== undefined ? { retryAfter } : {}),
        ...(paths ? { paths } : {}),
      });
  }

  watchCount(): number {
    return this.watchers.size;
  }

  countOf(kind: string): number {
    return this.counts.get(kind) ?? 0;
  }

  /** List requests of either kind: from the watch cache and from etcd. */
  lists(): number {
    return this.countOf('list') + this.countOf('list-cache');
  }

  eventList(): RecordedEvent[] {
    return [...this.events.values()];
  }

  // ---- HTTP ----

  private count(kind: string): void {
    this.counts.set(kind, (this.counts.get(kind) ?? 0) + 1);
  }

  private reply(
    res: http.ServerResponse,
    code: number,
    body: unknown,
    headers: Record<string, string> = {},
  ) {
    const text = JSON.stringify(body);
    res.writeHead(code, { 'content-type': 'application/json', ...headers });
    res.end(text);
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://fake');
    this.userAgents.push(String(req.headers['user-agent'] ?? ''));
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      this.count('refused');
      this.reply(res, 401, status(401, 'Unauthorized', 'Unauthorized'));
      return;
    }
    if (this.forbidden) {
      this.count('refused');
      this.reply(
        res,
        403,
        status(
          403,
          'Forbidden',
          `nodes is forbidden: User "system:serviceaccount:kube-system:ip-masq-agent" cannot list resource "nodes"`,
        ),
      );
      return;
    }
    const failure = this.failures.findIndex(
      (f) => f.paths === undefined || url.pathname.includes(f.paths),
    );
    if (failure !== -1) {
      const [f] = this.failures.splice(failure, 1);
      this.count('refused');
      this.reply(
        res,
        f!.status,
        status(
          f!.status,
          f!.status === 429 ? 'TooManyRequests' : 'InternalError',
          'fault injected by the test',
        ),
        f!.retryAfter !== undefined ? { 'retry-after': String(f!.retryAfter) } : {},
      );
      return;
    }
    const body: Buffer[] = [];
    req.on('data', (chunk: Buffer) => body.push(chunk));
    req.on('end', () => {
      try {
        this.route(req, res, url, Buffer.concat(body).toString('utf8'));
      } catch (err) {
        this.reply(res, 500, status(500, 'InternalError', String(err)));
      }
    });
  }

  private route(req: http.IncomingMessage, res: http.ServerResponse, url: URL, body: string): void {
    const path = url.pathname;
    if (path === '/api/v1/nodes' && req.method === 'GET') {
      if (url.searchParams.get('watch') === '1' || url.searchParams.get('watch') === 'true')
        this.watch(res, url);
      else this.list(res, url);
      return;
    }
    if (path === '/api/v1/pods' && req.method === 'GET') {
      this.count('pods');
      if (this.podsForbidden) {
        this.reply(
          res,
          403,
          status(
            403,
            'Forbidden',
            'pods is forbidden: User "system:serviceaccount:kube-system:ip-masq-agent" cannot list resource "pods" in API group "" at the cluster scope',
          ),
        );
        return;
      }
      // Only `spec.nodeName=NAME` is understood, as the agent asks; anything else is refused.
      const selector = url.searchParams.get('fieldSelector') ?? '';
      const wanted = /^spec\.nodeName=(.+)$/.exec(selector)?.[1];
      if (wanted === undefined) {
        this.reply(res, 400, status(400, 'BadRequest', `fake: fieldSelector ${selector}`));
        return;
      }
      const items = [...this.pods]
        .filter(([, pod]) => pod.node === wanted)
        .map(([key, pod]) => {
          const [namespace, name] = key.split('/');
          return {
            metadata: { namespace, name },
            spec: { nodeName: pod.node },
            status: { podIP: pod.ips[0], podIPs: pod.ips.map((ip) => ({ ip })) },
          };
        });
      this.reply(res, 200, {
        kind: 'PodList',
        apiVersion: 'v1',
        metadata: { resourceVersion: String(this.rv) },
        items,
      });
      return;
    }
    const node = /^\/api\/v1\/nodes\/([^/]+)$/.exec(path);
    if (node && req.method === 'GET') {
      this.count('get');
      const stored = this.nodes.get(decodeURIComponent(node[1]!));
      if (!stored) this.reply(res, 404, status(404, 'NotFound', `nodes "${node[1]}" not found`));
      else this.reply(res, 200, stored.object);
      return;
    }
    const events = /^\/api\/v1\/namespaces\/([^/]+)\/events(?:\/([^/]+))?$/.exec(path);
    if (events) {
      this.event(
        req,
        res,
        decodeURIComponent(events[1]!),
        events[2] ? decodeURIComponent(events[2]) : undefined,
        body,
      );
      return;
    }
    this.reply(
      res,
      404,
      status(404, 'NotFound', `the server could not find the requested resource ${path}`),
    );
  }

  private list(res: http.ServerResponse, url: URL): void {
    if (this.listDelayMs > 0) {
      const delay = this.listDelayMs;
      setTimeout(() => this.listNow(res, url), delay);
      return;
    }
    this.listNow(res, url);
  }

  private listNow(res: http.ServerResponse, url: URL): void {
    // resourceVersion=0 (any version): served from the watch cache, no etcd read.
    const fromCache = url.searchParams.get('resourceVersion') === '0';
    this.count(fromCache ? 'list-cache' : 'list');
    const limit =
      fromCache && this.options.cacheIgnoresLimit !== false
        ? 0
        : Number(url.searchParams.get('limit') ?? '0');
    const token = url.searchParams.get('continue');
    if (token && this.expireContinue) {
      this.reply(
        res,
        410,
        status(
          410,
          'Expired',
          'The provided continue parameter is too old to display a consistent list result.',
        ),
      );
      return;
    }
    let start = 0;
    let rv = this.rv;
    if (token) {
      const parsed = JSON.parse(Buffer.from(token, 'base64').toString('utf8')) as {
        rv: number;
        start: number;
      };
      if (parsed.rv < this.compactedBefore) {
        this.reply(
          res,
          410,
          status(
            410,
            'Expired',
            'The provided continue parameter is too old to display a consistent list result.',
          ),
        );
        return;
      }
      start = parsed.start;
      rv = parsed.rv;
    }
    const only = fieldName(url.searchParams.get('fieldSelector') ?? undefined);
    const names = [...this.nodes.keys()].filter((n) => only === undefined || n === only).sort();
    const end = limit > 0 ? Math.min(names.length, start + limit) : names.length;
    const items = names.slice(start, end).map((n) => this.nodes.get(n)!.object);
    const more = end < names.length;
    this.reply(res, 200, {
      kind: 'NodeList',
      apiVersion: 'v1',
      metadata: {
        resourceVersion: String(rv),
        ...(more
          ? {
              continue: Buffer.from(JSON.stringify({ rv, start: end })).toString('base64'),
              remainingItemCount: names.length - end,
            }
          : {}),
      },
      items,
    });
  }

  private watch(res: http.ServerResponse, url: URL): void {
    this.count('watch');
    const selector = url.searchParams.get('fieldSelector') ?? undefined;
    const from = url.searchParams.get('resourceVersion') ?? '';
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    const watcher: Watcher = {
      res,
      selector,
      queue: [],
      bookmarks: url.searchParams.get('allowWatchBookmarks') === 'true',
      timers: [],
    };
    this.watchers.add(watcher);
    res.on('close', () => this.endWatch(watcher));
    const only = fieldName(selector);
    const matches = (object: Record<string, unknown>) =>
      only === undefined || (object.metadata as { name: string }).name === only;
    if (from === '' || from === '0') {
      for (const stored of this.nodes.values())
        if (matches(stored.object))
          this.send(watcher, `${JSON.stringify({ type: 'ADDED', object: stored.object })}\n`);
    } else {
      const since = Number(from);
      if (!Number.isFinite(since) || since < this.compactedBefore) {
        this.send(
          watcher,
          `${JSON.stringify({ type: 'ERROR', object: status(410, 'Expired', `too old resource version: ${from} (${this.compactedBefore})`) })}\n`,
        );
        this.endWatch(watcher);
        return;
      }
      for (const entry of this.history)
        if (entry.rv > since && matches(entry.object))
          this.send(watcher, `${JSON.stringify({ type: entry.type, object: entry.object })}\n`);
    }
    const timeout = Number(url.searchParams.get('timeoutSeconds') ?? '0');
    if (timeout > 0 && !this.ignoreTimeout)
      watcher.timers.push(setTimeout(() => this.endWatch(watcher), timeout * 1000));
    if (this.trickleMs > 0) {
      watcher.timers.push(
        setInterval(() => {
          if (!watcher.res.writableEnded) watcher.res.write(' ');
        }, this.trickleMs),
      );
    }
    if (watcher.bookmarks) {
      watcher.timers.push(
        setInterval(() => {
          if (this.stalled) return;
          this.send(
            watcher,
            `${JSON.stringify({ type: 'BOOKMARK', object: { kind: 'Node', apiVersion: 'v1', metadata: { resourceVersion: String(this.rv) } } })}\n`,
          );
        }, this.bookmarkMs),
      );
    }
  }

  private send(watcher: Watcher, line: string): void {
    watcher.queue.push(line);
    if (!this.stalled) this.flush(watcher);
  }

  private flush(watcher: Watcher): void {
    if (watcher.queue.length === 0 || watcher.res.writableEnded) return;
    watcher.res.write(watcher.queue.join(''));
    watcher.queue = [];
  }

  private endWatch(watcher: Watcher): void {
    if (!this.watchers.delete(watcher)) return;
    for (const timer of watcher.timers) clearTimeout(timer);
    if (!this.stalled) this.flush(watcher);
    if (!watcher.res.writableEnded) watcher.res.end();
  }

  private event(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    namespace: string,
    name: string | undefined,
    body: string,
  ): void {
    if (req.method === 'POST' && name === undefined) {
      this.count('event-create');
      const event = JSON.parse(body) as Record<string, unknown>;
      const meta = event.metadata as { name?: string };
      if (!meta?.name)
        return this.reply(res, 422, status(422, 'Invalid', 'metadata.name is required'));
      if (this.events.has(meta.name))
        return this.reply(
          res,
          409,
          status(409, 'AlreadyExists', `events "${meta.name}" already exists`),
        );
      this.events.set(meta.name, {
        name: meta.name,
        namespace,
        reason: String(event.reason),
        message: String(event.message),
        type: String(event.type),
        count: Number(event.count ?? 1),
        involvedObject: event.involvedObject as RecordedEvent['involvedObject'],
        source: event.source as RecordedEvent['source'],
        writes: 1,
      });
      return this.reply(res, 201, event);
    }
    if (req.method === 'PATCH' && name !== undefined) {
      this.count('event-patch');
      const stored = this.events.get(name);
      if (!stored)
        return this.reply(res, 404, status(404, 'NotFound', `events "${name}" not found`));
      if (!String(req.headers['content-type']).includes('merge-patch'))
        return this.reply(res, 415, status(415, 'UnsupportedMediaType', 'merge patch only'));
      const patch = JSON.parse(body) as { count?: number };
      if (typeof patch.count === 'number') stored.count = patch.count;
      stored.writes += 1;
      return this.reply(res, 200, stored);
    }
    if (req.method === 'GET' && name === undefined) {
      return this.reply(res, 200, { kind: 'EventList', items: this.eventList() });
    }
    return this.reply(res, 405, status(405, 'MethodNotAllowed', 'method not allowed'));
  }
}

/** A FakeApiServer on the loopback for the client's unit tests, closed at teardown. */
export async function startFake(
  t: { teardown(fn: () => unknown): void },
  options: FakeOptions = {},
): Promise<FakeApiServer> {
  const server = new FakeApiServer(options);
  await server.listen();
  t.teardown(() => server.close());
  return server;
}

/** Polls `check` every 10 ms until it answers something but undefined or false; bounded. */
export async function until<T>(
  what: string,
  check: () => T | undefined,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A Connection to the fake (or any URL) with a fixed bearer token and, for TLS, a CA. */
export function connectionTo(url: string, token: string | undefined, ca?: Buffer): Connection {
  return {
    server: new URL(url),
    tls: async () => (ca ? { ca } : {}),
    authorization: async () => (token ? `Bearer ${token}` : undefined),
  };
}
