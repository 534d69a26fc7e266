// The opt-in Kubernetes API client (src/kubernetes) against the fake API server: lists in chunks,
// watches, 410 Gone, cut and stalled watches, 5xx/429 with Retry-After, 401/403, backoff with jitter,
// and what is kept of a Node. No kernel: src/kubernetes never touches one. The fake, not the real
// server (test/e2e/kubernetes-real.test.ts): these are the faults a real server cannot be made to
// produce on demand (continue tokens expiring at every page, trickled and stalled watches, 5xx and
// Retry-After, a watch that never ends), each exactly when the test needs it.
import t, { type Test } from 'tap';
import { pino, type Logger } from 'pino';
import { Writable } from 'node:stream';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiClient, ApiError, RETRY_AFTER_MAX_MS } from '../../../src/kubernetes/client.js';
import { tokenFile } from '../../../src/kubernetes/connection.js';
import { Cluster, labelsOf } from '../../../src/kubernetes/cluster.js';
import { podCIDRsOf } from '../../../src/kubernetes/pod-cidrs.js';
import {
  backoffDelay,
  REFUSED_BACKOFF_MAX_MS,
  Reflector,
  type ReflectorTimings,
} from '../../../src/kubernetes/reflector.js';
import { formatPrefix } from '../../../src/cidr/index.js';
import { connectionTo, FakeApiServer, startFake, until } from '../../../harness/fake-apiserver.js';

const FAST: ReflectorTimings = {
  backoffBaseMs: 20,
  backoffMaxMs: 200,
  watchTimeoutSeconds: 30,
  idleMs: 600,
  pageSize: 2,
};

function client(t: Test, server: FakeApiServer, token = server.token): ApiClient {
  const c = new ApiClient(connectionTo(server.url, token));
  t.teardown(() => c.close());
  return c;
}

function logs(): { logger: Logger; lines: Array<{ msg: string; level: number }> } {
  const lines: Array<{ msg: string; level: number }> = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean))
        lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), lines };
}

function podReflector(t: Test, c: ApiClient, extra: Partial<ReflectorTimings> = {}) {
  const state = {
    changes: 0,
    up: false,
    downs: 0,
    errors: [] as Array<{ op: string; err: unknown }>,
  };
  const reflector = new Reflector({
    client: c,
    path: '/api/v1/nodes',
    extract: (node) => podCIDRsOf(node, true).prefixes.map(formatPrefix),
    onChange: () => (state.changes += 1),
    onError: (op, err) => state.errors.push({ op, err }),
    onUp: (up) => {
      if (state.up && !up) state.downs += 1;
      state.up = up;
    },
    timings: { ...FAST, ...extra },
  });
  t.teardown(() => reflector.stop());
  return { reflector, state };
}

t.test('lists in chunks, keeps only each Node’s pod CIDRs, then follows the watch', async (t) => {
  // An API server that pages its watch cache's lists too.
  const server = await startFake(t, { cacheIgnoresLimit: false });
  for (let i = 0; i < 5; i++) server.setNode(`node-${i}`, { podCIDRs: [`10.244.${i}.0/24`] });
  const { reflector, state } = podReflector(t, client(t, server));
  reflector.start();
  await until('listed', () => reflector.listed);
  t.equal(server.lists(), 3, 'five Nodes in pages of two: three requests');
  t.equal(server.countOf('list-cache'), 1, 'the first from the watch cache (resourceVersion=0)');
  t.same(reflector.items.get('node-3'), ['10.244.3.0/24']);
  t.equal(reflector.items.size, 5);
  // What is kept is the extract, not the object: no status.images anywhere.
  t.notOk(JSON.stringify([...reflector.items]).includes('images'));
  await until('watching', () => state.up);
  server.setNode('node-5', { podCIDRs: ['10.244.5.0/24'] });
  server.setNode('node-0', { podCIDRs: ['10.244.100.0/24'] });
  server.deleteNode('node-1');
  await until(
    'events applied',
    () => reflector.items.has('node-5') && !reflector.items.has('node-1'),
  );
  t.same(reflector.items.get('node-0'), ['10.244.100.0/24'], 'MODIFIED replaces');
  t.equal(server.lists(), 3, 'no relist for watch events');
});

