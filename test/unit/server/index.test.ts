import t from 'tap';
import Fastify from 'fastify';
import {
  agentServerPlugin,
  buildServer,
  ServerOptionsError,
  type AgentStatus,
  type ServerOptions,
} from '../../../src/server/index.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';

function healthyStatus(): AgentStatus {
  return {
    alive: true,
    lastWriteOk: true,
    generation: 7,
    configHash: 'ab'.repeat(32),
    lastSyncTime: new Date('2024-05-06T07:08:09.123Z'),
    lastError: null,
    configError: null,
    waiting: null,
    nonMasqueradeCIDRs: { ipv4: 4, ipv6: 2 },
    ready: true,
    notReadyReason: null,
  };
}

async function serverWith(test: { teardown: (fn: () => unknown) => void }, status: AgentStatus) {
  const app = await buildServer({ status: () => status, metrics: new AgentMetrics() });
  test.teardown(() => app.close());
  return app;
}

t.test('GET /healthz: 200 with the full status while alive and writes succeed', async (t) => {
  const app = await serverWith(t, healthyStatus());
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 200);
  t.match(res.headers['content-type'], /^application\/json/);
  t.same(res.json(), {
    status: 'ok',
    generation: 7,
    configHash: 'ab'.repeat(32),
    lastSyncTime: '2024-05-06T07:08:09.123Z',
    lastError: null,
    configError: null,
    nonMasqueradeCIDRs: { ipv4: 4, ipv6: 2 },
  });
});

t.test('GET /healthz: fields before the first sync are null or 0', async (t) => {
  const app = await serverWith(t, {
    ...healthyStatus(),
    generation: 0,
    configHash: null,
    lastSyncTime: null,
    nonMasqueradeCIDRs: { ipv4: 0, ipv6: 0 },
  });
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 200);
  t.same(res.json(), {
    status: 'ok',
    generation: 0,
    configHash: null,
    lastSyncTime: null,
    lastError: null,
    configError: null,
    nonMasqueradeCIDRs: { ipv4: 0, ipv6: 0 },
  });
});

t.test('GET /healthz: 503 when the loop is dead or the last write failed', async (t) => {
  const cases: [string, Partial<AgentStatus>][] = [
    ['loop dead', { alive: false }],
    ['write failed', { lastWriteOk: false, lastError: 'nftables: Operation not permitted' }],
    ['both', { alive: false, lastWriteOk: false }],
  ];
  for (const [name, change] of cases) {
    const status = { ...healthyStatus(), ...change };
    const app = await serverWith(t, status);
    const res = await app.inject({ method: 'GET', url: '/healthz' });
    t.equal(res.statusCode, 503, name);
    t.same(
      res.json(),
      {
        status: 'unhealthy',
        generation: 7,
        configHash: 'ab'.repeat(32),
        lastSyncTime: '2024-05-06T07:08:09.123Z',
        lastError: status.lastError,
        configError: null,
        nonMasqueradeCIDRs: { ipv4: 4, ipv6: 2 },
      },
      name,
    );
  }
});

t.test('GET /healthz: an invalid config alone does not make the agent unhealthy', async (t) => {
  const configError = '/etc/config/ip-masq-agent: nonMasqueradeCIDRs[0]: "x" is not a CIDR';
  const app = await serverWith(t, { ...healthyStatus(), configError, ready: false });
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 200);
  t.equal(res.json().configError, configError);
});

t.test('GET /healthz reads the status on every request', async (t) => {
  let status = healthyStatus();
  const app = await buildServer({ status: () => status, metrics: new AgentMetrics() });
  t.teardown(() => app.close());
  t.equal((await app.inject('/healthz')).statusCode, 200);
  status = { ...status, alive: false };
  t.equal((await app.inject('/healthz')).statusCode, 503);
});

