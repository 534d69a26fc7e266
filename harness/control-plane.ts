// A real kube-apiserver and etcd (scripts/control-plane.sh) on a test namespace's loopback, where
// the agent in that namespace reaches them at https://127.0.0.1:6443; stopped and removed at
// teardown, and by the script's watcher should this process die without its teardown.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { inNetns, packageRoot, tempDir, type TapTest } from './netns.js';

const script = join(packageRoot, 'scripts/control-plane.sh');

export interface ControlPlane {
  readonly ns: string;
  /** Where its binaries are (kube-apiserver, kubectl, etcd, listwatch). */
  readonly bin: string;
  /** The admin's kubeconfig (system:masters by client certificate). */
  readonly kubeconfig: string;
  readonly server: string;
  /** The CA that signed the server's certificate (PEM). */
  readonly ca: string;
  /** Runs kubectl as the admin in the namespace; stdout. */
  kubectl(args: string[], input?: string): Promise<string>;
  /** kubectl, parsing `-o json`. */
  json<T = Record<string, unknown>>(args: string[]): Promise<T>;
  /** Stops kube-apiserver and starts it again on the same etcd. */
  restartApiServer(): Promise<void>;
  /** Compacts etcd's history to its current revision; returns that revision. */
  compact(): Promise<number>;
}

export interface PreparedControlPlane {
  /** The admin's kubeconfig, written before the servers start. */
  readonly kubeconfig: string;
  /** Starts etcd and kube-apiserver with the certificates already made. */
  start(): Promise<ControlPlane>;
}

/**
 * The control plane's certificates and kubeconfig in a directory of the test's, its servers not
 * started yet: stopped and removed at teardown, and by the script's watcher should this process
 * die without its teardown.
 */
export async function prepareControlPlane(t: TapTest, ns: string): Promise<PreparedControlPlane> {
  const dir = join(tempDir(t, 'control-plane'), 'cp');
  t.teardown(() => inNetns(ns, script, ['down', dir], { timeoutMs: 30_000 }));
  await inNetns(ns, script, ['certs', dir]);
  const kubeconfig = join(dir, 'admin.kubeconfig');
  return {
    kubeconfig,
    start: async () => {
      // The first build on a machine takes minutes (docs/development.md, "Tests against a real API
      // server").
      await inNetns(ns, 'env', [`CONTROL_PLANE_OWNER=${process.pid}`, script, 'up', dir], {
        timeoutMs: 1_200_000,
      });
      return planeIn(ns, dir);
    },
  };
}

/** Starts the control plane in `ns` (building it first on a machine that has not yet). */
export async function startControlPlane(t: TapTest, ns: string): Promise<ControlPlane> {
  return (await prepareControlPlane(t, ns)).start();
}

function planeIn(ns: string, dir: string): ControlPlane {
  const vars = Object.fromEntries(
    readFileSync(join(dir, 'env'), 'utf8')
      .trim()
      .split('\n')
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
  const kubectl = vars.KUBECTL!;
  const kubeconfig = join(dir, 'admin.kubeconfig');
  const run = async (args: string[], input?: string) =>
    (
      await inNetns(ns, kubectl, ['--kubeconfig', kubeconfig, ...args], {
        timeoutMs: 60_000,
        ...(input === undefined ? {} : { input }),
      })
    ).stdout;
  return {
    ns,
    bin: vars.CONTROL_PLANE_BIN!,
    kubeconfig,
    server: 'https://127.0.0.1:6443',
    ca: readFileSync(join(dir, 'pki', 'ca.crt'), 'utf8'),
    kubectl: run,
    json: async <T>(args: string[]) => JSON.parse(await run([...args, '-o', 'json'])) as T,
    restartApiServer: async () => {
      await inNetns(ns, script, ['restart-apiserver', dir], { timeoutMs: 180_000 });
    },
    compact: async () => Number((await inNetns(ns, script, ['compact'])).stdout.trim()),
  };
}

/** A kubeconfig for `token` (a ServiceAccount's, from the TokenRequest API) against `plane`. */
export function tokenKubeconfig(plane: ControlPlane, token: string): string {
  const ca = Buffer.from(plane.ca).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '  - name: test',
    '    cluster:',
    `      server: ${plane.server}`,
    `      certificate-authority-data: ${ca}`,
    'users:',
    '  - name: agent',
    '    user:',
    `      token: ${token}`,
    'contexts:',
    '  - name: test',
    '    context: { cluster: test, user: agent }',
    'current-context: test',
    '',
  ].join('\n');
}

