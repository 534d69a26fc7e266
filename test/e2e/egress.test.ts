// The egress policy keys on real packets (docs/egress-policy.md, "Egress policy"): a client on the
// node that is not a pod keeps its address under sourceCIDRs; only the chosen way out is
// masqueraded under egressInterfaces (an exact name and a wildcard); the remote sees exactly
// snatAddress, an address of its range, and a --to-ports port; a nodeNames file applies on its node
// only. Each case is written while the agent runs (in place), and a bad value keeps the last good
// ruleset.
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import {
  generationOf,
  httpGet,
  listTable,
  runAgentOnce,
  startAgent,
  waitFor,
} from '../../harness/agent.js';
import { inNetns, makeNetns, requireRoot, type TapTest } from '../../harness/netns.js';
import {
  makeTopology,
  NODE_IPV4,
  NODE_IPV6,
  POD_IPV4,
  POD_IPV6,
  probeSources,
  REMOTE_TARGETS_IPV4 as V4,
  REMOTE_TARGETS_IPV6 as V6,
  startEchoOn,
  startStream,
  type StreamAnswer,
  type Topology,
} from '../../harness/topology.js';

// A second source on the pod's side that is not a pod: a client whose traffic the node forwards.
const CLIENT_IPV4 = '10.250.1.2';
const CLIENT_IPV6 = 'fd00:250::2';
// Addresses of the node's own that the SNAT cases translate to.
const SNAT_IPV4 = ['192.0.2.10', '192.0.2.11'];
const SNAT_IPV6 = '2001:db8:1::10';
// A second way out: the node's ext1 to a second remote that holds OTHER_REMOTE_TARGET.
const EXT_NODE = '100.65.0.1';
const EXT_REMOTE = '100.65.0.2';
const OTHER_REMOTE_TARGET = '198.18.200.1';
const PODS = '10.244.0.0/16, "fd00:10:244::/48"';

const batch = (ns: string, lines: string[]) =>
  inNetns(ns, 'ip', ['-batch', '-'], { input: lines.join('\n') + '\n' });

/** The topology, plus the client on the pod's side and the second way out. */
async function egressTopology(t: TapTest): Promise<Topology> {
  const topo = await makeTopology(t, { ipv6: true });
  const remote2 = await makeNetns(t, 'remote2');
  await inNetns(topo.node, 'ip', [
    'link',
    'add',
    'ext1',
    'type',
    'veth',
    'peer',
    'name',
    'eth0',
    'netns',
    remote2,
  ]);
  await Promise.all([
    batch(topo.pod, [
      `address add ${CLIENT_IPV4}/24 dev eth0`,
      `address add ${CLIENT_IPV6}/64 dev eth0 nodad`,
    ]),
    batch(topo.node, [
      'address add 10.250.1.1/24 dev pod0',
      'address add fd00:250::1/64 dev pod0 nodad',
      ...SNAT_IPV4.map((a) => `address add ${a}/24 dev eth0`),
      // Deprecated at once, so that masquerade keeps choosing the node's own address.
      `address add ${SNAT_IPV6}/64 dev eth0 nodad preferred_lft 0`,
      'link set ext1 up',
      `address add ${EXT_NODE}/24 dev ext1`,
      `route add ${OTHER_REMOTE_TARGET}/32 via ${EXT_REMOTE}`,
    ]),
    batch(topo.remote, [
      `route add 10.250.0.0/16 via ${NODE_IPV4}`,
      `route add fd00:250::/48 via ${NODE_IPV6}`,
    ]),
    batch(remote2, [
      'link set lo up',
      'link set eth0 up',
      `address add ${EXT_REMOTE}/24 dev eth0`,
      `address add ${OTHER_REMOTE_TARGET}/32 dev lo`,
      `route add 10.244.0.0/16 via ${EXT_NODE}`,
    ]),
  ]);
  await startEchoOn(t, remote2, [OTHER_REMOTE_TARGET]);
  return topo;
}

/**
 * The agent on the topology's node with a config file it watches; `write` waits for the next
 * generation.
 */