t.test('GET /readyz', async (t) => {
  const ready = await serverWith(t, healthyStatus());
  const yes = await ready.inject({ method: 'GET', url: '/readyz' });
  t.equal(yes.statusCode, 200);
  t.same(yes.json(), { status: 'ready', generation: 7 });

  const reason = 'config invalid: nonMasqueradeCIDRs[0]';
  const notReady = await serverWith(t, {
    ...healthyStatus(),
    ready: false,
    notReadyReason: reason,
  });
  const no = await notReady.inject({ method: 'GET', url: '/readyz' });
  t.equal(no.statusCode, 503);
  t.same(no.json(), { status: 'not ready', reason });

  const noReason = await serverWith(t, { ...healthyStatus(), ready: false, notReadyReason: null });
  const res = await noReason.inject({ method: 'GET', url: '/readyz' });
  t.equal(res.statusCode, 503);
  t.equal(res.json().status, 'not ready');
  t.type(res.json().reason, 'string', 'a reason is always given');
});

t.test('GET /readyz asks whether the kernel is still known to hold our tables', async (t) => {
  let fresh = true;
  let status = healthyStatus();
  let asked = 0;
  const app = await buildServer({
    status: () => status,
    metrics: new AgentMetrics(),
    fresh: async () => {
      asked++;
      return fresh;
    },
  });
  t.teardown(() => app.close());
  t.equal((await app.inject('/readyz')).statusCode, 200);
  fresh = false;
  const stale = await app.inject('/readyz');
  t.equal(stale.statusCode, 503);
  t.match(stale.json().reason, /another nftables commit came since/);
  status = { ...status, ready: false, notReadyReason: 'config invalid' };
  const before = asked;
  const no = await app.inject('/readyz');
  t.equal(no.statusCode, 503);
  t.equal(no.json().reason, 'config invalid', 'not ready anyway: the status says why');
  t.equal(asked, before, 'and the kernel is not looked at for it');
});

t.test('GET /metrics answers in the Prometheus text format', async (t) => {
  const app = await serverWith(t, healthyStatus());
  const res = await app.inject({ method: 'GET', url: '/metrics' });
  t.equal(res.statusCode, 200);
  t.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/);
  t.match(res.body, /^# HELP ipmasq_generation /m);
});

t.test('HEAD on the GET routes is allowed', async (t) => {
  const app = await serverWith(t, healthyStatus());
  for (const url of ['/healthz', '/readyz', '/metrics']) {
    const res = await app.inject({ method: 'HEAD', url });
    t.equal(res.statusCode, 200, url);
  }
});

t.test('unknown paths: 404 JSON', async (t) => {
  const app = await serverWith(t, healthyStatus());
  for (const url of ['/', '/nope', '/healthz/extra', '/metricsx']) {
    for (const method of ['GET', 'POST'] as const) {
      const res = await app.inject({ method, url });
      t.equal(res.statusCode, 404, `${method} ${url}`);
      t.match(res.headers['content-type'], /^application\/json/);
      t.equal(res.json().statusCode, 404);
    }
  }
});

t.test('known paths with another method: 405 with Allow', async (t) => {
  const app = await serverWith(t, healthyStatus());
  for (const url of ['/healthz', '/readyz', '/metrics']) {
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'] as const) {
      const res = await app.inject({ method, url });
      t.equal(res.statusCode, 405, `${method} ${url}`);
      t.equal(res.headers['allow'], 'GET, HEAD', `${method} ${url} Allow`);
      t.equal(res.json().statusCode, 405);
    }
  }
  const withBody = await app.inject({
    method: 'POST',
    url: '/healthz',
    headers: { 'content-type': 'application/x-unknown' },
    payload: 'x'.repeat(10),
  });
  t.equal(withBody.statusCode, 405, 'a body of an unknown type still gets 405, not 415');
});