t.test(
  'a cut watch resumes from its resourceVersion; a compacted one relists (410 Gone)',
  async (t) => {
    const server = await startFake(t);
    server.setNode('a', { podCIDRs: ['10.244.0.0/24'] });
    const { reflector, state } = podReflector(t, client(t, server));
    reflector.start();
    await until('watching', () => state.up && server.watchCount() === 1);
    const lists = server.lists();
    t.equal(server.dropWatches(), 1);
    server.setNode('b', { podCIDRs: ['10.244.1.0/24'] }); // made while no watch is open
    await until('b seen', () => reflector.items.has('b'));
    t.equal(server.lists(), lists, 'a cut watch is resumed, not relisted');
    t.ok(
      state.errors.some((e) => e.op === 'watch'),
      'the cut is counted as a watch error',
    );

    await until('watching again', () => server.watchCount() === 1);
    server.compact();
    server.setNode('c', { podCIDRs: ['10.244.2.0/24'] });
    server.dropWatches();
    server.compact(); // c's event is gone too: only a relist finds it
    await until('relisted', () => reflector.items.has('c'));
    t.ok(server.lists() > lists, 'relisted after 410');
    t.ok(
      state.errors.some((e) => e.err instanceof ApiError && e.err.status === 410),
      'the 410 is reported',
    );
  },
);

t.test('a stalled watch is given up after idleMs and the data stays meanwhile', async (t) => {
  const server = await startFake(t, { bookmarkMs: 100 });
  server.setNode('a', { podCIDRs: ['10.244.0.0/24'] });
  const { reflector, state } = podReflector(t, client(t, server), { idleMs: 400 });
  reflector.start();
  await until('watching', () => state.up);
  const watches = server.countOf('watch');
  server.stall(true);
  await until('stall noticed', () =>
    state.errors.some((e) => String(e.err).includes('stalled')) ? true : undefined,
  );
  t.same(reflector.items.get('a'), ['10.244.0.0/24'], 'the last known data stays');
  server.setNode('b', { podCIDRs: ['10.244.1.0/24'] });
  server.stall(false);
  await until('b seen after the stall', () => reflector.items.has('b'));
  t.ok(server.countOf('watch') > watches, 'watched again');
});

t.test('bookmarks keep a quiet watch alive past idleMs', async (t) => {
  const server = await startFake(t, { bookmarkMs: 100 });
  const { reflector, state } = podReflector(t, client(t, server), { idleMs: 1_500 });
  reflector.start();
  await until('watching', () => state.up);
  const watches = server.countOf('watch');
  await new Promise((resolve) => setTimeout(resolve, 5_000));
  t.equal(server.countOf('watch'), watches, 'no reconnect while bookmarks arrive');
  t.same(state.errors, []);
});

t.test(
  '500, 429 with Retry-After, 401 and 403: errors counted by op, data kept, retried',
  async (t) => {
    const server = await startFake(t);
    server.setNode('a', { podCIDRs: ['10.244.0.0/24'] });
    server.failNext(2, 500);
    const { reflector, state } = podReflector(t, client(t, server));
    reflector.start();
    await until('listed after two 500s', () => reflector.listed);
    t.equal(state.errors.filter((e) => e.op === 'list').length, 2);

    await until('watching', () => state.up);
    server.failNext(1, 429, 1, 'nodes');
    server.dropWatches();
    const cut = Date.now();
    const watches = server.countOf('watch');
    await until('watching after 429', () => (server.countOf('watch') > watches ? true : undefined));
    t.ok(Date.now() - cut >= 900, 'Retry-After: 1 is waited');

    server.setForbidden(true);
    server.dropWatches();
    await until('403 seen', () =>
      state.errors.some((e) => e.err instanceof ApiError && e.err.status === 403)
        ? true
        : undefined,
    );
    t.equal(state.up, false, 'not up while forbidden');
    t.same(reflector.items.get('a'), ['10.244.0.0/24'], 'the data stays while forbidden');
    server.setForbidden(false);
    await until('up again', () => state.up);

    const wrong = podReflector(t, client(t, server, 'wrong-token'));
    wrong.reflector.start();
    await until('401 seen', () =>
      wrong.state.errors.some((e) => e.err instanceof ApiError && e.err.status === 401)
        ? true
        : undefined,
    );
    t.equal(wrong.reflector.listed, false);
  },
);

