// Two agents in one namespace with different configs, as during a rolling update with maxSurge
// (hardening round 2, item 8): they used to rewrite each other's table every resync (117 writes a
// minute each). Each now sees the other's write and says so; the newer (B, started second) wins:
// it writes its config again at once, the older holds back. Once one leaves, the other's config
// stays and its conflict ends.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import {
  httpGet,
  metricValue,
  startAgent,
  waitFor,
  type RunningAgent,
} from '../../harness/agent.js';
import { requireRoot, tempDir } from '../../harness/netns.js';
import { makeNode, setElements, sleep, untilGeneration } from '../helpers/node.js';

const OBSERVE_MS = 10_000;

if (requireRoot(t)) {
  const node = await makeNode(t, 'twoagents');
  const dir = tempDir(t, 'two');
  const configA = join(dir, 'a.yaml');
  const configB = join(dir, 'b.yaml');
  writeFileSync(configA, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n');
  writeFileSync(configB, 'nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\nresyncInterval: 1s\n');
  const portB = node.port + 1;
  const start = (config: string, port: number) =>
    startAgent(t, node.ns, ['--config', config, '--listen', `127.0.0.1:${port}`]);
  const writes = (agent: RunningAgent) =>
    agent.logs.filter((l) => l.msg === 'ruleset written to the kernel').length;
  const scrape = async (port: number, series: string) =>
    metricValue((await httpGet(node.ns, port, '/metrics')).body, series);

  const a = start(configA, node.port);
  await untilGeneration(node, 1, 10_000);
  const b = start(configB, portB);

  t.test(
    'the older holds back and the newer wins, instead of both rewriting every resync',
    async (t) => {
      const readyA: number[] = [];
      const readyB: number[] = [];
      const conflicts = { a: 0, b: 0 };
      const held: Array<{ at: number; elements: string }> = [];
      // Observed from B's first write on: before it, the kernel can only hold A's config (a busy
      // machine took seconds to start B, and half the samples fell before it wrote).
      await waitFor('B wrote', async () => (writes(b) > 0 ? true : undefined), 30_000, 50);
      const deadline = Date.now() + OBSERVE_MS;
      while (Date.now() < deadline) {
        held.push({ at: Date.now(), elements: (await setElements(node, 'nonmasq')).join() });
        readyA.push((await httpGet(node.ns, node.port, '/readyz')).status);
        readyB.push((await httpGet(node.ns, portB, '/readyz').catch(() => ({ status: 0 }))).status);
        conflicts.a = Math.max(
          conflicts.a,
          (await scrape(node.port, 'ipmasq_conflicting_writer')) ?? 0,
        );
        conflicts.b = Math.max(
          conflicts.b,
          (await scrape(portB, 'ipmasq_conflicting_writer').catch(() => 0)) ?? 0,
        );
        await sleep(250);
      }
      const total = writes(a) + writes(b);
      t.comment(`writes in ${OBSERVE_MS} ms: A ${writes(a)}, B ${writes(b)}`);
      // Fighting, each agent rewrites at every 1 s resync: about 20 writes in 10 s.
      t.ok(total <= 10, `${total} writes in ${OBSERVE_MS / 1000} s`);
      t.same(conflicts, { a: 1, b: 1 }, 'each exposed ipmasq_conflicting_writer 1');
      t.ok(readyA.includes(503) && readyB.includes(503), 'each was not ready while in conflict');
      const warned = (agent: RunningAgent, what: RegExp) =>
        agent.logs.filter((l) => l.level === 40 && what.test(String(l.msg))).length;
      t.same(
        [warned(a, /another ipmasq-agent/), warned(b, /another ipmasq-agent/)],
        [1, 1],
        'each warned once',
      );
      t.equal(warned(a, /holding back .*the newer agent wins/), 1, 'A, the older, holds back');
      t.equal(warned(b, /started before this one, so ours wins/), 1, 'B, the newer, wins');
      const bConfig = '10.0.0.0/8,169.254.0.0/16,192.168.0.0/16';
      const ofB = held.filter((h) => h.elements === bConfig).length;
      t.ok(ofB > held.length / 2, `the kernel held B's config in ${ofB} of ${held.length} samples`);
      // B puts its config back at its next resync (1 s) after each of A's writes; holding back as A
      // does would leave A's there for 1, 2, 4 s.
      let longest = 0;
      let since: number | undefined;
      for (const h of held) {
        if (h.elements !== bConfig) since ??= h.at;
        else if (since !== undefined) {
          longest = Math.max(longest, h.at - since);
          since = undefined;
        }
      }
      t.ok(longest < 2_500, `A's config stayed at most ${longest} ms before B's came back`);
    },
  );

  t.test("once A leaves, B's config stays and B is ready", async (t) => {
    a.child.kill('SIGTERM');
    t.same(await a.exited, { code: 0, signal: null });
    await waitFor(
      "B's config in the kernel and B ready",
      async () => {
        const elements = (await setElements(node, 'nonmasq')).join();
        const ready = (await httpGet(node.ns, portB, '/readyz')).status;
        return elements === '10.0.0.0/8,169.254.0.0/16,192.168.0.0/16' && ready === 200
          ? true
          : undefined;
      },
      30_000,
      250,
    );
    t.equal(await scrape(portB, 'ipmasq_conflicting_writer'), 0);
    const settled = writes(b);
    await sleep(3_000);
    t.equal(writes(b), settled, 'no more writes once it is alone');
    t.equal(b.child.exitCode, null);
  });
}
