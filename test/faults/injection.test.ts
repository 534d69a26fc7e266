// Config strings that carry nft syntax (README, "What it does": no config text reaches nftables as written)
// are refused by `--once` and by the running agent; another owner's table stays byte-for-byte
// the same and ours keeps the last good config.
import t from 'tap';
import { httpGet, listTable, runAgentOnce, startAgent, waitFor } from '../../harness/agent.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import {
  agentArgs,
  generation,
  makeNode,
  sleep,
  untilGeneration,
  untilUp,
  writeConfig,
} from '../helpers/node.js';

const hostile = [
  'nonMasqueradeCIDRs: ["10.0.0.0/8 }; flush ruleset; table ip x {"]',
  'nonMasqueradeCIDRs: ["10.0.0.0/8\\n}\\nflush ruleset\\n"]',
  '{"nonMasqueradeCIDRs": ["10.0.0.0/8\\"; delete table inet canary; \\""]}',
  'nonMasqueradeCIDRs: [10.0.0.0/8;flush]',
  'nonMasqueradeCIDRs: ["10.0.0.0/8,0.0.0.0/0"]',
  'masqueradeCIDRs: ["1.2.3.0/24 } ; add rule inet canary out drop ; {"]',
  'nonMasqueradeCIDRs: ["10.0.0.0/8\\u0000; flush ruleset"]',
  'nonMasqueradeCIDRs: ["include \\"/etc/passwd\\""]',
  'resyncInterval: "1s; flush ruleset"',
  'cidrLimit: "64 }; flush ruleset"',
];

if (requireRoot(t)) {
  const root = t;
  const node = await makeNode(t, 'inject');
  const canaryScript =
    'table inet canary {\n\tset keep { type ipv4_addr; flags interval; elements = { 10.1.0.0/16, 172.31.0.0/16 } }\n' +
    '\tchain out { type filter hook output priority 0; policy accept; ip daddr @keep accept; }\n}\n';
  await inNetns(node.ns, 'nft', ['-f', '-'], { input: canaryScript });
  const canary = await listTable(node.ns, 'inet', 'canary');
  const good = 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n';
  writeConfig(node, good);
  const once = (await runAgentOnce(node.ns, ['--once', '--config', node.configFile])).code;
  const ours = await listTable(node.ns, 'ip');

  t.test('--once refuses each, and writes nothing', async (t) => {
    t.equal(once, 0, 'the good config applied');
    for (const text of hostile) {
      writeConfig(node, text);
      const result = await runAgentOnce(node.ns, ['--once', '--config', node.configFile]);
      t.equal(result.code, 1, `refused: ${text}`);
      t.match(result.stdout, /invalid config, not applied/);
      t.equal(await listTable(node.ns, 'inet', 'canary'), canary, 'canary intact');
      t.equal(await listTable(node.ns, 'ip'), ours, 'our table unchanged');
    }
  });

  t.test('the running agent refuses each and keeps the last good ruleset', async (t) => {
    writeConfig(node, good);
    const agent = startAgent(root, node.ns, agentArgs(node));
    await untilUp(node);
    const g = await generation(node);
    let previous: string | null = null;
    for (const text of hostile) {
      writeConfig(node, text);
      previous = await waitFor("this config's error", async () => {
        const body = JSON.parse((await httpGet(node.ns, node.port, '/healthz')).body) as {
          configError: string | null;
        };
        return body.configError && body.configError !== previous ? body.configError : undefined;
      });
      t.equal(await listTable(node.ns, 'inet', 'canary'), canary, `canary intact after ${text}`);
    }
    await sleep(1_200); // one more resync with the last one in place
    t.equal(await generation(node), g, 'nothing written');
    t.equal(await listTable(node.ns, 'ip'), ours, 'our table holds the last good config');
    // A key is never rendered: nft syntax there is an unknown key, warned about and ignored.
    writeConfig(
      node,
      '"} ; flush ruleset ; {": 1\nnonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\nresyncInterval: 1s\n',
    );
    await untilGeneration(node, (g ?? 0) + 1);
    const listing = (await listTable(node.ns, 'ip')) ?? '';
    t.notMatch(listing, /flush|ruleset/, 'the key did not reach the kernel');
    t.match(listing, /elements = \{ 10\.0\.0\.0\/8, 169\.254\.0\.0\/16,\s+192\.168\.0\.0\/16 \}/);
    t.ok(
      agent.logs.some((l) => l.level === 40 && /unknown keys ignored: "?}/.test(String(l.msg))),
      'warned',
    );
    t.equal(await listTable(node.ns, 'inet', 'canary'), canary, 'canary intact at the end');
  });
}
