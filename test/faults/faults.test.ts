// Faults around a running agent (README, "Configuration" and "When it writes"): its table, a set, a rule or the whole ruleset
// removed behind its back, the config deleted, unreadable or replaced by a FIFO. After each, the
// kernel must hold the right ruleset again and the agent must still answer.
import { execFileSync } from 'node:child_process';
import { chmodSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import t from 'tap';
import { httpGet, startAgent, waitFor, type RunningAgent } from '../../harness/agent.js';
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

// Node's fs has no mkfifo; mkfifo(1) does it.
const mkfifo = (path: string) => execFileSync('mkfifo', [path]);

if (requireRoot(t)) {
  const root = t;
  const node = await makeNode(t, 'faults');
  const good = 'nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]\nresyncInterval: 1s\n';
  const goodElements = ['10.0.0.0/8', '100.64.0.0/10', '169.254.0.0/16'];
  writeConfig(node, good);
  let agent: RunningAgent = startAgent(root, node.ns, agentArgs(node));
  const nft = (...a: string[]) => inNetns(node.ns, 'nft', a);
  const healthz = async () => {
    const r = await httpGet(node.ns, node.port, '/healthz');
    return { status: r.status, body: JSON.parse(r.body) as Record<string, unknown> };
  };

  await untilGeneration(node, 1, 10_000);
  await untilUp(node);

  t.test('drift of every kind is repaired within a resync (1 s)', async (t) => {
    const faults: Array<[string, () => Promise<unknown>]> = [
      ['table deleted', () => nft('delete', 'table', 'ip', 'ipmasq')],
      ['set flushed', () => nft('flush', 'set', 'ip', 'ipmasq', 'nonmasq')],
      [
        'a rule deleted by handle',
        async () => {
          const listing = (await nft('-a', 'list', 'chain', 'ip', 'ipmasq', 'IP-MASQ-AGENT'))
            .stdout;
          const handle = /@nonmasq counter name "exempt" return # handle (\d+)/.exec(listing)?.[1];
          if (!handle) throw new Error(`no rule handle in ${listing}`);
          return nft('delete', 'rule', 'ip', 'ipmasq', 'IP-MASQ-AGENT', 'handle', handle);
        },
      ],
      [
        'an element added by hand',
        () => nft('add', 'element', 'ip', 'ipmasq', 'nonmasq', '{ 203.0.113.0/24 }'),
      ],
      ['the whole ruleset flushed', () => nft('flush', 'ruleset')],
    ];
    for (const [name, fault] of faults) {
      const before = (await generation(node)) ?? 0;
      const started = Date.now();
      await fault();
      await untilGeneration(node, before + 1, 4_000);
      t.same(
        await setElements(node, 'nonmasq'),
        goodElements,
        `${name}: repaired in ${Date.now() - started} ms`,
      );
    }
    t.equal(await metric(node, 'ipmasq_drift_repairs_total'), faults.length, 'each repair counted');
    t.equal((await healthz()).status, 200);
  });

  t.test('config deleted: the defaults, as the original agent does', async (t) => {
    const before = (await generation(node)) ?? 0;
    rmSync(node.configFile);
    await untilGeneration(node, before + 1, 3_000);
    t.same(await setElements(node, 'nonmasq'), [
      '10.0.0.0/8',
      '169.254.0.0/16',
      '172.16.0.0/12',
      '192.168.0.0/16',
    ]);
    t.equal((await healthz()).body.configError, null, 'a missing file is not an error');
  });

  t.test(
    'config replaced by a FIFO: refused without blocking; the last good ruleset stays',
    async (t) => {
      writeConfig(node, good);
      const g = (await waitFor('good config', async () => {
        const els = await setElements(node, 'nonmasq');
        return els.join() === goodElements.join() ? generation(node) : undefined;
      })) as number;
      // Made beside it and renamed over it: the file never goes missing (a missing file means the
      // defaults, a legitimate write in between that the test would then see).
      mkfifo(`${node.configFile}.fifo`);
      renameSync(`${node.configFile}.fifo`, node.configFile);
      const h = await waitFor('configError', async () => {
        const r = await healthz();
        return r.body.configError ? r : undefined;
      });
      t.match(h.body.configError, /ip-masq-agent: is neither a regular file nor a directory/);
      t.equal(h.status, 200, 'still healthy: the kernel holds the last good ruleset');
      t.equal((await httpGet(node.ns, node.port, '/readyz')).status, 503);
      await new Promise((r) => setTimeout(r, 2_500)); // two resyncs: neither may block on the FIFO
      t.equal((await healthz()).status, 200, 'still answering');
      t.equal(await generation(node), g);
      t.same(await setElements(node, 'nonmasq'), goodElements);
      rmSync(node.configFile);
    },
  );

  // Root ignores file modes through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH. Without them in the
  // bounding set, root is held to the owner's bits like anyone, so chmod 000 is a real EACCES.
  t.test(
    'config unreadable (chmod 000, agent without DAC override): kept last good, then recovers',
    async (t) => {
      agent.child.kill('SIGTERM');
      await agent.exited;
      writeConfig(node, good);
      agent = startAgent(root, node.ns, agentArgs(node), [
        'setpriv',
        '--bounding-set',
        '-dac_override,-dac_read_search',
        '--inh-caps',
        '-all',
      ]);
      await untilUp(node);
      const g = (await waitFor('first sync', async () =>
        (await healthz()).body.configHash ? generation(node) : undefined,
      )) as number;
      chmodSync(node.configFile, 0o000);
      // chmod changes no directory entry, so only the resync (1 s) sees it.
      const h = await waitFor('configError', async () => {
        const r = await healthz();
        return r.body.configError ? r : undefined;
      });
      t.match(h.body.configError, /ip-masq-agent: cannot be read: permission denied \(EACCES\)/);
      t.equal(h.status, 200);
      t.equal(await generation(node), g, 'nothing written');
      t.same(await setElements(node, 'nonmasq'), goodElements, 'the last good ruleset stays');
      const errors = agent.logs.filter(
        (l) => l.level === 50 && /permission denied/.test(String(l.msg)),
      );
      await new Promise((r) => setTimeout(r, 2_000));
      t.equal(
        agent.logs.filter((l) => l.level === 50 && /permission denied/.test(String(l.msg))).length,
        errors.length,
        'the error is logged once, not per resync',
      );
      chmodSync(node.configFile, 0o644);
      writeFileSync(node.configFile, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n');
      await untilGeneration(node, g + 1, 3_000);
      t.same(await setElements(node, 'nonmasq'), ['10.0.0.0/8', '169.254.0.0/16']);
      await waitFor('ready', async () =>
        (await httpGet(node.ns, node.port, '/readyz')).status === 200 ? true : undefined,
      );
    },
  );

  t.test(
    'a FIFO and a file renamed over the config in turn: the agent never blocks, applies the last good file',
    async (t) => {
      const g = (await generation(node)) ?? 0;
      const fifo = `${node.configFile}.fifo`;
      const file = `${node.configFile}.next`;
      for (let i = 0; i < 100; i++) {
        if (i % 2 === 0) {
          mkfifo(fifo);
          renameSync(fifo, node.configFile);
        } else {
          writeFileSync(
            file,
            'nonMasqueradeCIDRs: [10.0.0.0/8, 198.18.0.0/15]\nresyncInterval: 1s\n',
          );
          renameSync(file, node.configFile);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      // The loop ends on a regular file (i = 99): it must be applied, however the swaps interleaved.
      await untilGeneration(node, g + 1, 5_000);
      await waitFor('the last file applied', async () =>
        (await setElements(node, 'nonmasq')).join() === '10.0.0.0/8,169.254.0.0/16,198.18.0.0/15'
          ? true
          : undefined,
      );
      await new Promise((r) => setTimeout(r, 2_500)); // resyncs go on: nothing is stuck in open()
      const health = await healthz();
      t.equal(health.status, 200, 'healthy');
      t.equal(health.body.configError, null);
    },
  );

  t.test(
    'after all of it the agent is alive and quiet, and SIGTERM ends it within 5 s',
    async (t) => {
      t.equal(agent.child.exitCode, null, 'still running');
      t.equal(agent.stderr.join(''), '', 'nothing on stderr');
      const started = Date.now();
      agent.child.kill('SIGTERM');
      const exit = await agent.exited;
      t.same(exit, { code: 0, signal: null }, 'exit 0');
      t.ok(Date.now() - started < 5_000, `exited after ${Date.now() - started} ms`);
    },
  );
}
