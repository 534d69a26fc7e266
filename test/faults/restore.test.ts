// Saved tables of ours put back by `nft -f` (docs/writes.md, "When it writes": a restore is drift,
// whichever process of ours wrote it). First, a saved ruleset restored whole (`flush ruleset` and
// an older copy of our table, as config management restoring /etc/nftables.conf does): repaired
// within a resync, counted, the agent ready throughout. Then snapshots taken from real agents —
// this agent's own older writes (another config, and the same one), the previous agent process's
// (another config), and one of an agent that started later in another namespace — each repaired
// when the agent next looks (a readiness probe here, as kubelet's), counted as drift, and never
// taken for another agent: they used to open a conflict (8 intervals not ready) or be held back
// from for an interval.
import t from 'tap';
import { httpGet, listTable, metricValue, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import {
  agentArgs,
  generation,
  makeNode,
  metric,
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
  const node = await makeNode(t, 'restore');
  const older = 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n';
  const newer = 'nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\nresyncInterval: 1s\n';
  writeConfig(node, older);
  const agent = startAgent(t, node.ns, agentArgs(node));
  await untilGeneration(node, 1, 10_000);
  await untilUp(node, agent);

  t.test('a restored snapshot of an older write is repaired within a resync', async (t) => {
    const saved = (await inNetns(node.ns, 'nft', ['list', 'ruleset'])).stdout;
    writeConfig(node, newer);
    await untilGeneration(node, 2);
    const wanted = await setElements(node, 'nonmasq');
    t.same(wanted, ['10.0.0.0/8', '169.254.0.0/16', '192.168.0.0/16']);

    // Readiness sampled all along, from before the restore to after the repair.
    const ready: number[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        ready.push((await httpGet(node.ns, node.port, '/readyz')).status);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    await inNetns(node.ns, 'nft', ['-f', '-'], { input: `flush ruleset\n${saved}` });
    const restoredAt = Date.now();
    t.same(await setElements(node, 'nonmasq'), ['10.0.0.0/8', '169.254.0.0/16'], 'restored');
    await waitFor(
      'the repair',
      async () =>
        (await setElements(node, 'nonmasq')).join() === wanted.join() ? true : undefined,
      5_000,
      20,
    );
    const repairedMs = Date.now() - restoredAt;
    await new Promise((r) => setTimeout(r, 2_500)); // two more resyncs: nothing else happens
    sampling = false;
    await sampler;
    t.ok(repairedMs <= 2_500, `repaired ${repairedMs} ms after the restore (resync 1 s)`);
    t.equal(await generation(node), 3, 'one write: the repair');
    t.same(
      ready.filter((s) => s !== 200),
      [],
      `ready in all ${ready.length} samples, the restore's moment among them`,
    );
    t.equal(await metric(node, 'ipmasq_drift_repairs_total'), 1, 'counted as drift');
    t.equal(await metric(node, 'ipmasq_conflicting_writer'), 0, 'not another agent');
    t.ok(
      agent.logs.some((l) => l.level === 40 && /drifted/.test(String(l.msg))),
      'warned as drift',
    );
    t.notOk(
      agent.logs.some((l) => /another ipmasq-agent/.test(String(l.msg))),
      'never taken for another agent',
    );
  });

  t.test("snapshots of several agents' writes", async (t) => {
    const node = await makeNode(t, 'restores');
    const other = await makeNode(t, 'restores-other');

    /**
     * Runs an agent on `cidrs` in `where` until it wrote, and returns its table as nft lists it.
     */
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
  });
}
