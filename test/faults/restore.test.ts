// A saved ruleset put back (`nft -f` of `flush ruleset` and an older copy of our table, as config
// management restoring /etc/nftables.conf does): the table carries an older write of this same
// agent — its writer id in the mark — so it is drift, repaired at the next resync, counted, and the
// agent never stops being ready for it. It used to be taken for another agent: held back from for
// up to 8 resync intervals, not ready, ipmasq_conflicting_writer 1 with no other agent anywhere.
import t from 'tap';
import { httpGet, startAgent, waitFor } from '../../harness/agent.js';
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
}
