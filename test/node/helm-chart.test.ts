// The Helm chart (deploy/helm/ipmasq-agent) against the kustomizations it stands for, with a helm and
// a kubectl built from the Go module proxy (scripts/node.sh, scripts/control-plane.sh): `helm lint`
// clean, and `helm template` equal object by object to `kubectl kustomize` for the base, the API
// overlay and the pod-policy example, and to the monitoring manifests (docs/operations.md,
// "Install").
import t, { type Test } from 'tap';
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual, promisify } from 'node:util';
import { parse, parseAllDocuments } from 'yaml';
import { packageRoot, tempDir } from '../../harness/netns.js';

const exec = promisify(execFile);
const chart = join(packageRoot, 'deploy', 'helm', 'ipmasq-agent');

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  [key: string]: unknown;
}

/** Builds (once per machine) and finds kubectl and helm; minutes on a fresh machine. */
async function tools(): Promise<{ kubectl: string; helm: string }> {
  const build = async (script: string) =>
    (
      await exec('bash', [join(packageRoot, 'scripts', script), 'build'], {
        timeout: 3_600_000,
        maxBuffer: 64 * 1024 * 1024,
      })
    ).stdout.trim();
  const plane = await build('control-plane.sh');
  const node = await build('node.sh');
  return { kubectl: join(plane, 'kubectl'), helm: join(node, 'bin', 'helm') };
}

function objects(text: string): Map<string, K8sObject> {
  const found = new Map<string, K8sObject>();
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) throw new Error(doc.errors[0]!.message);
    const object = doc.toJS() as K8sObject | null;
    if (object === null) continue;
    const key = `${object.kind} ${object.metadata.namespace ?? ''}/${object.metadata.name}`;
    if (found.has(key)) throw new Error(`${key} twice`);
    found.set(key, object);
  }
  return found;
}

const { kubectl, helm } = await tools();
const home = tempDir(t, 'helm');
// helm keeps its cache and settings in the test's directory, not the machine's.
const env = {
  ...process.env,
  HELM_CACHE_HOME: join(home, 'cache'),
  HELM_CONFIG_HOME: join(home, 'config'),
  HELM_DATA_HOME: join(home, 'data'),
};

async function template(...args: string[]): Promise<Map<string, K8sObject>> {
  const { stdout } = await exec(
    helm,
    ['template', 'ipmasq-agent', chart, '--namespace', 'kube-system', ...args],
    { env, maxBuffer: 16 * 1024 * 1024 },
  );
  return objects(stdout);
}

async function kustomize(dir: string): Promise<Map<string, K8sObject>> {
  const { stdout } = await exec(kubectl, ['kustomize', join(packageRoot, dir)], {
    maxBuffer: 16 * 1024 * 1024,
  });
  return objects(stdout);
}

function sameObjects(
  t: Test,
  got: Map<string, K8sObject>,
  want: Map<string, K8sObject>,
  what: string,
) {
  t.same([...got.keys()].sort(), [...want.keys()].sort(), `${what}: the same objects`);
  for (const [key, object] of want) t.same(got.get(key), object, `${what}: ${key}`);
}

t.test('helm lint finds nothing to warn about', async (t) => {
  const { stdout } = await exec(helm, ['lint', chart, '--strict'], { env });
  t.match(stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  t.notMatch(stdout, /\[(WARNING|ERROR)\]/);
});

t.test('the default values make the objects of deploy/kubernetes', async (t) => {
  const got = await template();
  sameObjects(t, got, await kustomize('deploy/kubernetes'), 'kustomize deploy/kubernetes');
  t.equal(got.size, 3, 'ServiceAccount, ConfigMap, DaemonSet');
});

t.test('a changed value shows in the comparison', async (t) => {
  // The comparison is not blind: another image tag is a different DaemonSet, and nothing else.
  const got = await template('--set', 'image.tag=9.9.9');
  const want = await kustomize('deploy/kubernetes');
  const differ = [...want.keys()].filter((key) => !isDeepStrictEqual(got.get(key), want.get(key)));
  t.same(differ, ['DaemonSet kube-system/ipmasq-agent']);
});

t.test('kubernetes.enabled makes the objects of deploy/overlays/api', async (t) => {
  const got = await template('--set', 'kubernetes.enabled=true');
  sameObjects(t, got, await kustomize('deploy/overlays/api'), 'kustomize deploy/overlays/api');
});

t.test('configFiles with the API make the objects of the pod-policy example', async (t) => {
  // The example's files, as its ConfigMap patch holds them, given to the chart as values.
  const patch = parse(
    readFileSync(join(packageRoot, 'deploy/examples/pod-policy/configmap.yaml'), 'utf8'),
  ) as { op: string; path: string; value: Record<string, string> }[];
  const files = patch.find((op) => op.path === '/data')!.value;
  t.ok(Object.keys(files).length >= 3, 'the example has its files');
  const values = join(home, 'pod-policy.yaml');
  writeFileSync(values, JSON.stringify({ kubernetes: { enabled: true }, configFiles: files }));
  const got = await template('--values', values);
  sameObjects(
    t,
    got,
    await kustomize('deploy/examples/pod-policy'),
    'kustomize deploy/examples/pod-policy',
  );
});

t.test('monitoring makes the PodMonitor and the alert rules as shipped', async (t) => {
  const got = await template(
    '--set',
    'monitoring.podMonitor.enabled=true',
    '--set',
    'monitoring.prometheusRule.enabled=true',
  );
  const shipped = (file: string) => objects(readFileSync(join(packageRoot, file), 'utf8'));
  const want = new Map([
    ...(await kustomize('deploy/kubernetes')),
    ...shipped('deploy/kubernetes/podmonitor.yaml'),
    ...shipped('deploy/monitoring/prometheus-rule.yaml'),
  ]);
  sameObjects(t, got, want, 'deploy/kubernetes with podmonitor.yaml and prometheus-rule.yaml');
});

t.test('configMap.create=false leaves an existing ConfigMap alone', async (t) => {
  const got = await template('--set', 'configMap.create=false');
  t.notOk(got.has('ConfigMap kube-system/ip-masq-agent'), 'no ConfigMap');
  const ds = got.get('DaemonSet kube-system/ipmasq-agent') as unknown as {
    spec: { template: { spec: { volumes: { configMap: { name: string } }[] } } };
  };
  t.equal(ds.spec.template.spec.volumes[0]!.configMap.name, 'ip-masq-agent', 'still mounted');
});