const shippedServiceAccount = () =>
  readFileSync(join(packageRoot, 'deploy/kubernetes/serviceaccount.yaml'), 'utf8');

/** The ServiceAccount and the API overlay's RBAC, as deploy/ ships them (one YAML stream). */
export function shippedRbac(): string {
  return [
    shippedServiceAccount(),
    readFileSync(join(packageRoot, 'deploy/overlays/api/rbac.yaml'), 'utf8'),
  ].join('\n---\n');
}

/**
 * The agent's ServiceAccount alone and a kubeconfig with its token: every request refused until
 * `allow()` applies the shipped RBAC (an agent made to wait, with the data already in the server).
 */
export async function refusedAgentKubeconfig(
  t: TapTest,
  plane: ControlPlane,
): Promise<{ kubeconfig: string; allow(): Promise<void> }> {
  await plane.kubectl(['apply', '-f', '-'], shippedServiceAccount());
  const token = (
    await plane.kubectl(['create', 'token', 'ipmasq-agent', '-n', 'kube-system'])
  ).trim();
  const kubeconfig = join(tempDir(t, 'agent-token'), 'kubeconfig');
  writeFileSync(kubeconfig, tokenKubeconfig(plane, token));
  return {
    kubeconfig,
    allow: async () => {
      await plane.kubectl(['apply', '-f', '-'], shippedRbac());
    },
  };
}

/**
 * The rule of a shipped Role or ClusterRole that grants `resource`, taken away (`namespace` for a
 * Role). Throws when the role has no such rule.
 */
export async function removeRule(
  plane: ControlPlane,
  role: { kind: 'clusterrole' | 'role'; name: string; namespace?: string },
  resource: string,
): Promise<void> {
  const where = [role.kind, role.name, ...(role.namespace ? ['-n', role.namespace] : [])];
  const { rules } = await plane.json<{ rules: Array<{ resources?: string[] }> }>(['get', ...where]);
  const index = rules.findIndex((rule) => rule.resources?.includes(resource));
  if (index < 0) throw new Error(`${role.kind} ${role.name} has no rule for ${resource}`);
  const patch = JSON.stringify([{ op: 'remove', path: `/rules/${index}` }]);
  await plane.kubectl(['patch', ...where, '--type=json', '-p', patch]);
}

/**
 * Applies the shipped RBAC and writes a kubeconfig holding a token for the agent's ServiceAccount
 * from the TokenRequest API (what a projected token is); returns its path.
 */
export async function agentKubeconfig(t: TapTest, plane: ControlPlane): Promise<string> {
  await plane.kubectl(['apply', '-f', '-'], shippedRbac());
  const token = (
    await plane.kubectl(['create', 'token', 'ipmasq-agent', '-n', 'kube-system'])
  ).trim();
  const path = join(tempDir(t, 'agent-token'), 'kubeconfig');
  writeFileSync(path, tokenKubeconfig(plane, token));
  return path;
}

/**
 * A pod of `node` with these addresses (and labels), as the scheduler and the kubelet would leave
 * it: the namespace and its default ServiceAccount first (no controller-manager makes them here),
 * then the pod bound to the Node, then its addresses in its status.
 */
export async function createPod(
  plane: ControlPlane,
  namespace: string,
  name: string,
  node: string,
  ips: readonly string[],
  options: { labels?: Record<string, string>; hostNetwork?: boolean } = {},
): Promise<void> {
  await plane.kubectl(['create', 'namespace', namespace]).catch(() => undefined);
  await plane
    .kubectl(['create', 'serviceaccount', 'default', '-n', namespace])
    .catch(() => undefined);
  const pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace, labels: options.labels ?? {} },
    spec: {
      nodeName: node,
      automountServiceAccountToken: false,
      ...(options.hostNetwork ? { hostNetwork: true } : {}),
      containers: [{ name: 'c', image: 'registry.invalid/none' }],
    },
  };
  await plane.kubectl(['apply', '-f', '-'], JSON.stringify(pod));
  const status = { status: { podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) } };
  await plane.kubectl([
    'patch',
    'pod',
    name,
    '-n',
    namespace,
    '--subresource=status',
    '--type=merge',
    '-p',
    JSON.stringify(status),
  ]);
}