async function agentOn(t: TapTest, topo: Topology, flags: string[] = []) {
  const dir = mkdtempSync(join(tmpdir(), 'ipmasq-egress-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, `nonMasqueradeCIDRs: [${PODS}]\nresyncInterval: 1h\n`);
  const agent = startAgent(t, topo.node, [
    '--config',
    file,
    '--listen',
    '127.0.0.1:9410',
    '--enable-ipv6',
    '--node-name',
    'n1',
    ...flags,
  ]);
  const generationNow = async () => generationOf(await listTable(topo.node, 'ip')) ?? 0;
  let generation = await waitFor('generation 1', async () =>
    (await generationNow()) >= 1 ? generationNow() : undefined,
  );
  /** Renames `text` in. */
  const put = (text: string) => {
    writeFileSync(`${file}.tmp`, text);
    renameSync(`${file}.tmp`, file);
  };
  return {
    agent,
    file: () => file,
    put,
    /**
     * Renames `text` in and waits until the kernel holds it; then (unless `keepFlows`) flushes
     * conntrack so probes decide anew. Resolves with the time the new generation was seen.
     */
    async write(text: string, keepFlows = false) {
      put(text);
      generation++;
      await waitFor(
        `generation ${generation}`,
        async () => ((await generationNow()) >= generation ? true : undefined),
        10_000,
        5,
      );
      const at = Date.now();
      if (!keepFlows) await inNetns(topo.node, 'conntrack', ['-F']).catch(() => undefined);
      return at;
    },
    async health() {
      return JSON.parse((await httpGet(topo.node, 9410, '/healthz')).body) as {
        configError: string | null;
        generation: number;
      };
    },
  };
}

/**
 * The source address the remote saw for one UDP probe from the pod's address (or from `from` in the
 * pod's namespace, which holds the client's address too: the probe names its source either way).
 */
async function seen(topo: Topology, dst: string, from?: string): Promise<string> {
  const source = from ?? (dst.includes(':') ? POD_IPV6 : POD_IPV4);
  const [answer] = await probeSources(topo, [dst], 'udp', { from: source });
  return answer!.address;
}

if (requireRoot(t)) {
  const base = `nonMasqueradeCIDRs: [10.0.0.0/8, "fd00:10:244::/48"]\nresyncInterval: 1h\n`;

  t.test(
    'sourceCIDRs: only the pods are masqueraded; a forwarded client keeps its address',
    async (t) => {
      const topo = await egressTopology(t);
      const { write } = await agentOn(t, topo);
      const outside4 = V4.outsideDefaultsA;
      const outside6 = V6.uniqueLocalOther;
      t.same(
        [await seen(topo, outside4), await seen(topo, outside4, CLIENT_IPV4)],
        [NODE_IPV4, NODE_IPV4],
        'without sourceCIDRs, as the original: every source masqueraded',
      );
      await write(`${base}sourceCIDRs: [${PODS}]\n`);
      t.same(
        [
          await seen(topo, outside4),
          await seen(topo, outside4, CLIENT_IPV4),
          await seen(topo, outside6),
          await seen(topo, outside6, CLIENT_IPV6),
        ],
        [NODE_IPV4, CLIENT_IPV4, NODE_IPV6, CLIENT_IPV6],
        'the pods masqueraded, the client untouched, IPv4 and IPv6',
      );
      await write(`${base}sourceCIDRs: [10.244.0.0/16]\n`);
      t.same(
        [await seen(topo, outside4), await seen(topo, outside6)],
        [NODE_IPV4, POD_IPV6],
        'IPv6 traffic from no listed source is left alone',
      );
      await write(base);
      t.equal(await seen(topo, outside4, CLIENT_IPV4), NODE_IPV4, 'the key removed: as before');
    },
  );

  t.test('egressInterfaces: only traffic leaving through them, names and wildcards', async (t) => {
    const topo = await egressTopology(t);
    const { write, file } = await agentOn(t, topo);
    const viaEth0 = V4.outsideDefaultsA;
    const both = async () => [await seen(topo, viaEth0), await seen(topo, OTHER_REMOTE_TARGET)];
    t.same(await both(), [NODE_IPV4, EXT_NODE], 'without the key: both ways out masqueraded');
    await write(`${base}egressInterfaces: ["ext*"]\n`);
    t.same(await both(), [POD_IPV4, EXT_NODE], 'ext*: only ext1');
    const live = await runAgentOnce(topo.node, [
      ...['--config', file(), '--enable-ipv6', '--explain', viaEth0, '--via', 'eth0', '--live'],
    ]);
    t.match(live.stdout, /not touched: it leaves through eth0, which egressInterfaces \(ext\*\)/);
    t.match(
      live.stdout,
      /live: generation \d+ in the kernel leaves it alone: its egressInterfaces rule/,
    );
    t.notMatch(live.stdout, /DRIFT/, '--live agrees with the kernel');
    await write(`${base}egressInterfaces: [eth0]\n`);
    t.same(await both(), [NODE_IPV4, POD_IPV4], 'eth0: only eth0');
    t.equal(await seen(topo, V6.uniqueLocalOther), NODE_IPV6, 'IPv6 through eth0 as well');
    await write(`${base}egressInterfaces: [eth0, ext1]\n`);
    t.same(await both(), [NODE_IPV4, EXT_NODE], 'both named');
    // Names a wildcard covers collapse before the kernel sees them (nft refuses the overlap).
    await write(`${base}egressInterfaces: [eth0, "eth*", ext1, "ext*"]\n`);
    t.same(await both(), [NODE_IPV4, EXT_NODE], 'eth0 beside eth*, ext1 beside ext*: written');
    t.match(
      await listTable(topo.node, 'ip'),
      /set egress-interfaces \{[^}]*elements = \{ "eth\*",\s+"ext\*" \}/,
      'the wildcards alone in the set',
    );
  });

  t.test('snatAddress: the remote sees exactly that address, or one of the range', async (t) => {
    const topo = await egressTopology(t);
    const { write, put, health } = await agentOn(t, topo);
    await write(`${base}snatAddress: ${SNAT_IPV4[0]}\nsnatAddressIPv6: "${SNAT_IPV6}"\n`);
    t.equal(await seen(topo, V4.outsideDefaultsA), SNAT_IPV4[0]);
    t.equal(await seen(topo, V6.uniqueLocalOther), SNAT_IPV6);
    t.equal(await seen(topo, V4.private10), POD_IPV4, 'an exempt destination stays exempt');
    await write(`${base}snatAddress: ${SNAT_IPV4[0]}-${SNAT_IPV4[1]}\n`);
    const sources = new Set<string>();
    for (let i = 0; i < 12; i++) sources.add(await seen(topo, V4.outsideDefaultsA));
    t.ok(
      [...sources].every((s) => SNAT_IPV4.includes(s)),
      `every probe translated into the range: ${[...sources].join(', ')}`,
    );
    t.equal(await seen(topo, V6.uniqueLocalOther), NODE_IPV6, 'IPv6 without its key: masqueraded');

    // A bad value: a clear error, and the kernel keeps the last good ruleset.
    const before = await listTable(topo.node, 'ip');
    put(`${base}snatAddress: "2001:db8::1"\negressInterfaces: ["eth0/1"]\n`);
    const error = await waitFor(
      'the config error',
      async () => (await health()).configError ?? undefined,
    );
    t.match(error, /snatAddress: "2001:db8::1" is an IPv6 address; this key takes IPv4/);
    t.equal(await listTable(topo.node, 'ip'), before, 'the kernel holds the last good ruleset');
    t.ok(SNAT_IPV4.includes(await seen(topo, V4.outsideDefaultsA)), 'and packets see it');
  });

  t.test('snatAddress with --to-ports: the address and a port of the ranges', async (t) => {
    const topo = await egressTopology(t);
    const { write } = await agentOn(t, topo, ['--to-ports', '40000-40099']);
    await write(`${base}snatAddress: ${SNAT_IPV4[1]}\nsnatAddressIPv6: "${SNAT_IPV6}"\n`);
    for (const dst of [V4.outsideDefaultsA, V6.uniqueLocalOther]) {
      const [source] = await probeSources(topo, [dst], 'udp');
      t.equal(source!.address, dst.includes(':') ? SNAT_IPV6 : SNAT_IPV4[1], `${dst}: the address`);
      t.ok(source!.port >= 40000 && source!.port <= 40099, `${dst}: port ${source!.port} in range`);
    }
  });

  t.test(
    'nodeNames: one config directory, two nodes, the scoped file on its node only',
    async (t) => {
      const dir = mkdtempSync(join(tmpdir(), 'ipmasq-nodes-'));
      t.teardown(() => rmSync(dir, { recursive: true, force: true }));
      writeFileSync(join(dir, 'ip-masq-base'), 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
      writeFileSync(join(dir, 'ip-masq-n1'), 'nodeNames: [n1]\nmasqueradeCIDRs: [10.9.0.0/16]\n');
      const nodes = await Promise.all(['n1', 'n2'].map(() => makeTopology(t, { ipv6: false })));
      nodes.forEach((topo, i) =>
        startAgent(t, topo.node, [
          '--config',
          dir,
          '--listen',
          '127.0.0.1:9410',
          '--node-name',
          `n${i + 1}`,
        ]),
      );
      for (const topo of nodes) {
        await waitFor('generation 1', async () =>
          generationOf(await listTable(topo.node, 'ip')) === 1 ? true : undefined,
        );
      }
      t.same(
        [await seen(nodes[0]!, V4.private10), await seen(nodes[1]!, V4.private10)],
        [NODE_IPV4, POD_IPV4],
        'n1 masquerades 10.9.0.1, n2 leaves it alone',
      );
      t.same(
        [await seen(nodes[0]!, V4.private10Other), await seen(nodes[1]!, V4.private10Other)],
        [POD_IPV4, POD_IPV4],
        'the unscoped file applies on both',
      );

      // Without a node name the scoped file cannot be judged: an error saying what is missing.
      const once = await runAgentOnce(nodes[1]!.node, ['--once', '--config', dir]);
      t.equal(once.code, 1, '--once fails');
      t.match(
        once.stdout + once.stderr,
        /ip-masq-n1: nodeNames: .*set --node-name or the NODE_NAME/,
      );
    },
  );

  t.test(
    'existing UDP flows follow a policy change within 1 s (--conntrack-flush udp)',
    async (t) => {
      const topo = await egressTopology(t);
      const { write } = await agentOn(t, topo);
      const from = (address: string) => (a: StreamAnswer) => a.address === address;
      const stream = startStream(t, topo, 'udp', V4.outsideDefaultsA, 0.05, 30);
      await stream.until(0, from(NODE_IPV4), 3_000);
      const follows = async (text: string, address: string, what: string) => {
        const wrote = await write(text, true);
        const first = await stream.until(wrote, from(address), 3_000);
        t.ok(
          first.at - wrote <= 1_000,
          `${what}: ${address} ${first.at - wrote} ms after the write`,
        );
      };
      await follows(`${base}snatAddress: ${SNAT_IPV4[0]}\n`, SNAT_IPV4[0]!, 'snatAddress given');
      await follows(`${base}snatAddress: ${SNAT_IPV4[1]}\n`, SNAT_IPV4[1]!, 'snatAddress changed');
      await follows(`${base}sourceCIDRs: [10.250.0.0/16]\n`, POD_IPV4, 'the pod left sourceCIDRs');
      await follows(
        `${base}sourceCIDRs: [10.244.0.0/16]\n`,
        NODE_IPV4,
        'the pod back in sourceCIDRs',
      );
      await follows(
        `${base}egressInterfaces: [ext1]\n`,
        POD_IPV4,
        'its interface left egressInterfaces',
      );
      await follows(base, NODE_IPV4, 'the policy removed');
    },
  );
}
