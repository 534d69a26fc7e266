// Migration from the original agent (README, "What it does"): its chain left in iptables-nft's `ip nat` is
// found and reported, left alone by default, and with --remove-legacy-chain deleted together with
// exactly the POSTROUTING rule that jumps to it. The rules are made by iptables-nft, as the original
// agent makes them, inside a namespace of the test's own.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import {
  httpGet,
  listTable,
  metricValue,
  startAgent,
  waitFor,
  type RunningAgent,
} from '../../harness/agent.js';
import { inNetns, makeNetns, requireRoot, tempDir } from '../../harness/netns.js';

if (requireRoot(t)) {
  // Agents and namespaces outlive the subtest that starts them: their teardown belongs to the file.
  const root = t;
  const dir = tempDir(t, 'legacy');
  const configFile = join(dir, 'ip-masq-agent');
  writeFileSync(configFile, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 60s\n');
  const port = 9410;

  async function freshNode(): Promise<string> {
    const ns = await makeNetns(root, 'legacy');
    await inNetns(ns, 'ip', ['link', 'set', 'lo', 'up']);
    return ns;
  }
  const iptables = (ns: string, ...args: string[]) =>
    inNetns(ns, 'iptables-nft', ['-t', 'nat', ...args]);
  /** nft's view of `ip nat` without counters: the probes' own loopback packets pass through it. */
  const natListing = async (ns: string) =>
    (await inNetns(ns, 'nft', ['-s', 'list', 'table', 'ip', 'nat'])).stdout;
  /** iptables' own view of `ip nat`, one rule or chain per line. */
  const natRules = async (ns: string) =>
    (await iptables(ns, '-S')).stdout.split('\n').filter(Boolean);

  /** The original agent's chain and jump, plus a rule and a chain of someone else's. */
  async function makeLegacyChain(ns: string, chain: string): Promise<void> {
    await iptables(ns, '-N', chain);
    await iptables(
      ns,
      '-A',
      chain,
      '-d',
      '10.0.0.0/8',
      '-m',
      'comment',
      '--comment',
      'ip-masq-agent: local traffic is not subject to MASQUERADE',
      '-j',
      'RETURN',
    );
    await iptables(
      ns,
      '-A',
      chain,
      '-m',
      'comment',
      '--comment',
      'ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)',
      '-j',
      'MASQUERADE',
    );
    await iptables(
      ns,
      '-A',
      'POSTROUTING',
      '-m',
      'comment',
      '--comment',
      `ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom ${chain} chain`,
      '-m',
      'addrtype',
      '!',
      '--dst-type',
      'LOCAL',
      '-j',
      chain,
    );
    await iptables(ns, '-N', 'KUBE-POSTROUTING');
    await iptables(
      ns,
      '-A',
      'KUBE-POSTROUTING',
      '-m',
      'mark',
      '--mark',
      '0x4000/0x4000',
      '-j',
      'MASQUERADE',
    );
    await iptables(ns, '-A', 'POSTROUTING', '-j', 'KUBE-POSTROUTING');
    await iptables(
      ns,
      '-A',
      'POSTROUTING',
      '-s',
      '10.244.0.0/16',
      '-d',
      '203.0.113.0/24',
      '-j',
      'MASQUERADE',
    );
  }

  /** Starts the agent and waits until its start-up check of `ip nat` is done (it precedes the first write). */
  async function startAndSettle(
    ns: string,
    flags: string[] = [],
  ): Promise<{ agent: RunningAgent; metrics: string }> {
    // tap's child_process wrapper puts its loaders back into NODE_OPTIONS; the agent runs without them.
    const agent = startAgent(
      root,
      ns,
      ['--config', configFile, '--listen', `127.0.0.1:${port}`, ...flags],
      ['env', '-u', 'NODE_OPTIONS'],
    );
    await waitFor(
      'the first write',
      () => (agent.logs.some((l) => l.generation === 1) ? true : undefined),
      10_000,
    );
    const metrics = await waitFor('the server', () =>
      httpGet(ns, port, '/metrics').then(
        (r) => r.body,
        () => undefined,
      ),
    );
    return { agent, metrics };
  }
  const legacyWarnings = (agent: RunningAgent) =>
    agent.logs.filter((l) => l.level === 40 && /original/.test(String(l.msg)));
  const errors = (agent: RunningAgent) => agent.logs.filter((l) => (l.level ?? 0) >= 50);

  t.test('found and left alone without --remove-legacy-chain', async (t) => {
    const ns = await freshNode();
    await makeLegacyChain(ns, 'IP-MASQ-AGENT');
    const before = await natListing(ns);
    const { agent, metrics } = await startAndSettle(ns);
    t.equal(metricValue(metrics, 'ipmasq_legacy_chain_present'), 1);
    const warnings = legacyWarnings(agent);
    t.equal(warnings.length, 1, 'one warning');
    t.match(warnings[0], { chain: 'IP-MASQ-AGENT', msg: /--remove-legacy-chain/ });
    t.same(errors(agent), []);
    t.equal(await natListing(ns), before, 'table ip nat unchanged');
  });

  for (const chain of ['IP-MASQ-AGENT', 'IP-MASQ']) {
    t.test(`--remove-legacy-chain deletes ${chain} and its jump, nothing else`, async (t) => {
      const ns = await freshNode();
      await makeLegacyChain(ns, chain);
      const before = await natRules(ns);
      const ours = new RegExp(`(-N|-A|-j) ${chain}( |$)`);
      t.equal(
        before.filter((rule) => ours.test(rule)).length,
        4,
        'the chain, its two rules and the jump',
      );
      const { agent, metrics } = await startAndSettle(ns, ['--remove-legacy-chain']);
      t.same(
        await natRules(ns),
        before.filter((rule) => !ours.test(rule)),
        'exactly those lines gone',
      );
      t.equal(metricValue(metrics, 'ipmasq_legacy_chain_present'), 0);
      t.match(
        legacyWarnings(agent).filter((line) => 'jumpRulesDeleted' in line),
        [{ chain, jumpRulesDeleted: 1 }],
        'the removal is logged',
      );
      const written = agent.logs.findIndex((line) => line.msg === 'ruleset written to the kernel');
      const removed = agent.logs.findIndex((line) => 'jumpRulesDeleted' in line);
      t.ok(written >= 0 && removed > written, 'removed only once our table was in the kernel');
      t.same(errors(agent), []);
    });
  }

  t.test('no ip nat table: no warning, gauge 0, no error, nothing made', async (t) => {
    const ns = await freshNode();
    const { agent, metrics } = await startAndSettle(ns, ['--remove-legacy-chain']);
    t.equal(metricValue(metrics, 'ipmasq_legacy_chain_present'), 0);
    t.same(legacyWarnings(agent), []);
    t.same(errors(agent), []);
    t.equal((await httpGet(ns, port, '/healthz')).status, 200);
    t.equal(await listTable(ns, 'ip', 'nat'), null, 'no ip nat table created');
  });
}
