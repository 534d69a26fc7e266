// Events on the Node (src/kubernetes/events.ts) and the two ways to reach the API server
// (src/kubernetes/connection.ts: the pod's service account, a kubeconfig), against the fake API
// server, over TLS with a CA made for the test.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { ApiClient } from '../../src/kubernetes/client.js';
import { fromKubeconfig, inCluster, tokenFile } from '../../src/kubernetes/connection.js';
import { EventRecorder } from '../../src/kubernetes/events.js';
import { FakeApiServer, startFake, until } from '../../harness/fake-apiserver.js';

function dir(t: Test): string {
  const path = mkdtempSync(join(tmpdir(), 'ipmasq-kube-unit-'));
  t.teardown(() => rmSync(path, { recursive: true, force: true }));
  return path;
}

const silent = pino({ level: 'silent' });

/** A recorder for node-1 posting to `server`, counting its failures; stopped at teardown. */
function recorderFor(t: Test, server: FakeApiServer, intervalMs: number) {
  const client = new ApiClient({ server: new URL(server.url), token: async () => server.token });
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

t.test('kubeconfig: token, token file, CA data; exec plugins refused', async (t) => {
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
  t.equal(a.ca?.toString(), 'CA');
  t.equal(await a.token(), 'abc');
  writeFileSync(join(d, 'b'), config('{tokenFile: token}'));
  t.equal(await (await fromKubeconfig(join(d, 'b'))).token(), 'from-file', 'relative to the file');
  writeFileSync(join(d, 'c'), config('{exec: {command: aws}}'));
  await t.rejects(fromKubeconfig(join(d, 'c')), /exec and auth-provider/);
  writeFileSync(join(d, 'd'), 'current-context: nope\ncontexts: []\n');
  await t.rejects(fromKubeconfig(join(d, 'd')), /no context named nope/);
  await t.rejects(fromKubeconfig(join(d, 'missing')), /--kubeconfig .*missing/);
});

t.test('in-cluster: KUBERNETES_SERVICE_HOST/PORT, its CA and its token', async (t) => {
  const d = dir(t);
  await t.rejects(inCluster({}, d), /KUBERNETES_SERVICE_HOST/);
  const env = { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' };
  await t.rejects(inCluster(env, d), /CA/);
  writeFileSync(join(d, 'ca.crt'), 'CA');
  await t.rejects(inCluster(env, d), /token/);
  writeFileSync(join(d, 'token'), 'one');
  const c = await inCluster(env, d);
  t.equal(c.server.href, 'https://[fd00::1]/', 'an IPv6 host bracketed, 443 the default');
  t.equal(await c.token(), 'one');
});

t.test('a token file is read again as it rotates, once a minute', async (t) => {
  const d = dir(t);
  writeFileSync(join(d, 'token'), 'first\n');
  let now = 1_000_000;
  const token = tokenFile(join(d, 'token'), () => now);
  t.equal(await token(), 'first');
  writeFileSync(join(d, 'token'), 'rotated\n');
  now += 59_999;
  t.equal(await token(), 'first', 'within the minute: the one read');
  now += 1;
  t.equal(await token(), 'rotated', 'a minute on: read again');
});

t.test('TLS: the API server is verified against the given CA', async (t) => {
  const d = dir(t);
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: d, stdio: 'pipe' });
  run([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    '1',
    '-subj',
    '/CN=test-ca',
  ]);
  run([
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'server.key',
    '-out',
    'server.csr',
    '-subj',
    '/CN=127.0.0.1',
  ]);
  writeFileSync(join(d, 'ext'), 'subjectAltName=IP:127.0.0.1\n');
  run([
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.crt',
    '-days',
    '1',
    '-extfile',
    'ext',
  ]);
  const { readFileSync } = await import('node:fs');
  const server = await startFake(t, {
    tls: {
      cert: readFileSync(join(d, 'server.crt'), 'utf8'),
      key: readFileSync(join(d, 'server.key'), 'utf8'),
    },
  });
  server.setNode('n', { podCIDRs: ['10.244.0.0/24'] });
  const good = new ApiClient({
    server: new URL(server.url),
    ca: readFileSync(join(d, 'ca.crt')),
    token: async () => server.token,
  });
  t.teardown(() => good.close());
  const list = (await good.json('GET', '/api/v1/nodes')) as { items: unknown[] };
  t.equal(list.items.length, 1);
  const untrusted = new ApiClient({ server: new URL(server.url), token: async () => server.token });
  t.teardown(() => untrusted.close());
  await t.rejects(
    untrusted.json('GET', '/api/v1/nodes'),
    /self.signed|unable to verify|certificate/i,
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
