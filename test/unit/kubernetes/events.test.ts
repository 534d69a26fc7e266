// Events on the Node (src/kubernetes/events.ts) and the two ways to reach the API server
// (src/kubernetes/connection.ts: the pod's service account, a kubeconfig), against the fake API
// server, over TLS with a CA made for the test. The fake, not the real server: the Event writes'
// failures and the rate bound are driven on demand (the real server's storing of them is in
// test/e2e/kubernetes-real.test.ts).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { ApiClient } from '../../../src/kubernetes/client.js';
import { fromKubeconfig, inCluster, tokenFile } from '../../../src/kubernetes/connection.js';
import { EventRecorder } from '../../../src/kubernetes/events.js';
import { connectionTo, FakeApiServer, startFake, until } from '../../../harness/fake-apiserver.js';

function dir(t: Test): string {
  const path = mkdtempSync(join(tmpdir(), 'ipmasq-kube-unit-'));
  t.teardown(() => rmSync(path, { recursive: true, force: true }));
  return path;
}

const silent = pino({ level: 'silent' });

/** A recorder for node-1 posting to `server`, counting its failures; stopped at teardown. */
function recorderFor(t: Test, server: FakeApiServer, intervalMs: number) {
  const client = new ApiClient(connectionTo(server.url, server.token));
  t.teardown(() => client.close());
  const failures = { count: 0 };
  const recorder = new EventRecorder({
    client,
    nodeName: 'node-1',
    logger: silent,
    onError: () => failures.count++,
    intervalMs,
  });
  t.teardown(() => recorder.stop());
  return { recorder, failures };
}

