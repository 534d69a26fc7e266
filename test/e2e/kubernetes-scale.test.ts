// The API client at cluster size (docs/kubernetes.md, "Kubernetes API (opt-in)"), against a real
// kube-apiserver and etcd: 5 000 Nodes of ~100 KiB each (a 500 MiB list). The agent holds the
// shipped ServiceAccount's token while its ClusterRole is not there yet, so it waits (refused) with
// all Nodes already in the server; then the RBAC is applied, and its first list must put every
// Node's pod CIDR into the kernel within 30 s, its RSS growing by at most 64 MiB over what it held
// waiting.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { agentWithParts, httpGet, metricValue, startAgent, waitFor } from '../../harness/agent.js';
import { refusedAgentKubeconfig, startControlPlane } from '../../harness/control-plane.js';
import { inNetns, packageRoot, requireRoot, tempDir } from '../../harness/netns.js';
import { makeTopology } from '../../harness/topology.js';
import { nonMasqCovers } from '../helpers/nonmasq.js';
import { processStats } from '../helpers/node.js';

const NODES = 5_000;
const PAD_BYTES = 100 * 1024;
const TIMINGS = JSON.stringify({ backoffBaseMs: 100, backoffMaxMs: 500, idleMs: 60_000 });

const rssMiB = (pid: number) => processStats(pid).rssKiB / 1024;

// On a machine that has not built the control plane yet, its first start builds it (minutes).
t.setTimeout(1_500_000);

if (requireRoot(t)) {
  t.test(
    `${NODES} Nodes of ${PAD_BYTES >> 10} KiB: the first list within 30 s, RSS +64 MiB at most`,
    async (t) => {
      const topo = await makeTopology(t, { ipv6: false });
      const plane = await startControlPlane(t, topo.node);
      const created = Date.now();
      await inNetns(
        topo.node,
        process.execPath,
        [
          '--import',
          'tsx',
          join(packageRoot, 'harness/create-nodes.ts'),
          plane.kubeconfig,
          'create',
          '0',
          String(NODES),
          String(PAD_BYTES),
        ],
        { timeoutMs: 900_000 },
      );
      t.comment(`${NODES} Nodes created in ${((Date.now() - created) / 1000).toFixed(1)} s`);

      // The ServiceAccount and its token, not yet its ClusterRole: every list is refused.
      const { kubeconfig, allow } = await refusedAgentKubeconfig(t, plane);
      const dir = tempDir(t, 'kube-scale');
      const config = join(dir, 'ip-masq-agent');
      writeFileSync(
        config,
        'nonMasqueradeCIDRs: [192.168.0.0/16]\nnonMasqueradeNodePodCIDRs: true\n',
      );
      const agent = startAgent(
        t,
        topo.node,
        [
          '--config',
          config,
          '--listen',
          '127.0.0.1:9410',
          '--kubeconfig',
          kubeconfig,
          '--node-name',
          'scale-0',
        ],
        [],
        undefined,
        agentWithParts({ kubernetesTimings: JSON.parse(TIMINGS) }),
      );
      const metric = async (series: string) =>
        metricValue((await httpGet(topo.node, 9410, '/metrics')).body, series);
      await waitFor(
        'refused a few times',
        async () =>
          ((await metric('ipmasq_kubernetes_errors_total{op="list"}').catch(() => 0)) ?? 0) >= 3
            ? true
            : undefined,
        30_000,
      );
      const pid = agent.child.pid!;
      let baseline = 0;
      for (let i = 0; i < 5; i++) {
        baseline = Math.max(baseline, rssMiB(pid));
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      t.notOk(await nonMasqCovers(topo.node, '10.0.0.1'), 'nothing of the Nodes in the kernel yet');

      // Allowed: the first list, sampled as it goes.
      await allow();
      const allowed = Date.now();
      let peak = baseline;
      const sampler = setInterval(() => {
        peak = Math.max(peak, rssMiB(pid));
      }, 25);
      const last = NODES - 1;
      try {
        await waitFor(
          'every Node in the kernel',
          async () =>
            (await nonMasqCovers(topo.node, `10.${last >> 8}.${last & 255}.1`)) &&
            (await nonMasqCovers(topo.node, '10.0.0.1'))
              ? true
              : undefined,
          120_000,
          50,
        );
      } finally {
        clearInterval(sampler);
      }
      const seconds = (Date.now() - allowed) / 1000;
      peak = Math.max(peak, rssMiB(pid));
      t.comment(
        `first list of ${NODES} Nodes (~${((NODES * PAD_BYTES) / 2 ** 20).toFixed(0)} MiB) in the kernel ${seconds.toFixed(1)} s after the RBAC; RSS ${baseline.toFixed(1)} MiB waiting, ${peak.toFixed(1)} MiB at most (+${(peak - baseline).toFixed(1)})`,
      );
      t.ok(seconds <= 30, `within 30 s (${seconds.toFixed(1)} s)`);
      t.ok(peak - baseline <= 64, `RSS grew by ${(peak - baseline).toFixed(1)} MiB ≤ 64`);
      t.equal(await metric('ipmasq_kubernetes_up'), 1, 'watching');
    },
  );
}
