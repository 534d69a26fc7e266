// The Kubernetes session as the agent starts it (src/kubernetes/index.ts): connected by kubeconfig,
// watching the Node, posting Events, its series following the watches, each failure logged once and
// "watching again" once it is back; the kubeconfig shapes it refuses; the bounds on what a Node and
// an Event may carry. The fake, not the real server: oversized Nodes and Events and failures on
// demand are what a real one refuses to store or cannot be made to do.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { DEFAULT_WIDEST_NODE_POD_CIDR } from '../../../src/kubernetes/pod-cidrs.js';
import t, { type Test } from 'tap';
import { fromKubeconfig } from '../../../src/kubernetes/connection.js';
import { labelsOf } from '../../../src/kubernetes/cluster.js';
import { podCIDRsOf } from '../../../src/kubernetes/pod-cidrs.js';
import {
  EVENT_INTERVAL_MS,
  startKubernetes,
  kubernetesTimings,
} from '../../../src/kubernetes/index.js';
import { DEFAULT_TIMINGS } from '../../../src/kubernetes/reflector.js';
import { startFake, until } from '../../../harness/fake-apiserver.js';

function dir(t: Test): string {
  const path = mkdtempSync(join(tmpdir(), 'ipmasq-kube-session-'));
  t.teardown(() => rmSync(path, { recursive: true, force: true }));
  return path;
}

function kubeconfig(t: Test, server: string, token: string): string {
  const path = join(dir(t), 'kubeconfig');
  writeFileSync(
    path,
    `current-context: c
clusters: [{name: k, cluster: {server: "${server}"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {token: ${token}}}]
`,
  );
  return path;
}

t.test('timings given: positive numbers taken, anything else left at the default', async (t) => {
  const defaults = { ...DEFAULT_TIMINGS, eventIntervalMs: EVENT_INTERVAL_MS };
  t.same(kubernetesTimings(), defaults);
  t.same(kubernetesTimings({}), defaults);
  const timings = kubernetesTimings({
    idleMs: 500,
    backoffMaxMs: -1,
    backoffBaseMs: Number.NaN,
    pageSize: 'x',
    eventIntervalMs: 200,
  });
  t.equal(timings.idleMs, 500);
  t.equal(timings.eventIntervalMs, 200);
  t.equal(timings.backoffMaxMs, DEFAULT_TIMINGS.backoffMaxMs, 'a negative number is ignored');
  t.equal(timings.backoffBaseMs, DEFAULT_TIMINGS.backoffBaseMs, 'NaN is ignored');
  t.equal(timings.pageSize, DEFAULT_TIMINGS.pageSize, 'a string is ignored');
});

