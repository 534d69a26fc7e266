// Mixed nftables versions in one namespace, both directions, on the matrix of userlands reachable here
// (test/helpers/nft-versions.ts): another version's objects never kill the agent, and what the agent
// writes never breaks another version's nft.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { httpGet, listTable, runAgentOnce, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, makeNetns, requireRoot, type TapTest, tempDir } from '../../harness/netns.js';
import {
  listsRuleset,
  nftTools,
  requireMatrix,
  runNftTool,
  type NftTool,
} from '../helpers/nft-versions.js';

const PORT = 9412;

// What a neighbour of another version leaves in the namespace: plain `type` sets, interval and
// not, of an address and of a protocol (the kinds nft >= 1.1.2 writes with metadata older versions
// crash on).
const FOREIGN_TABLE = `table ip kp {
	set plain {
		type ipv4_addr
		elements = { 192.0.2.10 }
	}
	set ranges {
		type ipv4_addr
		flags interval
		elements = { 198.51.100.0/24 }
	}
	set protos {
		type inet_proto
		elements = { tcp, udp }
	}
}
`;

// A neighbour's transaction with set elements: the command whose cache fill reads every table.
const NEIGHBOUR_WRITE = `add table ip nb
add set ip nb s { typeof ip daddr; flags interval; }
add element ip nb s { 192.0.2.0/24, 203.0.113.0/24 }
`;

function configDir(t: TapTest): string {
  const dir = tempDir(t, 'versions');
  writeFileSync(
    join(dir, 'config.yaml'),
    'nonMasqueradeCIDRs: [10.0.0.0/8, 192.0.2.0/24]\nresyncInterval: 60s\n',
  );
  return join(dir, 'config.yaml');
}

function normalised(listing: string | null): string {
  return (listing ?? '').replace(/\s+/g, ' ').trim();
}

const tools = nftTools();
const own = tools.find((tool) => tool.own);

t.test('the matrix has at least two nft versions', async (t) => {
  if (!requireRoot(t)) return;
  const matrix = requireMatrix(t);
  if (!matrix) return;
  t.comment(
    `nft versions: ${matrix.map((tool) => `${tool.version}${tool.own ? ' (own)' : ''}`).join(', ')}`,
  );
  t.ok(matrix.length >= 2);
});

for (const writer of tools) {
  t.test(
    `another tool's sets written by nft ${writer.version}: --once applies where it can read them, else fails with the cause and no signal`,
    async (t) => {
      if (!requireRoot(t) || !requireMatrix(t) || !own) return;
      const ns = await makeNetns(t, 'ver-once');
      await runNftTool(ns, writer, ['-f', '-'], FOREIGN_TABLE);
      const readable = await listsRuleset(ns, own);
      t.comment(
        `own nft ${own.version} ${readable ? 'reads' : 'cannot read'} what ${writer.version} wrote`,
      );
      const config = configDir(t);
      const result = await runAgentOnce(ns, ['--once', '--config', config]);
      t.not(result.code, -1, 'the agent exited by itself, not by a signal');
      if (readable) {
        t.equal(result.code, 0, `--once succeeded: ${result.stderr}${result.stdout.slice(-500)}`);
        t.match(
          await listTable(ns, 'ip'),
          /jump IP-MASQ-AGENT comment "ipmasq-agent generation 1 /,
        );
      } else {
        t.equal(result.code, 1, '--once reports the failure with exit 1');
        t.match(result.stdout, /libnftables crashed \(SIG[A-Z]+\)/);
        t.match(result.stdout, /cannot read table ip kp \(not ours\)/);
        t.equal(await listTable(ns, 'ip'), null, 'nothing of ours was half-written');
      }
    },
  );
}

