// Inputs that used to end the process or leak through /healthz (hardening round 2, items 2, 9, 11,
// 12), given to the running agent: it stays up, keeps and repairs the last good ruleset, logs each
// distinct error once, and never shows what the config path points at.
import { readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import t from 'tap';
import { httpGet, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, python, requireRoot } from '../../harness/netns.js';
import {
  agentArgs,
  generation,
  makeNode,
  setElements,
  sleep,
  untilGeneration,
  untilUp,
} from '../helpers/node.js';

const GOOD = 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n';
const SECRET = 's3cr3t-canary-value';

if (requireRoot(t)) {
  const node = await makeNode(t, 'hostile');
  writeFileSync(node.configFile, GOOD);
  const agent = startAgent(t, node.ns, agentArgs(node), ['env', `IPMASQ_TEST_SECRET=${SECRET}`]);
  await untilGeneration(node, 1, 10_000);
  await untilUp(node);
  const healthz = async () => {
    const r = await httpGet(node.ns, node.port, '/healthz');
    return { status: r.status, body: JSON.parse(r.body) as { configError: string | null } };
  };

  t.test(
    '100 000 nested "[": refused with one stable error; the agent lives and repairs',
    async (t) => {
      const g = (await generation(node)) ?? 0;
      writeFileSync(node.configFile, '['.repeat(100_000));
      const h = await waitFor('the config error', async () => {
        const r = await healthz();
        return r.body.configError ? r : undefined;
      });
      t.match(h.body.configError, /invalid YAML: nested more than 64 levels deep at line 1$/);
      t.equal(h.status, 200, 'healthy: the kernel holds the last good ruleset');
      await new Promise((r) => setTimeout(r, 3_000)); // three resyncs
      t.equal(agent.child.exitCode, null, 'still running');
      const errors = agent.logs.filter(
        (l) => l.level === 50 && /nested more than/.test(String(l.msg)),
      );
      t.equal(errors.length, 1, 'logged once, not once per resync');
      await inNetns(node.ns, 'nft', ['flush', 'ruleset']);
      await untilGeneration(node, g + 1, 5_000);
      t.same(
        await setElements(node, 'nonmasq'),
        ['10.0.0.0/8', '169.254.0.0/16'],
        'last good repaired',
      );
    },
  );

  t.test('a config symlinked to /proc/self/environ: the error shows none of it', async (t) => {
    rmSync(node.configFile, { force: true });
    symlinkSync('/proc/self/environ', node.configFile);
    const h = await waitFor('the config error', async () => {
      const r = await healthz();
      return r.body.configError && !/nested/.test(r.body.configError) ? r : undefined;
    });
    t.match(h.body.configError, /got a string of \d+ characters \(not shown\)|not valid UTF-8/);
    const everything = JSON.stringify(h.body) + agent.logs.map((l) => JSON.stringify(l)).join('\n');
    t.notOk(everything.includes(SECRET), 'no environment variable in /healthz or the logs');
    rmSync(node.configFile, { force: true });
    writeFileSync(node.configFile, GOOD);
    await waitFor('valid again', async () =>
      (await healthz()).body.configError === null ? true : undefined,
    );
  });
}

// Hardening round 2, item 6: half-open connections to the health port used to take every file
// descriptor, and the next libnftables call aborted the process. The server now holds at most a
// few dozen connections, each for at most 5 s.
const HOLDER = `
import socket, sys, time
port, count, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
held = []
for _ in range(count):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.send(b"GET /healthz HTTP/1.1\\r\\nHost: x\\r\\n")  # headers never finished
        held.append(s)
    except OSError:
        pass
print(len(held), flush=True)
time.sleep(hold)
`;

if (requireRoot(t)) {
  t.test(
    '400 half-open connections under a 256-descriptor limit: the agent still writes',
    async (t) => {
      const node = await makeNode(t, 'fdflood');
      writeFileSync(node.configFile, GOOD);
      const agent = startAgent(t, node.ns, agentArgs(node), ['prlimit', '--nofile=256:256']);
      await untilGeneration(node, 1, 10_000);
      await untilUp(node);
      const flood = inNetns(node.ns, python, ['-c', HOLDER, String(node.port), '400', '8'], {
        timeoutMs: 30_000,
      });
      await sleep(2_000); // the connections are open (or refused) by now
      writeFileSync(
        node.configFile,
        'nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\nresyncInterval: 1s\n',
      );
      await untilGeneration(node, 2, 5_000);
      t.same(await setElements(node, 'nonmasq'), [
        '10.0.0.0/8',
        '169.254.0.0/16',
        '192.168.0.0/16',
      ]);
      const fds = readdirSync(`/proc/${agent.child.pid}/fd`).length;
      t.ok(fds < 200, `${fds} descriptors open in the agent during the flood`);
      await flood;
      t.equal(agent.child.exitCode, null, 'still running');
      t.equal((await httpGet(node.ns, node.port, '/healthz')).status, 200);
    },
  );
}
