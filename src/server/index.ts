// The health and metrics server (docs/observability.md, "HTTP"). It only reads: the agent hands it
// a status function and its metrics, so a probe never waits on libnftables; /readyz alone may wait,
// within its time, for a sync to look at the kernel again (reconcile/readiness.ts).
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyPluginAsync,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import fp from 'fastify-plugin';
import type { AgentMetrics } from '../reconcile/metrics.js';
import type { AgentStatus } from '../reconcile/status.js';

export type { AgentStatus } from '../reconcile/status.js';

export interface ServerOptions {
  status: () => AgentStatus;
  metrics: AgentMetrics;
  /**
   * Whether the kernel is known to hold our tables as of now, looking again if another commit came
   * since the last look (reconcile/readiness.ts); without it, /readyz answers from the status
   * alone.
   */
  fresh?: () => Promise<boolean>;
}

/** Bad options given to the plugin; thrown at registration, never per request. */
export class ServerOptionsError extends Error {
  readonly code = 'IPMASQ_ERR_SERVER_OPTIONS';
  constructor(message: string) {
    super(message);
    this.name = 'ServerOptionsError';
  }
}

/** /healthz and /livez: the same body with 200 or 503 (docs/observability.md, "HTTP"). */
interface HealthReply {
  status: 'ok' | 'unhealthy';
  generation: number;
  configHash: string | null;
  /** ISO 8601 */
  lastSyncTime: string | null;
  lastError: string | null;
  configError: string | null;
  nonMasqueradeCIDRs: { ipv4: number; ipv6: number };
}

type ReadyReply = { status: 'ready'; generation: number } | { status: 'not ready'; reason: string };

const routes = ['/healthz', '/livez', '/readyz', '/metrics'];
const allowedMethods = ['GET', 'HEAD'];

function resolveOptions(opts: Partial<ServerOptions> | undefined): ServerOptions {
  if (typeof opts?.status !== 'function') {
    throw new ServerOptionsError('the server needs a status function returning AgentStatus');
  }
  // Duck-typed rather than instanceof so a second copy of this module (src vs dist) still works.
  if (typeof opts.metrics?.exposition !== 'function') {
    throw new ServerOptionsError('the server needs an AgentMetrics instance');
  }
  if (opts.fresh !== undefined && typeof opts.fresh !== 'function') {
    throw new ServerOptionsError('fresh must be a function returning Promise<boolean>');
  }
  return {
    status: opts.status,
    metrics: opts.metrics,
    ...(opts.fresh ? { fresh: opts.fresh } : {}),
  };
}

const agentServer: FastifyPluginAsync<ServerOptions> = async (app, opts) => {
  const { status, metrics, fresh } = resolveOptions(opts);

  // /livez is the API server's name for the same liveness answer.
  const health = async (_request: FastifyRequest, reply: FastifyReply) => {
    const s = status();
    const healthy = s.alive && s.lastWriteOk;
    const body: HealthReply = {
      status: healthy ? 'ok' : 'unhealthy',
      generation: s.generation,
      configHash: s.configHash,
      lastSyncTime: s.lastSyncTime?.toISOString() ?? null,
      lastError: s.lastError,
      configError: s.configError,
      nonMasqueradeCIDRs: { ipv4: s.nonMasqueradeCIDRs.ipv4, ipv6: s.nonMasqueradeCIDRs.ipv6 },
    };
    return reply.code(healthy ? 200 : 503).send(body);
  };
  for (const url of ['/healthz', '/livez']) app.get(url, health);

  app.get('/readyz', async (_request, reply) => {
    let s = status();
    if (s.ready && fresh && !(await fresh())) {
      // Another commit came since the last look, and the look asked for did not say yes in time.
      s = status();
      if (s.ready) {
        const reason =
          'another nftables commit came since our tables were last checked; checking them again';
        return reply.code(503).send({ status: 'not ready', reason } satisfies ReadyReply);
      }
    } else if (fresh) s = status();
    const body: ReadyReply = s.ready
      ? { status: 'ready', generation: s.generation }
      : {
          status: 'not ready',
          reason: s.notReadyReason ?? 'the kernel does not hold the current config yet',
        };
    return reply.code(s.ready ? 200 : 503).send(body);
  });

  app.get('/metrics', async (_request, reply) => {
    const text = await metrics.exposition();
    return reply.type(metrics.registry.contentType).send(text);
  });

  // Fastify answers an unrouted method with 404; HTTP wants 405 and an Allow header. Answering in
  // onRequest comes before body parsing, so a POST with an odd body still gets 405, not 415.
  const otherMethods = app.supportedMethods.filter((m) => !allowedMethods.includes(m));
  const methodNotAllowed = async (request: FastifyRequest, reply: FastifyReply) => {
    return reply
      .code(405)
      .header('allow', allowedMethods.join(', '))
      .send({
        statusCode: 405,
        error: 'Method Not Allowed',
        message: `${request.method} ${request.routeOptions.url ?? request.url}: use GET or HEAD`,
      });
  };
  for (const url of routes) {
    app.route({
      method: otherMethods,
      url,
      onRequest: methodNotAllowed,
      handler: methodNotAllowed,
    });
  }
};