t.test(
  'the running agent beside a set its libnftables cannot read: alive, says why, recovers once it is gone',
  async (t) => {
    if (!requireRoot(t) || !requireMatrix(t) || !own) return;
    // A writer whose `type` sets this userland's libnftables cannot read, if there is one here.
    let found: { ns: string; writer: NftTool } | undefined;
    for (const writer of tools.filter((tool) => !tool.own)) {
      const ns = await makeNetns(t, 'ver-run');
      await runNftTool(ns, writer, ['-f', '-'], FOREIGN_TABLE);
      if (!(await listsRuleset(ns, own))) {
        found = { ns, writer };
        break;
      }
    }
    if (!found) {
      // Only a libnftables <= 1.1.1 crashes; a newer one reads every version's objects.
      t.comment(`nft ${own.version} reads every other version's sets: nothing to recover from`);
      t.pass('no version here crashes this libnftables');
      return;
    }
    const { ns, writer } = found;
    await inNetns(ns, 'ip', ['link', 'set', 'lo', 'up']);
    const agent = startAgent(t, ns, ['--config', configDir(t), '--listen', `127.0.0.1:${PORT}`]);
    const health = await waitFor(
      'an unhealthy /healthz naming the foreign table',
      async () => {
        const answer = await httpGet(ns, PORT, '/healthz').catch(() => undefined);
        return answer?.status === 503 && /ip kp/.test(answer.body) ? answer : undefined;
      },
      15_000,
      200,
    );
    const body = JSON.parse(health.body) as { lastError: string };
    t.match(
      body.lastError,
      /libnftables crashed \(SIGSEGV\).*cannot read table ip kp \(not ours\)/,
    );
    const ready = await httpGet(ns, PORT, '/readyz');
    t.equal(ready.status, 503, '/readyz answers 503');
    const metrics = await httpGet(ns, PORT, '/metrics');
    t.equal(metrics.status, 200, '/metrics answers');
    const crashes = /^ipmasq_libnftables_failures_total\{kind="crash"\} (\d+)/m.exec(metrics.body);
    t.ok(Number(crashes?.[1]) >= 1, 'the crash is counted');
    // Let a retry or two happen: the same cause is logged once.
    await new Promise((resolve) => setTimeout(resolve, 3_500));
    const errors = agent.logs.filter((line) => line.level === 50);
    t.equal(errors.length, 1, 'one error line for the repeated cause');
    t.equal(agent.child.exitCode, null, 'the agent is still running');

    await runNftTool(ns, writer, ['delete', 'table', 'ip', 'kp']);
    await waitFor(
      'the table once the foreign one is gone',
      async () => ((await listTable(ns, 'ip')) ? true : undefined),
      15_000,
      200,
    );
    const healthy = await waitFor(
      'a healthy /healthz',
      async () => {
        const answer = await httpGet(ns, PORT, '/healthz').catch(() => undefined);
        return answer?.status === 200 ? answer : undefined;
      },
      10_000,
      200,
    );
    t.equal((JSON.parse(healthy.body) as { lastError: unknown }).lastError, null);
    t.ok(agent.logs.some((line) => line.msg === 'kernel writes work again'));
  },
);

t.test(
  'what the agent writes is listed alike by every version, and written beside by each',
  async (t) => {
    if (!requireRoot(t) || !requireMatrix(t)) return;
    const ns = await makeNetns(t, 'ver-write');
    for (const layout of ['interval', 'concat']) {
      const result = await runAgentOnce(ns, [
        '--once',
        '--enable-ipv6',
        '--set-layout',
        layout,
        '--config',
        configDir(t),
      ]);
      t.equal(result.code, 0, `--once --set-layout ${layout}: ${result.stdout.slice(-300)}`);
      const listings = new Map<string, string>();
      for (const tool of tools) {
        t.ok(await listsRuleset(ns, tool), `nft ${tool.version}: list ruleset exits 0 (${layout})`);
        for (const family of ['ip', 'ip6']) {
          const listing = (await runNftTool(ns, tool, ['list', 'table', family, 'ipmasq'])).stdout;
          t.match(listing, /typeof ip6? daddr/, `nft ${tool.version} sees typeof sets`);
          const first = listings.get(family);
          if (first === undefined) listings.set(family, listing);
          else
            t.equal(
              normalised(listing),
              normalised(first),
              `nft ${tool.version} lists ${family} alike`,
            );
        }
        await runNftTool(ns, tool, ['-f', '-'], NEIGHBOUR_WRITE);
        t.pass(
          `nft ${tool.version}: a transaction with set elements beside ours exits 0 (${layout})`,
        );
        await runNftTool(ns, tool, ['delete', 'table', 'ip', 'nb']);
      }
    }
  },
);
