// The few API calls the agent makes (docs/kubernetes.md, "Kubernetes API (opt-in)"), over
// node:http(s): a JSON request, and a watch read as one JSON object per line. docs/design.md says
// why this is not
// @kubernetes/client-node. Every call has a deadline; every body and line a size bound.
import http from 'node:http';
import https from 'node:https';
import { version } from '../version.js';
import type { Connection, TlsMaterial } from './connection.js';
import { ListScanner } from './list-stream.js';

/** A status from the API server, with what a caller decides on: the code and Retry-After. */
export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly status: number,
    message: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}

/** An answer over MAX_BODY_BYTES: refused, not buffered (a list asks for smaller pages then). */
export class BodyTooLarge extends Error {
  override name = 'BodyTooLarge';
}

/** A list page of Nodes with ~20 KiB each is a few MiB; a larger body is refused, not buffered. */
export const MAX_BODY_BYTES = 64 * 1024 * 1024;
/** One watch event is one object: the same bound. */
export const MAX_LINE_BYTES = MAX_BODY_BYTES;

export interface RequestOptions {
  readonly body?: unknown;
  readonly contentType?: string;
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

export interface WatchOptions {
  /**
   * No event for this long (not even a bookmark; bytes that complete none do not count): the
   * watch is taken for stalled and ended.
   */
  readonly idleMs: number;
  /** The watch is ended by this client this long after it opened, whatever the server does. */
  readonly deadlineMs?: number;
  readonly signal?: AbortSignal;
  /** Called once the server has answered 200: the watch is live. */
  readonly onOpen?: () => void;
}

const DEFAULT_TIMEOUT_MS = 30_000;

/**
 * A watch this client had to end at its own deadline (the server never ended it): a failure, as
 * client-go takes it — the watch is down, and the next one starts from a new list.
 */
export class WatchCut extends Error {
  override readonly name = 'WatchCut';
}

/**
 * The most a server's Retry-After is waited (docs/kubernetes.md, "Kubernetes API (opt-in)"): a
 * proxy or an API server under load may ask for an hour; the reflector's own backoff and jitter
 * apply beyond.
 */
export const RETRY_AFTER_MAX_MS = 30_000;

function retryAfter(header: string | string[] | undefined): number | undefined {
  const text = Array.isArray(header) ? header[0] : header;
  if (text === undefined) return undefined;
  const seconds = Number(text);
  if (text.trim() !== '' && Number.isFinite(seconds) && seconds >= 0)
    return Math.min(seconds * 1000, RETRY_AFTER_MAX_MS);
  const date = Date.parse(text);
  return Number.isNaN(date)
    ? undefined
    : Math.max(0, Math.min(date - Date.now(), RETRY_AFTER_MAX_MS));
}

/** The message of a Status body, else the start of the body. */
function statusMessage(status: number, body: string): string {
  try {
    const parsed = JSON.parse(body) as { message?: unknown };
    if (typeof parsed.message === 'string') return `${status}: ${parsed.message.slice(0, 300)}`;
  } catch {
    // not JSON: the text itself
  }
  return `${status}: ${body.slice(0, 300).replace(/[^\x20-\x7e]/g, '?') || http.STATUS_CODES[status] || 'error'}`;
}

/**
 * A non-2xx answer to a streamed request (a list, a watch) as the ApiError it is: the start of its
 * body (a Status, 64 KiB at most) read, the request ended.
 */
async function refusal(req: http.ClientRequest, res: http.IncomingMessage): Promise<ApiError> {
  const status = res.statusCode ?? 0;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > 64 * 1024) break;
    chunks.push(chunk);
  }
  req.destroy();
  return new ApiError(
    status,
    statusMessage(status, Buffer.concat(chunks).toString('utf8')),
    retryAfter(res.headers['retry-after']),
  );
}

/** Whether two TLS materials are the same bytes. */
function sameMaterial(a: TlsMaterial, b: TlsMaterial): boolean {
  const same = (x: Buffer | undefined, y: Buffer | undefined) =>
    x === y || (x !== undefined && y !== undefined && x.equals(y));
  return same(a.ca, b.ca) && same(a.cert, b.cert) && same(a.key, b.key);
}

/** What the agent says it is (`User-Agent`), as client-go's components do. */
const USER_AGENT = `ipmasq-agent/${version()} (linux; node ${process.versions.node})`;

export class ApiClient {
  private agent: http.Agent | undefined;
  private material: TlsMaterial = {};
  /** Agents made with TLS material since replaced: destroyed once a request on them ends. */
  private readonly retired = new Set<http.Agent>();

  constructor(private readonly connection: Connection) {}

  close(): void {
    this.agent?.destroy();
    for (const agent of this.retired) agent.destroy();
    this.retired.clear();
  }

