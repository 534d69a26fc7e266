// The agent without CAP_NET_ADMIN (docs/writes.md, "When it writes": retry with backoff, 1 s
// doubling, capped at resyncInterval). test/e2e/ops.test.ts checks the 503; this one watches the
// retry rhythm over ~15 s: no crash, no busy loop, one error line for the cause and one debug line
// per attempt.
import t from 'tap';
import { httpGet, startAgent } from '../../harness/agent.js';
import { requireRoot } from '../../harness/netns.js';
import { agentArgs, makeNode, metric, sleep, untilUp, writeConfig } from '../helpers/node.js';

const OBSERVE_MS = 15_500;

if (requireRoot(t)) {
  const node = await makeNode(t, 'nocap');
  writeConfig(node, 'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 4s\n');
  const agent = startAgent(
    t,
    node.ns,
    [...agentArgs(node), '--log-level', 'debug'],
    ['setpriv', '--bounding-set', '-net_admin', '--inh-caps', '-all'],
  );
  await untilUp(node);
  await sleep(OBSERVE_MS);

  t.test('backoff 1 s, 2 s, 4 s, then capped at resyncInterval (4 s)', async (t) => {
    const failures = agent.logs.filter(
      (l) => l.level === 20 && l.msg === 'sync failed; retrying with backoff',
    );
    const times = failures.map((l) => Number(l.time));
    const gaps = times.slice(1).map((time, i) => time - (times[i] as number));
    t.comment(`failures at +${times.map((x) => x - (times[0] as number)).join(', +')} ms`);
    // 0, 1, 3, 7, 11, 15 s: 5 or 6 attempts in the window, depending on start-up time.
    t.ok(
      failures.length >= 5 && failures.length <= 6,
      `${failures.length} attempts in ${OBSERVE_MS} ms`,
    );
    // Never sooner than the backoff says (a slow attempt on a busy machine only makes a gap
    // longer), and never so late that the doubling or the cap is lost.
    const expected = [1_000, 2_000, 4_000, 4_000, 4_000];
    gaps.forEach((gap, i) => {
      const want = expected[i] as number;
      t.ok(gap >= want - 50 && gap < want + 1_000, `gap ${i + 1}: ${gap} ms (want ${want})`);
    });
    t.match(
      String((failures[0]?.err as { message?: string } | undefined)?.message),
      /Operation not permitted/,
    );
  });

  t.test('no crash, no flood: unhealthy with the reason, few log lines', async (t) => {
    t.equal(agent.child.exitCode, null, 'still running');
    const health = await httpGet(node.ns, node.port, '/healthz');
    t.equal(health.status, 503);
    t.match(JSON.parse(health.body).lastError, /Operation not permitted/);
    t.equal(await metric(node, 'ipmasq_generation'), 0, 'nothing written');
    const errors = await metric(node, 'ipmasq_syncs_total{result="error"}');
    t.ok(errors !== undefined && errors <= 7, `${errors} failed syncs`);
    // start-up lines + one error for the cause + the legacy-chain check; retries only at debug.
    const lines = agent.logs.filter((l) => Number(l.level) >= 30);
    t.ok(lines.length <= 8, `${lines.length} log lines at info and above in ${OBSERVE_MS} ms`);
    const errorLines = lines.filter(
      (l) => l.level === 50 && /kernel write failed/.test(String(l.msg)),
    );
    t.equal(errorLines.length, 1, 'one error line for the repeated cause');
    // libnftables 1.0.6 prints this itself on fd 2, past the addon's error buffer: one line per
    // failed call (the legacy-chain check and each attempt), so it follows the backoff too.
    const stderrLines = agent.stderr.join('').split('\n').filter(Boolean);
    t.ok(
      stderrLines.every((line) => line === 'Operation not permitted (you must be root)'),
      "only libnftables' EPERM line on stderr",
    );
    t.ok(stderrLines.length <= (errors ?? 0) + 2, `${stderrLines.length} stderr lines`);
  });
}
