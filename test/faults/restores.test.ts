// Saved tables of ours put back by `nft -f` (README, "When it writes": a restore is drift, whichever
// process of ours wrote it). Snapshots taken from real agents — this agent's own older writes (another
// config, and the same one), the previous agent process's (another config), and one of an agent that
// started later in another namespace — are each repaired at once when the agent next looks (a
// readiness probe here, as kubelet's), counted as drift, and never taken for another agent.
import t from 'tap';
import { httpGet, listTable, metricValue, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import {
  agentArgs,
  makeNode,
  setElements,
  untilGeneration,
  untilUp,
  writeConfig,
} from '../helpers/node.js';

const config = (cidrs: string[]) =>
  `nonMasqueradeCIDRs: [${cidrs.join(', ')}]\nresyncInterval: 1h\n`;
const A = ['10.0.0.0/8'];
const B = ['10.0.0.0/8', '192.168.0.0/16'];
const X = ['10.0.0.0/8', '172.16.0.0/12'];
const Y = ['198.18.0.0/15'];

if (requireRoot(t)) {
  const node = await makeNode(t, 'restores');
  const other = await makeNode(t, 'restores-other');

  /** Runs an agent on `cidrs` in `where` until it wrote, and returns its table as nft lists it. */
  const snapshotOf = async (where: typeof node, cidrs: string[]) => {
    writeConfig(where, config(cidrs));
    const agent = startAgent(t, where.ns, agentArgs(where));
    await untilUp(where, agent);
    // The set is not there until the agent's first write.
    const written = async () =>
      (await setElements(where, 'nonmasq').catch((): string[] => [])).includes(cidrs[0]!);
    await waitFor('its write', async () => ((await written()) ? true : undefined));
    return { agent, table: (await listTable(where.ns, 'ip'))! };
  };
  const restore = (table: string) =>
    inNetns(node.ns, 'nft', ['-f', '-'], { input: `delete table ip ipmasq\n${table}` });
  const scrape = async (series: string) =>
    metricValue((await httpGet(node.ns, node.port, '/metrics')).body, series) ?? 0;

  // The previous agent process on this node, with another config.
  const previous = await snapshotOf(node, X);
  previous.agent.child.kill('SIGTERM');
  await previous.agent.exited;

  writeConfig(node, config(A));
  const agent = startAgent(t, node.ns, agentArgs(node));
  await untilUp(node, agent);
  await untilGeneration(node, 2);
  const ownA = (await listTable(node.ns, 'ip'))!;
  writeConfig(node, config(B));
  await untilGeneration(node, 3);
  const ownB = (await listTable(node.ns, 'ip'))!;
  writeConfig(node, config(A));
  await untilGeneration(node, 4);

  // An agent that started after this one, elsewhere.
  const later = await snapshotOf(other, Y);

  const cases: Array<[string, string]> = [
    ["this agent's older write, another config", ownB],
    ["this agent's older write, the same config", ownA],
    ["the previous agent process's write, another config", previous.table],
    ['an agent started later, elsewhere', later.table],
    ['the same snapshot again', later.table],
  ];
  for (const [what, table] of cases) {
    t.test(`${what}: repaired at once, drift, no conflict`, async (t) => {
      const repairs = await scrape('ipmasq_drift_repairs_total');
      await restore(table);
      const seen: number[] = [];
      await waitFor(
        'ready again with our config',
        async () => {
          const ready = (await httpGet(node.ns, node.port, '/readyz')).status;
          seen.push(ready);
          const elements = (await setElements(node, 'nonmasq')).sort().join();
          return ready === 200 && elements === [...A, '169.254.0.0/16'].join() ? true : undefined;
        },
        10_000,
        100,
      );
      t.equal(await scrape('ipmasq_drift_repairs_total'), repairs + 1, 'counted as drift');
      t.equal(await scrape('ipmasq_conflicting_writer'), 0, 'not taken for another agent');
      t.comment(`readiness answers until repaired: ${seen.join(' ')}`);
    });
  }

  t.test('no conflict was ever reported, and every repair warned', async (t) => {
    t.equal(
      agent.logs.filter((l) => /another ipmasq-agent/.test(String(l.msg))).length,
      0,
      'no conflict warned',
    );
    t.ok(
      agent.logs.filter((l) => l.level === 40 && /drifted/.test(String(l.msg))).length >=
        cases.length,
      'a warning for each repair',
    );
  });
}
