// Another tool's commit landing between the agent's commit and its reading of the generation id
// (hardening round 2, item 1). The agent is stopped (SIGSTOP) while its libnftables process
// commits, an element is added to our set meanwhile (the nft command succeeding says it landed),
// and the agent continued: it must not take the id it then reads for its own commit's, and repairs
// the element away in that same sync (docs/writes.md, "When it writes").
import t from 'tap';
import { startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import {
  agentArgs,
  generation,
  isRunning,
  makeNode,
  metric,
  processAndChildren,
  setElements,
  untilGeneration,
  untilUp,
  writeConfig,
} from '../helpers/node.js';

const INJECTED = '198.51.100.0/24';

if (requireRoot(t)) {
  const node = await makeNode(t, 'interleave');
  writeConfig(node, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n');
  const agent = startAgent(t, node.ns, agentArgs(node));
  await untilGeneration(node, 1, 10_000);
  await untilUp(node);
  const pid = agent.child.pid as number;

  t.test(
    'an element added while the agent is stopped right after its commit is repaired',
    async (t) => {
      const before = (await generation(node)) ?? 0;
      const repairsBefore = (await metric(node, 'ipmasq_drift_repairs_total')) ?? 0;
      // A change of the rules, not of elements alone: written through libnftables (an element-only
      // change goes over netlink, in the agent's own process, where no child can be caught).
      writeConfig(
        node,
        'nonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\nsnatAddress: 198.18.0.1\nresyncInterval: 1s\n',
      );
      // The write's libnftables process appears; stop the agent while it runs on and commits.
      const child = await waitFor(
        'the libnftables process of the write',
        () => processAndChildren(pid).slice(1)[0],
        5_000,
        1,
      );
      process.kill(pid, 'SIGSTOP');
      try {
        await waitFor('the commit', () => (!isRunning(child) ? true : undefined), 5_000, 5);
        t.equal(await generation(node), before + 1, 'our write is in the kernel');
        await inNetns(node.ns, 'nft', [
          'add',
          'element',
          'ip',
          'ipmasq',
          'nonmasq',
          `{ ${INJECTED} }`,
        ]);
      } finally {
        process.kill(pid, 'SIGCONT');
      }
      await waitFor(
        'the element repaired away',
        async () => ((await setElements(node, 'nonmasq')).includes(INJECTED) ? undefined : true),
        5_000,
        100,
      );
      t.same(await setElements(node, 'nonmasq'), ['10.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12']);
      t.equal(
        await metric(node, 'ipmasq_drift_repairs_total'),
        repairsBefore + 1,
        'counted as a repair',
      );
      t.equal(await generation(node), before + 2, 'one repair write');
    },
  );
}