export const agentServerPlugin = fp(agentServer, { name: 'ipmasq-agent-server', fastify: '5.x' });

// Kubelet probes every few seconds: per-request lines go to debug so they never drown the agent's
// own logs. Server errors (5xx) stay at error.
class ProbeLogController extends LogController {
  override incomingRequest(request: FastifyRequest): void {
    request.log.debug({ req: request }, 'incoming request');
  }
  override requestCompleted(
    error: Error | null | undefined,
    request: FastifyRequest,
    reply: FastifyReply,
  ): void {
    if (error) reply.log.error({ res: reply, err: error }, 'request errored');
    else reply.log.debug({ res: reply, responseTime: reply.elapsedTime }, 'request completed');
  }
  override routeNotFound(request: FastifyRequest): void {
    request.log.debug(`route ${request.method} ${request.url} not found`);
  }
  override defaultErrorLog(error: Error, request: FastifyRequest, reply: FastifyReply): void {
    if (reply.statusCode >= 500) {
      reply.log.error({ req: request, res: reply, err: error }, error.message);
    } else {
      reply.log.debug({ res: reply, err: error }, error.message);
    }
  }
}

/** Kubelet and Prometheus need a handful of connections; a flood of idle ones must not pile up. */
export const MAX_CONNECTIONS = 64;
/** A request must arrive whole, and an idle keep-alive socket is closed, within 5 s. */
const SERVER_LIMITS = {
  connectionTimeout: 5_000,
  requestTimeout: 5_000,
  keepAliveTimeout: 5_000,
  http: { headersTimeout: 5_000 },
} as const;

/**
 * Fastify loads ajv and fast-json-stringify unless it is given its schema compilers: memory an idle
 * agent would hold for nothing (docs/design.md, "Memory"). The routes take no input and declare no
 * schemas: their replies are typed objects that JSON.stringify writes. A schema declared by mistake
 * throws, never compiled.
 */
const schemaController = {
  compilersFactory: {
    buildValidator: () => () => {
      throw new ServerOptionsError('the agent server validates no requests');
    },
    buildSerializer: () => () => {
      throw new ServerOptionsError('the agent server compiles no response schemas');
    },
  },
};

/** A server with the plugin registered; `logger` is a pino logger, or false for none. */
export async function buildServer(
  opts: ServerOptions & { logger?: FastifyBaseLogger | false },
): Promise<FastifyInstance> {
  const { logger, ...pluginOptions } = opts;
  const logController = new ProbeLogController();
  const app: FastifyInstance = logger
    ? Fastify({ loggerInstance: logger, logController, schemaController, ...SERVER_LIMITS })
    : Fastify({ logger: false, schemaController, ...SERVER_LIMITS });
  // Connections past this are closed at once: idle or half-open sockets from probes and scrapers
  // must never take the file descriptors the agent needs for its own work (netlink, libnftables).
  app.server.maxConnections = MAX_CONNECTIONS;
  await app.register(agentServerPlugin, pluginOptions);
  return app;
}
