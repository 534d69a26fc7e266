// Another table never holds our writes back (docs/observability.md, "Other NAT on the node"; the
// red team's case, issue 51 item 1): one foreign table with a 200 000-element interval set and four
// nat postrouting base chains sharing one jumped chain, and a writer replacing that chain's rule
// every second, so that every look (one per resync, here every 2 s) prints it again with
// libnftables, downloading the set each time. Meanwhile: the first write comes at once, every
// config change reaches the kernel within a few seconds (the look used to hold them for its prints:
// 26-97 s), and /readyz and /healthz, probed throughout on fresh connections, always answer 200.
// Beside a base chain jumping to 10 000 chains, the look stops at its budget and the writes go on.
import t from 'tap';
import { startAgent, startHealthProbe, waitFor } from '../../harness/agent.js';
import { lookHeavyTable, startRuleWriter, wideTable } from '../../harness/foreign-nat.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import { agentArgs, generation, makeNode, untilGeneration, writeConfig } from '../helpers/node.js';

const config = (extra: boolean) =>
  `resyncInterval: 2s\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16${extra ? ', 198.51.100.0/24' : ''}]\n`;

if (requireRoot(t)) {
  t.test('a look-heavy foreign table holds back no write and no probe', async (t) => {
    const node = await makeNode(t, 'nat-beside');
    await inNetns(node.ns, 'nft', ['-f', '-'], {
      input: lookHeavyTable(200_000),
      timeoutMs: 300_000,
    });
    writeConfig(node, config(false));
    const agent = startAgent(t, node.ns, agentArgs(node));
    // The look comes after the first write, and beside it: the write does not wait for its prints.
    await untilGeneration(node, 1, 15_000);
    const warning = await waitFor(
      'the foreign chain reported',
      () => agent.logs.find((l) => l.level === 40 && l.table === 'ip other'),
      120_000,
    );
    t.match(warning, { translatingRules: 1 }, 'the look printed the jumped chain and reported it');

    const writer = startRuleWriter(node.ns);
    let rewrites: number;
    const probe = await startHealthProbe(
      t,
      node.ns,
      node.port,
      { maxRequests: 2_000, maxSeconds: 120, gapS: 0.1 },
      ['/readyz', '/healthz'],
    );
    try {
      for (let change = 1; change <= 6; change++) {
        // A look is under way or due: the writer keeps the chain's handles moving.
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        const before = (await generation(node)) ?? 0;
        writeConfig(node, config(change % 2 === 1));
        // Within the second the contract gives it, five times over for a busy machine.
        await untilGeneration(node, before + 1, 5_000);
      }
      t.pass('6 config changes, each in the kernel within 5 s while the looks print');
    } finally {
      rewrites = await writer.stop();
    }
    const probed = await probe.stop();
    t.ok(rewrites >= 6, `the foreign chain's rule replaced ${rewrites} times meanwhile`);
    t.ok(probed.samples.length >= 40, `${probed.samples.length} probes answered`);
    t.same(probed.failures, [], 'every /readyz and /healthz answered 200');
    const slowest = Math.max(...probed.samples.map(([, ms]) => ms));
    t.ok(slowest < 2_000, `none near the DaemonSet's 2 s probe timeout (slowest ${slowest} ms)`);
  });

  // Issue 51, item 6: one base chain jumping to 10 000 chains (the first write came after 24 s).
  t.test('beside 10 000 foreign chains: the look stops at its budget, writes go on', async (t) => {
    const node = await makeNode(t, 'nat-wide');
    await inNetns(node.ns, 'nft', ['-f', '-'], { input: wideTable(10_000), timeoutMs: 300_000 });
    writeConfig(node, config(false));
    const started = Date.now();
    const agent = startAgent(t, node.ns, agentArgs(node));
    await untilGeneration(node, 1, 30_000);
    t.pass(`first write ${Date.now() - started} ms after start (the agent's start included)`);
    const budget = await waitFor(
      'the budget warning',
      () => agent.logs.find((l) => l.level === 40 && 'chainsMax' in l),
      60_000,
    );
    t.match(budget, { chainsMax: 1_000 }, 'the look says it stopped at its budget, once');
    for (let change = 1; change <= 3; change++) {
      const before = (await generation(node)) ?? 0;
      writeConfig(node, config(change % 2 === 1));
      await untilGeneration(node, before + 1, 5_000);
    }
    t.pass('3 config changes in the kernel, each within 5 s');
    t.equal(
      agent.logs.filter((l) => 'chainsMax' in l).length,
      1,
      'warned once over the looks since',
    );
  });
}
