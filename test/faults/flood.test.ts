// A flood of other tools' commits (docs/writes.md, "Beside a busy node"): tens of thousands of
// commits to another table as fast as nft makes them, while the agent writes 100 000 CIDRs anew (a
// config whose every CIDR changed); then another tool deletes one of our elements, and the flood
// goes on at once. The notifications may overflow (the agent then assumes its tables were touched); the
// element comes back without a restart or a resync (1 h here), and /readyz never says 200 while it
// is missing.
import { spawn } from 'node:child_process';
import t from 'tap';
import { httpGet, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import { agentArgs, makeNode, untilUp, writeConfig } from '../helpers/node.js';

t.setTimeout(600_000);
const SIZE = 100_000;
/** Commits in each half of the flood: during our whole write, and after the element's deletion. */
const HALF = 20_000;

/** `count` non-adjacent /24s from FIRST.0.0.0 on (four first octets for 100 000). */
function configText(count: number, first: number): string {
  const lines = ['nonMasqueradeCIDRs:'];
  for (let i = 0; i < count; i++) {
    const n = i * 2;
    lines.push(`  - ${first + (n >> 16)}.${(n >> 8) & 255}.${n & 255}.0/24`);
  }
  lines.push(`cidrLimit: ${count + 10}`, 'resyncInterval: 1h', '');
  return lines.join('\n');
}

const floodLines = (from: number, count: number) =>
  Array.from({ length: count }, (_, i) => {
    const n = from + i;
    return `add element ip flood s { 10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255} }`;
  }).join('\n') + '\n';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

if (requireRoot(t)) {
  t.test(
    `${2 * HALF} commits elsewhere around a whole write at ${SIZE}, one of ours deleted amid them`,
    async (t) => {
      const node = await makeNode(t, 'flood');
      writeConfig(node, configText(SIZE, 20));
      const agent = startAgent(t, node.ns, agentArgs(node));
      await untilUp(node, agent);
      const health = async () =>
        JSON.parse((await httpGet(node.ns, node.port, '/healthz')).body) as { generation: number };
      // A probe not answered within the client's 5 s is a failed one, as the kubelet counts it
      // (its own timeout is 2 s): under the flood a readiness look may wait that long.
      const ready = async () =>
        (await httpGet(node.ns, node.port, '/readyz').catch(() => ({ status: 0 }))).status === 200;
      await waitFor('ready', async () => ((await ready()) ? true : undefined), 120_000);
      await inNetns(node.ns, 'nft', ['add table ip flood; add set ip flood s { type ipv4_addr; }']);

      // Above 2 000 CIDRs the set is concatenated (--set-layout auto): address . protocol.
      const element = '30.0.2.0/24 . 0-255';
      /** Whether the element is missing, by nft; under the flood this may take seconds. */
      const missing = () =>
        inNetns(node.ns, 'nft', ['get', 'element', 'ip', 'ipmasq', 'nonmasq', `{ ${element} }`], {
          timeoutMs: 120_000,
        }).then(
          () => false,
          () => true,
        );

      /** One nft session committing each line on its own; resolves when it has made them all. */
      const flood = (lines: string) => {
        const writer = spawn('ip', ['netns', 'exec', node.ns, 'nft', '-i'], {
          stdio: ['pipe', 'ignore', 'ignore'],
        });
        writer.stdin.on('error', () => undefined);
        t.teardown(() => writer.kill('SIGKILL'));
        const ended = new Promise<number>((resolve) =>
          writer.once('exit', () => resolve(Date.now())),
        );
        writer.stdin.end(lines);
        return ended;
      };

      // Every CIDR changed: the sets are written anew amid the flood's first half.
      const firstHalf = flood(floodLines(0, HALF));
      const before = (await health()).generation;
      writeConfig(node, configText(SIZE, 30));
      await waitFor(
        'the whole write in',
        async () =>
          (await health().catch(() => ({ generation: -1 }))).generation > before ? true : undefined,
        120_000,
        20,
      );
      await firstHalf;
      t.equal(await missing(), false, `${element} is in the kernel after the write`);
      // The element goes between the halves, while no one else commits (a separate nft cannot
      // delete from a 100 000-element set amid a flood: it reads the set first, and starts again at
      // each commit); the flood's second half starts at once, so the agent hears the deletion and
      // makes its repair amid it.
      await inNetns(
        node.ns,
        'nft',
        ['delete', 'element', 'ip', 'ipmasq', 'nonmasq', `{ ${element} }`],
        {
          timeoutMs: 60_000,
        },
      );
      const ended = flood(floodLines(HALF, HALF));

      // Probed as the kubelet would until the flood ends. The element comes back only by the
      // agent's write, and nothing takes it away again: a look begun after a 200 that finds it
      // missing proves that 200 came while it was. (A probe unanswered within the client's 5 s
      // counts as failed, as the kubelet's own 2 s timeout would.)
      let probes = 0;
      let unready = 0;
      let lies = 0;
      let checked = false;
      let floodEnd = 0;
      void ended.then((at) => (floodEnd = at));
      while (floodEnd === 0) {
        probes++;
        if (!(await ready())) unready++;
        else if (!checked) {
          checked = true;
          if (await missing()) lies++;
        }
        await sleep(100);
      }
      // After the flood: each look is quick again.
      let back = 0;
      while (Date.now() - floodEnd < 60_000) {
        if (!(await missing())) {
          back = Date.now();
          break;
        }
        await sleep(20);
      }
      t.ok(back > 0, `${element} back`);
      t.comment(
        `${probes} probes during the flood; the first look after it ended found the element back ${back - floodEnd} ms after`,
      );
      // Measured 0.74-0.78 s on an idle 2-core machine (the look itself takes half a second at
      // 100 000). A read attempt begun in the flood's last moments may still run its 5 s (docs/writes.md,
      // "Beside a busy node") before the whole write: the bound leaves room for a saturated machine.
      t.ok(
        back - floodEnd <= 30_000,
        `back within 30 s of the flood's end (${back - floodEnd} ms)`,
      );
      t.comment(`/readyz not 200 in ${unready} of ${probes} probes during the flood`);
      t.equal(lies, 0, `/readyz never 200 while ${element} was missing`);
      const { stdout } = await inNetns(node.ns, 'nft', ['list', 'set', 'ip', 'flood', 's'], {
        timeoutMs: 120_000,
      });
      const commits = stdout.match(/10\.\d+\.\d+\.\d+/g)?.length ?? 0;
      t.equal(commits, 2 * HALF, `the other tool made all ${2 * HALF} commits`);
    },
  );
}