t.test('the API server unreachable, then back: the watch resumes', async (t) => {
  const server = await startFake(t);
  server.setNode('a', { podCIDRs: ['10.244.0.0/24'] });
  const { reflector, state } = podReflector(t, client(t, server));
  reflector.start();
  await until('watching', () => state.up);
  await server.down();
  server.deleteNode('a');
  await until('down noticed', () => (state.up ? undefined : true));
  t.same(reflector.items.get('a'), ['10.244.0.0/24'], 'kept while down');
  await new Promise((resolve) => setTimeout(resolve, 300));
  await server.up();
  await until('deletion seen', () => (reflector.items.has('a') ? undefined : true));
  t.ok(state.errors.length >= 1);
});

t.test(
  'backoff: full jitter under a doubling ceiling, Retry-After as a floor, 410 at once',
  async (t) => {
    const timings = { backoffBaseMs: 1_000, backoffMaxMs: 60_000 };
    t.equal(
      backoffDelay(1, new Error('x'), timings, () => 1),
      1_000,
    );
    t.equal(
      backoffDelay(3, new Error('x'), timings, () => 1),
      4_000,
    );
    t.equal(
      backoffDelay(30, new Error('x'), timings, () => 1),
      60_000,
      'capped',
    );
    t.equal(
      backoffDelay(3, new Error('x'), timings, () => 0.25),
      1_000,
      'a random part of it',
    );
    t.equal(
      backoffDelay(30, new ApiError(403, 'forbidden'), timings, () => 1),
      REFUSED_BACKOFF_MAX_MS,
      'refused: a permission given back is used within 10 s',
    );
    t.ok(REFUSED_BACKOFF_MAX_MS <= 8_000);
    t.equal(
      backoffDelay(30, new ApiError(401, 'unauthorized'), timings, () => 1),
      8_000,
    );
    t.equal(
      backoffDelay(30, new ApiError(500, 'x'), timings, () => 1),
      60_000,
      'others: a minute',
    );
    t.equal(
      backoffDelay(1, new ApiError(429, 'slow down', 5_000), timings, () => 0),
      5_000,
    );
    t.equal(
      backoffDelay(1, new ApiError(410, 'gone'), timings, () => 1),
      0,
    );
    t.equal(
      backoffDelay(2, new ApiError(410, 'gone'), timings, () => 1),
      2_000,
    );
    // Thousands of agents failing together spread over the whole window.
    const delays = Array.from({ length: 1000 }, () => backoffDelay(6, new Error('x'), timings));
    const buckets = new Set(delays.map((d) => Math.floor(d / 4_000)));
    t.ok(buckets.size >= 7, `spread over the window (${buckets.size} of 8 buckets)`);
  },
);

