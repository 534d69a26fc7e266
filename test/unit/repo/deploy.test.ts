// Offline checks of deploy/: the manifests against the Kubernetes API schemas and against the agent's
// own flag parser, and the Dockerfile against the repository layout (no Docker engine runs here).
import t, { type Test } from 'tap';
import { execFile } from 'node:child_process';
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { promisify } from 'node:util';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { DaemonSet, type IDaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { ConfigMap, type IConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { ServiceAccount, type IServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import {
  ClusterRole,
  type IClusterRole,
} from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole';
import {
  ClusterRoleBinding,
  type IClusterRoleBinding,
} from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding';
import { Role, type IRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import {
  RoleBinding,
  type IRoleBinding,
} from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import type { IContainer } from 'kubernetes-models/v1/Container';
import { parseArgs } from '../../../src/cli/flags.js';
import { checkPath } from '../../../src/config/check.js';
import { defaultConfig, parseConfigText } from '../../../src/config/index.js';
import { addonPaths } from '../../../src/kernel/addon.js';
import { EVENTS_NAMESPACE } from '../../../src/kubernetes/events.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const kubeDir = join(root, 'deploy', 'kubernetes');
const namespace = 'kube-system';

type Manifest = Record<string, unknown> & { kind?: unknown };

function readManifests(file: string): Manifest[] {
  const docs = parseAllDocuments(readFileSync(join(kubeDir, file), 'utf8'));
  return docs.map((doc) => {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]!.message}`);
    return doc.toJS() as Manifest;
  });
}

function readOne<T>(file: string, kind: string): T {
  const docs = readManifests(file);
  const found = docs.filter((doc) => doc.kind === kind);
  if (found.length !== 1) throw new Error(`${file}: expected one ${kind}, found ${found.length}`);
  return found[0] as T;
}

// What `kubectl apply` would send the API server for each kind we ship; validate() throws on errors.
const validators: Record<string, (obj: Manifest) => void> = {
  DaemonSet: (obj) => new DaemonSet(obj as unknown as IDaemonSet).validate(),
  ConfigMap: (obj) => new ConfigMap(obj as unknown as IConfigMap).validate(),
  ServiceAccount: (obj) => new ServiceAccount(obj as unknown as IServiceAccount).validate(),
  ClusterRole: (obj) => new ClusterRole(obj as unknown as IClusterRole).validate(),
  ClusterRoleBinding: (obj) =>
    new ClusterRoleBinding(obj as unknown as IClusterRoleBinding).validate(),
  Role: (obj) => new Role(obj as unknown as IRole).validate(),
  RoleBinding: (obj) => new RoleBinding(obj as unknown as IRoleBinding).validate(),
};

function validateManifest(obj: Manifest): void {
  const validate = validators[String(obj.kind)];
  if (!validate) throw new Error(`no schema for kind ${String(obj.kind)}`);
  validate(obj);
}

/** A Kubernetes memory quantity in MiB; only the binary suffixes these manifests use. */
function mebibytes(quantity: string | number | undefined): number {
  const match = /^(\d+)(Mi|Gi)$/.exec(String(quantity));
  if (!match) return Number.NaN;
  return Number(match[1]) * (match[2] === 'Gi' ? 1024 : 1);
}

interface Kustomization {
  namespace?: string;
  resources?: string[];
  images?: Array<{ name?: string; newName?: string; newTag?: string }>;
}

const kustomization = parseYaml(
  readFileSync(join(kubeDir, 'kustomization.yaml'), 'utf8'),
) as Kustomization;
const resources = kustomization.resources ?? [];
const daemonSet = readOne<IDaemonSet>('daemonset.yaml', 'DaemonSet');
const podSpec = daemonSet.spec?.template.spec;
const container: IContainer | undefined = podSpec?.containers[0];
const args = container?.args ?? [];

t.test('every manifest parses and validates against the Kubernetes API schemas', async (t) => {
  t.ok(resources.length > 0, 'kustomization lists resources');
  for (const file of resources) {
    const docs = readManifests(file);
    t.ok(docs.length > 0, `${file} holds a manifest`);
    for (const doc of docs) {
      t.doesNotThrow(() => validateManifest(doc), `${file}: ${String(doc.kind)} is valid`);
    }
  }
});

t.test('the validator rejects broken copies of the DaemonSet', async (t) => {
  const original = readOne<Manifest>('daemonset.yaml', 'DaemonSet');
  t.doesNotThrow(() => validateManifest(structuredClone(original)), 'the unbroken copy passes');

  const withoutContainers = structuredClone(original) as unknown as IDaemonSet;
  delete (withoutContainers.spec!.template.spec as { containers?: unknown }).containers;
  t.throws(() => validateManifest(withoutContainers as unknown as Manifest), /containers/);

  const wrongType = structuredClone(original) as unknown as IDaemonSet;
  (wrongType.spec!.template.spec as { hostNetwork: unknown }).hostNetwork = 'yes';
  t.throws(() => validateManifest(wrongType as unknown as Manifest), /hostNetwork/);

  const portAsString = structuredClone(original) as unknown as IDaemonSet;
  const port = portAsString.spec!.template.spec!.containers[0]!.ports![0]!;
  (port as { containerPort: unknown }).containerPort = '9410';
  t.throws(() => validateManifest(portAsString as unknown as Manifest), /containerPort/);
});

t.test("the container's args are accepted by the agent's own flag parser", async (t) => {
  const parsed = parseArgs(args);
  if (!parsed.ok) return t.fail(`parseArgs rejected ${JSON.stringify(args)}: ${parsed.message}`);
  t.same(parsed.warnings, [], 'no warnings');
  t.equal(parsed.options.mode, 'run', 'runs as a daemon, not a one-shot mode');
  t.equal(parsed.options.masqChain, 'IP-MASQ-AGENT', "upstream's chain name");
});

t.test('probes ask /healthz and /readyz on the port the agent listens on', async (t) => {
  const parsed = parseArgs(args);
  if (!parsed.ok) return t.fail(parsed.message);
  const { host, port } = parsed.options.listen;
  // kubelet probes a hostNetwork pod at the node's address, so the agent must listen on all of them.
  t.ok(host === '0.0.0.0' || host === '::', `listens on every address (${host})`);

  const ports = container?.ports ?? [];
  const resolvePort = (ref: string | number | undefined): number | undefined =>
    typeof ref === 'number' ? ref : ports.find((p) => p.name === ref)?.containerPort;
  const liveness = container?.livenessProbe?.httpGet;
  const readiness = container?.readinessProbe?.httpGet;
  t.equal(liveness?.path, '/healthz');
  t.equal(resolvePort(liveness?.port), port, 'liveness probe port');
  t.equal(readiness?.path, '/readyz');
  t.equal(resolvePort(readiness?.port), port, 'readiness probe port');
  t.equal(resolvePort('metrics'), port, 'the port named metrics');

  const annotations = daemonSet.spec?.template.metadata?.annotations ?? {};
  t.equal(annotations['prometheus.io/scrape'], 'true');
  t.equal(annotations['prometheus.io/port'], String(port));
  t.equal(annotations['prometheus.io/path'], '/metrics');
});

t.test('the ConfigMap is mounted where the agent reads its config', async (t) => {
  const parsed = parseArgs(args);
  if (!parsed.ok) return t.fail(parsed.message);
  const volume = podSpec?.volumes?.find((v) => v.configMap?.name === 'ip-masq-agent');
  if (!volume?.configMap) return t.fail('a volume from the ip-masq-agent ConfigMap');
  t.equal(volume.configMap.optional, true, 'a missing ConfigMap means defaults');
  const item = volume.configMap.items?.find((i) => i.key === 'config');
  const mount = container?.volumeMounts?.find((m) => m.name === volume.name);
  if (!item || !mount) return t.fail('the config key is projected and mounted');
  t.equal(`${mount.mountPath}/${item.path}`, parsed.options.config);
  t.equal(mount.readOnly, true);

  const configMap = readOne<IConfigMap>('configmap.yaml', 'ConfigMap');
  t.equal(configMap.metadata?.name, 'ip-masq-agent', "upstream's ConfigMap name");
  t.ok(configMap.data?.config, 'the ConfigMap has the key the volume projects');
});

t.test("the ConfigMap's config is valid for the agent and spells out its defaults", async (t) => {
  const configMap = readOne<IConfigMap>('configmap.yaml', 'ConfigMap');
  const text = configMap.data?.config ?? '';
  const loadOptions = { enableIPv6: false, nomasqAllReservedRanges: false };
  const result = parseConfigText(text, 'configmap.yaml', loadOptions);
  if (!result.ok) return t.fail(result.error.message);
  // Unknown or misspelt keys are accepted by the agent with a warning, so none is allowed here.
  t.same(result.warnings, [], 'no warnings: only known keys');
  const document = parseYaml(text, { version: '1.1' }) as Record<string, unknown>;
  t.ok(Object.keys(document).length > 0, 'the example sets keys explicitly');
  // Applying the shipped ConfigMap must not change behaviour compared with having none.
  t.equal(result.config.hash, defaultConfig(loadOptions).hash, 'same meaning as the defaults');
});

t.test('the container holds NET_ADMIN and nothing else', async (t) => {
  const security = container?.securityContext;
  t.same(security?.capabilities?.add, ['NET_ADMIN']);
  t.same(security?.capabilities?.drop, ['ALL']);
  t.equal(security?.readOnlyRootFilesystem, true);
  t.equal(security?.allowPrivilegeEscalation, false);
  t.not(security?.privileged, true);
  t.equal(security?.seccompProfile?.type, 'RuntimeDefault');
  t.equal(security?.runAsUser, 0, 'root in the container, so the bounding set applies');
  t.equal(podSpec?.hostNetwork, true, "writes the node's nftables, not the pod's");
  t.equal(podSpec?.dnsPolicy, 'ClusterFirstWithHostNet');
  t.equal(podSpec?.automountServiceAccountToken, false, 'the agent talks to no API server');
  t.equal(podSpec?.priorityClassName, 'system-node-critical');
  t.same(podSpec?.tolerations, [{ operator: 'Exists' }], 'runs on every node');
  t.same(podSpec?.nodeSelector, { 'kubernetes.io/os': 'linux' });
  t.equal(daemonSet.spec?.updateStrategy?.type, 'RollingUpdate');
  t.equal(daemonSet.spec?.updateStrategy?.rollingUpdate?.maxUnavailable, '10%');
  const resources = container?.resources;
  t.ok(mebibytes(resources?.requests?.memory) >= 80, 'memory request covers the ~80 MiB idle RSS');
  // Measured peak at 100 000 CIDRs was 340 MiB; below that the kernel would OOM-kill mid-sync.
  t.ok(mebibytes(resources?.limits?.memory) >= 384, 'memory limit covers the largest configs');
  t.equal(resources?.limits?.cpu, undefined, 'no CPU limit: throttling would stretch large syncs');
  t.ok(resources?.requests?.cpu, 'a CPU request');
});

t.test('names and labels tie the objects together', async (t) => {
  const serviceAccount = readOne<IServiceAccount>('serviceaccount.yaml', 'ServiceAccount');
  t.equal(podSpec?.serviceAccountName, serviceAccount.metadata?.name);
  t.equal(serviceAccount.automountServiceAccountToken, false);
  const selector = daemonSet.spec?.selector.matchLabels ?? {};
  const podLabels = daemonSet.spec?.template.metadata?.labels ?? {};
  t.ok(Object.keys(selector).length > 0, 'the DaemonSet selects by label');
  t.match(podLabels, selector, 'the pod template carries the selector labels');

  const podMonitor = readOne<{
    spec?: {
      selector?: { matchLabels?: Record<string, string> };
      namespaceSelector?: { matchNames?: string[] };
      podMetricsEndpoints?: Array<{ port?: string; path?: string }>;
    };
  }>('podmonitor.yaml', 'PodMonitor');
  t.same(podMonitor.spec?.selector?.matchLabels, selector, 'PodMonitor selects the agent pods');
  t.same(podMonitor.spec?.namespaceSelector?.matchNames, [namespace]);
  const endpoint = podMonitor.spec?.podMetricsEndpoints?.[0];
  t.ok(
    container?.ports?.some((p) => p.name === endpoint?.port),
    'PodMonitor scrapes a named container port',
  );
  t.equal(endpoint?.path, '/metrics');
});

t.test('kustomization lists exactly the manifests that exist', async (t) => {
  // podmonitor.yaml needs the Prometheus operator's CRD, so it is applied separately.
  const optional = ['podmonitor.yaml'];
  const onDisk = readdirSync(kubeDir)
    .filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml' && !optional.includes(f))
    .sort();
  t.same([...resources].sort(), onDisk);
  for (const file of optional) t.ok(existsSync(join(kubeDir, file)), `${file} exists`);
  t.equal(kustomization.namespace, namespace);
  for (const file of [...resources, ...optional]) {
    for (const doc of readManifests(file)) {
      const meta = doc.metadata as { namespace?: string } | undefined;
      t.equal(meta?.namespace, namespace, `${file}: ${String(doc.kind)} namespace`);
    }
  }

  // kustomize rewrites an image only when `images[].name` equals the container's image name.
  const imageName = (container?.image ?? '').replace(/:[^/:]+$/, '');
  const entry = kustomization.images?.find((i) => i.name === imageName);
  t.ok(entry, `an images entry for ${imageName}`);
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
  t.equal(entry?.newTag, pkg.version, 'the image tag is the package version');
  t.equal(container?.image, `${imageName}:${pkg.version}`);
});

interface Instruction {
  keyword: string;
  args: string;
}

/** Dockerfile instructions with continuation lines joined and comments dropped. */
function readDockerfile(path: string): Instruction[] {
  const logical: string[] = [];
  let pending = '';
  for (const raw of readFileSync(path, 'utf8').split('\n')) {
    const line = raw.trim();
    if (line.startsWith('#') || (line === '' && pending === '')) continue;
    if (line.endsWith('\\')) {
      pending += line.slice(0, -1) + ' ';
      continue;
    }
    logical.push(pending + line);
    pending = '';
  }
  return logical
    .filter((l) => l !== '')
    .map((l) => {
      const space = l.search(/\s/);
      return { keyword: l.slice(0, space).toUpperCase(), args: l.slice(space).trim() };
    });
}

const dockerfile = readDockerfile(join(root, 'deploy', 'Dockerfile'));

function stages(): Instruction[][] {
  const result: Instruction[][] = [];
  for (const instruction of dockerfile) {
    if (instruction.keyword === 'FROM') result.push([]);
    result.at(-1)?.push(instruction);
  }
  return result;
}

/** Splits `COPY [--from=x] src... dest` into its flags, sources and destination. */
function copyParts(args: string): { from?: string; sources: string[]; dest: string } {
  const words = args.split(/\s+/);
  const flags = words.filter((w) => w.startsWith('--'));
  const paths = words.filter((w) => !w.startsWith('--'));
  const from = flags.find((f) => f.startsWith('--from='))?.slice('--from='.length);
  return { from, sources: paths.slice(0, -1), dest: paths.at(-1) ?? '' };
}

t.test(
  'the Dockerfile builds on a maintained Node LTS and Debian 13, and runs the agent',
  async (t) => {
    t.notMatch(
      readFileSync(join(root, 'deploy', 'Dockerfile'), 'utf8'),
      /^#\s*syntax=/m,
      'no syntax directive (it makes BuildKit fetch a frontend: offline builds break)',
    );
    const [deps, unit, buildOnly, runtimeRoot, runtime, ...extra] = stages();
    t.same(extra, [], 'five stages');
    t.match(deps?.[0]?.args, /^node:22-trixie\s+AS\s+deps$/i);
    t.match(unit?.[0]?.args, /^deps\s+AS\s+unit$/i, 'the unit suite on the build, apart');
    t.match(buildOnly?.[0]?.args, /^deps\s+AS\s+build$/i);
    t.match(runtimeRoot?.[0]?.args, /^node:22-trixie-slim\s+AS\s+runtime-root$/i);
    t.match(
      (unit ?? [])
        .filter((i) => i.keyword === 'RUN')
        .map((i) => i.args)
        .join('\n'),
      /node --import=tsx "\$f"/,
      'the unit stage runs each unit test file',
    );
    const build = [...(deps ?? []), ...(buildOnly ?? [])];
    for (const stage of [deps, runtimeRoot]) {
      const major = Number(/^node:(\d+)/.exec(stage?.[0]?.args ?? '')?.[1]);
      // Even majors become LTS; 20 reached end of life in April 2026.
      t.ok(major >= 22 && major % 2 === 0, `node ${major} is a maintained LTS line`);
    }
    // The final image is the runtime root copied whole, so what that stage removed takes no layer.
    t.equal(runtime?.[0]?.args, 'scratch');
    const copies = (runtime ?? [])
      .filter((i) => i.keyword === 'COPY')
      .map((i) => copyParts(i.args));
    t.same(copies, [{ from: 'runtime-root', sources: ['/'], dest: '/' }]);

    const buildRuns = (build ?? []).filter((i) => i.keyword === 'RUN').map((i) => i.args);
    const buildText = buildRuns.join('\n');
    t.match(buildText, /apt-get install[^\n]*\blibnftables-dev\b/);
    t.match(buildText, /\bnpm ci\b/);
    t.match(buildText, /node-gyp rebuild/);
    t.match(buildText, /tsc -p tsconfig\.build\.json/);
    t.match(buildText, /npm prune --omit=dev/);
    t.match(buildText, /npm sbom --sbom-format cyclonedx --omit dev > sbom\/npm\.cdx\.json/);

    const runtimeRuns = (runtimeRoot ?? []).filter((i) => i.keyword === 'RUN').map((i) => i.args);
    const installed = runtimeRuns
      .flatMap((r) => [...r.matchAll(/apt-get install ([^&|;]*)/g)])
      .flatMap((m) => (m[1] ?? '').split(/\s+/))
      .filter((w) => w !== '' && !w.startsWith('-'));
    t.same(
      installed,
      ['libnftables1', 'libnetfilter-conntrack3'],
      'the runtime adds only the shared libraries the addon links',
    );
    const removed = runtimeRuns.join('\n');
    for (const path of [
      '/usr/local/lib/node_modules',
      '/usr/local/include/node',
      '/usr/local/bin/npm',
      '/usr/local/bin/corepack',
    ]) {
      t.ok(removed.includes(path), `the runtime root removes ${path}`);
    }

    t.match(
      removed,
      /dpkg-query -W[^\n]*> \/app\/sbom\/debian-packages\.tsv/,
      'the Debian packages listed',
    );
    const labels = (runtime ?? [])
      .filter((i) => i.keyword === 'LABEL')
      .map((i) => i.args)
      .join(' ');
    for (const label of ['source', 'version', 'revision', 'licenses', 'created'])
      t.match(labels, new RegExp(`org\\.opencontainers\\.image\\.${label}=`), `OCI label ${label}`);
    t.match(labels, /org\.opencontainers\.image\.licenses="GPL-2\.0-or-later"/);
    const entrypoint = (runtime ?? []).find((i) => i.keyword === 'ENTRYPOINT');
    t.same(
      JSON.parse(entrypoint?.args ?? 'null'),
      ['/app/bin/ipmasq-launch', 'node', '--disable-sigusr1', '/app/bin/ipmasq-agent.js'],
      'exec-form ENTRYPOINT: the launcher holds signals until the agent handles them; Node never opens its inspector on SIGUSR1',
    );
    t.match(removed, /node --disable-sigusr1 -e/, 'the build fails on a Node without the flag');
    t.match(removed, /ln -s \/app\/bin\/ipmasq-agent\.js \/usr\/local\/bin\/ipmasq-agent/);
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      bin: Record<string, string>;
    };
    t.equal(
      pkg.bin['ipmasq-agent'],
      'bin/ipmasq-agent.js',
      'the symlink target is the package bin',
    );
    t.ok(
      statSync(join(root, 'bin', 'ipmasq-agent.js')).mode & 0o111,
      'the bin script is executable',
    );
  },
);

t.test('everything the Dockerfile copies exists and is not in .dockerignore', async (t) => {
  const ignored = readFileSync(join(root, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  for (const name of ['node_modules', 'build', 'dist', '.git', '.tap', 'bench', 'docs']) {
    t.ok(ignored.includes(name), `.dockerignore excludes ${name}`);
  }
  const sources = dockerfile
    .filter((i) => i.keyword === 'COPY')
    .map((i) => copyParts(i.args))
    .filter((c) => c.from === undefined)
    .flatMap((c) => c.sources.map((s) => s.replace(/\/$/, '')));
  const expected = ['bin', 'package.json', 'package-lock.json', 'binding.gyp', 'native', 'src'];
  for (const name of [...expected, 'tsconfig.json', 'tsconfig.build.json']) {
    t.ok(sources.includes(name), `COPY ${name}`);
  }
  for (const source of sources) {
    t.ok(existsSync(join(root, source)), `${source} exists in the repository`);
    const top = source.split('/')[0];
    t.notOk(ignored.includes(source) || ignored.includes(top ?? ''), `${source} reaches the build`);
  }
});

t.test('the runtime stage copies what the build stage produces', async (t) => {
  const fromBuild = dockerfile
    .filter((i) => i.keyword === 'COPY')
    .map((i) => copyParts(i.args))
    .filter((c) => c.from === 'build')
    .flatMap((c) => c.sources);
  const tsBuild = JSON.parse(readFileSync(join(root, 'tsconfig.build.json'), 'utf8')) as {
    compilerOptions: { outDir: string };
  };
  const gyp = JSON.parse(readFileSync(join(root, 'binding.gyp'), 'utf8')) as {
    targets: Array<{ target_name: string }>;
  };
  const addonFile = `build/Release/${gyp.targets[0]?.target_name}.node`;
  // The addon loader looks for it at this path under the package root (/app in the image).
  t.ok(
    addonPaths.some((p) => p.endsWith(`/${addonFile}`)),
    `the addon loader looks for ${addonFile}`,
  );
  for (const wanted of [
    '/app/package.json',
    '/app/bin/',
    `/app/${tsBuild.compilerOptions.outDir}/`,
    `/app/${addonFile}`,
    '/app/node_modules/',
  ]) {
    t.ok(fromBuild.includes(wanted), `runtime copies ${wanted}`);
  }
});

t.test('the DaemonSet gives the agent its node name from the downward API', async (t) => {
  const env = container?.env?.find((e) => e.name === 'NODE_NAME');
  t.equal(env?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName', 'NODE_NAME from spec.nodeName');
  t.notOk(podSpec?.automountServiceAccountToken, 'and still no API access');
});

t.test('the egress policy example renders and checks as the agent would mount it', async (t) => {
  // kubectl is on this machine image, and so in CI; elsewhere the rendering is not checked.
  const kubectl = ['/usr/bin/kubectl', '/usr/local/bin/kubectl'].find((p) => existsSync(p));
  if (!kubectl) {
    if (process.env.CI === 'true') t.fail('kubectl is needed to render the example');
    else t.comment('no kubectl here: the rendering is not checked');
    return;
  }
  const rendered = await promisify(execFile)(kubectl, [
    'kustomize',
    join(root, 'deploy', 'examples', 'egress-policy'),
  ]);
  const docs = parseAllDocuments(rendered.stdout).map((doc) => doc.toJS() as Manifest);
  for (const doc of docs) validateManifest(doc);
  const dir = mkdtempSync(join(tmpdir(), 'ipmasq-example-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'rendered.yaml');
  writeFileSync(file, rendered.stdout);
  const outcome = await checkPath(
    file,
    { enableIPv6: false, nomasqAllReservedRanges: false, scoping: 'describe' },
    { configMaps: ['kube-system/ip-masq-agent'], named: false },
  );
  t.same(outcome.errors, [], 'valid');
  t.match(outcome.checked.join(), /as a directory of 2 ip-masq\* files/, 'mounted as a directory');
  const egressDaemonSet = docs.find((d) => d.kind === 'DaemonSet') as unknown as IDaemonSet;
  const args = egressDaemonSet.spec?.template.spec?.containers[0]?.args ?? [];
  t.ok(args.includes('--config=/etc/config'), 'the agent reads the directory');
});

t.test(
  'the pod policy example renders, checks, and asks the API for what its policies need',
  async (t) => {
    const docs = await kustomize(t, 'deploy/examples/pod-policy');
    if (!docs) return;
    for (const doc of docs) validateManifest(doc);
    const dir = mkdtempSync(join(tmpdir(), 'ipmasq-example-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'rendered.yaml');
    writeFileSync(file, docs.map((doc) => JSON.stringify(doc)).join('\n---\n'));
    const outcome = await checkPath(
      file,
      { enableIPv6: false, nomasqAllReservedRanges: false, scoping: 'describe' },
      { configMaps: ['kube-system/ip-masq-agent'], named: false },
    );
    t.same(outcome.errors, [], 'valid');
    t.match(
      outcome.checked.join(),
      /as a directory of 3 ip-masq\* files/,
      'mounted as a directory',
    );
    const daemonSet = docs.find((d) => d.kind === 'DaemonSet') as unknown as IDaemonSet;
    const args = daemonSet.spec?.template.spec?.containers[0]?.args ?? [];
    t.ok(args.includes('--kubernetes'), 'pod policies need the API');
    t.ok(args.includes('--config=/etc/config'), 'the agent reads the directory');
    const role = docs.find((d) => d.kind === 'ClusterRole') as unknown as IClusterRole;
    const granted = (resource: string) =>
      role.rules?.find((r) => r.resources?.includes(resource))?.verbs ?? [];
    t.same([...granted('pods')].sort(), ['list', 'watch']);
    t.same([...granted('namespaces')].sort(), ['list', 'watch']);
  },
);

/** `kubectl kustomize DIR`, parsed; undefined where no kubectl is installed (a failure under CI). */
async function kustomize(t: Test, dir: string): Promise<Manifest[] | undefined> {
  const kubectl = ['/usr/bin/kubectl', '/usr/local/bin/kubectl'].find((p) => existsSync(p));
  if (!kubectl) {
    if (process.env.CI === 'true') t.fail('kubectl is needed to render the overlays');
    else t.comment('no kubectl here: the rendering is not checked');
    return undefined;
  }
  const rendered = await promisify(execFile)(kubectl, ['kustomize', join(root, dir)]);
  return parseAllDocuments(rendered.stdout).map((doc) => doc.toJS() as Manifest);
}

t.test(
  'the base renders without any API access; the api overlay with exactly its RBAC',
  async (t) => {
    const base = await kustomize(t, 'deploy/kubernetes');
    const api = await kustomize(t, 'deploy/overlays/api');
    if (!base || !api) return;
    for (const doc of [...base, ...api]) validateManifest(doc);
    const kinds = (docs: Manifest[]) => docs.map((d) => String(d.kind)).sort();
    t.same(kinds(base), ['ConfigMap', 'DaemonSet', 'ServiceAccount']);
    t.same(kinds(api), [
      'ClusterRole',
      'ClusterRoleBinding',
      'ConfigMap',
      'DaemonSet',
      'Role',
      'RoleBinding',
      'ServiceAccount',
    ]);
    const podOf = (docs: Manifest[]) =>
      (docs.find((d) => d.kind === 'DaemonSet') as unknown as IDaemonSet).spec!.template.spec!;
    t.equal(podOf(base).automountServiceAccountToken, false, 'base: no token in the pod');
    t.notOk(podOf(base).containers[0]!.args?.includes('--kubernetes'));

    const pod = podOf(api);
    t.equal(pod.automountServiceAccountToken, true, 'api: the token is mounted');
    const apiArgs = pod.containers[0]!.args ?? [];
    t.ok(apiArgs.includes('--kubernetes'));
    const env = pod.containers[0]!.env?.find((e) => e.name === 'NODE_NAME');
    t.equal(
      env?.valueFrom?.fieldRef?.fieldPath,
      'spec.nodeName',
      'NODE_NAME from the downward API',
    );
    const parsed = parseArgs(apiArgs, { NODE_NAME: 'node-1' });
    t.ok(parsed.ok && parsed.options.kubernetes, "the agent's own parser takes the args");

    const role = api.find((d) => d.kind === 'ClusterRole') as unknown as IClusterRole;
    t.same(
      role.rules?.map((r) => [r.apiGroups, r.resources, [...(r.verbs ?? [])].sort()]),
      [
        [[''], ['nodes'], ['get', 'list', 'watch']],
        [[''], ['pods'], ['list', 'watch']],
        [[''], ['namespaces'], ['list', 'watch']],
      ],
      'cluster-wide: exactly get/list/watch on nodes, list/watch on pods (--flows, pod policies) and on namespaces (namespaceSelector)',
    );
    // Events are written in one namespace (src/kubernetes/events.ts): granted there alone.
    const events = api.find((d) => d.kind === 'Role') as unknown as IRole;
    t.equal(events.metadata?.namespace, EVENTS_NAMESPACE);
    t.same(
      events.rules?.map((r) => [r.apiGroups, r.resources, [...(r.verbs ?? [])].sort()]),
      [[[''], ['events'], ['create', 'patch']]],
      'in that namespace: exactly create/patch on events',
    );
    const eventsBinding = api.find((d) => d.kind === 'RoleBinding') as unknown as IRoleBinding;
    t.equal(eventsBinding.metadata?.namespace, EVENTS_NAMESPACE);
    t.same(eventsBinding.roleRef, {
      apiGroup: 'rbac.authorization.k8s.io',
      kind: 'Role',
      name: events.metadata?.name,
    });
    const binding = api.find(
      (d) => d.kind === 'ClusterRoleBinding',
    ) as unknown as IClusterRoleBinding;
    const account = api.find((d) => d.kind === 'ServiceAccount') as unknown as IServiceAccount;
    t.same(binding.roleRef, {
      apiGroup: 'rbac.authorization.k8s.io',
      kind: 'ClusterRole',
      name: role.metadata?.name,
    });
    for (const subjects of [binding.subjects, eventsBinding.subjects]) {
      t.same(subjects, [
        {
          kind: 'ServiceAccount',
          name: account.metadata?.name,
          namespace: account.metadata?.namespace,
        },
      ]);
    }
    t.equal(pod.serviceAccountName, account.metadata?.name, 'the pod runs as the bound account');
  },
);