  /** The agent for the TLS material as it is now: a replaced CA or certificate makes a new one. */
  private async currentAgent(): Promise<http.Agent> {
    const { connection } = this;
    if (connection.server.protocol !== 'https:')
      return (this.agent ??= new http.Agent({ keepAlive: true }));
    const material = await connection.tls();
    if (this.agent && sameMaterial(material, this.material)) return this.agent;
    if (this.agent) this.retired.add(this.agent);
    this.material = material;
    this.agent = new https.Agent({
      keepAlive: true,
      ...material,
      rejectUnauthorized: connection.insecureSkipTLSVerify !== true,
    });
    return this.agent;
  }

  /** A request on a replaced agent ended: the agent goes (any other request on it reconnects). */
  private done(agent: http.Agent): void {
    if (!this.retired.delete(agent)) return;
    agent.destroy();
  }

  /**
   * Opens a request; a 401 is asked once more with the credential read again at once (a token
   * rotated since it was last read), as client-go does.
   */
  private async open(
    method: string,
    path: string,
    options: { body?: string; contentType?: string; signal?: AbortSignal; timeoutMs: number },
  ): Promise<{ req: http.ClientRequest; res: http.IncomingMessage; agent: http.Agent }> {
    const first = await this.openOnce(method, path, options, false);
    if (first.res.statusCode !== 401) return first;
    first.res.resume();
    first.req.destroy();
    this.done(first.agent);
    return this.openOnce(method, path, options, true);
  }

  private async openOnce(
    method: string,
    path: string,
    options: { body?: string; contentType?: string; signal?: AbortSignal; timeoutMs: number },
    fresh: boolean,
  ): Promise<{ req: http.ClientRequest; res: http.IncomingMessage; agent: http.Agent }> {
    const { server } = this.connection;
    const agent = await this.currentAgent();
    const authorization = await this.connection.authorization(fresh);
    const headers: Record<string, string> = {
      accept: 'application/json',
      'user-agent': USER_AGENT,
    };
    if (authorization) headers.authorization = authorization;
    if (options.body !== undefined) {
      headers['content-type'] = options.contentType ?? 'application/json';
      headers['content-length'] = String(Buffer.byteLength(options.body));
    }
    const transport = server.protocol === 'https:' ? https : http;
    const base = server.pathname.replace(/\/$/, '');
    return new Promise((resolve, reject) => {
      const req = transport.request({
        method,
        host: server.hostname.replace(/^\[|\]$/g, ''),
        port: server.port || (server.protocol === 'https:' ? 443 : 80),
        path: base + path,
        headers,
        agent,
        ...(options.signal ? { signal: options.signal } : {}),
      });
      const timer = setTimeout(
        () => req.destroy(new Error(`${method} ${path}: no answer in ${options.timeoutMs} ms`)),
        options.timeoutMs,
      );
      timer.unref();
      req.on('response', (res) => {
        clearTimeout(timer);
        resolve({ req, res, agent });
      });
      req.on('error', (err) => {
        clearTimeout(timer);
        this.done(agent);
        reject(err);
      });
      req.end(options.body);
    });
  }

