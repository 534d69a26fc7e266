// The server is given fastify's schema compilers (docs/design.md, "Memory"), so an agent's process
// never loads ajv or fast-json-stringify's compiler: about a hundred modules an idle agent would
// hold for nothing. Its own process, so that no other test's fastify instance loads them first.
import { createRequire } from 'node:module';
import t from 'tap';
import { buildServer } from '../../../src/server/index.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';
import { agentStatus, initialFacts } from '../../../src/reconcile/status.js';

t.test('ajv and fast-json-stringify never load, whatever is asked', async (t) => {
  const app = await buildServer({
    // The status an agent answers with before its first sync.
    status: () => agentStatus(initialFacts, true),
    metrics: new AgentMetrics(),
  });
  t.teardown(() => app.close());
  for (const url of ['/healthz', '/readyz', '/livez', '/metrics', '/nowhere']) {
    t.ok((await app.inject({ method: 'GET', url })).statusCode > 0, url);
  }
  t.ok(
    (await app.inject({ method: 'POST', url: '/healthz', payload: '{"a":1}' })).statusCode >= 400,
  );
  const loaded = Object.keys(createRequire(import.meta.url).cache);
  t.ok(
    loaded.some((path) => path.includes('/node_modules/fastify/')),
    'the cache read is the one fastify loads into',
  );
  const compilers = loaded.filter((path) =>
    /\/node_modules\/(ajv|ajv-formats|@fastify\/ajv-compiler|@fastify\/fast-json-stringify-compiler)\/|\/fast-json-stringify\/index\.js$/.test(
      path,
    ),
  );
  t.same(compilers, [], 'no validator or serializer compiler loaded');
});