t.test(
  'pod CIDRs: parsed by the agent, bad ones left out with one warning naming the Node',
  async (t) => {
    const node = (podCIDRs: unknown[]) => ({ metadata: { name: 'n' }, spec: { podCIDRs } });
    t.same(
      podCIDRsOf(node(['10.244.1.0/24', 'fd00:1::/64']), false).prefixes.map(formatPrefix),
      ['10.244.1.0/24'],
      'IPv6 left out without --enable-ipv6',
    );
    t.same(podCIDRsOf(node(['10.244.1.0/24', 'fd00:1::/64']), true).prefixes.map(formatPrefix), [
      '10.244.1.0/24',
      'fd00:1::/64',
    ]);
    const bad = podCIDRsOf(
      node(['10.244.1.5/24', 'not-a-cidr', 7, '10.0.0.0/8;flush ruleset']),
      true,
    );
    t.same(bad.prefixes, []);
    t.equal(bad.rejected.length, 4);
    t.match(bad.rejected[0], /aligned/);
    t.same(
      podCIDRsOf({ metadata: { name: 'n' }, spec: { podCIDR: '10.1.0.0/16' } }, false).prefixes.map(
        formatPrefix,
      ),
      ['10.1.0.0/16'],
      'the older spec.podCIDR',
    );
    t.same(
      [...labelsOf({ metadata: { labels: { a: 'b', n: 3, 'x\ny': 'v\nw' } } })],
      [
        ['a', 'b'],
        ['x\ny', 'v\nw'],
      ],
      'labels: strings only, kept as they are (compared, never written anywhere)',
    );

    const server = await startFake(t);
    server.setNode('good', { podCIDRs: ['10.244.1.0/24'] });
    server.setNode('bad\nnode', { podCIDRs: ['10.244.2.7/24'] });
    const { logger, lines } = logs();
    const cluster = new Cluster({
      client: client(t, server),
      nodeName: 'good',
      enableIPv6: false,
      logger,
      metrics: { setUp: () => undefined, incError: () => undefined },
      onChange: () => undefined,
      timings: FAST,
    });
    t.teardown(() => cluster.stop());
    cluster.start();
    cluster.wantPodCIDRs(true);
    await until('listed', () => cluster.podCIDRs());
    await until('labels', () => cluster.labels);
    t.equal(cluster.labels?.get('kubernetes.io/hostname'), 'good');
    const nodes = cluster.podCIDRs()!;
    t.same(nodes.get('bad\nnode')?.prefixes, []);
    const version = cluster.podCIDRsVersion;
    server.setNode('bad\nnode', { podCIDRs: ['10.244.2.7/24'], labels: { touched: 'yes' } });
    server.setNode('good', { podCIDRs: ['10.244.1.0/24'], labels: { touched: 'yes' } });
    server.setNode('later', { podCIDRs: ['10.244.3.0/24'] });
    // Events arrive in order: once `later` is seen, the two updates before it were applied.
    await until('later seen', () => (cluster.podCIDRs()?.has('later') ? true : undefined));
    t.equal(
      cluster.podCIDRsVersion,
      version + 1,
      'updates that leave the pod CIDRs as they were are not changes',
    );
    const warnings = lines.filter((l) => l.msg.includes('podCIDRs'));
    t.equal(warnings.length, 1, 'one warning while the same bad value stays');
    t.match(warnings[0]!.msg, /Node bad\\u000anode's podCIDRs: left out: .*10\.244\.2\.7\/24/);
  },
);

t.test('a 10 MiB Node object is read without ending anything', async (t) => {
  const server = await startFake(t);
  server.setNode('huge', { podCIDRs: ['10.244.9.0/24'], padBytes: 10 * 1024 * 1024 });
  const { reflector, state } = podReflector(t, client(t, server));
  reflector.start();
  await until('listed', () => reflector.listed);
  await until('watching', () => state.up);
  server.setNode('huge', { podCIDRs: ['10.244.10.0/24'], padBytes: 10 * 1024 * 1024 });
  await until('modified', () => reflector.items.get('huge')?.[0] === '10.244.10.0/24' || undefined);
  t.same(state.errors, []);
});

// Hardening round 4 (issue 40, items 1-6): each against the fake behaving as a real server can.

t.test("large Nodes: the watch cache's unpaged answer is read as it streams", async (t) => {
  for (const [count, padBytes] of [
    [100, 700 * 1024],
    [14, 5 * 1024 * 1024],
  ] as const) {
    const server = await startFake(t);
    server.seedNodes(count, (i) => ({ name: `big-${i}`, podCIDRs: [`10.${i}.0.0/24`], padBytes }));
    const { reflector, state } = podReflector(t, client(t, server), { pageSize: 100 });
    await reflector.listOnce();
    t.equal(reflector.items.size, count, `${count} Nodes of ${padBytes >> 10} KiB listed`);
    t.same(reflector.items.get(`big-${count - 1}`), [`10.${count - 1}.0.0/24`]);
    t.equal(server.countOf('list-cache'), 1, 'from the watch cache, in one answer of ~70 MiB');
    t.equal(server.countOf('list'), 0, 'etcd not asked');
    t.same(state.errors, []);
  }
});

t.test(
  '100 Nodes of 700 KiB whose continue tokens expire at every page: listed, as client-go',
  async (t) => {
    const server = await startFake(t, { cacheIgnoresLimit: false });
    server.seedNodes(100, (i) => ({
      name: `big-${i}`,
      podCIDRs: [`10.${i}.0.0/24`],
      padBytes: 700 * 1024,
    }));
    server.expireContinue = true;
    const { reflector, state } = podReflector(t, client(t, server), { pageSize: 10 });
    await reflector.listOnce();
    t.equal(reflector.items.size, 100, 'every Node');
    t.same(reflector.items.get('big-99'), ['10.99.0.0/24']);
    t.equal(server.countOf('list-cache'), 1, "the cache's first page; its continue expired");
    t.equal(
      server.countOf('list'),
      4,
      "the cache's continue expired, then etcd: a first page, its expired continue, one full list of ~70 MiB",
    );
    t.same(state.errors, []);
  },
);

t.test('a continue token that expires at every page: one full list, as client-go', async (t) => {
  const server = await startFake(t, { cacheIgnoresLimit: false });
  server.seedPodNodes(9);
  server.expireContinue = true;
  const { reflector } = podReflector(t, client(t, server));
  await reflector.listOnce();
  t.equal(reflector.items.size, 9, 'every Node');
  t.equal(server.countOf('list-cache'), 1, "the cache's first page; its continue expired");
  t.equal(
    server.countOf('list'),
    4,
    'then etcd: a first page, its expired continue, one full list',
  );
});

t.test('stop() while a paged list is read keeps nothing of it', async (t) => {
  const server = await startFake(t, { cacheIgnoresLimit: false });
  server.seedPodNodes(10);
  server.listDelayMs = 50;
  const { reflector } = podReflector(t, client(t, server));
  reflector.start();
  await until('a page answered', () => server.lists() >= 2);
  await reflector.stop();
  t.equal(reflector.listed, false, 'not listed');
  t.equal(reflector.items.size, 0, 'no partial list committed');
});

t.test(
  'a trickling watch (one space every 100 ms, no event) is stalled all the same',
  async (t) => {
    const server = await startFake(t);
    server.setNode('a', { podCIDRs: ['10.244.0.0/24'] });
    const { reflector, state } = podReflector(t, client(t, server));
    reflector.start();
    await until('watching', () => state.up);
    server.trickleMs = 100;
    server.dropWatches();
    await until('stalled', () =>
      state.errors.some((e) => /stalled: no event for 600 ms/.test(String(e.err)))
        ? true
        : undefined,
    );
  },
);

t.test(
  'a server that never ends a watch: cut at timeoutSeconds by this side, a failure, and listed again',
  async (t) => {
    const server = await startFake(t, { bookmarkMs: 50 });
    server.ignoreTimeout = true;
    server.setNode('a', { podCIDRs: ['10.244.0.0/24'] });
    const { reflector, state } = podReflector(t, client(t, server), { watchTimeoutSeconds: 1 });
    reflector.start();
    await until('watching', () => state.up);
    const lists = server.lists();
    // timeoutSeconds 1-2 plus a grace of min(30 s, idleMs): cut within ~3 s.
    await until(
      'the watch cut',
      () =>
        state.errors.some((e) => e.op === 'watch' && /watch cut by the client/.test(String(e.err)))
          ? true
          : undefined,
      10_000,
    );
    t.ok(state.downs > 0, 'down meanwhile (ipmasq_kubernetes_up 0)');
    await until('watched again', () => server.countOf('watch') >= 2, 10_000);
    t.ok(server.lists() > lists, 'listed again before the next watch');
  },
);

t.test('Retry-After: 3600 is waited 30 s at most (spread by up to 1 s), not an hour', async (t) => {
  const server = await startFake(t);
  server.failNext(1, 503, 3600);
  const err = await client(t, server)
    .json('GET', '/api/v1/nodes')
    .catch((e: unknown) => e);
  t.ok(err instanceof ApiError);
  t.equal((err as ApiError).retryAfterMs, RETRY_AFTER_MAX_MS);
  t.equal(RETRY_AFTER_MAX_MS, 30_000);
  const waits = [0, 0.5, 0.999].map((r) =>
    backoffDelay(1, err, { backoffBaseMs: 1000, backoffMaxMs: 60_000 }, () => r),
  );
  t.same(waits, [30_000, 30_500, 30_999]);
});

t.test('a 401 reads the token again at once; the User-Agent names the agent', async (t) => {
  const server = await startFake(t);
  server.setNode('a', { podCIDRs: ['10.244.0.0/24'] });
  const dir = mkdtempSync(join(tmpdir(), 'ipmasq-token-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'token'), `${server.token}\n`);
  const read = tokenFile(join(dir, 'token'));
  const c = new ApiClient({
    server: new URL(server.url),
    tls: async () => ({}),
    authorization: async (fresh) => `Bearer ${await read(fresh)}`,
  });
  t.teardown(() => c.close());
  await c.json('GET', '/api/v1/nodes');
  // Rotated: the old token is refused from now on; the file holds the new one.
  writeFileSync(join(dir, 'token.new'), 'rotated\n');
  renameSync(join(dir, 'token.new'), join(dir, 'token'));
  server.rotateToken('rotated');
  const refused = server.countOf('refused');
  const list = (await c.json('GET', '/api/v1/nodes')) as { items: unknown[] };
  t.equal(list.items.length, 1, 'answered at once, within the second the file is not looked at');
  t.equal(server.countOf('refused'), refused + 1, 'one 401, then the new token');
  t.match(server.userAgents.at(-1), /^ipmasq-agent\/\d+\.\d+\.\d+ /);
});

t.test('the Nodes are watched only while a config asks for their pod CIDRs', async (t) => {
  const server = await startFake(t);
  server.seedPodNodes(3);
  server.setNode('self', {});
  const cluster = new Cluster({
    client: client(t, server),
    nodeName: 'self',
    enableIPv6: false,
    logger: logs().logger,
    metrics: { setUp: () => undefined, incError: () => undefined },
    onChange: () => undefined,
    timings: FAST,
  });
  t.teardown(() => cluster.stop());
  cluster.start();
  await until('this Node watched', () => server.watchCount() === 1);
  t.equal(cluster.podCIDRs(), undefined, 'not asked: not listed');
  cluster.wantPodCIDRs(true);
  await until('listed', () => cluster.podCIDRs());
  await until('both watched', () => server.watchCount() === 2);
  cluster.wantPodCIDRs(false);
  await until('the Nodes watch ended', () => server.watchCount() === 1);
  t.equal(cluster.podCIDRs(), undefined, 'forgotten');
  cluster.wantPodCIDRs(true);
  await until('listed again', () => cluster.podCIDRs()?.size === 4 || undefined);
});

t.test('a Node with an implausibly wide pod CIDR is left out, the Node named', async (t) => {
  const node = (podCIDRs: unknown[]) => ({ metadata: { name: 'evil' }, spec: { podCIDRs } });
  const parsed = podCIDRsOf(node(['0.0.0.0/0', '::/0']), true);
  t.same(parsed.prefixes, []);
  t.match(
    parsed.rejected[0],
    /^0\.0\.0\.0\/0 is wider than a Node's pod range may be \(\/16 at most/,
  );
  t.match(parsed.rejected[1], /^::\/0 is wider than .*\/48 at most/);
  t.same(
    podCIDRsOf(node(['10.0.0.0/16', 'fd00:10::/48']), true).prefixes.map(formatPrefix),
    ['10.0.0.0/16', 'fd00:10::/48'],
    'at the bound: kept',
  );
  t.same(
    podCIDRsOf(node(['10.0.0.0/8']), true, { ipv4: 8, ipv6: 48 }).prefixes.map(formatPrefix),
    ['10.0.0.0/8'],
    '--widest-node-pod-cidr 8 keeps a /8',
  );
  t.same(podCIDRsOf(node(['10.0.0.0/15']), true).prefixes, [], 'a /15 is not');
});
