// `--flows` naming the pods from a real kube-apiserver's pod list (docs/observability.md, "What the
// node's NAT does"), on real packets: the agent's ServiceAccount holds the shipped RBAC's token;
// the pods of this Node are named, another Node's are not; with the ClusterRole's pods rule taken
// away it says once that it may not list pods and prints the addresses.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { generationOf, listTable, runAgentOnce, startAgent, waitFor } from '../../harness/agent.js';
import {
  agentKubeconfig,
  createPod,
  removeRule,
  startControlPlane,
} from '../../harness/control-plane.js';
import { inNetns, requireRoot, tempDir } from '../../harness/netns.js';
import {
  makeTopology,
  POD_IPV4,
  POD_IPV6,
  probeSources,
  REMOTE_IPV4,
  REMOTE_TARGETS_IPV6,
} from '../../harness/topology.js';

const SECOND_POD = '10.244.1.3';

// On a machine that has not built the control plane yet, its first start builds it (minutes).
t.setTimeout(1_500_000);

if (requireRoot(t)) {
  const root = t;
  const topo = await makeTopology(root, { ipv6: true });
  await inNetns(topo.pod, 'ip', ['address', 'add', `${SECOND_POD}/24`, 'dev', 'eth0']);
  const dir = tempDir(root, 'flows-pods');
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n');
  startAgent(root, topo.node, [
    '--config',
    file,
    '--listen',
    '127.0.0.1:9413',
    '--enable-ipv6',
    '--to-ports',
    '20000-20009',
  ]);
  await waitFor('the first write', async () =>
    (generationOf(await listTable(topo.node, 'ip')) ?? 0) >= 1 ? true : undefined,
  );
  const flows = (n: number, from: string) =>
    probeSources(topo, Array(n).fill(REMOTE_IPV4), 'udp', { attempts: 1, from });
  await flows(3, POD_IPV4);
  await flows(2, SECOND_POD);
  await probeSources(topo, [REMOTE_TARGETS_IPV6.uniqueLocalOther], 'udp', {
    attempts: 1,
    from: POD_IPV6,
  });

  t.test(
    '--flows names the pods from a real API server, or says once that it may not',
    async (t) => {
      // A real kube-apiserver in the node's namespace; the agent holds the shipped RBAC's token.
      const plane = await startControlPlane(t, topo.node);
      await createPod(plane, 'shop', 'web-1', 'self', [POD_IPV4, POD_IPV6]);
      await createPod(plane, 'shop', 'elsewhere', 'other-node', [SECOND_POD]);
      const kubeconfig = await agentKubeconfig(t, plane);
      const args = ['--flows', '--kubeconfig', kubeconfig, '--node-name', 'self'];
      const named = await runAgentOnce(topo.node, [...args, '--output', 'json']);
      t.equal(named.code, 0, named.stderr);
      t.notMatch(named.stderr, /list pods/, 'allowed by the shipped ClusterRole');
      const sources = (
        JSON.parse(named.stdout) as { sources: Array<{ source: string; pod?: string }> }
      ).sources;
      t.same(
        sources.map((s) => [s.source, s.pod]),
        [
          [POD_IPV4, 'shop/web-1'],
          [SECOND_POD, undefined],
          [POD_IPV6, 'shop/web-1'],
        ],
        'pods of this node only',
      );
      // The ClusterRole's pods rule taken away: said once, the addresses printed.
      await removeRule(plane, { kind: 'clusterrole', name: 'ipmasq-agent' }, 'pods');
      const refused = await waitFor(
        'the refusal',
        async () => {
          const run = await runAgentOnce(topo.node, args);
          return /list pods/.test(run.stderr) ? run : undefined;
        },
        30_000,
      );
      t.equal(refused.code, 0);
      t.equal(refused.stderr.match(/list pods/g)?.length, 1, 'said once');
      t.match(refused.stderr, /403/, 'as the 403 it is');
      t.match(refused.stdout, new RegExp(`^${POD_IPV4.replaceAll('.', '\\.')}: 3 flows$`, 'm'));
    },
  );
}
