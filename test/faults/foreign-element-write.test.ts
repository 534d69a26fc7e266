// Another tool's commit close to an element-only write of ours (docs/writes.md, "Beside a busy
// node"): at 4 500 CIDRs a one-CIDR edit goes over netlink as an element batch, audited a moment
// later against the whole list it meant. Another tool adds an element to our set at swept delays
// after the config's rename — before, during and just after our write, and around its audit. The
// audit compares against what nftables' notifications say happened: the foreign element is drift,
// repaired, and never our write's fault (no fast-path mismatch, no error).
import t from 'tap';
import { httpGet, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import { agentArgs, makeNode, metric, untilUp, writeConfig } from '../helpers/node.js';

const SIZE = 4_500;
const DELAYS_MS = [0, 2, 5, 8, 12, 16, 20, 25, 30, 40, 50, 60, 80, 100, 150];
// Above 2 000 CIDRs the set is concatenated (--set-layout auto): address . protocol.
const PLANTED = '198.51.100.0/24 . 0-255';
const EXTRA = '203.0.113.0/24';

/** `SIZE` non-adjacent /24s from 20.0.0.0, and EXTRA when `extra`. */
function configText(extra: boolean): string {
  const lines = ['nonMasqueradeCIDRs:'];
  for (let i = 0; i < SIZE; i++) {
    const n = i * 2;
    lines.push(`  - ${20 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}.0/24`);
  }
  if (extra) lines.push(`  - ${EXTRA}`);
  lines.push(`cidrLimit: ${SIZE + 10}`, 'resyncInterval: 1h', '');
  return lines.join('\n');
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

if (requireRoot(t)) {
  t.test(`a foreign element beside our element-only writes at ${SIZE}`, async (t) => {
    const node = await makeNode(t, 'fewrite');
    writeConfig(node, configText(false));
    const agent = startAgent(t, node.ns, agentArgs(node));
    await untilUp(node, agent);
    const ready = async () => (await httpGet(node.ns, node.port, '/readyz')).status === 200;
    const health = async () =>
      JSON.parse((await httpGet(node.ns, node.port, '/healthz')).body) as {
        configHash: string;
        generation: number;
      };
    const has = (element: string) =>
      inNetns(node.ns, 'nft', ['get', 'element', 'ip', 'ipmasq', 'nonmasq', `{ ${element} }`]).then(
        () => true,
        () => false,
      );
    await waitFor('ready', async () => ((await ready()) ? true : undefined), 60_000);
    // The log says how each write went (docs/observability.md): `via` netlink is an element batch.
    const written = (l: (typeof agent.logs)[number]) => l.msg === 'ruleset written to the kernel';
    const drifted = (l: (typeof agent.logs)[number]) => /drifted/.test(l.msg ?? '');

    // Each edit goes as an element-only write, unless the planted element came first: then the
    // agent found drift before it wrote, and its repair (a whole write) carried the edit too. On a
    // busy machine the short delays land there, as the agent reads the renamed file late.
    const ways: Array<'element-only' | 'repair' | 'whole'> = [];
    let extra = false;
    for (const delay of DELAYS_MS) {
      extra = !extra;
      const before = (await health()).configHash;
      const from = agent.logs.length;
      writeConfig(node, configText(extra));
      await sleep(delay);
      await inNetns(node.ns, 'nft', [
        'add',
        'element',
        'ip',
        'ipmasq',
        'nonmasq',
        `{ ${PLANTED} }`,
      ]);
      await waitFor(
        `${delay} ms: the edit in, the planted element gone, ready, its writes logged`,
        async () => {
          const now = await health();
          return now.configHash !== before &&
            (await ready()) &&
            !(await has(PLANTED)) &&
            (await has(`${EXTRA} . 0-255`)) === extra &&
            agent.logs.some((l) => written(l) && l.generation === now.generation)
            ? true
            : undefined;
        },
        20_000,
        20,
      );
      const since = agent.logs.slice(from);
      const first = since.findIndex(written);
      ways.push(
        since[first]?.via === 'netlink'
          ? 'element-only'
          : since.slice(0, first).some(drifted)
            ? 'repair'
            : 'whole',
      );
    }
    t.comment(`by delay: ${DELAYS_MS.map((d, i) => `${d} ms ${ways[i]}`).join(', ')}`);
    t.same(
      DELAYS_MS.filter((_, i) => ways[i] === 'whole'),
      [],
      'each edit went as an element-only write, or in the repair of drift found before it',
    );
    t.ok(ways.includes('element-only'), 'the edits went as element-only writes');
    t.equal(
      (await metric(node, 'ipmasq_fast_path_mismatches_total{path="element-write"}')) ?? 0,
      0,
      'no element-only write blamed for a commit that was not ours',
    );
    const errors = agent.logs.filter((l) => (l.level ?? 0) >= 50);
    t.same(
      errors.map((l) => l.msg),
      [],
      'nothing logged as an error',
    );
    t.ok(
      agent.logs.some((l) => /drifted/.test(l.msg ?? '')),
      'the planted elements were repaired as drift',
    );
  });
}