t.test(
  'one Event per cause, repeats counted on it, one write per reason per interval',
  async (t) => {
    const server = await startFake(t);
    const { recorder, failures } = recorderFor(t, server, 300);
    for (let i = 0; i < 5; i++) recorder.emit('ConfigInvalid', 'file: bad CIDR');
    await until('created', () => server.eventList().length === 1);
    const [first] = server.eventList();
    t.match(first, {
      reason: 'ConfigInvalid',
      type: 'Warning',
      namespace: 'default',
      involvedObject: { kind: 'Node', name: 'node-1', uid: 'node-1' },
      source: { component: 'ipmasq-agent', host: 'node-1' },
    });
    // The first write went at once with what had been counted by then; the rest follow in one patch.
    await until('patched to 5', () => server.eventList()[0]!.count === 5);
    const writes = server.eventList()[0]!.writes;
    t.ok(writes <= 2, `5 occurrences in ${writes} writes`);

    recorder.emit('KernelWriteFailed', 'EPERM');
    await until('another reason is not held back', () =>
      server.eventList().some((e) => e.reason === 'KernelWriteFailed'),
    );

    // A burst of 50 over ~1 s: at most one write per 300 ms for the reason.
    const began = Date.now();
    const before = server.countOf('event-create') + server.countOf('event-patch');
    for (let i = 0; i < 50; i++) {
      recorder.emit('ConfigInvalid', i % 2 ? 'file: bad CIDR' : 'file: other');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await new Promise((resolve) => setTimeout(resolve, 400));
    const elapsed = Date.now() - began;
    const after = server.countOf('event-create') + server.countOf('event-patch');
    t.ok(
      after - before <= Math.ceil(elapsed / 300) + 1,
      `${after - before} writes in ${elapsed} ms with one allowed per 300 ms`,
    );
    t.equal(
      server.eventList().filter((e) => e.reason === 'ConfigInvalid').length,
      2,
      'two distinct messages: two Events',
    );
    t.equal(failures.count, 0);
  },
);

t.test(
  'an Event that expired is created anew; a failing API is counted, never thrown',
  async (t) => {
    const server = await startFake(t);
    const { recorder, failures } = recorderFor(t, server, 50);
    recorder.emit('LegacyChainPresent', 'chain IP-MASQ-AGENT');
    await until('created', () => server.eventList().length === 1);
    server.events.clear(); // expired (events have a TTL)
    recorder.emit('LegacyChainPresent', 'chain IP-MASQ-AGENT');
    await until('created again', () => server.eventList().length === 1);
    t.equal(server.eventList()[0]!.count, 2, 'the count goes on');
    server.setForbidden(true);
    t.doesNotThrow(() => recorder.emit('ConflictingWriter', 'another agent'));
    await until('error counted', () => failures.count >= 1);
  },
);

t.test(
  'kubeconfig: token, token file, basic auth, CA data; what it refuses, by name',
  async (t) => {
    const d = dir(t);
    writeFileSync(join(d, 'token'), 'from-file\n');
    const config = (user: string, extra = '') =>
      [
        'apiVersion: v1',
        'current-context: c',
        'clusters:',
        '- name: k',
        `  cluster: {server: "https://192.0.2.10:6443", certificate-authority-data: ${Buffer.from('CA').toString('base64')}${extra}}`,
        'contexts:',
        '- name: c',
        '  context: {cluster: k, user: u}',
        'users:',
        '- name: u',
        `  user: ${user}`,
      ].join('\n');
    writeFileSync(join(d, 'a'), config('{token: abc}'));
    const a = await fromKubeconfig(join(d, 'a'));
    t.equal(a.server.href, 'https://192.0.2.10:6443/');
    t.equal((await a.tls()).ca?.toString(), 'CA');
    t.equal(await a.authorization(), 'Bearer abc');
    writeFileSync(join(d, 'b'), config('{tokenFile: token}'));
    t.equal(
      await (await fromKubeconfig(join(d, 'b'))).authorization(),
      'Bearer from-file',
      'relative to the file',
    );
    writeFileSync(join(d, 'basic'), config('{username: admin, password: "s3cret"}'));
    t.equal(
      await (await fromKubeconfig(join(d, 'basic'))).authorization(),
      `Basic ${Buffer.from('admin:s3cret').toString('base64')}`,
    );
    // Each field the agent does not follow is refused by name, never silently ignored.
    for (const [user, extra, field] of [
      ['{exec: {command: aws}}', '', 'exec'],
      ['{auth-provider: {name: gcp}}', '', 'auth-provider'],
      ['{token: abc, as: admin}', '', 'as'],
      ['{token: abc, as-groups: [system:masters]}', '', 'as-groups'],
      ['{token: abc}', ', proxy-url: "http://192.0.2.99:3128"', 'proxy-url'],
      ['{token: abc}', ', tls-server-name: api.internal', 'tls-server-name'],
    ] as const) {
      writeFileSync(join(d, 'refused'), config(user, extra));
      await t.rejects(
        fromKubeconfig(join(d, 'refused')),
        { name: 'UnsupportedKubeconfig', message: new RegExp(`: ${field}: .* is not supported`) },
        field,
      );
    }
    writeFileSync(join(d, 'd'), 'current-context: nope\ncontexts: []\n');
    await t.rejects(fromKubeconfig(join(d, 'd')), /no context named nope/);
    await t.rejects(fromKubeconfig(join(d, 'missing')), /--kubeconfig .*missing: .*ENOENT/);
  },
);

t.test('several kubeconfig files (a:b, KUBECONFIG) are refused, naming them', async (t) => {
  const d = dir(t);
  const one = join(d, 'one');
  writeFileSync(
    one,
    'current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: "http://192.0.2.20:8080"}}]\nusers: [{name: u, user: {token: t}}]\n',
  );
  t.equal((await fromKubeconfig(one)).server.href, 'http://192.0.2.20:8080/', 'one file: read');
  const refused = { name: 'UnsupportedKubeconfig', message: /several kubeconfig files/ };
  await t.rejects(fromKubeconfig(`${one}:${join(d, 'two')}`), refused, 'a:b');
  await t.rejects(fromKubeconfig(`${one}:${one}`), refused, 'the same file twice');
  // --kubernetes outside a pod: KUBECONFIG, as kubectl takes it, one file; without it, both named.
  t.equal((await inCluster({ KUBECONFIG: one }, d)).server.href, 'http://192.0.2.20:8080/');
  await t.rejects(inCluster({ KUBECONFIG: `${one}:${one}` }, d), refused);
  await t.rejects(inCluster({}, d), /KUBERNETES_SERVICE_HOST .*KUBECONFIG/);
});

t.test('in-cluster: KUBERNETES_SERVICE_HOST/PORT, its CA and its token', async (t) => {
  const d = dir(t);
  const env = { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' };
  await t.rejects(inCluster(env, d), /CA/);
  writeFileSync(join(d, 'ca.crt'), 'CA');
  await t.rejects(inCluster(env, d), /token/);
  writeFileSync(join(d, 'token'), 'one');
  const c = await inCluster(env, d);
  t.equal(c.server.href, 'https://[fd00::1]/', 'an IPv6 host bracketed, 443 the default');
  t.equal(await c.authorization(), 'Bearer one');
  t.equal((await c.tls()).ca?.toString(), 'CA');
});

t.test(
  'a token file is read again as it rotates: within a second, at once after a 401',
  async (t) => {
    const d = dir(t);
    const path = join(d, 'token');
    writeFileSync(path, 'first\n');
    let now = 1_000_000;
    const token = tokenFile(path, () => now);
    t.equal(await token(), 'first');
    // kubelet swaps a symlink: a new file in place.
    writeFileSync(`${path}.new`, 'rotated\n');
    renameSync(`${path}.new`, path);
    now += 999;
    t.equal(await token(), 'first', 'within the second: not looked at');
    t.equal(await token(true), 'rotated', 'after a 401: read at once');
    writeFileSync(`${path}.new`, 'third\n');
    renameSync(`${path}.new`, path);
    now += 1_000;
    t.equal(await token(), 'third', 'a second on: looked at, changed, read');
    // A failed read keeps the last good token; the first read's failure is thrown.
    rmSync(path);
    now += 1_000;
    t.equal(await token(), 'third', 'the file gone: the last good token');
    t.equal(await token(true), 'third');
    await t.rejects(tokenFile(join(d, 'never'))(), /ENOENT/);
  },
);

/** A CA and a server certificate for 127.0.0.1 signed by it, made with openssl in `d`/`name`-*. */
function certificates(d: string, name: string): { ca: Buffer; cert: string; key: string } {
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: d, stdio: 'pipe' });
  const f = (part: string) => `${name}-${part}`;
  run([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    f('ca.key'),
    '-out',
    f('ca.crt'),
    '-days',
    '1',
    '-subj',
    `/CN=${name}-ca`,
  ]);
  run([
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    f('server.key'),
    '-out',
    f('server.csr'),
    '-subj',
    '/CN=127.0.0.1',
  ]);
  writeFileSync(join(d, 'ext'), 'subjectAltName=IP:127.0.0.1\n');
  run([
    'x509',
    '-req',
    '-in',
    f('server.csr'),
    '-CA',
    f('ca.crt'),
    '-CAkey',
    f('ca.key'),
    '-CAcreateserial',
    '-out',
    f('server.crt'),
    '-days',
    '1',
    '-extfile',
    'ext',
  ]);
  return {
    ca: readFileSync(join(d, f('ca.crt'))),
    cert: readFileSync(join(d, f('server.crt')), 'utf8'),
    key: readFileSync(join(d, f('server.key')), 'utf8'),
  };
}

