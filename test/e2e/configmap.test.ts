// A ConfigMap update is one write: kubelet's atomic writer (test/helpers/configmap.ts) makes a burst
// of events in the config's directory, and the agent, settling for 10 ms after the last, reads the
// result once — in file mode and in directory mode, where keys appear and disappear in the swap and
// a read between its steps would see a config that never was. The steps here are 2 ms apart, as on
// a busy node (kubelet's own are microseconds apart): without the settling the agent writes twice.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { configMapWrite } from '../helpers/configmap.js';
import { generation, makeNode, setElements, sleep, untilGeneration } from '../helpers/node.js';
import { startAgent, waitFor, type RunningAgent } from '../../harness/agent.js';

const STEP_GAP_MS = 2;
const WRITE_LINE = 'ruleset written to the kernel';
const writes = (agent: RunningAgent) =>
  agent.logs.filter((entry) => entry.msg === WRITE_LINE).length;
const list = (cidrs: string[]) => `nonMasqueradeCIDRs: [${cidrs.join(', ')}]\n`;

/** Each version's keys; every version holds a CIDR of its own, so the set shows which one landed. */
const versions: Record<'file' | 'directory', Array<Record<string, string>>> = {
  file: [1, 2, 3, 4, 5, 6].map((v) => ({
    'ip-masq-agent': list([`198.18.${v}.0/24`]) + 'resyncInterval: 60s\n',
  })),
  directory: [
    { 'ip-masq-agent': list(['198.18.1.0/24']), 'ip-masq-b': list(['198.19.1.0/24']) },
    { 'ip-masq-agent': list(['198.18.2.0/24']) }, // a key removed
    { 'ip-masq-agent': list(['198.18.3.0/24']), 'ip-masq-c': list(['198.19.3.0/24']) }, // added
    { 'ip-masq-a0': list(['198.19.4.0/24']), 'ip-masq-agent': list(['198.18.4.0/24']) }, // replaced
    { 'ip-masq-agent': list(['198.18.5.0/24']), 'ip-masq-a0': list(['198.19.5.0/24']) },
    { 'ip-masq-agent': list(['198.18.6.0/24']), 'ip-masq-d': list(['198.19.6.0/24']) },
  ],
};

/** The CIDRs a version puts in the non-masquerade set beside the link-local default. */
function expected(keys: Record<string, string>): string[] {
  return Object.values(keys)
    .flatMap((text) => [...text.matchAll(/198\.1[89]\.\d+\.0\/24/g)].map((m) => m[0]))
    .sort();
}

t.test('one write per ConfigMap swap, with the swapped content', async (t) => {
  for (const mode of ['file', 'directory'] as const) {
    await t.test(`${mode} mode`, async (t) => {
      const node = await makeNode(t, `cm-${mode}`);
      const volume = join(node.dir, 'volume');
      mkdirSync(volume);
      const [first, ...rest] = versions[mode];
      await configMapWrite(volume, first as Record<string, string>);
      const config = mode === 'file' ? join(volume, 'ip-masq-agent') : volume;
      const agent = startAgent(t, node.ns, [
        '--config',
        config,
        '--listen',
        `127.0.0.1:${node.port}`,
        '--conntrack-flush=none',
      ]);
      await untilGeneration(node, 1, 10_000);
      // The kernel holds generation 1 before the agent logs its write: count from that line on (a
      // busy machine logged it after the next swap began, and the swap seemed to write twice).
      await waitFor('the first write logged', () => (writes(agent) >= 1 ? true : undefined));
      let gen = 1;
      for (const keys of rest) {
        const before = writes(agent);
        await configMapWrite(volume, keys, STEP_GAP_MS);
        await untilGeneration(node, gen + 1);
        gen++;
        // Whatever else the burst would cause has happened well within this.
        await sleep(400);
        t.equal(
          await generation(node),
          gen,
          `${Object.keys(keys).join(' + ')}: one new generation`,
        );
        await waitFor('the write log line', () => (writes(agent) > before ? true : undefined));
        t.equal(writes(agent), before + 1, 'one write logged');
        const inSet = (await setElements(node, 'nonmasq')).filter((c) => c.startsWith('198.1'));
        t.same(inSet.sort(), expected(keys), 'the set holds exactly the swapped content');
      }
    });
  }
});
