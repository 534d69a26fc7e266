// The one-shot commands with --kubeconfig (docs/kubernetes.md, "Kubernetes API (opt-in)"):
// --explain names the Node whose pod CIDR decides, --render writes the Nodes' pod CIDRs and judges
// nodeSelector files on the Node's labels, and an API server that cannot be read is a clear
// failure. The built command, against the fake API server on the loopback: without root, no
// namespace to run the real one in (the real server is in test/e2e/kubernetes-real.test.ts, --once
// included), and a refusal toggled on demand.
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { agentBin, agentEnv } from '../../../harness/agent.js';
import { packageRoot, tempDir } from '../../../harness/netns.js';
import { FakeApiServer } from '../../../harness/fake-apiserver.js';

function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [agentBin, ...args],
      { cwd: packageRoot, env: agentEnv(), timeout: 60_000 },
      (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
    );
  });
}

const dir = tempDir(t, 'kube-commands');
const configDir = join(dir, 'config');
const { mkdirSync } = await import('node:fs');
mkdirSync(configDir);
writeFileSync(
  join(configDir, 'ip-masq-agent'),
  'nonMasqueradeCIDRs: [10.0.0.0/8]\nnonMasqueradeNodePodCIDRs: true\n',
);
writeFileSync(
  join(configDir, 'ip-masq-gpu'),
  'nodeSelector: {pool: gpu}\nmasqueradeCIDRs: [10.9.0.0/16]\n',
);

const server = new FakeApiServer();
await server.listen();
t.teardown(() => server.close());
server.setNode('self', { podCIDRs: ['100.64.1.0/24'], labels: { pool: 'gpu' } });
server.setNode('worker-7', { podCIDRs: ['100.64.7.0/24'] });
const kubeconfig = join(dir, 'kubeconfig');
writeFileSync(
  kubeconfig,
  `apiVersion: v1
current-context: c
clusters: [{name: k, cluster: {server: "${server.url}"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {token: ${server.token}}}]
`,
);
const api = ['--config', configDir, '--kubeconfig', kubeconfig, '--node-name', 'self'];

t.test(
  '--explain names the Node whose pod CIDR decides, and judges nodeSelector on its labels',
  async (t) => {
    const { code, stdout, stderr } = await run([...api, '--explain', '100.64.7.9', '10.9.0.1']);
    t.equal(code, 0, stderr);
    t.match(
      stdout,
      /100\.64\.7\.9: not masqueraded, because of Node worker-7's podCIDRs 100\.64\.7\.0\/24/,
    );
    t.match(
      stdout,
      /10\.9\.0\.1: masqueraded, because of \S*ip-masq-gpu masqueradeCIDRs\[0\]/,
      'pool=gpu: the file applies',
    );
    const json = await run([...api, '--explain', '100.64.7.9', '--output', 'json']);
    const parsed = JSON.parse(json.stdout) as { explanations: Array<{ reason: string }> };
    t.equal(parsed.explanations[0]?.reason, 'node podCIDRs');
  },
);

t.test('without the flags the commands say the Nodes are not included', async (t) => {
  const { code, stdout, stderr } = await run([
    '--config',
    configDir,
    '--node-labels',
    'pool=cpu',
    '--explain',
    '100.64.7.9',
  ]);
  t.equal(code, 0);
  t.match(stderr, /the Nodes' pod CIDRs are not included/);
  t.match(stdout, /100\.64\.7\.9: masqueraded/);
});

t.test('--render writes the Nodes’ pod CIDRs', async (t) => {
  const { code, stdout, stderr } = await run([...api, '--render']);
  t.equal(code, 0, stderr);
  t.match(stdout, /100\.64\.7\.0\/24/);
  t.match(stdout, /100\.64\.1\.0\/24/);
  t.match(stdout, /10\.9\.0\.0\/16/, 'the gpu file applies on a pool=gpu Node');
});

t.test('an API server that cannot be read is a clear failure, not the defaults', async (t) => {
  server.setForbidden(true);
  t.teardown(() => server.setForbidden(false));
  const explained = await run([...api, '--explain', '100.64.7.9']);
  t.equal(explained.code, 1);
  t.match(explained.stderr, /cannot read the cluster from the API server: 403/);
  const rendered = await run([...api, '--render']);
  t.equal(rendered.code, 1);
  t.match(rendered.stderr, /cannot read the cluster from the API server: 403/);
});

t.test('a kubeconfig feature the agent does not do: exit 2 naming it, in every mode', async (t) => {
  const proxied = join(dir, 'proxied');
  writeFileSync(
    proxied,
    readFileSync(kubeconfig, 'utf8').replace(
      '{server:',
      '{proxy-url: "http://192.0.2.99:3128", server:',
    ),
  );
  const named = join(dir, 'named');
  writeFileSync(
    named,
    readFileSync(kubeconfig, 'utf8').replace('{server:', '{tls-server-name: api.internal, server:'),
  );
  for (const [config, mode, pattern] of [
    [`${kubeconfig}:${kubeconfig}`, '--render', /several kubeconfig files/],
    [proxied, '--once', /proxy-url/],
    [named, '--explain', /tls-server-name/],
    // The agent itself: refused before it touches anything, not after waiting for the server.
    [named, undefined, /tls-server-name/],
  ] as const) {
    const args = ['--config', configDir, '--kubeconfig', config, '--node-name', 'self'];
    if (mode === '--explain') args.push(mode, '10.0.0.1');
    else if (mode) args.push(mode);
    const { code, stderr } = await run(args);
    t.equal(code, 2, `${mode ?? 'the agent'}: exit 2`);
    t.match(stderr, pattern, `${mode ?? 'the agent'}: named`);
  }
});
