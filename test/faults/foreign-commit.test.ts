// Another tool commits to our table around a config change (docs/writes.md, "When it writes"): one
// `nft` command — an element added or deleted, a rule inserted, the set flushed — at swept delays
// after the rename. Whatever the interleaving, the kernel ends up holding the config, well before
// the next resync (1 h here), and every /readyz 200 is true: the kernel holds the config when it is
// given.
import t from 'tap';
import { httpGet, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import { agentArgs, makeNode, metric, setElements, untilUp, writeConfig } from '../helpers/node.js';

const A = ['10.0.0.0/8'];
const B = ['10.0.0.0/8', '192.168.0.0/16'];
const configText = (cidrs: string[]) =>
  `nonMasqueradeCIDRs: [${cidrs.join(', ')}]\nresyncInterval: 1h\n`;

/** Each kind of foreign commit, as another tool or an admin would make it. */
const FOREIGN: Record<string, string[]> = {
  'add element': ['add', 'element', 'ip', 'ipmasq', 'nonmasq', '{ 198.51.100.0/24 }'],
  // The element a change from B to A deletes too: nft refuses our delete if this lands first.
  'delete element': ['delete', 'element', 'ip', 'ipmasq', 'nonmasq', '{ 192.168.0.0/16 }'],
  'insert rule': [
    'insert',
    'rule',
    'ip',
    'ipmasq',
    'IP-MASQ-AGENT',
    'ip',
    'daddr',
    '10.9.0.1',
    'masquerade',
  ],
  'flush set': ['flush', 'set', 'ip', 'ipmasq', 'nonmasq'],
};
const DELAYS_MS = [0, 3, 8, 15, 30, 60];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

if (requireRoot(t)) {
  const node = await makeNode(t, 'foreign');
  writeConfig(node, configText(A));
  const agent = startAgent(t, node.ns, agentArgs(node));
  // An agent that ends during the trials fails them all: what it said then is shown with them.
  let done = false;
  void agent.exited.then((how) => {
    if (done) return;
    t.fail(`the agent ended during the trials: ${JSON.stringify(how)}`);
    t.comment(`stderr: ${agent.stderr.join('').slice(-4000)}`);
    t.comment(`last log lines: ${JSON.stringify(agent.logs.slice(-10))}`);
  });
  t.teardown(() => {
    done = true;
  });
  await untilUp(node, agent);

  /** What makes the kernel right for `cidrs`: the set's elements and the decision chain's rules. */
  const kernelHolds = async (cidrs: string[]) => {
    const elements = (await setElements(node, 'nonmasq')).sort();
    const wanted = [...cidrs, '169.254.0.0/16'].sort();
    const { stdout } = await inNetns(node.ns, 'nft', [
      'list',
      'chain',
      'ip',
      'ipmasq',
      'IP-MASQ-AGENT',
    ]);
    const rules = stdout.split('\n').filter((line) => /^\t\t\S/.test(line));
    return JSON.stringify(elements) === JSON.stringify(wanted) && rules.length === 3
      ? true
      : `elements ${elements.join(', ')}; rules ${rules.map((r) => r.trim()).join(' | ')}`;
  };
  const ready = async () => (await httpGet(node.ns, node.port, '/readyz')).status === 200;
  await waitFor('ready on A', async () => ((await ready()) ? true : undefined));

  let current = A;
  for (const [kind, command] of Object.entries(FOREIGN)) {
    t.test(`${kind} around a config change, at ${DELAYS_MS.join(', ')} ms`, async (t) => {
      for (const delay of DELAYS_MS) {
        const next = current === A ? B : A;
        const hash = async () =>
          (
            JSON.parse((await httpGet(node.ns, node.port, '/healthz')).body) as {
              configHash: string;
            }
          ).configHash;
        const hashBefore = await hash();
        writeConfig(node, configText(next));
        await sleep(delay);
        // It may find nothing to act on (the element not there yet): that is one interleaving too.
        await inNetns(node.ns, 'nft', command).catch(() => undefined);
        current = next;
        // Ready again, for the new config: then the kernel must hold it.
        await waitFor(
          `ready on the new config after ${kind} at ${delay} ms`,
          async () => ((await hash()) !== hashBefore && (await ready()) ? true : undefined),
          10_000,
          10,
        );
        const holds = await kernelHolds(next);
        t.equal(holds, true, `${delay} ms: /readyz 200 and the kernel holds the config`);
      }
    });
  }

  t.test('without any probe: a foreign commit after a change is repaired at once', async (t) => {
    // Nothing asks /readyz here and the resync is an hour away: only hearing the commit repairs it.
    const planted = '198.51.100.0/24';
    for (const delay of [0, 20, 80, 200, 500]) {
      const next = current === A ? B : A;
      writeConfig(node, configText(next));
      current = next;
      await waitFor('the change in the kernel', async () =>
        (await kernelHolds(next)) === true ? true : undefined,
      );
      await sleep(delay);
      await inNetns(node.ns, 'nft', FOREIGN['add element'] as string[]);
      const added = Date.now();
      await waitFor(
        `the planted element gone (${delay} ms after the write)`,
        async () => ((await setElements(node, 'nonmasq')).includes(planted) ? undefined : true),
        5_000,
        10,
      );
      t.comment(`${delay} ms after the write: repaired ${Date.now() - added} ms after the commit`);
      t.equal(await kernelHolds(next), true, `${delay} ms: the kernel holds the config again`);
    }
    await inNetns(node.ns, 'nft', FOREIGN['insert rule'] as string[]);
    await waitFor('the inserted rule gone', async () =>
      (await kernelHolds(current)) === true ? true : undefined,
    );
    t.pass('an inserted rule is removed without a probe too');
  });

  t.test(
    'an element planted in late-replies: one to stay is repaired, one without a timeout of its own expires',
    async (t) => {
      const planted = (extra: string) =>
        inNetns(node.ns, 'nft', [
          'add',
          'element',
          'ip',
          'ipmasq',
          'late-replies',
          `{ 10.9.0.1 . 53 . 10.244.1.2 . 1000${extra} }`,
        ]);
      const held = async () =>
        (await inNetns(node.ns, 'nft', ['list', 'set', 'ip', 'ipmasq', 'late-replies'])).stdout;
      const repairs = agent.logs.filter((l) => /drifted/.test(l.msg ?? '')).length;
      await planted(' timeout 1h');
      await waitFor('ready again', async () => ((await ready()) ? true : undefined), 10_000, 20);
      t.notMatch(await held(), /10\.9\.0\.1/, 'the element meant to stay is gone');
      t.equal(
        agent.logs.filter((l) => /drifted/.test(l.msg ?? '')).length,
        repairs + 1,
        'repaired as drift',
      );
      await planted('');
      t.match(await held(), /expires [0-3]s/, "one without a timeout takes the set's 3 s");
      await waitFor(
        'it expired',
        async () => (/10\.9\.0\.1/.test(await held()) ? undefined : true),
        10_000,
        100,
      );
      t.pass('expired by itself');
    },
  );

  t.test(
    'one commit naming many tables (past 256, and past the reader keeps) that deletes our element: repaired at once, never ready meanwhile',
    async (t) => {
      for (const count of [300, 5_000]) {
        await waitFor('ready', async () =>
          (await ready()) && (await kernelHolds(current)) === true ? true : undefined,
        );
        // A `flush ruleset` and reload on a node of many tables is such a commit.
        const tables = Array.from({ length: count }, (_, i) => `ip many${i}`);
        const script =
          tables.map((table) => `add table ${table}`).join('\n') +
          '\ndelete element ip ipmasq nonmasq { 10.0.0.0/8 }\n';
        // The kernel takes seconds over 5 000 tables in one commit (5 s of system time here when
        // quiet), more on a busy machine.
        await inNetns(node.ns, 'nft', ['-f', '-'], { input: script, timeoutMs: 120_000 });
        const committed = Date.now();
        let readyWhileWrong = 0;
        await waitFor(
          `our element back after a commit naming ${count} tables`,
          async () => {
            const missing = !(await setElements(node, 'nonmasq')).includes('10.0.0.0/8');
            if (!missing) return true;
            // Ready while the element was missing, and still missing after the answer: wrong.
            if ((await ready()) && !(await setElements(node, 'nonmasq')).includes('10.0.0.0/8'))
              readyWhileWrong++;
            return undefined;
          },
          30_000,
          10,
        );
        t.comment(`${count} tables: repaired ${Date.now() - committed} ms after the commit`);
        t.equal(readyWhileWrong, 0, `${count} tables: never ready while our element was missing`);
        t.equal(await kernelHolds(current), true, `${count} tables: the kernel holds the config`);
        await inNetns(node.ns, 'nft', ['-f', '-'], {
          input: tables.map((table) => `delete table ${table}`).join('\n') + '\n',
          timeoutMs: 120_000,
        });
      }
    },
  );

  t.test('each interleaving was repaired, none waited for a resync', async (t) => {
    const repairs = agent.logs.filter((l) => /drifted|changed under it/.test(l.msg ?? '')).length;
    t.ok(repairs > 0, `${repairs} repairs logged`);
    t.equal(
      agent.logs.filter((l) => (l.msg ?? '').startsWith('kernel write failed')).length,
      0,
      'no write failed for good',
    );
    // Another tool's commit close to an element-only write of ours is never our write's fault.
    t.equal(
      await metric(node, 'ipmasq_fast_path_mismatches_total{path="element-write"}'),
      0,
      'no element-only write blamed for a commit that was not ours',
    );
    t.equal(
      (await metric(node, 'ipmasq_write_fallbacks_total{reason="EBUSY"}')) ?? 0,
      0,
      'no write of ours refused for its own order of parts',
    );
  });
}
