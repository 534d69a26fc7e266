// docs/writes.md, "When it writes" (existing flows): after a config change flips the decision for
// some destinations, the agent deletes the conntrack entries of flows to them, so long-lived UDP
// flows follow the new rules within a second; flows to unaffected destinations keep their entries.
import { renameSync, writeFileSync } from 'node:fs';
import t from 'tap';
import { generationOf, listTable, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot, type TapTest } from '../../harness/netns.js';
import { agentInTopology, metric } from '../helpers/node.js';
import {
  makeTopology,
  NODE_IPV4,
  NODE_IPV6,
  POD_IPV4,
  POD_IPV6,
  REMOTE_TARGETS_IPV4 as V4,
  REMOTE_TARGETS_IPV6 as V6,
  SLOW_ECHO_PORT,
  startSlowEcho,
  startStream,
  type StreamAnswer,
  type Topology,
} from '../../harness/topology.js';

// A exempts 10.9.0.1 and fd12::1; B masquerades them. 172.20.0.1 (exempt) and 198.19.0.4
// (masqueraded) keep their decision in both.
const A = 'nonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12, "fd12::/16"]\nresyncInterval: 1h\n';
const B = 'nonMasqueradeCIDRs: [10.200.0.0/16, 172.16.0.0/12]\nresyncInterval: 1h\n';

const fromNode = (a: StreamAnswer) => a.address === NODE_IPV4 || a.address === NODE_IPV6;
const fromPod = (a: StreamAnswer) => a.address === POD_IPV4 || a.address === POD_IPV6;

