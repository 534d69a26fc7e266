// The operations surface (README, "Flags", "When it writes" and "HTTP"): flags and exit codes, --render without privileges
// or addon, --once, --cleanup, /healthz when kernel writes fail, /metrics, SIGINT and write logs.
// Every agent runs in a namespace of its own, so a flag wrongly accepted cannot touch the host.
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import {
  agentEnv,
  generationOf,
  httpGet,
  listTable,
  metricValue,
  runAgentOnce,
  startAgent,
  waitFor,
  type RunningAgent,
} from '../../harness/agent.js';
import { inNetns, makeNetns, packageRoot, requireRoot, tempDir } from '../../harness/netns.js';
import { TABLE_COMMENT } from '../../src/nftables/ownership.js';

if (requireRoot(t)) {
  // Agents and namespaces outlive the subtest that starts them: their teardown belongs to the file.
  const root = t;
  const dir = tempDir(t, 'ops');
  // tap's child_process wrapper puts its loaders back into NODE_OPTIONS; the agent runs without them.
  const plainNode = ['env', '-u', 'NODE_OPTIONS'];
  const runCli = (ns: string, args: string[], wrapper: string[] = []) =>
    runAgentOnce(ns, args, [...plainNode, ...wrapper]);
  const runDaemon = (ns: string, args: string[], wrapper: string[] = []) =>
    startAgent(root, ns, args, [...plainNode, ...wrapper]);
  const port = 9410;
  const listen = ['--listen', `127.0.0.1:${port}`];
  let files = 0;
  /** A config file of its own directory, so one test's writes never wake another's watcher. */
  function configFile(text: string): string {
    const sub = join(dir, `c${files++}`);
    mkdirSync(sub, { mode: 0o755 });
    const file = join(sub, 'ip-masq-agent');
    writeFileSync(file, text, { mode: 0o644 });
    return file;
  }
  async function freshNode(): Promise<string> {
    const ns = await makeNetns(root, 'ops');
    await inNetns(ns, 'ip', ['link', 'set', 'lo', 'up']);
    return ns;
  }
  const ruleset = async (ns: string) => (await inNetns(ns, 'nft', ['list', 'ruleset'])).stdout;
  const logLines = (stdout: string) =>
    stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  const untilFirstWrite = (agent: RunningAgent) =>
    waitFor(
      'the first write',
      () => (agent.logs.some((l) => l.generation === 1) ? true : undefined),
      10_000,
    );
  const goodConfig = configFile(
    'nonMasqueradeCIDRs: [10.0.0.0/8, 198.51.100.0/24]\nresyncInterval: 60s\n',
  );
  const badConfig = configFile('nonMasqueradeCIDRs: [10.0.0.0/8, 10.0.0.1/8]\n');

  t.test('flags: --version, unknown flags, bad names and ports, klog flags', async (t) => {
    const ns = await freshNode();
    const { version } = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as {
      version: string;
    };
    const v = await runCli(ns, ['--version']);
    t.same(v, { code: 0, stdout: `ipmasq-agent ${version}\n`, stderr: '' });

    const unknown = await runCli(ns, ['--once', '--config', goodConfig, '--bogus']);
    t.equal(unknown.code, 2, 'unknown flag: exit 2');
    t.match(unknown.stderr, /unknown flag: --bogus[\s\S]*Usage: ipmasq-agent/);
    t.equal(unknown.stdout, '');
    // Each refused with --once beside it: a flag wrongly accepted would have written a table.
    const refused: string[][] = [
      ['--table', 'has space'],
      ['--table=9starts-with-digit'],
      [`--table=${'x'.repeat(65)}`],
      ['-masq-chain=a.b'],
      ['--to-ports', '2000-1000'],
      ['--to-ports=1024-2000,1500-3000'],
      ['--to-ports=70000'],
    ];
    const results = await Promise.all(
      refused.map((flags) => runCli(ns, ['--once', '--config', goodConfig, ...flags])),
    );
    for (const [i, r] of results.entries()) {
      const flags = refused[i] ?? [];
      t.equal(r.code, 2, `${flags.join(' ')}: exit 2`);
      t.match(r.stderr, /--(table|masq-chain|to-ports)/, `${flags.join(' ')}: names the flag`);
    }
    t.equal(await ruleset(ns), '', 'nothing was written');

    for (const klog of [
      ['--v=2', '--logtostderr'],
      ['-v', '2', '--alsologtostderr'],
    ]) {
      const r = await runCli(ns, ['--once', '--config', goodConfig, ...klog]);
      t.equal(r.code, 0, `${klog.join(' ')}: accepted`);
      const warnings = logLines(r.stdout).filter((l) => l.level === 40);
      t.equal(warnings.length, 1, `${klog.join(' ')}: one warning`);
      t.match(warnings[0]?.msg, /klog/);
    }
    const rendered = await runCli(ns, [
      '--render',
      '--config',
      goodConfig,
      '--v=2',
      '--logtostderr',
    ]);
    t.equal(rendered.code, 0);
    t.equal(rendered.stderr.match(/klog/g)?.length, 1, '--render: one warning on stderr');
  });

  t.test(
    '--render without any capability: a script nft accepts; an invalid config exits 1',
    async (t) => {
      const ns = await freshNode();
      // Every capability dropped (not another uid: the checkout may sit under a 0700 directory).
      const noCaps = ['setpriv', '--bounding-set=-all', '--inh-caps=-all', '--no-new-privs'];
      const r = await runCli(ns, ['--render', '--config', goodConfig], noCaps);
      t.equal(r.code, 0, r.stderr);
      t.equal(r.stderr, '', 'no warnings, no errors');
      t.match(
        r.stdout,
        /table ip ipmasq \{[\s\S]*elements = \{ 10\.0\.0\.0\/8, 169\.254\.0\.0\/16, 198\.51\.100\.0\/24 \}/,
      );
      await t.resolves(
        inNetns(ns, 'nft', ['-c', '-f', '-'], { input: r.stdout }),
        'nft -c accepts it',
      );
      t.equal(await ruleset(ns), '', 'nothing was written');

      const bad = await runCli(ns, ['--render', '--config', badConfig], noCaps);
      t.equal(bad.code, 1);
      t.equal(bad.stdout, '');
      t.match(bad.stderr, /nonMasqueradeCIDRs\[1\]: "10\.0\.0\.1\/8" is not aligned/);
    },
  );

  t.test('--render never loads the addon: it works in a copy without build/', async (t) => {
    const ns = await freshNode();
    const copy = join(dir, 'no-addon');
    for (const part of ['bin', 'dist', 'package.json'])
      cpSync(join(packageRoot, part), join(copy, part), { recursive: true });
    symlinkSync(join(packageRoot, 'node_modules'), join(copy, 'node_modules'));
    const run = (args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        const bin = join(copy, 'bin', 'ipmasq-agent.js');
        execFile(
          'ip',
          ['netns', 'exec', ns, ...plainNode, process.execPath, bin, ...args],
          { cwd: copy, env: agentEnv(), timeout: 30_000 },
          (err, stdout, stderr) =>
            resolve({
              code: err ? (typeof err.code === 'number' ? err.code : -1) : 0,
              stdout,
              stderr,
            }),
        );
      });
    const rendered = await run(['--render', '--config', goodConfig]);
    t.equal(rendered.code, 0, rendered.stderr);
    const original = await runCli(ns, ['--render', '--config', goodConfig]);
    t.equal(rendered.stdout, original.stdout, 'the same script as with the addon present');
    // The control: in this copy, anything that does load the addon fails.
    const once = await run(['--once', '--config', goodConfig]);
    t.equal(once.code, 1);
    t.match(once.stdout + once.stderr, /cannot load the nftables_napi addon/);
  });

  t.test(
    '--once: exit 0 with the table; invalid config: exit 1, nothing in the kernel',
    async (t) => {
      const ns = await freshNode();
      const bad = await runCli(ns, ['--once', '--config', badConfig]);
      t.equal(bad.code, 1);
      t.match(bad.stdout, /not aligned/, 'the error is logged');
      t.equal(await ruleset(ns), '', 'nothing in the kernel');
      const good = await runCli(ns, ['--once', '--config', goodConfig]);
      t.equal(good.code, 0, good.stdout + good.stderr);
      t.equal(generationOf(await listTable(ns, 'ip')), 1);
      t.match(await listTable(ns, 'ip'), /198\.51\.100\.0\/24/);
    },
  );

  t.test('--cleanup removes our ip and ip6 tables and nothing else', async (t) => {
    const ns = await freshNode();
    // Same name in another family, and another owner's table: both must survive.
    const canary =
      'table inet ipmasq {\n\tset keep { type ipv4_addr; flags interval; elements = { 10.1.0.0/16 }; }\n}\n' +
      'table ip canary {\n\tchain out { type filter hook output priority 0; policy accept; ip daddr 192.0.2.9 counter; }\n}\n';
    await inNetns(ns, 'nft', ['-f', '-'], { input: canary });
    const canaryBefore = [
      await listTable(ns, 'inet', 'ipmasq'),
      await listTable(ns, 'ip', 'canary'),
    ];
    const once = await runCli(ns, ['--once', '--enable-ipv6', '--config', goodConfig]);
    t.equal(once.code, 0, once.stdout + once.stderr);
    t.ok(await listTable(ns, 'ip'), 'ip table made');
    t.ok(await listTable(ns, 'ip6'), 'ip6 table made');
    const cleanup = await runCli(ns, ['--cleanup']);
    t.equal(cleanup.code, 0, cleanup.stdout + cleanup.stderr);
    t.equal(await listTable(ns, 'ip'), null);
    t.equal(await listTable(ns, 'ip6'), null);
    t.same(
      [await listTable(ns, 'inet', 'ipmasq'), await listTable(ns, 'ip', 'canary')],
      canaryBefore,
      'canaries byte-for-byte',
    );
    t.equal((await runCli(ns, ['--cleanup'])).code, 0, 'again, with nothing to delete');
  });

  t.test(
    'a planted comment with a huge generation: made anew from generation 1, with a warning, also on a restart',
    async (t) => {
      const ns = await freshNode();
      const planted =
        'table ip ipmasq {\n\tcomment "ipmasq-agent generation 1000000000000000000000 config sha256:' +
        'ab'.repeat(32) +
        '"\n\tset nonmasq { typeof ip daddr; flags interval; elements = { 203.0.113.0/24 }; }\n}\n';
      await inNetns(ns, 'nft', ['-f', '-'], { input: planted });
      const first = await runCli(ns, ['--once', '--config', goodConfig]);
      t.equal(first.code, 0, first.stdout + first.stderr);
      const listing = await listTable(ns, 'ip');
      t.match(listing, `\tcomment "${TABLE_COMMENT}"\n`);
      t.match(
        listing,
        / jump IP-MASQ-AGENT comment "ipmasq-agent generation 1 config sha256:[0-9a-f]{64}/,
      );
      t.match(first.stdout, /the mark on our table does not parse/);
      t.equal(await listTable(ns, 'ip', 'ipmasq_upgrade'), null, 'no stand-in left');
      t.notMatch(listing, /203\.0\.113\.0/, 'the planted set is gone');
      const again = await runCli(ns, ['--once', '--config', goodConfig]);
      t.equal(again.code, 0);
      t.match(await listTable(ns, 'ip'), /generation 1 config/, 'a restart finds it right');
    },
  );

  t.test(
    "--table nat beside iptables-nft's nat tables: refused, and both left byte-for-byte",
    async (t) => {
      const ns = await freshNode();
      for (const tool of ['iptables-nft', 'ip6tables-nft']) {
        await inNetns(ns, tool, ['-t', 'nat', '-N', 'KUBE-SERVICES']);
        await inNetns(ns, tool, ['-t', 'nat', '-A', 'PREROUTING', '-j', 'KUBE-SERVICES']);
      }
      const before = [await listTable(ns, 'ip', 'nat'), await listTable(ns, 'ip6', 'nat')];
      t.match(before[0], /KUBE-SERVICES/);
      const once = await runCli(ns, ['--once', '--table', 'nat', '--config', goodConfig]);
      t.equal(once.code, 1, 'exit 1');
      t.match(once.stdout, /table ip nat exists and is not ipmasq-agent's/);
      const cleanup = await runCli(ns, ['--cleanup', '--table', 'nat']);
      t.equal(cleanup.code, 1, '--cleanup refuses too');
      t.match(cleanup.stdout, /not deleted: the table is not ipmasq-agent's/);
      t.same([await listTable(ns, 'ip', 'nat'), await listTable(ns, 'ip6', 'nat')], before);
    },
  );

  t.test('without CAP_NET_ADMIN: /healthz 503, retries with backoff, no crash', async (t) => {
    const ns = await freshNode();
    const dropNetAdmin = ['setpriv', '--bounding-set=-net_admin', '--inh-caps=-net_admin'];
    const agent = runDaemon(ns, ['--config', goodConfig, ...listen], dropNetAdmin);
    const failures = () =>
      agent.logs.filter((l) => l.level === 50 && /kernel write failed/.test(String(l.msg)));
    await waitFor('a failed write', () => (failures().length > 0 ? true : undefined), 10_000);
    const firstFailure = Date.now();
    // `ip netns exec` and setpriv exec in place: the pid is the agent's.
    const capEff = /CapEff:\s+([0-9a-f]+)/.exec(
      readFileSync(`/proc/${agent.child.pid}/status`, 'utf8'),
    )?.[1];
    t.equal((BigInt(`0x${capEff}`) >> 12n) & 1n, 0n, 'CAP_NET_ADMIN is not effective');

    const health = await httpGet(ns, port, '/healthz');
    t.equal(health.status, 503);
    const body = JSON.parse(health.body) as Record<string, unknown>;
    t.match(body, { status: 'unhealthy', generation: 0, configError: null });
    t.match(body.lastError, /Operation not permitted/);
    const ready = await httpGet(ns, port, '/readyz');
    t.equal(ready.status, 503);
    t.match(JSON.parse(ready.body), { status: 'not ready', reason: /Operation not permitted/ });
    t.ok(
      (metricValue(
        (await httpGet(ns, port, '/metrics')).body,
        'ipmasq_syncs_total{result="error"}',
      ) ?? 0) >= 1,
    );

    // Backoff 1 s, 2 s, 4 s…: about 3 attempts in 4.5 s; without it, one every 100 ms (~45).
    await new Promise((r) => setTimeout(r, 4_500 - (Date.now() - firstFailure)));
    const attempts =
      metricValue(
        (await httpGet(ns, port, '/metrics')).body,
        'ipmasq_syncs_total{result="error"}',
      ) ?? 0;
    t.ok(attempts >= 2 && attempts <= 5, `${attempts} failed syncs in ~4.5 s`);
    t.equal(failures().length, 1, 'one error line for the repeated cause, not one per attempt');
    t.equal(agent.child.exitCode, null, 'still running');
    t.equal((await httpGet(ns, port, '/healthz')).status, 503, 'still answering');
  });

  t.test('/metrics, 404, 405, write logs, SIGINT', async (t) => {
    const ns = await freshNode();
    const file = configFile('nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 60s\n');
    const agent = runDaemon(ns, ['--config', file, ...listen]);
    await untilFirstWrite(agent);
    await waitFor('the server', () =>
      httpGet(ns, port, '/healthz').then(
        (r) => r.status,
        () => undefined,
      ),
    );

    const text = (await httpGet(ns, port, '/metrics')).body;
    const series = [
      'ipmasq_generation',
      'ipmasq_syncs_total{result="applied"}',
      'ipmasq_syncs_total{result="unchanged"}',
      'ipmasq_syncs_total{result="error"}',
      'ipmasq_sync_duration_seconds_bucket{le="+Inf"}',
      'ipmasq_config_valid',
      'ipmasq_config_errors_total',
      'ipmasq_drift_repairs_total',
      'ipmasq_nonmasquerade_cidrs{family="ipv4"}',
      'ipmasq_last_success_timestamp_seconds',
      'ipmasq_legacy_chain_present',
      'ipmasq_large_set_warning',
      'process_cpu_user_seconds_total',
      'nodejs_eventloop_lag_seconds',
    ];
    for (const name of series) t.ok(Number.isFinite(metricValue(text, name)), `${name} present`);
    t.equal(metricValue(text, 'ipmasq_nonmasquerade_cidrs{family="ipv4"}'), 2);
    t.equal((await httpGet(ns, port, '/nope')).status, 404);
    t.equal(await httpStatus(ns, 'POST', '/healthz'), 405);

    // Two more writes: a config change, then a repair of a deleted table.
    writeFileSync(file, 'nonMasqueradeCIDRs: [10.0.0.0/8, 203.0.113.0/24]\nresyncInterval: 60s\n');
    await waitFor('generation 2', async () =>
      generationOf(await listTable(ns, 'ip')) === 2 ? true : undefined,
    );
    await inNetns(ns, 'nft', ['delete', 'table', 'ip', 'ipmasq']);
    agent.child.kill('SIGHUP');
    await waitFor('generation 3', async () =>
      generationOf(await listTable(ns, 'ip')) === 3 ? true : undefined,
    );
    const applied = metricValue(
      (await httpGet(ns, port, '/metrics')).body,
      'ipmasq_syncs_total{result="applied"}',
    );
    t.equal(applied, 3);
    const writeLines = agent.logs.filter(
      (l) => l.level === 30 && l.msg === 'ruleset written to the kernel',
    );
    t.same(
      writeLines.map((l) => l.generation),
      [1, 2, 3],
      'one info line per write',
    );
    for (const line of writeLines) {
      t.match(
        line,
        { nonMasqueradeCIDRs: { ipv4: Number, ipv6: 0 }, durationMs: Number },
        `generation ${line.generation}: counts and duration`,
      );
    }

    const started = Date.now();
    agent.child.kill('SIGINT');
    const { code } = await agent.exited;
    t.equal(code, 0, 'SIGINT: exit 0');
    t.ok(Date.now() - started < 5_000, `exited in ${Date.now() - started} ms`);
    t.equal(generationOf(await listTable(ns, 'ip')), 3, 'table left in place');
  });

  /** Status of a request with any method, from inside ns. */
  async function httpStatus(ns: string, method: string, path: string): Promise<number> {
    return (await httpGet(ns, port, path, method)).status;
  }
}
