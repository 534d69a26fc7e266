// The shipped manifests on a real node (scripts/node.sh; docs/development.md, "A real node"): the
// DaemonSet's pod started, probed and fed by a real kubelet and containerd, its table in the node's
// network namespace, and a pod the CNI made sending real packets to a remote that says which
// source it saw. `kubectl apply -k deploy/kubernetes` unchanged; a ConfigMap edit through the
// kubelet's own volume update to the kernel, timed; then the API overlay, where an invalid
// ConfigMap keeps the pod Running but not Ready, the kernel on the last good config, and an Event
// on the Node says why. Beside it kube-proxy (nftables mode) as a busy neighbour, and a second agent
// whose short-lived projected token the kubelet renews. The image is deploy/Dockerfile's, built
// from the checkout (scripts/node.sh).
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { waitFor } from '../../harness/agent.js';
import { inNetns, packageRoot, requireRoot } from '../../harness/netns.js';
import { NODE_ECHO_PORT, startRealNode, type RealNode } from '../../harness/real-node.js';

t.setTimeout(1_800_000);

interface Pod {
  metadata: { name: string; uid: string };
  spec: { nodeName?: string };
  status: {
    phase?: string;
    podIP?: string;
    conditions?: { type: string; status: string }[];
    containerStatuses?: { ready: boolean; restartCount: number }[];
  };
}

const ready = (pod: Pod) =>
  pod.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

/** The shipped ConfigMap's config with `extra` CIDRs, or `text` as it is. */
function configMap(text: string): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: 'ip-masq-agent',
      namespace: 'kube-system',
      labels: { 'app.kubernetes.io/name': 'ipmasq-agent' },
    },
    data: { config: text },
  });
}
const config = (cidrs: string[]) =>
  `nonMasqueradeCIDRs: [${cidrs.join(', ')}]\nmasqLinkLocal: false\nresyncInterval: 60s\n`;
const SHIPPED = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'];

async function agentPod(node: RealNode): Promise<Pod> {
  const pods = await node.json<{ items: Pod[] }>([
    '-n',
    'kube-system',
    'get',
    'pods',
    '-l',
    'app.kubernetes.io/name=ipmasq-agent',
  ]);
  const running = pods.items.filter((p) => p.status.phase === 'Running');
  if (running.length !== 1) throw new Error(`${running.length} agent pods running`);
  return running[0]!;
}

/** Waits until the DaemonSet's rollout is done. */
async function rolledOut(node: RealNode): Promise<void> {
  await node.kubectl([
    '-n',
    'kube-system',
    'rollout',
    'status',
    'daemonset/ipmasq-agent',
    '--timeout=180s',
  ]);
}

/** Waits until the agent's pod is Ready (again). */
async function untilAgentReady(node: RealNode): Promise<void> {
  await waitFor(
    'the agent Ready',
    async () => (ready(await agentPod(node)) ? true : undefined),
    180_000,
    200,
  );
}

/**
 * The node process of `pod`'s agent, seen from here (the containers share this machine's PID
 * space): the one whose cgroup is the pod's (a second agent runs beside it in this suite).
 */
async function agentProcess(node: RealNode, pod: Pod): Promise<string> {
  // node as the image's launcher starts it (the launcher's own command line names node second).
  const listed = await node.inNode('pgrep', ['-f', '^\\S*node .*/app/bin/ipmasq-agent\\.js']);
  const pid = listed
    .trim()
    .split('\n')
    .find((p) => {
      try {
        return readFileSync(`/proc/${p}/cgroup`, 'utf8').includes(pod.metadata.uid);
      } catch {
        return false;
      }
    });
  if (!pid) throw new Error(`no agent process in pod ${pod.metadata.name}`);
  return pid;
}

async function nonmasq(node: RealNode): Promise<string> {
  return node.inNode('nft', ['list', 'set', 'ip', 'ipmasq', 'nonmasq']);
}