if (requireRoot(t)) {
  /** A node with the agent running on config A and the given --conntrack-flush. */
  const agentOn = (t: TapTest, topo: Topology, mode: string, first = A) =>
    agentInTopology(t, topo, first, ['--enable-ipv6', `--conntrack-flush=${mode}`]);

  /**
   * conntrack entries in the node namespace, optionally of one protocol and destination, with their
   * ids.
   */
  async function entries(topo: Topology, ...filter: string[]): Promise<string[]> {
    const { stdout } = await inNetns(topo.node, 'conntrack', ['-L', ...filter, '-o', 'id']);
    // Each line without what changes while an entry lives: its remaining timeout, [ASSURED] (set on
    // a UDP flow with replies once it is 2 s old: a test run slower than that saw it appear) and
    // its reference count. The entry's tuples, NAT, TCP state and id stay.
    return stdout
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) =>
        line
          .replace(/^(\S+\s+\d+\s+)\d+ /, '$1')
          .replace(/ \[ASSURED\]/, '')
          .replace(/ use=\d+/, ''),
      );
  }

  t.test(
    'udp (default): streams to changed addresses follow within 1 s, others keep their entries',
    async (t) => {
      const topo = await makeTopology(t, { ipv6: true });
      const { write } = await agentOn(t, topo, 'udp');
      const changed = [V4.private10, V6.uniqueLocal].map((dst) =>
        startStream(t, topo, 'udp', dst, 0.05, 30),
      );
      const exempt = startStream(t, topo, 'udp', V4.private172, 0.05, 30);
      const masqueraded = startStream(t, topo, 'udp', V4.outsideDefaultsA, 0.05, 30);
      const started = Date.now();
      for (const s of [...changed, exempt]) await s.until(started, fromPod, 3_000);
      const natted = await masqueraded.until(started, fromNode, 3_000);
      const unaffected = [
        ...(await entries(topo, '-p', 'udp', '-d', V4.private172)),
        ...(await entries(topo, '-p', 'udp', '-d', V4.outsideDefaultsA)),
      ];
      t.equal(unaffected.length, 2, 'one entry per unaffected stream');

      const wrote = await write(B);
      for (const s of changed) {
        const first = await s.until(wrote, fromNode, 1_000);
        t.ok(first.at - wrote <= 1_000, `masqueraded ${first.at - wrote} ms after the write`);
      }
      await new Promise((resolve) => setTimeout(resolve, 300));
      t.ok(
        exempt.answers.filter((a) => a.at >= wrote).every(fromPod),
        'the exempt stream kept its source',
      );
      const later = masqueraded.answers.filter((a) => a.at >= wrote);
      t.ok(
        later.length > 0 && later.every((a) => fromNode(a) && a.port === natted.port),
        'the masqueraded stream kept its port',
      );
      t.same(
        [
          ...(await entries(topo, '-p', 'udp', '-d', V4.private172)),
          ...(await entries(topo, '-p', 'udp', '-d', V4.outsideDefaultsA)),
        ],
        unaffected,
        'their conntrack entries are the same ones',
      );

      const back = await write(A);
      for (const s of changed) {
        const first = await s.until(back, fromPod, 1_000);
        t.ok(first.at - back <= 1_000, `exempt again ${first.at - back} ms after the write`);
      }
    },
  );

  t.test(
    'large configs: the changed ranges come packed from their worker, and streams still follow',
    async (t) => {
      // 2 500 non-adjacent /32s in each config: over IN_THREAD_MAX_ENTRIES together, so the ranges
      // are worked out on a worker; 10.9.0.1 and fd12::1 flip as in A ↔ B.
      const extra = Array.from(
        { length: 2_500 },
        (_, k) => `  - 100.96.${k >> 7}.${(k & 127) * 2}/32`,
      ).join('\n');
      const large = (text: string) =>
        text.replace(/nonMasqueradeCIDRs: \[(.*)\]/, (_, listed: string) =>
          [
            'cidrLimit: 3000',
            'nonMasqueradeCIDRs:',
            ...listed.split(', ').map((c) => `  - ${c}`),
            extra,
          ].join('\n'),
        );
      const topo = await makeTopology(t, { ipv6: true });
      const { agent, write } = await agentOn(t, topo, 'udp', large(A));
      const changed = [V4.private10, V6.uniqueLocal].map((dst) =>
        startStream(t, topo, 'udp', dst, 0.05, 30),
      );
      const started = Date.now();
      for (const s of changed) await s.until(started, fromPod, 3_000);
      const wrote = await write(large(B));
      // That they follow is the point here; how fast is the first test's (this flush first starts
      // its worker, which on a saturated machine takes a while).
      for (const s of changed) {
        const first = await s.until(wrote, fromNode, 5_000);
        t.pass(`masqueraded ${first.at - wrote} ms after the write`);
      }
      const flushed = await waitFor('the flush logged', async () =>
        agent.logs.find((entry) => entry.msg?.startsWith('deleted the conntrack entries')),
      );
      t.match(flushed, { deleted: { ipv4: { udp: Number }, ipv6: { udp: Number } } });
    },
  );

  t.test('a write that changes nothing and a drift repair delete no entry', async (t) => {
    const topo = await makeTopology(t, { ipv6: true });
    const { agent, node } = await agentOn(t, topo, 'udp');
    const streams = [V4.private10, V4.outsideDefaultsA].map((dst) =>
      startStream(t, topo, 'udp', dst, 0.05, 30),
    );
    const started = Date.now();
    for (const s of streams) await s.until(started, (a) => a.address !== undefined, 3_000);
    const before = await entries(topo, '-p', 'udp');
    // The same rules from another file (only cidrLimit differs): one sync, nothing written.
    const unchanged = async () =>
      (await metric(node, 'ipmasq_syncs_total{result="unchanged"}')) ?? 0;
    const syncs = await unchanged();
    writeFileSync(
      `${node.configFile}.tmp`,
      A.replace('resyncInterval: 1h', 'resyncInterval: 1h\ncidrLimit: 100'),
    );
    renameSync(`${node.configFile}.tmp`, node.configFile);
    await waitFor('the sync of the new file', async () =>
      (await unchanged()) > syncs ? true : undefined,
    );
    t.equal(generationOf(await listTable(topo.node, 'ip')), 1, 'nothing written');
    await inNetns(topo.node, 'nft', ['delete', 'table', 'ip', 'ipmasq']);
    agent.child.kill('SIGHUP');
    await waitFor('the repair', async () =>
      (await listTable(topo.node, 'ip')) !== null ? true : undefined,
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Every entry is still there, the same one (tuples, NAT and id). New ones may appear: with the
    // table deleted the namespace has no nat chain, so the kernel stops translating established
    // flows until the repair, and a reply to a datagram that left untranslated meanwhile is a new
    // flow.
    const after = await entries(topo, '-p', 'udp');
    t.same(
      before.filter((entry) => !after.includes(entry)),
      [],
      'the same entries, none deleted',
    );
    t.notOk(
      agent.logs.some((l) => /deleted the conntrack entries/.test(String(l.msg))),
      'no flush logged',
    );
  });

  t.test('none keeps old decisions; udp leaves TCP alone; all deletes its entry', async (t) => {
    for (const mode of ['none', 'udp', 'all'] as const) {
      const topo = await makeTopology(t, { ipv6: false });
      const { write } = await agentOn(t, topo, mode);
      const udp = startStream(t, topo, 'udp', V4.private10, 0.05, 30);
      // One message, then silence: no later packet could recreate a deleted entry before we look.
      const tcp = startStream(t, topo, 'tcp', V4.private10, 60, 30);
      const started = Date.now();
      await udp.until(started, fromPod, 3_000);
      await tcp.until(started, fromPod, 3_000);
      t.equal(
        (await entries(topo, '-p', 'tcp', '-d', V4.private10)).length,
        1,
        `${mode}: a TCP entry`,
      );
      const wrote = await write(B);
      if (mode === 'none') {
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        const after = udp.answers.filter((a) => a.at >= wrote);
        t.ok(after.length > 10 && after.every(fromPod), 'none: the stream keeps the old source');
      } else {
        await udp.until(wrote, fromNode, 1_000);
      }
      const tcpLeft = (await entries(topo, '-p', 'tcp', '-d', V4.private10)).length;
      t.equal(
        tcpLeft,
        mode === 'all' ? 0 : 1,
        `${mode}: the TCP entry ${mode === 'all' ? 'is gone' : 'stays'}`,
      );
    }
  });

  /** A Service IP in the node, DNATed to a backend on the remote, as kube-proxy does. */
  async function service(topo: Topology, proto: 'udp' | 'tcp', serviceIP: string, backend: string) {
    await inNetns(topo.node, 'nft', ['-f', '-'], {
      input:
        `table ip svc-${proto} {\n` +
        '  chain pre { type nat hook prerouting priority dstnat; policy accept;\n' +
        `    ip daddr ${serviceIP} ${proto} dport 9999 dnat to ${backend}\n  }\n}\n`,
    });
  }

  t.test(
    "a UDP stream to a Service follows its backend's decision within 1 s, both ways",
    async (t) => {
      const topo = await makeTopology(t, { ipv6: false });
      // 10.96.0.10 is exempt in both configs; its backend 198.18.0.1 only in the first.
      const withBackend = 'nonMasqueradeCIDRs: [10.0.0.0/8, 198.18.0.0/15]\nresyncInterval: 1h\n';
      const withoutBackend = 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n';
      const { write } = await agentOn(t, topo, 'udp', withBackend);
      await service(topo, 'udp', '10.96.0.10', V4.benchmarking);
      const stream = startStream(t, topo, 'udp', '10.96.0.10', 0.05, 30);
      await stream.until(Date.now(), fromPod, 3_000);
      const wrote = await write(withoutBackend);
      const masqueraded = await stream.until(wrote, fromNode, 1_000);
      t.ok(
        masqueraded.at - wrote <= 1_000,
        `masqueraded ${masqueraded.at - wrote} ms after the write`,
      );
      const back = await write(withBackend);
      const exempt = await stream.until(back, fromPod, 1_000);
      t.ok(exempt.at - back <= 1_000, `exempt again ${exempt.at - back} ms after the write`);
    },
  );

  t.test(
    'all: a TCP connection to a Service whose backend keeps its decision survives a change of the Service range',
    async (t) => {
      const topo = await makeTopology(t, { ipv6: false });
      // The Service range 10.96.0.0/12 is exempt, then not; the backend 198.18.0.1 is in both.
      const before = 'nonMasqueradeCIDRs: [10.0.0.0/8, 198.18.0.0/15]\nresyncInterval: 1h\n';
      const after = 'nonMasqueradeCIDRs: [10.200.0.0/16, 198.18.0.0/15]\nresyncInterval: 1h\n';
      const { write, agent } = await agentOn(t, topo, 'all', before);
      await service(topo, 'tcp', '10.96.0.20', V4.benchmarking);
      const tcp = startStream(t, topo, 'tcp', '10.96.0.20', 0.1, 30);
      const first = await tcp.until(Date.now(), fromPod, 3_000);
      const entry = await entries(topo, '-p', 'tcp', '-d', '10.96.0.20');
      t.equal(entry.length, 1, 'one TCP entry');
      const wrote = await write(after);
      await waitFor('the flush of that write', () =>
        agent.logs.some(
          (l) => /deleted the conntrack entries/.test(String(l.msg)) && l.generation === 2,
        )
          ? true
          : undefined,
      );
      await tcp.until(Date.now(), (a) => a.at > wrote + 300 || a.error !== undefined, 3_000);
      const later = tcp.answers.filter((a) => a.at >= wrote);
      t.ok(later.length > 0, `${later.length} answers after the write`);
      t.ok(
        later.every(
          (a) => a.error === undefined && a.address === first.address && a.port === first.port,
        ),
        'the same connection, untranslated, no error',
      );
      t.same(await entries(topo, '-p', 'tcp', '-d', '10.96.0.20'), entry, 'the same entry');
    },
  );

  t.test(
    'a stream to a slow peer (replies 135 ms late) never stays on its old decision',
    async (t) => {
      const topo = await makeTopology(t, { ipv6: true });
      await startSlowEcho(t, topo, 0.135);
      // The pods' own range is exempt in both, as in a cluster: a reply that comes back to a pod
      // after its flow's entry was deleted is then let through as the start of a flow the other
      // way.
      const pods = '10.244.0.0/16, "fd00:10:244::/48"';
      const exempt = `nonMasqueradeCIDRs: [${pods}, 10.9.0.0/16, "fd12::/16"]\nresyncInterval: 1h\n`;
      const masqueraded = `nonMasqueradeCIDRs: [${pods}]\nresyncInterval: 1h\n`;
      const { write } = await agentOn(t, topo, 'udp', exempt);
      const TRIALS = 5;
      const stuck: string[] = [];
      for (let trial = 1; trial <= TRIALS; trial++) {
        // A new stream each trial: a new flow, masqueraded after the first write.
        const streams = [V4.private10, V6.uniqueLocal].map((dst) => ({
          dst,
          stream: startStream(t, topo, 'udp', dst, 0.02, 30, SLOW_ECHO_PORT),
        }));
        const started = Date.now();
        for (const { stream } of streams) await stream.until(started, fromPod, 3_000);
        const wrote = await write(masqueraded);
        for (const { dst, stream } of streams) {
          // Within 3 s it is masqueraded, and every answer after that says so.
          await stream.until(wrote, fromNode, 3_000).catch(() => undefined);
          await stream.until(wrote + 4_000, () => true, 6_000);
          const late = stream.answers.filter((a) => a.at >= wrote + 3_000 && a.at < wrote + 4_000);
          if (late.length === 0 || !late.every(fromNode)) stuck.push(`${dst} in trial ${trial}`);
        }
        await write(exempt);
      }
      t.same(stuck, [], `masqueraded and staying so in all ${TRIALS} trials, IPv4 and IPv6`);
    },
  );
}