t.test('bad options are rejected at registration', async (t) => {
  const metrics = new AgentMetrics();
  const bad: [string, unknown][] = [
    ['no options', {}],
    ['no status', { metrics }],
    ['status not a function', { status: healthyStatus(), metrics }],
    ['no metrics', { status: healthyStatus }],
    ['metrics without a registry', { status: healthyStatus, metrics: {} }],
  ];
  for (const [name, opts] of bad) {
    await t.rejects(buildServer(opts as ServerOptions), ServerOptionsError, name);
    const app = Fastify();
    await t.rejects(
      async () => {
        await app.register(agentServerPlugin, opts as ServerOptions);
      },
      { code: 'IPMASQ_ERR_SERVER_OPTIONS' },
      `${name} (plugin)`,
    );
    await app.close();
  }
});

t.test('the plugin is not encapsulated and can sit beside other routes', async (t) => {
  const app = Fastify();
  t.teardown(() => app.close());
  await app.register(agentServerPlugin, { status: healthyStatus, metrics: new AgentMetrics() });
  app.get('/other', async () => ({ other: true }));
  t.equal((await app.inject('/healthz')).statusCode, 200);
  t.equal((await app.inject('/other')).statusCode, 200);
  t.ok(app.hasPlugin('ipmasq-agent-server'));
});

t.test('requests are logged at debug only; server errors at error', async (t) => {
  const { pino } = await import('pino');
  function capture(level: string) {
    const lines: { level: number; msg: string }[] = [];
    const write = (line: string) => void lines.push(JSON.parse(line));
    return { lines, logger: pino({ level }, { write }) };
  }

  const quiet = capture('info');
  const app = await buildServer({ status: healthyStatus, metrics: new AgentMetrics(), ...quiet });
  t.teardown(() => app.close());
  for (let i = 0; i < 3; i++) await app.inject('/healthz');
  await app.inject('/nope');
  await app.inject({ method: 'POST', url: '/healthz' });
  t.same(quiet.lines, [], 'nothing at info');
  app.log.info('through the given logger');
  t.equal(quiet.lines.length, 1, 'the given logger is the one fastify uses');

  const verbose = capture('debug');
  const debugApp = await buildServer({
    status: healthyStatus,
    metrics: new AgentMetrics(),
    ...verbose,
  });
  t.teardown(() => debugApp.close());
  await debugApp.inject('/healthz');
  await debugApp.inject('/nope');
  const messages = verbose.lines.map((l) => l.msg);
  t.ok(messages.includes('request completed'), 'requests appear at debug');
  t.ok(messages.includes('route GET /nope not found'), '404s appear at debug');
  t.ok(
    verbose.lines.every((l) => l.level === 20),
    'all at debug (20)',
  );

  const failing = capture('info');
  const broken = () => {
    throw new Error('status exploded');
  };
  const brokenApp = await buildServer({ status: broken, metrics: new AgentMetrics(), ...failing });
  t.teardown(() => brokenApp.close());
  const res = await brokenApp.inject('/healthz');
  t.equal(res.statusCode, 500);
  t.ok(
    failing.lines.some((l) => l.level === 50 && l.msg === 'status exploded'),
    'a 500 is logged at error',
  );
});

t.test('over a real socket', async (t) => {
  const app = await buildServer({ status: healthyStatus, metrics: new AgentMetrics() });
  t.teardown(() => app.close());
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  t.equal(address.address, '127.0.0.1');
  const res = await fetch(`http://127.0.0.1:${address.port}/healthz`, {
    signal: AbortSignal.timeout(5000),
  });
  t.equal(res.status, 200);
  t.equal(((await res.json()) as { status: string }).status, 'ok');
  await app.close();
});

t.test('GET /livez answers as /healthz does, healthy and not', async (t) => {
  for (const status of [
    healthyStatus(),
    { ...healthyStatus(), lastWriteOk: false, lastError: 'x' },
  ]) {
    const app = await serverWith(t, status);
    const health = await app.inject({ method: 'GET', url: '/healthz' });
    const live = await app.inject({ method: 'GET', url: '/livez' });
    t.equal(live.statusCode, health.statusCode);
    t.same(live.json(), health.json());
    t.equal((await app.inject({ method: 'POST', url: '/livez' })).statusCode, 405);
  }
});
