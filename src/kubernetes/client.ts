// The few API calls the agent makes (README, "Kubernetes API (opt-in)"), over node:http(s): a JSON
// request, and a watch read as one JSON object per line. docs/design.md says why this is not
// @kubernetes/client-node. Every call has a deadline; every body and line a size bound.
import http from 'node:http';
import https from 'node:https';
import type { Connection } from './connection.js';

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
  /** No byte for this long (not even a bookmark): the watch is taken for stalled and ended. */
  readonly idleMs: number;
  readonly signal?: AbortSignal;
  /** Called once the server has answered 200: the watch is live. */
  readonly onOpen?: () => void;
}

const DEFAULT_TIMEOUT_MS = 30_000;

function retryAfter(header: string | string[] | undefined): number | undefined {
  const text = Array.isArray(header) ? header[0] : header;
  if (text === undefined) return undefined;
  const seconds = Number(text);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.min(seconds, 600) * 1000;
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, Math.min(date - Date.now(), 600_000));
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

export class ApiClient {
  private readonly agent: http.Agent;

  constructor(private readonly connection: Connection) {
    const tls = connection.server.protocol === 'https:';
    this.agent = tls
      ? new https.Agent({
          keepAlive: true,
          ...(connection.ca ? { ca: connection.ca } : {}),
          ...(connection.cert ? { cert: connection.cert } : {}),
          ...(connection.key ? { key: connection.key } : {}),
          rejectUnauthorized: connection.insecureSkipTLSVerify !== true,
        })
      : new http.Agent({ keepAlive: true });
  }

  close(): void {
    this.agent.destroy();
  }

  private async open(
    method: string,
    path: string,
    options: { body?: string; contentType?: string; signal?: AbortSignal; timeoutMs: number },
  ): Promise<{ req: http.ClientRequest; res: http.IncomingMessage }> {
    const { server } = this.connection;
    const token = await this.connection.token();
    const headers: Record<string, string> = { accept: 'application/json' };
    if (token) headers.authorization = `Bearer ${token}`;
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
        agent: this.agent,
        ...(options.signal ? { signal: options.signal } : {}),
      });
      const timer = setTimeout(
        () => req.destroy(new Error(`${method} ${path}: no answer in ${options.timeoutMs} ms`)),
        options.timeoutMs,
      );
      timer.unref();
      req.on('response', (res) => {
        clearTimeout(timer);
        resolve({ req, res });
      });
      req.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      req.end(options.body);
    });
  }

  /** One request; resolves to the parsed JSON body of a 2xx, rejects with ApiError otherwise. */
  async json(method: string, path: string, options: RequestOptions = {}): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const { req, res } = await this.open(method, path, {
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
      ...(options.contentType ? { contentType: options.contentType } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
      timeoutMs,
    });
    const body = await new Promise<string>((resolve, reject) => {
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
          req.destroy(new Error(`${method} ${path}: answer larger than ${MAX_BODY_BYTES} bytes`));
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
   * A watch: each line is handed to `onEvent` parsed. Resolves when the server ends the stream (its
   * timeoutSeconds), rejects on a non-2xx answer, a broken line, an over-long line, an idle stall.
   */
  async watch(
    path: string,
    onEvent: (event: unknown) => void,
    options: WatchOptions,
  ): Promise<void> {
    const { req, res } = await this.open('GET', path, {
      ...(options.signal ? { signal: options.signal } : {}),
      timeoutMs: options.idleMs,
    });
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) {
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > 64 * 1024) break;
        chunks.push(chunk);
      }
      req.destroy();
      throw new ApiError(
        status,
        statusMessage(status, Buffer.concat(chunks).toString('utf8')),
        retryAfter(res.headers['retry-after']),
      );
    }
    options.onOpen?.();
    await new Promise<void>((resolve, reject) => {
      let pending: Buffer[] = [];
      let pendingBytes = 0;
      let idle: NodeJS.Timeout;
      const fail = (err: Error) => {
        clearTimeout(idle);
        req.destroy();
        reject(err);
      };
      const arm = () => {
        clearTimeout(idle);
        idle = setTimeout(
          () => fail(new Error(`watch stalled: nothing for ${options.idleMs} ms`)),
          options.idleMs,
        );
        idle.unref();
      };
      arm();
      res.on('data', (chunk: Buffer) => {
        arm();
        let start = 0;
        for (;;) {
          const newline = chunk.indexOf(10, start);
          if (newline === -1) break;
          const piece = chunk.subarray(start, newline);
          const line =
            pending.length === 0
              ? piece.toString('utf8')
              : Buffer.concat([...pending, piece]).toString('utf8');
          pending = [];
          pendingBytes = 0;
          start = newline + 1;
          if (line.trim() === '') continue;
          let event: unknown;
          try {
            event = JSON.parse(line);
          } catch {
            fail(new Error('watch: a line that is not JSON'));
            return;
          }
          try {
            onEvent(event);
          } catch (err) {
            fail(err instanceof Error ? err : new Error(String(err)));
            return;
          }
        }
        if (start < chunk.length) {
          pendingBytes += chunk.length - start;
          if (pendingBytes > MAX_LINE_BYTES) {
            fail(new Error(`watch: an event larger than ${MAX_LINE_BYTES} bytes`));
            return;
          }
          pending.push(chunk.subarray(start));
        }
      });
      res.on('end', () => {
        clearTimeout(idle);
        resolve();
      });
      res.on('error', (err) => fail(err));
      res.on('aborted', () => fail(new Error('watch: the connection was cut')));
      req.on('error', (err) => fail(err));
    });
  }
}