t.test(
  'a session: labels, changes, Events, the up series and one log line per cause',
  async (t) => {
    const server = await startFake(t, { bookmarkMs: 100 });
    server.setNode('self', { podCIDRs: ['10.244.0.0/24'], labels: { pool: 'a' } });
    const lines: Array<{ msg: string; level: number }> = [];
    const logger = pino(
      { level: 'info' },
      { write: (line: string) => lines.push(JSON.parse(line)) },
    );
    const ups: boolean[] = [];
    const errors: string[] = [];
    let changes = 0;
    const session = await startKubernetes({
      timings: { backoffBaseMs: 50, backoffMaxMs: 200 },
      kubeconfig: kubeconfig(t, server.url, server.token),
      nodeName: 'self',
      enableIPv6: false,
      logger,
      metrics: { setUp: (up) => ups.push(up), incError: (op) => errors.push(op) },
      widest: DEFAULT_WIDEST_NODE_POD_CIDR,
      onChange: () => changes++,
    });
    t.teardown(() => session.stop());
    await until('labels', () => session.cluster.labels?.get('pool'));
    t.equal(session.cluster.labels?.get('pool'), 'a');
    await until('up', () => ups.at(-1) === true);
    const before = changes;
    server.setNode('self', { podCIDRs: ['10.244.0.0/24'], labels: { pool: 'b' } });
    await until('label change', () => session.cluster.labels?.get('pool') === 'b');
    t.ok(changes > before, 'a label change is a change');

    session.events('ConfigInvalid', 'x');
    await until('event', () => server.eventList().length === 1);

    server.setForbidden(true);
    server.dropWatches();
    await until('errors', () => errors.filter((op) => op === 'watch').length >= 3);
    t.equal(ups.at(-1), false, 'not up while refused');
    const failing = lines.filter((l) => /this Node's watch failed: 403/.test(l.msg));
    t.equal(failing.length, 1, 'the cause logged once however often it recurs');
    server.setForbidden(false);
    await until('up again', () => ups.at(-1) === true);
    await until('said so', () => lines.some((l) => /watching this Node again/.test(l.msg)));
    t.equal(session.cluster.labels?.get('pool'), 'b', 'the data stayed');
  },
);

t.test('kubeconfig: what it refuses, and client certificates', async (t) => {
  const d = dir(t);
  const write = (name: string, text: string) => {
    writeFileSync(join(d, name), text);
    return join(d, name);
  };
  const cluster = (server: string, extra = '') =>
    `current-context: c\nclusters: [{name: k, cluster: {server: "${server}"${extra}}}]\ncontexts: [{name: c, context: {cluster: k}}]\n`;
  await t.rejects(fromKubeconfig(write('a', 'current-context: c\n: [\n')), /not YAML/);
  await t.rejects(fromKubeconfig(write('b', 'contexts: []\n')), /no current-context/);
  await t.rejects(fromKubeconfig(write('c', cluster('not a url'))), /is not a URL/);
  await t.rejects(fromKubeconfig(write('d', cluster('ftp://192.0.2.1'))), /not http\(s\)/);
  await t.rejects(
    fromKubeconfig(write('e', cluster('https://192.0.2.1').replace(/server: "[^"]*"/, 'x: 1'))),
    /has no server/,
  );
  await t.rejects(
    fromKubeconfig(
      write('f', cluster('https://192.0.2.1', ', certificate-authority: missing.crt')),
    ),
    /certificate-authority .*missing\.crt/,
  );
  const insecure = await fromKubeconfig(
    write('g', cluster('https://192.0.2.1', ', insecure-skip-tls-verify: true')),
  );
  t.equal(insecure.insecureSkipTLSVerify, true);
  t.equal(await insecure.authorization(), undefined, 'no user: no token');
  write('client.crt', 'CERT');
  const certs = await fromKubeconfig(
    write(
      'h',
      `current-context: c
clusters: [{name: k, cluster: {server: "https://192.0.2.1"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {client-certificate: client.crt, client-key-data: ${Buffer.from('KEY').toString('base64')}}}]
`,
    ),
  );
  const material = await certs.tls();
  t.equal(material.cert?.toString(), 'CERT');
  t.equal(material.key?.toString(), 'KEY');
});

t.test('what a Node may carry: pod CIDRs and labels are bounded', async (t) => {
  const many = podCIDRsOf(
    { spec: { podCIDRs: Array.from({ length: 12 }, (_, i) => `10.${i}.0.0/16`) } },
    false,
  );
  t.equal(many.prefixes.length, 8);
  t.match(many.rejected, ['4 more left out']);
  const long = podCIDRsOf({ spec: { podCIDRs: [`10.0.0.0/8${' '.repeat(100)}`] } }, false);
  t.same(long.prefixes, []);
  t.equal(long.rejected.length, 1);
  t.same(podCIDRsOf({ spec: {} }, false), { prefixes: [], rejected: [] }, 'none given: none');
  const labels = Object.fromEntries(Array.from({ length: 600 }, (_, i) => [`k${i}`, 'v']));
  t.equal(labelsOf({ metadata: { labels } }).size, 512);
  t.equal(labelsOf({}).size, 0);
});