  /** One request; resolves to the parsed JSON body of a 2xx, rejects with ApiError otherwise. */
  async json(method: string, path: string, options: RequestOptions = {}): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const { req, res, agent } = await this.open(method, path, {
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
      ...(options.contentType ? { contentType: options.contentType } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
      timeoutMs,
    });
    const body = await new Promise<string>((resolve, reject) => {
      res.on('close', () => this.done(agent));
      const chunks: Buffer[] = [];
      let size = 0;
      const timer = setTimeout(
        () => req.destroy(new Error(`${method} ${path}: body not read in ${timeoutMs} ms`)),
        timeoutMs,
      );
      timer.unref();
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > MAX_BODY_BYTES) {
          const err = new BodyTooLarge(
            `${method} ${path}: answer larger than ${MAX_BODY_BYTES} bytes`,
          );
          clearTimeout(timer);
          reject(err);
          req.destroy(err);
          return;
        }
        chunks.push(chunk);
      });
      res.on('end', () => {
        clearTimeout(timer);
        resolve(Buffer.concat(chunks).toString('utf8'));
      });
      res.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      req.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) {
      throw new ApiError(
        status,
        statusMessage(status, body),
        retryAfter(res.headers['retry-after']),
      );
    }
    return JSON.parse(body) as unknown;
  }

  /**
   * A list, decoded as it streams (list-stream.ts): each item handed to `onItem` parsed and then
   * dropped; resolves to the list's metadata (resourceVersion, continue). Memory is bounded by one
   * item, not by the answer; a deadline of `timeoutMs` for the whole answer as for any request.
   */
  async list(
    path: string,
    onItem: (item: unknown) => void,
    options: RequestOptions = {},
  ): Promise<Record<string, unknown>> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const { req, res, agent } = await this.open('GET', path, {
      ...(options.signal ? { signal: options.signal } : {}),
      timeoutMs,
    });
    res.on('close', () => this.done(agent));
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) throw await refusal(req, res);
    const scanner = new ListScanner(onItem);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => fail(new Error(`GET ${path}: body not read in ${timeoutMs} ms`)),
        timeoutMs,
      );
      timer.unref();
      let settled = false;
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        req.destroy(err);
        reject(err);
      };
      res.on('data', (chunk: Buffer) => {
        if (settled) return;
        try {
          scanner.write(chunk);
        } catch (err) {
          fail(err instanceof Error ? err : new Error(String(err)));
        }
      });
      res.on('end', () => {
        if (settled) return;
        try {
          scanner.end();
        } catch (err) {
          fail(err instanceof Error ? err : new Error(String(err)));
          return;
        }
        settled = true;
        clearTimeout(timer);
        resolve();
      });
      res.on('error', (err) => fail(err));
      res.on('close', () => {
        if (!res.complete) fail(new Error(`GET ${path}: the connection was cut`));
      });
      req.on('error', (err) => fail(err));
    });
    return scanner.metadata;
  }

  /**
   * A watch: each line is handed to `onEvent` parsed. Resolves when the server ends the stream (its
   * timeoutSeconds); rejects with WatchCut at `deadlineMs`, and on a non-2xx answer, a broken line, an over-long
   * line, or no event for idleMs (bytes that complete no event are no progress: a server trickling
   * spaces is stalled all the same).
   */
  async watch(
    path: string,
    onEvent: (event: unknown) => void,
    options: WatchOptions,
  ): Promise<void> {
    const { req, res, agent } = await this.open('GET', path, {
      ...(options.signal ? { signal: options.signal } : {}),
      timeoutMs: options.idleMs,
    });
    try {
      await this.follow(req, res, onEvent, options);
    } finally {
      this.done(agent);
    }
  }

  private async follow(
    req: http.ClientRequest,
    res: http.IncomingMessage,
    onEvent: (event: unknown) => void,
    options: WatchOptions,
  ): Promise<void> {
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) throw await refusal(req, res);
    options.onOpen?.();
    await new Promise<void>((resolve, reject) => {
      let idle: NodeJS.Timeout;
      let settled = false;
      const deadline =
        options.deadlineMs === undefined
          ? undefined
          : setTimeout(
              // Cut by this side: the server kept it past its own timeout (docs/kubernetes.md).
              () =>
                finish(
                  new WatchCut(
                    `watch cut by the client ${options.deadlineMs} ms after it opened: the server never ended it`,
                  ),
                ),
              options.deadlineMs,
            );
      deadline?.unref();
      const finish = (err?: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(idle);
        clearTimeout(deadline);
        if (err) {
          req.destroy();
          reject(err);
        } else {
          if (!res.complete) req.destroy();
          resolve();
        }
      };
      const arm = () => {
        clearTimeout(idle);
        idle = setTimeout(
          () => finish(new Error(`watch stalled: no event for ${options.idleMs} ms`)),
          options.idleMs,
        );
        idle.unref();
      };
      arm();
      const lines = new EventLines();
      res.on('data', (chunk: Buffer) => {
        if (settled) return;
        const err = lines.take(chunk, (event) => {
          arm();
          try {
            onEvent(event);
            return true;
          } catch (err) {
            finish(err instanceof Error ? err : new Error(String(err)));
            return false;
          }
        });
        if (err) finish(err);
      });
      res.on('end', () => finish());
      res.on('error', (err) => finish(err));
      // The connection closed before the server ended the stream.
      res.on('close', () => {
        if (!res.complete) finish(new Error('watch: the connection was cut'));
      });
      req.on('error', (err) => finish(err));
    });
  }
}

/** A watch's body cut into lines, one JSON event each; a line may span chunks. */
class EventLines {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  /**
   * Each complete line's event given to `each`, in order, until it says false; an error when a
   * line is not JSON or grows past MAX_LINE_BYTES.
   */
  take(chunk: Buffer, each: (event: unknown) => boolean): Error | undefined {
    let start = 0;
    for (;;) {
      const newline = chunk.indexOf(10, start);
      if (newline === -1) break;
      const piece = chunk.subarray(start, newline);
      const line =
        this.pending.length === 0
          ? piece.toString('utf8')
          : Buffer.concat([...this.pending, piece]).toString('utf8');
      this.pending = [];
      this.pendingBytes = 0;
      start = newline + 1;
      if (line.trim() === '') continue;
      let event: unknown;
      try {
        event = JSON.parse(line);
      } catch {
        return new Error('watch: a line that is not JSON');
      }
      if (!each(event)) return undefined;
    }
    if (start < chunk.length) {
      this.pendingBytes += chunk.length - start;
      if (this.pendingBytes > MAX_LINE_BYTES)
        return new Error(`watch: an event larger than ${MAX_LINE_BYTES} bytes`);
      this.pending.push(chunk.subarray(start));
    }
    return undefined;
  }
}
