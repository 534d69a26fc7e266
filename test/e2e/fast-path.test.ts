// The fast config path on the wire (docs/writes.md, "The everyday edit"): a config over 64 KiB
// (read on the worker, edits answered from the last load) edited as editors do — an item commented
// out with `#` at column 0, put back, two item lines joined — with a fresh flow probed after each
// step; then an agent whose fast path is made wrong on purpose
// (harness/agent-with-parts.js: the fault comes in through the agent's parts) must find it by its
// audit, count it, and apply the whole answer.
import t, { type Test } from 'tap';
import { agentWithParts, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import {
  makeTopology,
  POD_IPV4,
  probeSources,
  REMOTE_TARGETS_IPV4 as V4,
} from '../../harness/topology.js';
import { agentInTopology, generation, metric, writeConfig } from '../helpers/node.js';
import { httpGet } from '../../harness/agent.js';

/** 4 001 non-adjacent /24s from 20.0.0.0 (nothing merges): about 80 KiB, then the lines given. */
function configText(extra: readonly string[]): string {
  const lines = ['resyncInterval: 1h', 'cidrLimit: 10000', 'nonMasqueradeCIDRs:'];
  for (let i = 0; i < 4001; i++) {
    const n = i * 2;
    lines.push(`  - ${20 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}.0/24`);
  }
  return [...lines, ...extra, ''].join('\n');
}

const TEST_NET_3 = '  - 203.0.113.0/24'; // V4.testNet3 is 203.0.113.9
const TEST_NET_2 = '  - 198.51.100.0/24'; // V4.testNet2 is 198.51.100.7

if (requireRoot(t)) {
  const topo = await makeTopology(t, { ipv6: false });
  /** Who a new flow to `address` arrives as: the pod (exempt) or the node (masqueraded). */
  const seenAs = async (address: string) => {
    await inNetns(topo.node, 'conntrack', ['-F']).catch(() => undefined);
    const [seen] = await probeSources(topo, [address]);
    return seen?.address === POD_IPV4 ? 'pod' : 'node';
  };

  t.test('commented out, put back, joined: what a fresh process would decide', async (t) => {
    const { agent, node, write } = await agentInTopology(
      t,
      topo,
      configText([TEST_NET_3, TEST_NET_2]),
      ['--conntrack-flush=none'],
    );
    t.equal(await seenAs(V4.testNet3), 'pod', '203.0.113.0/24 exempt at start');
    const reads = (await metric(node, 'ipmasq_kernel_reads_total')) ?? 0;

    await write(configText([`#${TEST_NET_3}`, TEST_NET_2]));
    t.equal(await seenAs(V4.testNet3), 'node', 'commented out at column 0: masqueraded');
    t.equal(await seenAs(V4.testNet2), 'pod', 'the next line still exempt');

    await write(configText([TEST_NET_3, TEST_NET_2]));
    t.equal(await seenAs(V4.testNet3), 'pod', 'put back: exempt again');

    await write(configText([`#- ${TEST_NET_3.trim().slice(2)}`, TEST_NET_2]));
    t.equal(await seenAs(V4.testNet3), 'node', 'commented out unindented (#- …): masqueraded');
    await write(configText([TEST_NET_3, TEST_NET_2]));
    t.equal(await seenAs(V4.testNet3), 'pod', 'put back again');

    const before = await generation(node);
    writeConfig(node, configText([`${TEST_NET_3}${TEST_NET_2}`]));
    await waitFor('the config refused', async () =>
      (await metric(node, 'ipmasq_config_valid')) === 0 ? true : undefined,
    );
    t.equal((await httpGet(node.ns, node.port, '/readyz')).status, 503, '/readyz 503');
    t.ok(
      agent.logs.some((l) => /invalid config, not applied/.test(String(l.msg))),
      'the error logged',
    );
    t.equal(await generation(node), before, 'nothing written');
    t.equal(await seenAs(V4.testNet3), 'pod', 'the last good ruleset stays');
    t.equal(
      await metric(node, 'ipmasq_fast_path_mismatches_total{path="config"}'),
      0,
      'no mismatch',
    );
    const netlink = agent.logs.filter(
      (l) => l.msg === 'ruleset written to the kernel' && l.via === 'netlink',
    ).length;
    t.ok(netlink >= 4, `the edits written as element edits over netlink (${netlink})`);
    // The element-only writes are read back by their audits (a burst by its last write: one read of
    // our tables each time), and none found wrong.
    await waitFor('the writes audited', async () =>
      ((await metric(node, 'ipmasq_kernel_reads_total')) ?? 0) > reads ? true : undefined,
    );
    t.equal(
      await metric(node, 'ipmasq_fast_path_mismatches_total{path="element-write"}'),
      0,
      'audited, none found wrong',
    );
  });

  /**
   * An agent with the test-only fault `path` at 203.0.113.0/24 added: waits for the mismatch's
   * error line, its count and the whole answer in the kernel; returns the line and the agent's
   * node.
   */
  async function caught(t: Test, path: 'config' | 'element-write') {
    // The last agent's table goes first: its generation would pass for the new agent's first write.
    await inNetns(topo.node, 'nft', ['delete', 'table', 'ip', 'ipmasq']).catch(() => undefined);
    const { agent, node } = await agentInTopology(
      t,
      topo,
      configText([TEST_NET_2]),
      ['--conntrack-flush=none'],
      agentWithParts({ fault: path }),
    );
    t.equal(await seenAs(V4.testNet3), 'node', '203.0.113.0/24 masqueraded at start');
    // The fault leaves the added entry out of the fast answer; the audit within a second puts it
    // in.
    writeConfig(node, configText([TEST_NET_2, TEST_NET_3]));
    const line = await waitFor(
      'the mismatch logged',
      () => agent.logs.find((l) => l.path === path && l.level === 50),
      10_000,
    );
    await waitFor('the count', async () =>
      (await metric(node, `ipmasq_fast_path_mismatches_total{path="${path}"}`)) === 1
        ? true
        : undefined,
    );
    await waitFor('the whole answer written', async () =>
      (await seenAs(V4.testNet3)) === 'pod' ? true : undefined,
    );
    t.pass('the whole answer is in the kernel: 203.0.113.9 exempt');
    t.equal((await httpGet(node.ns, node.port, '/readyz')).status, 200, 'ready');
    return { line, node };
  }

  t.test('a wrong fast answer is found by the audit and the whole answer applied', async (t) => {
    const { line, node } = await caught(t, 'config');
    t.match(String(line.msg), /config read from the last load disagreed with the whole path/);
    t.match(line.difference, /203\.0\.113\.0\/24/, 'the difference names the entry');
    t.match(line.edits, [new RegExp(`${node.configFile} line 4006`)], 'and the file and line');
  });

  t.test('a wrong element-only write is found by its audit and the tables repaired', async (t) => {
    const { line, node } = await caught(t, 'element-write');
    t.match(String(line.msg), /element-only write disagreed with the whole path/);
    t.match(
      line.difference,
      /set ip ipmasq \S+: .*1 missing \(203\.0\.113\.0-203\.0\.113\.255\)/,
      'the difference names the set and the element the write left out',
    );
    t.equal(await metric(node, 'ipmasq_drift_repairs_total'), 0, 'not counted as drift');
  });
}