t.test('TLS: the API server is verified against the given CA', async (t) => {
  const d = dir(t);
  const made = certificates(d, 'one');
  writeFileSync(join(d, 'ca.crt'), made.ca);
  writeFileSync(join(d, 'server.crt'), made.cert);
  writeFileSync(join(d, 'server.key'), made.key);
  const server = await startFake(t, {
    tls: {
      cert: readFileSync(join(d, 'server.crt'), 'utf8'),
      key: readFileSync(join(d, 'server.key'), 'utf8'),
    },
  });
  server.setNode('n', { podCIDRs: ['10.244.0.0/24'] });
  const good = new ApiClient(
    connectionTo(server.url, server.token, readFileSync(join(d, 'ca.crt'))),
  );
  t.teardown(() => good.close());
  const list = (await good.json('GET', '/api/v1/nodes')) as { items: unknown[] };
  t.equal(list.items.length, 1);
  const untrusted = new ApiClient(connectionTo(server.url, server.token));
  t.teardown(() => untrusted.close());
  await t.rejects(
    untrusted.json('GET', '/api/v1/nodes'),
    /self.signed|unable to verify|certificate/i,
  );
});

t.test('a replaced CA file is read again: the client follows a CA rotation', async (t) => {
  const d = dir(t);
  const [one, two] = [certificates(d, 'one'), certificates(d, 'two')];
  const server = await startFake(t, { tls: { cert: one.cert, key: one.key } });
  server.setNode('n', { podCIDRs: ['10.244.0.0/24'] });
  writeFileSync(join(d, 'ca.crt'), one.ca);
  writeFileSync(join(d, 'token'), server.token);
  const port = new URL(server.url).port;
  const env = { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: port };
  const client = new ApiClient(await inCluster(env, d));
  t.teardown(() => client.close());
  await client.json('GET', '/api/v1/nodes');
  // The cluster's CA rotated: the server presents a certificate of the new CA, kubelet puts the new
  // CA in place (a new file, as a projected volume swaps it).
  await server.replaceTls({ cert: two.cert, key: two.key });
  writeFileSync(join(d, 'ca.crt.new'), two.ca);
  renameSync(join(d, 'ca.crt.new'), join(d, 'ca.crt'));
  let failures = 0;
  const deadline = Date.now() + 10_000;
  for (;;) {
    const answer = await client.json('GET', '/api/v1/nodes').catch(() => undefined);
    if (answer !== undefined) break;
    failures++;
    if (Date.now() > deadline) throw new Error('the new CA was never used');
    await new Promise((r) => setTimeout(r, 100));
  }
  t.ok(
    failures <= 15,
    `answered under the new CA after ${failures} failed tries (the file is looked at once a second)`,
  );
});

t.test('an Event message is bounded, old messages are forgotten, nothing after stop', async (t) => {
  const server = await startFake(t);
  const { recorder } = recorderFor(t, server, 10);
  recorder.emit('KernelWriteFailed', 'x'.repeat(5_000));
  await until('created', () => server.eventList().length === 1);
  t.equal(server.eventList()[0]!.message.length, 1024, 'cut to 1 KiB');
  for (let i = 0; i < 40; i++) recorder.emit('ConfigInvalid', `message ${i}`);
  // One write per 10 ms for the reason, each the latest message: the earlier ones are not queued.
  await until('the last one written', () =>
    server.eventList().some((e) => e.message === 'message 39'),
  );
  t.ok(server.eventList().length < 41, 'not one Event per message of a burst');
  recorder.emit('ConfigInvalid', 'message 0');
  const again = await until('message 0 written', () =>
    server.eventList().find((e) => e.message === 'message 0'),
  );
  t.equal(again.count, 1, 'message 0 was forgotten (32 kept per reason): counted anew');
  await recorder.stop();
  const count = server.eventList().length;
  recorder.emit('ConflictingWriter', 'after stop');
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.equal(server.eventList().length, count, 'nothing is posted after stop');
});