if (requireRoot(t)) {
  const node = await startRealNode(t);
  const { env } = node;
  /** The agent's config file as the kubelet's atomic writer keeps it in `pod`'s volume. */
  const configVolume = (pod: Pod) =>
    join(
      node.dir,
      'kubelet',
      'root',
      'pods',
      pod.metadata.uid,
      'volumes',
      'kubernetes.io~configmap',
      'config',
      'ip-masq-agent',
    );

  t.test('the shipped DaemonSet runs Ready through the kubelet', async (t) => {
    await node.kubectl(['apply', '-k', join(packageRoot, 'deploy', 'kubernetes')]);
    await rolledOut(node);
    const pod = await agentPod(node);
    t.ok(ready(pod), 'Ready by its readiness probe');
    t.equal(pod.spec.nodeName, env.NODE_NAME);
    t.equal(pod.status.containerStatuses?.[0]?.restartCount, 0, 'never restarted');
    t.match(await node.inNode('nft', ['list', 'tables']), /table ip ipmasq/, "in the node's netns");
    const metrics = await node.inNode('curl', ['-sf', `http://${env.NODE_IP}:9410/metrics`]);
    t.match(metrics, /^ipmasq_config_valid 1$/m, "/metrics on the node's address");
  });

  // A second agent, the shipped image with the API overlay's pod, whose projected token lasts the
  // 10 minutes the API allows at least: the DaemonSet's own lasts an hour, renewed by the kubelet
  // after 80 % of it. In a network namespace of its own (its tables are its pod's), with a
  // ServiceAccount, role and ConfigMap of its own that nothing else in this suite touches. Started
  // here; its rotation is checked last, its /metrics sampled throughout.
  const follower = {
    ip: '',
    uid: '',
    token: '',
    samples: 0,
    notUp: 0,
    sampling: true,
    sampler: Promise.resolve(),
    authFailures: 0,
  };
  const TOKEN_SECONDS = 600;
  const claims = (token: string) =>
    JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as {
      iat: number;
      exp: number;
    };
  const followerToken = () =>
    readFileSync(
      join(
        node.dir,
        'kubelet',
        'root',
        'pods',
        follower.uid,
        'volumes',
        'kubernetes.io~projected',
        'token',
        'token',
      ),
      'utf8',
    );
  /**
   * The API server's count of requests whose credential it did not take: "failure" (none it knows)
   * and "error" (a token it could not accept: an expired one among them).
   */
  const authFailures = async () => {
    const metrics = await node.kubectl(['get', '--raw', '/metrics']);
    let refused = 0;
    for (const [, result, count] of metrics.matchAll(
      /^authentication_attempts\{result="(\w+)"\} (\d+)$/gm,
    ))
      if (result !== 'success') refused += Number(count);
    return refused;
  };

  t.test('a second agent whose projected token lasts 10 minutes starts', async (t) => {
    const rbac = parseAllDocuments(
      readFileSync(join(packageRoot, 'deploy', 'overlays', 'api', 'rbac.yaml'), 'utf8'),
    ).map((doc) => {
      const object = doc.toJS() as {
        metadata: { name: string; labels?: unknown };
        roleRef?: { name: string };
        subjects?: { name: string }[];
      };
      const renamed = (name: string) => name.replace('ipmasq-agent', 'token-follower');
      object.metadata.name = renamed(object.metadata.name);
      delete object.metadata.labels;
      if (object.roleRef) object.roleRef.name = renamed(object.roleRef.name);
      for (const subject of object.subjects ?? []) subject.name = 'token-follower';
      return object;
    });
    const rendered = parseAllDocuments(
      await node.kubectl(['kustomize', join(packageRoot, 'deploy', 'overlays', 'api')]),
    ).map(
      (doc) =>
        doc.toJS() as { kind: string; spec: { template: { spec: Record<string, unknown> } } },
    );
    const template = rendered.find((o) => o.kind === 'DaemonSet')!.spec.template.spec as {
      containers: { volumeMounts: unknown[] }[];
      volumes: { name: string; configMap?: { name: string } }[];
      [key: string]: unknown;
    };
    template.volumes.find((v) => v.name === 'config')!.configMap!.name = 'token-follower';
    template.volumes.push({
      name: 'token',
      projected: {
        sources: [
          { serviceAccountToken: { path: 'token', expirationSeconds: TOKEN_SECONDS } },
          { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
          {
            downwardAPI: {
              items: [{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace' } }],
            },
          },
        ],
      },
    } as never);
    template.containers[0]!.volumeMounts.push({
      name: 'token',
      mountPath: '/var/run/secrets/kubernetes.io/serviceaccount',
      readOnly: true,
    });
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: 'token-follower',
        namespace: 'kube-system',
        labels: { app: 'token-follower' },
      },
      spec: {
        ...template,
        serviceAccountName: 'token-follower',
        automountServiceAccountToken: false,
        hostNetwork: false,
        dnsPolicy: 'Default',
      },
    };
    const objects = [
      ...rbac,
      {
        apiVersion: 'v1',
        kind: 'ServiceAccount',
        metadata: { name: 'token-follower', namespace: 'kube-system' },
      },
      {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'token-follower', namespace: 'kube-system' },
        data: { config: config(SHIPPED) },
      },
      pod,
    ];
    await node.kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }),
    );
    await node.kubectl([
      '-n',
      'kube-system',
      'wait',
      'pod/token-follower',
      '--for=condition=Ready',
      '--timeout=180s',
    ]);
    const started = await node.json<Pod>(['-n', 'kube-system', 'get', 'pod', 'token-follower']);
    follower.ip = started.status.podIP!;
    follower.uid = started.metadata.uid;
    follower.token = followerToken();
    const { iat, exp } = claims(follower.token);
    t.equal(exp - iat, TOKEN_SECONDS, 'its token lasts 10 minutes');
    follower.authFailures = await authFailures();
    const metrics = () =>
      node.inNode('curl', ['-sf', '--max-time', '2', `http://${follower.ip}:9410/metrics`]);
    await waitFor(
      'its watches up',
      async () =>
        /^ipmasq_kubernetes_up 1$/m.test(await metrics().catch(() => '')) ? true : undefined,
      60_000,
      200,
    );
    t.pass('Ready, its watches of the API server up');
    follower.sampler = (async () => {
      while (follower.sampling) {
        const text = await metrics().catch(() => '');
        follower.samples++;
        if (!/^ipmasq_kubernetes_up 1$/m.test(text)) follower.notUp++;
        await new Promise((r) => setTimeout(r, 2_000));
      }
    })();
  });

  let podNetns = '';
  let podIP = '';
  t.test("a pod's new flows leave as the config says", async (t) => {
    await node.kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'workload', namespace: 'default' },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [
            { name: 'pause', image: 'registry.k8s.io/pause:3.10', imagePullPolicy: 'Never' },
          ],
        },
      }),
    );
    await node.kubectl(['wait', 'pod/workload', '--for=condition=Ready', '--timeout=120s']);
    const pod = await node.json<Pod>(['get', 'pod', 'workload']);
    podIP = pod.status.podIP!;
    t.match(podIP, /^10\.244\.0\./, "an address from the Node's pod CIDR");
    podNetns = await node.podNetns(podIP);
    const seen = await node.sources(podNetns, [env.REMOTE_MASQ_IP!, env.REMOTE_IP!]);
    t.equal(seen.get(env.REMOTE_MASQ_IP!), env.NODE_IP, `to ${env.REMOTE_MASQ_IP}: masqueraded`);
    t.equal(seen.get(env.REMOTE_IP!), podIP, `to ${env.REMOTE_IP} (192.168/16): the pod's own`);
  });

  t.test("a ConfigMap edit reaches the kernel through the kubelet's volume", async (t) => {
    const volume = configVolume(await agentPod(node));
    t.notMatch(readFileSync(volume, 'utf8'), /198\.18\.0\.0\/15/);
    const applied = Date.now();
    await node.kubectl(['apply', '-f', '-'], configMap(config([...SHIPPED, '198.18.0.0/15'])));
    const inVolume = await waitFor(
      'the kubelet to update the volume',
      () => (/198\.18\.0\.0\/15/.test(readFileSync(volume, 'utf8')) ? Date.now() : undefined),
      120_000,
      10,
    );
    const inKernel = await waitFor(
      'the kernel to hold it',
      async () => (/198\.18\.0\.0\/15/.test(await nonmasq(node)) ? Date.now() : undefined),
      120_000,
      10,
    );
    t.comment(
      `apply → volume ${inVolume - applied} ms (the kubelet's part); volume → kernel ${inKernel - inVolume} ms (the agent's)`,
    );
    t.ok(inKernel - inVolume <= 1_000, 'the agent wrote it within 1 s of the volume changing');
    const seen = await node.sources(podNetns, [env.REMOTE_MASQ_IP!]);
    t.equal(seen.get(env.REMOTE_MASQ_IP!), podIP, 'the pod now keeps its address there');
  });

  /** A UDP Service without a selector and its EndpointSlice: `port` on it to `address`:`port`. */
  const service = (name: string, port: number, address: string) => ({
    apiVersion: 'v1',
    kind: 'List',
    items: [
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name, namespace: 'churn' },
        spec: { ports: [{ name: 'udp', protocol: 'UDP', port, targetPort: port }] },
      },
      {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name, namespace: 'churn', labels: { 'kubernetes.io/service-name': name } },
        addressType: 'IPv4',
        endpoints: [{ addresses: [address], conditions: { ready: true } }],
        ports: [{ name: 'udp', protocol: 'UDP', port }],
      },
    ],
  });

  t.test(
    'kube-proxy as the busy neighbour: Services changed every second, the agent ready and prompt',
    async (t) => {
      // kube-proxy (nftables mode) runs beside the agent in the node's namespace (scripts/node.sh):
      // every Service or EndpointSlice change is a commit of its table.
      await node.kubectl(['create', 'namespace', 'churn']);
      const NODE_IP = env.NODE_IP!;
      const REMOTE_IP = env.REMOTE_IP!;
      const REMOTE_MASQ_IP = env.REMOTE_MASQ_IP!;
      await node.kubectl(
        ['apply', '-f', '-'],
        JSON.stringify(service('echo', NODE_ECHO_PORT, REMOTE_IP)),
      );
      await node.kubectl(
        ['apply', '-f', '-'],
        JSON.stringify(service('echo-masq', NODE_ECHO_PORT, REMOTE_MASQ_IP)),
      );
      const syncs = async () =>
        Number(
          /^kubeproxy_sync_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} (\d+)$/m.exec(
            await node.inNode('curl', ['-sf', 'http://127.0.0.1:10249/metrics']),
          )?.[1] ?? NaN,
        );
      const syncsBefore = await syncs();
      // The churn: each second one of five Services gets a new port, its EndpointSlice with it.
      let churning = true;
      let changes = 0;
      const churn = (async () => {
        for (let i = 0; churning; i++) {
          const started = Date.now();
          await node.kubectl(
            ['apply', '-f', '-'],
            JSON.stringify(service(`churn-${i % 5}`, 20_000 + i, REMOTE_IP)),
          );
          changes++;
          await new Promise((r) => setTimeout(r, Math.max(0, 1_000 - (Date.now() - started))));
        }
      })();
      // /readyz as the kubelet asks it, four times a second, throughout.
      const answers = new Map<string, number>();
      let probing = true;
      const prober = (async () => {
        while (probing) {
          const code = await node
            .inNode('curl', [
              '-s',
              '-o',
              '/dev/null',
              '-w',
              '%{http_code}',
              '--max-time',
              '2',
              `http://${NODE_IP}:9410/readyz`,
            ])
            .catch(() => 'none');
          answers.set(code, (answers.get(code) ?? 0) + 1);
          await new Promise((r) => setTimeout(r, 250));
        }
      })();
      const started = Date.now();
      const volume = configVolume(await agentPod(node));
      // Edits through the kubelet's volume, each timed from the volume's change to the kernel.
      const edits: [string, string[], RegExp, boolean][] = [
        ['198.18.0.0/15 removed', SHIPPED, /198\.18\.0\.0\/15/, false],
        ['198.51.100.0/24 added', [...SHIPPED, '198.51.100.0/24'], /198\.51\.100\.0\/24/, true],
        ['198.51.100.0/24 removed', SHIPPED, /198\.51\.100\.0\/24/, false],
      ];
      const agentParts: number[] = [];
      for (const [what, cidrs, pattern, present] of edits) {
        await node.kubectl(['apply', '-f', '-'], configMap(config(cidrs)));
        const inVolume = await waitFor(
          `the volume with ${what}`,
          () => (pattern.test(readFileSync(volume, 'utf8')) === present ? Date.now() : undefined),
          120_000,
          10,
        );
        const inKernel = await waitFor(
          `the kernel with ${what}`,
          async () => (pattern.test(await nonmasq(node)) === present ? Date.now() : undefined),
          120_000,
          10,
        );
        agentParts.push(inKernel - inVolume);
        t.ok(
          inKernel - inVolume <= 1_000,
          `${what}: in the kernel ${inKernel - inVolume} ms after the volume`,
        );
      }
      // At least half a minute of churn.
      await waitFor(
        '30 s of churn',
        () => (Date.now() - started >= 30_000 ? true : undefined),
        60_000,
        200,
      );
      churning = false;
      await churn;
      probing = false;
      await prober;
      const commits = (await syncs()) - syncsBefore;
      const seconds = Math.round((Date.now() - started) / 1000);
      t.comment(
        `${changes} Service changes in ${seconds} s, ${commits} kube-proxy syncs; /readyz ${JSON.stringify(Object.fromEntries(answers))}; volume → kernel ${agentParts.join(', ')} ms`,
      );
      t.ok(commits >= seconds / 3, `kube-proxy committed throughout (${commits} syncs)`);
      t.same(
        [...answers.keys()],
        ['200'],
        `/readyz 200 in every one of ${[...answers.values()].reduce((a, b) => a + b, 0)} probes`,
      );
      t.ok(ready(await agentPod(node)), 'the pod Ready by the kubelet');

      // kube-proxy's own rules as its Services say, and working beside ours: a pod's new flows to
      // the echo Services' cluster addresses reach the remote, as itself to 192.168.77.2 and
      // masqueraded to 198.18.0.2 (the agent decides on the address kube-proxy translated to).
      const services = await node.json<{
        items: {
          metadata: { name: string };
          spec: { clusterIP: string; ports: { port: number }[] };
        }[];
      }>(['-n', 'churn', 'get', 'services']);
      const map = await node.inNode('nft', ['list', 'map', 'ip', 'kube-proxy', 'service-ips']);
      for (const item of services.items) {
        const element = `${item.spec.clusterIP} . udp . ${item.spec.ports[0]!.port}`;
        t.ok(map.includes(element), `kube-proxy's map holds ${item.metadata.name} as ${element}`);
      }
      const clusterIP = (name: string) =>
        services.items.find((s) => s.metadata.name === name)!.spec.clusterIP;
      const seen = await node.sources(podNetns, [clusterIP('echo'), clusterIP('echo-masq')]);
      t.equal(
        seen.get(clusterIP('echo')),
        podIP,
        `through the Service to ${REMOTE_IP}: the pod's own`,
      );
      t.equal(
        seen.get(clusterIP('echo-masq')),
        NODE_IP,
        `through the Service to ${REMOTE_MASQ_IP}: masqueraded`,
      );

      // kube-proxy masquerades what it marked and the hairpin connections it redirected: neither is
      // traffic the agent leaves alone, so neither is reported, and --explain --live says so.
      const metrics = await node.inNode('curl', ['-sf', `http://${NODE_IP}:9410/metrics`]);
      t.notMatch(
        metrics,
        /^ipmasq_other_nat_rules\{table="ip kube-proxy"/m,
        'no other-NAT finding for kube-proxy',
      );
      const explained = JSON.parse(
        await node.kubectl([
          '-n',
          'kube-system',
          'exec',
          'daemonset/ipmasq-agent',
          '--',
          'ipmasq-agent',
          '--explain',
          REMOTE_IP,
          REMOTE_MASQ_IP,
          '--live',
          '--from',
          podIP,
          '--output',
          'json',
        ]),
      ) as {
        live: { answers: { masqueraded: boolean | null; otherNat?: unknown[]; text: string }[] };
      };
      const [toRemote, toMasq] = explained.live.answers;
      t.equal(
        toRemote?.masqueraded,
        false,
        `--explain --live: ${REMOTE_IP} left alone (${toRemote?.text})`,
      );
      t.same(
        toRemote?.otherNat,
        [],
        "and no other NAT names it: kube-proxy's masquerade is not for it",
      );
      t.equal(
        toMasq?.masqueraded,
        true,
        `--explain --live: ${REMOTE_MASQ_IP} masqueraded (${toMasq?.text})`,
      );
      await node.kubectl(['delete', 'namespace', 'churn', '--wait']);
    },
  );

  t.test('with the API overlay, an invalid ConfigMap: Running, not Ready, an Event', async (t) => {
    await node.kubectl(['apply', '-k', join(packageRoot, 'deploy', 'overlays', 'api')]);
    await rolledOut(node);
    // The overlay's ConfigMap is the shipped one again.
    await waitFor(
      'the shipped config in the kernel',
      async () => (/198\.18\.0\.0\/15/.test(await nonmasq(node)) ? undefined : true),
      120_000,
      50,
    );
    const before = await agentPod(node);
    t.ok(ready(before), 'Ready');
    await node.kubectl(['apply', '-f', '-'], configMap('nonMasqueradeCIDRs: [not-a-cidr]\n'));
    await waitFor(
      'the pod not Ready',
      async () => (ready(await agentPod(node)) ? undefined : true),
      180_000,
      200,
    );
    const pod = await agentPod(node);
    t.equal(pod.status.phase, 'Running', 'still Running');
    t.equal(pod.metadata.uid, before.metadata.uid, 'the same pod');
    t.equal(pod.status.containerStatuses?.[0]?.restartCount, 0, 'never restarted');
    t.match(await nonmasq(node), /192\.168\.0\.0\/16/, 'the kernel keeps the last good config');
    const events = await waitFor(
      'an Event on the Node',
      async () => {
        const list = await node.json<{
          items: { reason: string; message: string; involvedObject: { kind: string } }[];
        }>(['-n', 'default', 'get', 'events', '--field-selector', 'reason=ConfigInvalid']);
        return list.items.length > 0 ? list.items : undefined;
      },
      60_000,
      500,
    );
    t.equal(events[0]!.involvedObject.kind, 'Node');
    t.match(events[0]!.message, /not-a-cidr/, 'it says why');
    await node.kubectl(['apply', '-f', '-'], configMap(config(SHIPPED)));
    await untilAgentReady(node);
    t.pass('Ready again once the ConfigMap is valid');
  });

  t.test(
    "Prometheus finds the agent's pod through the API, scrapes it, and the config alert fires",
    async (t) => {
      // A Prometheus server in the node's namespace (scripts/node.sh builds it: Debian's has no
      // Kubernetes discovery): the pod role of kubernetes_sd through the real API server, kept by
      // the pod's prometheus.io annotations (as the manifests set them), and the shipped
      // PrometheusRule's groups as its rule file.
      const dir = join(node.dir, 'prometheus');
      mkdirSync(dir, { recursive: true });
      const rule = parse(
        readFileSync(join(packageRoot, 'deploy', 'monitoring', 'prometheus-rule.yaml'), 'utf8'),
      ) as { spec: { groups: unknown[] } };
      writeFileSync(join(dir, 'rules.yaml'), stringify({ groups: rule.spec.groups }));
      const scrapeConfig = {
        global: { scrape_interval: '2s', evaluation_interval: '2s' },
        rule_files: [join(dir, 'rules.yaml')],
        scrape_configs: [
          {
            job_name: 'kubernetes-pods',
            kubernetes_sd_configs: [{ role: 'pod', kubeconfig_file: env.KUBECONFIG }],
            relabel_configs: [
              {
                source_labels: ['__meta_kubernetes_pod_annotation_prometheus_io_scrape'],
                action: 'keep',
                regex: 'true',
              },
              {
                source_labels: [
                  '__meta_kubernetes_pod_ip',
                  '__meta_kubernetes_pod_annotation_prometheus_io_port',
                ],
                regex: '(.+);(\\d+)',
                replacement: '$1:$2',
                target_label: '__address__',
              },
              {
                source_labels: ['__meta_kubernetes_pod_annotation_prometheus_io_path'],
                regex: '(.+)',
                target_label: '__metrics_path__',
              },
              { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'pod' },
            ],
          },
        ],
      };
      writeFileSync(join(dir, 'prometheus.yml'), stringify(scrapeConfig));
      const listen = '127.0.0.1:19090';
      const server = spawn('ip', [
        'netns',
        'exec',
        env.NODE_NETNS!,
        env.PROMETHEUS!,
        `--config.file=${join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dir, 'data')}`,
        `--web.listen-address=${listen}`,
      ]);
      const output: string[] = [];
      server.stderr.on('data', (chunk: Buffer) => output.push(chunk.toString()));
      t.teardown(() => server.kill('SIGKILL'));
      let exited = false;
      server.once('exit', () => (exited = true));
      const api = async <T>(path: string) => {
        const body = await node.inNode('curl', ['-sf', `http://${listen}/api/v1/${path}`]);
        return (JSON.parse(body) as { data: T }).data;
      };
      const target = await waitFor(
        "the agent's pod a healthy target",
        async () => {
          if (exited) throw new Error('prometheus exited');
          const { activeTargets } = await api<{
            activeTargets: { labels: { pod?: string }; health: string; scrapeUrl: string }[];
          }>('targets?state=active').catch(() => ({ activeTargets: [] }));
          return activeTargets.find(
            (a) => a.labels.pod?.startsWith('ipmasq-agent-') && a.health === 'up',
          );
        },
        120_000,
        500,
      ).catch((err: Error) => {
        t.comment(output.join('').slice(-2000));
        throw err;
      });
      t.equal(
        target.scrapeUrl,
        `http://${env.NODE_IP}:9410/metrics`,
        "scraped on the node's address, as the annotations say",
      );
      type Alert = { labels: { alertname: string }; state: string; activeAt: string };
      const configAlert = async () =>
        (await api<{ alerts: Alert[] }>('alerts')).alerts.find(
          (a) => a.labels.alertname === 'IpMasqAgentConfigInvalid',
        );
      const groups = await api<{ groups: { rules: unknown[] }[] }>('rules');
      t.equal(
        groups.groups.reduce((n, g) => n + g.rules.length, 0),
        11,
        'the shipped rules loaded',
      );
      t.equal(await configAlert(), undefined, 'the config alert quiet while the config is valid');

      // The rule waits 5 minutes of an invalid config before it fires: this subtest waits too.
      await node.kubectl(['apply', '-f', '-'], configMap('nonMasqueradeCIDRs: [not-a-cidr]\n'));
      const pending = await waitFor(
        'the config alert pending',
        async () => ((await configAlert())?.state === 'pending' ? Date.now() : undefined),
        120_000,
        500,
      );
      const firing = await waitFor(
        'the config alert firing',
        async () => ((await configAlert())?.state === 'firing' ? Date.now() : undefined),
        600_000,
        2_000,
      );
      t.comment(`pending → firing: ${Math.round((firing - pending) / 1000)} s (its for: 5m)`);
      t.pass('the invalid ConfigMap drove IpMasqAgentConfigInvalid to firing');
      await node.kubectl(['apply', '-f', '-'], configMap(config(SHIPPED)));
      await waitFor(
        'the alert resolved',
        async () => ((await configAlert()) === undefined ? true : undefined),
        120_000,
        500,
      );
      await untilAgentReady(node);
      t.pass('resolved, and the agent Ready again, once the ConfigMap is valid');
    },
  );

  /** The mark of our table's current write (docs/writes.md): unchanged when a new agent adopts it. */
  const mark = async () =>
    /comment "(ipmasq-agent generation [^"]+)"/.exec(
      await node.inNode('nft', ['list', 'chain', 'ip', 'ipmasq', 'postrouting']),
    )?.[1];

  /**
   * New flows from the workload pod, two at a time, until `until` settles: how many were decided
   * otherwise than the config says (masqueraded to REMOTE_MASQ_IP, not to REMOTE_IP).
   */
  async function probeWhile(until: Promise<unknown>): Promise<{ flows: number; wrong: number }> {
    let done = false;
    void until.finally(() => (done = true));
    let flows = 0;
    let wrong = 0;
    while (!done) {
      const seen = await node.sources(podNetns, [env.REMOTE_MASQ_IP!, env.REMOTE_IP!]);
      flows += 2;
      if (seen.get(env.REMOTE_MASQ_IP!) !== env.NODE_IP) wrong++;
      if (seen.get(env.REMOTE_IP!) !== podIP) wrong++;
    }
    await until;
    return { flows, wrong };
  }

  t.test(
    'kubectl delete pod: the new agent adopts the table, packets right throughout',
    async (t) => {
      const before = await agentPod(node);
      const held = await mark();
      t.ok(held, `our table carries its mark (${held})`);
      const replaced = (async () => {
        await node.kubectl(['-n', 'kube-system', 'delete', 'pod', before.metadata.name, '--wait']);
        await waitFor(
          'a new agent Ready',
          async () => {
            const pod = await agentPod(node).catch(() => undefined);
            return pod && pod.metadata.uid !== before.metadata.uid && ready(pod) ? pod : undefined;
          },
          180_000,
          200,
        );
      })();
      const { flows, wrong } = await probeWhile(replaced);
      t.ok(flows >= 4, `${flows} new flows while the agent was replaced`);
      t.equal(wrong, 0, 'none decided otherwise than the config says');
      t.equal(await mark(), held, 'the same write in the kernel: adopted, not written again');
      const logs = await node.kubectl(['-n', 'kube-system', 'logs', 'daemonset/ipmasq-agent']);
      t.notMatch(logs, /ruleset written to the kernel/, 'the new agent wrote nothing');
    },
  );

  /**
   * `change` and the rollout it starts, with the workload opening new flows throughout: a new pod,
   * Ready, no flow decided wrongly, and the table adopted (the same write's mark).
   */
  async function rollsOver(t: Test, what: string, change: () => Promise<unknown>) {
    const before = await agentPod(node);
    const held = await mark();
    const done = (async () => {
      await change();
      await rolledOut(node);
    })();
    const { flows, wrong } = await probeWhile(done);
    const after = await agentPod(node);
    t.not(after.metadata.uid, before.metadata.uid, `${what} replaced the pod`);
    // Ready by the kubelet's probe (with both cores held, once seen not Ready just after the
    // rollout's end; not looked into).
    await untilAgentReady(node);
    t.pass('Ready');
    t.ok(flows >= 4, `${flows} new flows during ${what}`);
    t.equal(wrong, 0, 'none decided otherwise than the config says');
    t.equal(await mark(), held, 'the same write in the kernel: adopted, not written again');
  }

  t.test('a rolling update of the DaemonSet: adopted, packets right throughout', (t) =>
    // A changed env is a new pod template: the DaemonSet replaces the pod (maxUnavailable 10 %).
    rollsOver(t, 'the rolling update', () =>
      node.kubectl([
        '-n',
        'kube-system',
        'set',
        'env',
        'daemonset/ipmasq-agent',
        'IPMASQ_TEST_ROLLOUT=1',
      ]),
    ),
  );

  t.test(
    'a frozen agent: the liveness probe restarts it, the kernel decides meanwhile',
    async (t) => {
      const before = await agentPod(node);
      const restarts = before.status.containerStatuses?.[0]?.restartCount ?? 0;
      const pid = await agentProcess(node, before);
      t.ok(pid, `the agent's process ${pid}`);
      process.kill(Number(pid), 'SIGSTOP');
      const restarted = waitFor(
        'the kubelet to restart it',
        async () => {
          const pod = await agentPod(node);
          return (pod.status.containerStatuses?.[0]?.restartCount ?? 0) > restarts && ready(pod)
            ? pod
            : undefined;
        },
        240_000,
        500,
      );
      const { flows, wrong } = await probeWhile(restarted);
      const after = await restarted;
      t.equal(after.metadata.uid, before.metadata.uid, 'the same pod, its container restarted');
      t.ok(flows >= 10, `${flows} new flows while it was frozen and restarted`);
      t.equal(wrong, 0, 'none decided otherwise than the config says');
      const events = await node.kubectl([
        '-n',
        'kube-system',
        'get',
        'events',
        '--field-selector',
        `involvedObject.name=${before.metadata.name}`,
      ]);
      t.match(events, /Liveness probe failed/, "the kubelet's own liveness probe found it");
    },
  );

  /** A pause pod in `namespace` with `labels`, Ready: its address (from the CNI) and namespace. */
  async function runPod(name: string, namespace: string, labels: Record<string, string> = {}) {
    await node.kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace, labels },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [
            { name: 'pause', image: 'registry.k8s.io/pause:3.10', imagePullPolicy: 'Never' },
          ],
        },
      }),
    );
    await node.kubectl([
      '-n',
      namespace,
      'wait',
      `pod/${name}`,
      '--for=condition=Ready',
      '--timeout=120s',
    ]);
    const ip = (await node.json<Pod>(['-n', namespace, 'get', 'pod', name])).status.podIP!;
    return { ip, netns: await node.podNetns(ip) };
  }

  /**
   * Until new flows from `netns` leave as `toMasq` to REMOTE_MASQ_IP and as `toRemote` (default
   * the same) to REMOTE_IP, within 30 s.
   */
  const untilLeavesAs = (what: string, netns: string, toMasq: string, toRemote = toMasq) =>
    waitFor(
      what,
      async () => {
        const seen = await node.sources(netns, [env.REMOTE_MASQ_IP!, env.REMOTE_IP!]);
        return seen.get(env.REMOTE_MASQ_IP!) === toMasq && seen.get(env.REMOTE_IP!) === toRemote
          ? true
          : undefined;
      },
      30_000,
      100,
    );

  t.test('pod policies with real pods: labels by kubectl, addresses by the CNI', async (t) => {
    // deploy/examples/pod-policy: the database pods leave as 192.0.2.10 ("an address every node
    // holds"), pods of namespaces labelled egress=untranslated as themselves, the rest masqueraded
    // outside 10.0.0.0/8. The remote routes 192.0.2.10 back through the node.
    const SNAT = '192.0.2.10';
    await node.inNode('ip', ['address', 'add', `${SNAT}/32`, 'dev', 'lo']);
    await inNetns(env.REMOTE_NETNS!, 'ip', ['route', 'add', `${SNAT}/32`, 'via', env.NODE_IP!]);
    await node.kubectl(['apply', '-k', join(packageRoot, 'deploy', 'examples', 'pod-policy')]);
    await rolledOut(node);
    await waitFor(
      'the node-wide file in the kernel',
      async () => (/192\.168\.0\.0\/16/.test(await nonmasq(node)) ? undefined : true),
      120_000,
      50,
    );
    await node.kubectl(['create', 'namespace', 'routed']);
    await node.kubectl(['label', 'namespace', 'routed', 'egress=untranslated']);
    const [db, routed] = await Promise.all([
      runPod('db', 'default', { app: 'db' }),
      runPod('routed', 'routed'),
    ]);
    await untilLeavesAs('the db pod as 192.0.2.10', db.netns, SNAT);
    await untilLeavesAs('the routed pod as itself', routed.netns, routed.ip);
    await untilLeavesAs('the workload masqueraded', podNetns, env.NODE_IP!);
    t.pass('each pod leaves as its policy says, to both remotes');

    const relabelled = Date.now();
    await node.kubectl(['label', 'pod', 'workload', 'app=db']);
    await untilLeavesAs('the workload as 192.0.2.10 once labelled app=db', podNetns, SNAT);
    t.comment(`label → new flows as 192.0.2.10: ${Date.now() - relabelled} ms`);
    await node.kubectl(['label', 'pod', 'workload', 'app-']);
    await untilLeavesAs('the workload masqueraded again once unlabelled', podNetns, env.NODE_IP!);
    t.pass('a label changed with kubectl moves the pod in and out of the policy');

    // The db pod deleted: its address goes back to the CNI's pool, the policy no longer holds it.
    await node.kubectl(['delete', 'pod', 'db', '--wait']);
    const metrics = await node.inNode('curl', ['-sf', `http://${env.NODE_IP}:9410/metrics`]);
    t.match(metrics, /^ipmasq_kubernetes_up 1$/m, 'the API read is up');
    await node.kubectl(['delete', 'namespace', 'routed', '--wait']);
    const pod = await agentPod(node);
    t.equal(pod.status.containerStatuses?.[0]?.restartCount, 0, 'the agent never restarted');
  });

  t.test('Helm: installed over the same node, then upgraded as a rolling update', async (t) => {
    const helm = (args: string[]) =>
      node.inNode('env', [
        `HELM_CACHE_HOME=${node.dir}/helm/cache`,
        `HELM_CONFIG_HOME=${node.dir}/helm/config`,
        `HELM_DATA_HOME=${node.dir}/helm/data`,
        env.HELM!,
        '--kubeconfig',
        env.KUBECONFIG!,
        ...args,
      ]);
    const chart = join(packageRoot, 'deploy', 'helm', 'ipmasq-agent');
    // Helm installs only objects it owns: kustomize's go first (the table stays in the kernel).
    await node.kubectl([
      'delete',
      '-k',
      join(packageRoot, 'deploy', 'examples', 'pod-policy'),
      '--wait',
    ]);
    await waitFor(
      'no agent pod',
      async () => {
        const pods = await node.json<{ items: Pod[] }>([
          '-n',
          'kube-system',
          'get',
          'pods',
          '-l',
          'app.kubernetes.io/name=ipmasq-agent',
        ]);
        return pods.items.length === 0 ? true : undefined;
      },
      120_000,
      200,
    );
    await helm(['install', 'ipmasq-agent', chart, '--namespace', 'kube-system']);
    await rolledOut(node);
    t.ok(ready(await agentPod(node)), "the chart's pod Ready through the kubelet");
    await waitFor(
      "the chart's config in the kernel",
      async () => (/192\.168\.0\.0\/16/.test(await nonmasq(node)) ? true : undefined),
      120_000,
      50,
    );
    await untilLeavesAs(
      `the workload masqueraded to ${env.REMOTE_MASQ_IP}, itself to ${env.REMOTE_IP}`,
      podNetns,
      env.NODE_IP!,
      podIP,
    );
    t.pass("packets as the chart's config says");

    await rollsOver(t, 'the upgrade', () =>
      helm([
        'upgrade',
        'ipmasq-agent',
        chart,
        '--namespace',
        'kube-system',
        '--reuse-values',
        '--set-string',
        'podAnnotations.upgraded=yes',
      ]),
    );
    t.match(
      await helm(['list', '--namespace', 'kube-system']),
      /ipmasq-agent\s.*\s2\s/,
      'revision 2',
    );
  });

  t.test('the largest ConfigMap the API takes, under the shipped memory limit', async (t) => {
    // The API refuses a ConfigMap over 1 MiB: 65 000 /24s written tightly ("[a,b,…]", about 15
    // bytes each) is near the most one holds (80 000 are 1.2 MB: refused; 100 000 about 1.5 MB).
    const count = 65_000;
    const cidrs = Array.from({ length: count }, (_, i) => {
      const n = i * 2;
      return `${20 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}.0/24`;
    });
    const text = `nonMasqueradeCIDRs: [${cidrs.join(',')}]\ncidrLimit: ${count + 10}\nresyncInterval: 60s\n`;
    t.ok(text.length < 1_048_576, `${text.length} bytes: under the API's 1 MiB`);
    const before = await agentPod(node);
    const restarts = before.status.containerStatuses?.[0]?.restartCount ?? 0;
    const pid = await agentProcess(node, before);
    // The container's memory cgroup (v1 here): its peak counts the libnftables children too.
    const cgroup = /^\d+:memory:(.+)$/m.exec(readFileSync(`/proc/${pid}/cgroup`, 'utf8'))?.[1];
    t.ok(cgroup, `the agent's memory cgroup (${cgroup})`);
    const peakFile = `/sys/fs/cgroup/memory${cgroup}/memory.max_usage_in_bytes`;
    const limit = Number(
      readFileSync(`/sys/fs/cgroup/memory${cgroup}/memory.limit_in_bytes`, 'utf8'),
    );
    t.equal(limit, 512 * 1024 * 1024, 'the shipped limit, 512 MiB');
    writeFileSync(peakFile, '0'); // the peak from now on
    const applied = Date.now();
    // replace, not apply: apply would keep the whole file in an annotation, which holds 256 KiB.
    await node.kubectl(['replace', '-f', '-'], configMap(text));
    const metrics = () => node.inNode('curl', ['-sf', `http://${env.NODE_IP}:9410/metrics`]);
    const inKernel = await waitFor(
      `${count} CIDRs in the kernel`,
      async () => {
        // Every CIDR of the file, and 169.254.0.0/16 (masqLinkLocal false by default).
        const value = /^ipmasq_nonmasquerade_cidrs\{family="ipv4"\} (\d+)$/m.exec(
          await metrics().catch(() => ''),
        )?.[1];
        return Number(value) >= count ? Date.now() : undefined;
      },
      300_000,
      200,
    );
    const elements = (await nonmasq(node)).match(/\d+\.\d+\.\d+\.0\/24/g)?.length ?? 0;
    t.equal(elements, count, `the kernel's set holds all ${count}`);
    const peak = Number(readFileSync(peakFile, 'utf8'));
    const after = await agentPod(node);
    t.equal(after.metadata.uid, before.metadata.uid, 'the same pod');
    t.equal(after.status.containerStatuses?.[0]?.restartCount, restarts, 'no restart, no OOM kill');
    t.ok(ready(after), 'Ready');
    t.ok(peak < limit, `peak ${Math.round(peak / 2 ** 20)} MiB, under the limit`);
    t.comment(
      `${count} CIDRs (${text.length} bytes): apply → kernel ${inKernel - applied} ms; the container's peak memory ${Math.round(peak / 2 ** 20)} MiB of ${limit / 2 ** 20}`,
    );
    const seen = await node.sources(podNetns, [env.REMOTE_MASQ_IP!]);
    t.equal(seen.get(env.REMOTE_MASQ_IP!), env.NODE_IP, `to ${env.REMOTE_MASQ_IP}: masqueraded`);
  });

  t.test('the kubelet rotates the short-lived token: the second agent follows it', async (t) => {
    const first = claims(follower.token);
    const rotated = await waitFor(
      'the kubelet to rotate the token',
      () => {
        const token = followerToken();
        return token !== follower.token ? token : undefined;
      },
      Math.max(0, first.exp * 1000 - Date.now()) + 60_000,
      500,
    );
    const next = claims(rotated);
    t.ok(next.iat > first.iat, `a new token, issued ${next.iat - first.iat} s after the first`);
    // Past the first token's expiry and the API server's minute of leeway for clocks, the first
    // token is refused (asked here: once, counted, then the count starts again)...
    await waitFor(
      "the first token's expiry and the leeway after it",
      () => (Date.now() / 1000 > first.exp + 75 ? true : undefined),
      TOKEN_SECONDS * 1000,
      500,
    );
    t.equal(await authFailures(), follower.authFailures, 'no credential refused so far');
    const server = /server: (\S+)/.exec(readFileSync(env.KUBECONFIG!, 'utf8'))?.[1];
    const code = await node.inNode('curl', [
      '-sk',
      '-o',
      '/dev/null',
      '-w',
      '%{http_code}',
      '-H',
      `Authorization: Bearer ${follower.token}`,
      `${server}/api`,
    ]);
    t.equal(code, '401', 'the first token is refused by now');
    follower.authFailures = await authFailures();
    // ...and a request only the new one can make: an Event on the Node, posted when the second
    // agent's config turns invalid.
    await node.kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'token-follower', namespace: 'kube-system' },
        data: { config: 'nonMasqueradeCIDRs: [token-follower-check]\n' },
      }),
    );
    await waitFor(
      'its Event after the first token expired',
      async () => {
        const list = await node.json<{ items: { message: string }[] }>([
          '-n',
          'default',
          'get',
          'events',
          '--field-selector',
          'reason=ConfigInvalid',
        ]);
        return list.items.some((e) => e.message.includes('token-follower-check'))
          ? true
          : undefined;
      },
      180_000,
      1_000,
    );
    t.pass('an Event posted with the rotated token');
    follower.sampling = false;
    await follower.sampler;
    t.ok(follower.samples >= 100, `${follower.samples} samples of its /metrics over the suite`);
    t.equal(follower.notUp, 0, 'ipmasq_kubernetes_up 1 in every one');
    t.equal(
      await authFailures(),
      follower.authFailures,
      'no request refused for its credential since (no 401)',
    );
    const metrics = await node.inNode('curl', ['-sf', `http://${follower.ip}:9410/metrics`]);
    t.notMatch(metrics, /^ipmasq_kubernetes_errors_total\{[^}]*\} [1-9]/m, 'no API error counted');
    await node.kubectl(['-n', 'kube-system', 'delete', 'pod', 'token-follower', '--wait']);
  });

  t.test('the kubelet wrote its logs and volumes under the node directory only', async (t) => {
    t.ok(readdirSync(join(node.dir, 'pod-logs')).length > 0, 'the pods logs are in DIR');
  });
}
