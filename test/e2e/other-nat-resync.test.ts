// Other tables' NAT looked at again at every resync, SIGHUP included (docs/observability.md, "Other
// NAT on the node"): a translating chain added after start is reported at the next SIGHUP, and
// cleared at the one after its table is deleted, with a resync interval long enough that no
// periodic look helps.
import t from 'tap';
import { startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import {
  agentArgs,
  makeNode,
  metrics,
  untilGeneration,
  untilUp,
  writeConfig,
} from '../helpers/node.js';

const LATE = `table ip late {
  chain post {
    type nat hook postrouting priority srcnat - 10; policy accept;
    ip saddr 10.244.0.0/16 masquerade
  }
}
`;

/** The value of ipmasq_other_nat_rules for table "ip late", chain "post", or undefined. */
function lateSeries(text: string): number | undefined {
  const m =
    /^ipmasq_other_nat_rules\{table="ip late",chain="post",position="before"\} (\S+)$/m.exec(text);
  return m ? Number(m[1]) : undefined;
}

if (requireRoot(t)) {
  t.test(
    'a chain added after start: reported at the next SIGHUP, cleared after it goes',
    async (t) => {
      const node = await makeNode(t, 'othernat');
      writeConfig(node, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n');
      const agent = startAgent(t, node.ns, agentArgs(node));
      await untilUp(node, agent);
      await untilGeneration(node, 1);
      t.equal(lateSeries(await metrics(node)), undefined, 'nothing to report at start');

      await inNetns(node.ns, 'nft', ['-f', '-'], { input: LATE });
      agent.child.kill('SIGHUP');
      const warning = await waitFor('the warning', () =>
        agent.logs.find((l) => l.level === 40 && l.table === 'ip late'),
      );
      t.match(warning, { chain: 'post', position: 'before', translatingRules: 1 });
      t.same(warning.rules, ['ip saddr 10.244.0.0/16 masquerade']);
      await waitFor('the gauge', async () =>
        lateSeries(await metrics(node)) === 1 ? true : undefined,
      );

      await inNetns(node.ns, 'nft', ['delete', 'table', 'ip', 'late']);
      agent.child.kill('SIGHUP');
      await waitFor('the gauge cleared', async () =>
        lateSeries(await metrics(node)) === undefined ? true : undefined,
      );
      t.ok(
        agent.logs.some((l) => l.table === 'ip late' && /no longer translates/.test(String(l.msg))),
        'said once it went',
      );
    },
  );
}
