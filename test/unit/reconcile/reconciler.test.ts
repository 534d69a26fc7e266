// The reconciler against the fake kernel: when it reads, when it writes, what it counts and logs.
import { createHash } from 'node:crypto';
import { pino } from 'pino';
import t from 'tap';
import {
  MAX_GENERATION,
  STAND_IN_COMMENT,
  TABLE_COMMENT,
} from '../../../src/nftables/ownership.js';
import type { Config, LoadResult } from '../../../src/config/types.js';
import { ConfigError } from '../../../src/config/types.js';
import { frozenElements } from '../../../src/nftables/types.js';
import { NftError } from '../../../src/kernel/addon.js';
import { markText } from '../../../src/nftables/ownership.js';
import { withoutTableComment } from '../../../src/nftables/render.js';
import { Reconciler, type ReconcilerDeps } from '../../../src/reconcile/reconciler.js';
import { listingIs } from '../../../src/nftables/listing.js';
import { compile } from '../../../src/compile.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';
import { FakeKernel } from '../../helpers/fake-kernel.js';
import { egressKeys } from '../../helpers/config.js';
import type { EgressPolicy } from '../../../src/config/types.js';
import type { Kernel } from '../../../src/kernel/ports.js';
import { compileOptions } from '../../helpers/compile-options.js';

const ip = { family: 'ip', name: 'ipmasq' } as const;

/** Another writer's commit to our table: its mark on the jump rule (another config), and `edit`. */
function writtenBy(
  kernel: FakeKernel,
  writer: string,
  generation: number,
  edit: (listing: string) => string = (listing) => listing,
): void {
  kernel.tamper(ip, (listing) =>
    edit(listing).replace(
      /jump IP-MASQ-AGENT comment "[^"]*"/,
      `jump IP-MASQ-AGENT comment "${markText({ generation, hash: 'ee'.repeat(32), writer })}"`,
    ),
  );
}

function config(
  ipv4: string[],
  hash = createHash('sha256').update(ipv4.join(',')).digest('hex'),
): Config {
  return {
    nonMasquerade: { ipv4, ipv6: [] },
    masquerade: { ipv4: [], ipv6: [] },
    hash,
    sources: [],
    keys: {},
  };
}

/** Each setup is a process started after the one before: its writer id is newer. */
let writers = 0;

function setup(
  kernel = new FakeKernel(),
  first: LoadResult = { ok: true, config: config(['10.0.0.0/8']), warnings: [] },
  overrides: Partial<ReconcilerDeps> = {},
) {
  const logs: Array<{ level: number; msg: string }> = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => logs.push(JSON.parse(line)) });
  const metrics = new AgentMetrics();
  let current = first;
  writers++;
  const writer = `${(1764640000000 + writers).toString(36)}.000`;
  const reconciler = new Reconciler({
    configPath: '/cfg',
    loadOptions: { enableIPv6: false, nomasqAllReservedRanges: false },
    compileOptions: compileOptions(),
    loadConfig: async () => current,
    kernel,
    logger,
    metrics,
    largeSetThreshold: 3,
    conntrackFlush: 'none',
    legacy: { chains: [], remove: false },
    writer,
    ...overrides,
  });
  const metric = async (name: string, labels: Record<string, string> = {}) => {
    const m = await metrics.registry.getSingleMetric(name)?.get();
    return m?.values.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))
      ?.value;
  };
  return {
    kernel,
    reconciler,
    writer,
    logs,
    metric,
    setConfig: (next: LoadResult) => (current = next),
  };
}

const invalid: LoadResult = {
  ok: false,
  error: new ConfigError('/cfg', 'nonMasqueradeCIDRs[0]: "x" is not a CIDR'),
  warnings: [],
};

t.test('first sync writes generation 1; an idle resync neither reads nor writes', async (t) => {
  const { kernel, reconciler, metric } = setup();
  t.same(await reconciler.sync(), { ok: true });
  t.equal(kernel.applies.length, 1);
  t.match(kernel.tables.get('ip ipmasq'), /generation 1 config/);
  t.equal(reconciler.status(true).generation, 1);
  const reads = kernel.reads;
  for (let i = 0; i < 5; i++) await reconciler.sync();
  t.equal(kernel.applies.length, 1, 'no writes');
  t.equal(kernel.reads, reads, 'no reads while the generation id is unchanged');
  t.equal(await metric('ipmasq_syncs_total', { result: 'unchanged' }), 5);
  t.equal(await metric('ipmasq_generation'), 1);
  t.ok(reconciler.status(true).ready);
});

t.test('another tool commits elsewhere: one read, no write, then no reads again', async (t) => {
  const { kernel, reconciler } = setup();
  await reconciler.sync();
  kernel.tamper({ family: 'ip', name: 'other' });
  const reads = kernel.reads;
  await reconciler.sync();
  t.equal(kernel.reads, reads + 2, 'read ip and ip6 once');
  await reconciler.sync();
  t.equal(kernel.reads, reads + 2);
  t.equal(kernel.applies.length, 1);
});

t.test(
  'another tool commits elsewhere, then the config changes: still an element-only write, pinned to the read',
  async (t) => {
    const { kernel, reconciler, setConfig, logs } = setup();
    await reconciler.sync();
    kernel.tamper({ family: 'ip', name: 'other' });
    setConfig({ ok: true, config: config(['10.0.0.0/8', '192.0.2.0/24']), warnings: [] });
    const reads = kernel.reads;
    t.same(await reconciler.sync('config changed'), { ok: true });
    t.ok(kernel.reads > reads, 'read back first: the generation moved');
    t.equal(kernel.edits.length, 1, 'then written as elements');
    t.equal(kernel.edits[0]?.generation, kernel.genId - 1, 'pinned to the generation it read');
    t.match(
      logs.filter((l) => l.msg === 'ruleset written to the kernel').at(-1),
      { via: 'netlink' },
      'the log says so',
    );
    t.notOk(
      logs.some((l) => /drifted/.test(l.msg)),
      'not drift: our tables were as we left them',
    );

    // Our table changed by another tool: no element write from what we last wrote.
    kernel.tamper({ family: 'ip', name: 'ipmasq' }, (listing) =>
      listing.replace('192.0.2.0/24', '192.0.2.0/25'),
    );
    setConfig({ ok: true, config: config(['10.0.0.0/8', '198.51.100.0/24']), warnings: [] });
    await reconciler.sync('config changed');
    t.equal(kernel.edits.length, 1, 'written through libnftables from what it read');
  },
);

t.test(
  "readiness trusts nftables' notifications of commits elsewhere; a sync still reads back, and a notification that lied is a mismatch",
  async (t) => {
    const { kernel, reconciler, logs, metric } = setup();
    await reconciler.sync();
    t.ok(await reconciler.kernelUnchangedForProbe(), 'known after the write');
    kernel.tamper({ family: 'ip', name: 'other' });
    t.notOk(await reconciler.kernelUnchangedForProbe(), 'a commit not heard of: not known');
    reconciler.heard.elsewhere(kernel.genId);
    t.ok(
      await reconciler.kernelUnchangedForProbe(),
      'heard to name none of ours: known for a probe',
    );
    t.ok(
      await reconciler.kernelUnchanged(),
      'nor for the check a commit naming ours starts: the step is explained',
    );
    // No notifications are heard here (nothing wired): the periodic resync reads back whole.
    const reads = kernel.reads;
    await reconciler.sync('periodic');
    t.ok(kernel.reads > reads, 'the periodic sync reads back all the same');
    t.equal(await metric('ipmasq_fast_path_mismatches_total', { path: 'commit-notifications' }), 0);

    // A notification that said "elsewhere" for a commit that changed our table.
    kernel.tamper({ family: 'ip', name: 'ipmasq' }, (listing) =>
      listing.replace('10.0.0.0/8', '10.0.0.0/9'),
    );
    reconciler.heard.elsewhere(kernel.genId);
    t.ok(await reconciler.kernelUnchangedForProbe(), 'the probe believes it');
    await reconciler.sync('periodic');
    t.equal(
      await metric('ipmasq_fast_path_mismatches_total', { path: 'commit-notifications' }),
      1,
      'the read back finds it: counted',
    );
    t.ok(
      logs.some(
        (l) => l.level === 50 && /notifications that our tables were left alone/.test(l.msg),
      ),
      'logged as an error',
    );
    t.ok(
      logs.some((l) => /drifted/.test(l.msg)),
      'and repaired as drift',
    );
    t.match(await kernel.listTable({ family: 'ip', name: 'ipmasq' }), /10\.0\.0\.0\/8/);
  },
);

t.test(
  "beside a busy node: a change after others' commits heard elsewhere is written without a read, not pinned; the periodic resync reads back",
  async (t) => {
    const { kernel, reconciler, setConfig, metric } = setup();
    let hearing = true;
    reconciler.heard.hearBy(() => hearing);
    await reconciler.sync();
    for (let i = 0; i < 5; i++) {
      kernel.tamper({ family: 'ip', name: 'kube-proxy' });
      reconciler.heard.elsewhere(kernel.genId);
    }
    setConfig({ ok: true, config: config(['10.0.0.0/8', '192.0.2.0/24']), warnings: [] });
    const reads = kernel.reads;
    t.same(await reconciler.sync('config changed'), { ok: true });
    t.equal(kernel.reads, reads, 'no read: the notifications named none of our tables');
    t.equal(kernel.edits.length, 1, 'an element-only write');
    t.equal(kernel.edits[0]?.generation, undefined, 'not pinned: others may commit meanwhile');
    t.ok(reconciler.status(true).ready, 'ready');
    // Another commit elsewhere between the write's own steps is no doubt on it either.
    kernel.tamper({ family: 'ip', name: 'kube-proxy' });
    reconciler.heard.elsewhere(kernel.genId);
    const dumps = kernel.chainDumps;
    const audits = kernel.audits.length;
    t.same(await reconciler.sync('periodic'), { ok: true });
    t.ok(
      kernel.chainDumps > dumps && kernel.audits.length > audits,
      'the periodic resync audits over netlink: chains, rules, every address set',
    );
    t.equal(
      kernel.reads,
      reads,
      'without a libnftables listing, which a busy node keeps restarting',
    );
    t.ok(reconciler.status(true).ready, 'ready after the audit');
    t.equal(await metric('ipmasq_fast_path_mismatches_total', { path: 'commit-notifications' }), 0);
    // Nothing heard (the socket gone): a step not known to be elsewhere is read back.
    hearing = false;
    kernel.tamper({ family: 'ip', name: 'kube-proxy' });
    setConfig({ ok: true, config: config(['10.0.0.0/8']), warnings: [] });
    const before = kernel.reads;
    await reconciler.sync('config changed');
    t.ok(kernel.reads > before, 'read back: the step was not heard');
    t.equal(kernel.edits.at(-1)?.generation, kernel.genId - 1, 'and pinned to the read');
  },
);

t.test(
  'a set gone behind a lying notification: the netlink audit cannot read it, and our tables are written whole',
  async (t) => {
    const { kernel, reconciler, metric } = setup();
    reconciler.heard.hearBy(() => true);
    await reconciler.sync();
    kernel.tamper(ip, (listing) => listing.replace(/\tset nonmasq \{[^}]*\}\n/, ''));
    reconciler.heard.elsewhere(kernel.genId);
    t.notMatch(kernel.tables.get('ip ipmasq'), /set nonmasq/, 'the set is gone');
    t.same(await reconciler.sync('periodic'), { ok: true }, 'converged');
    t.match(kernel.tables.get('ip ipmasq'), /set nonmasq/, 'written whole: the set is back');
    t.equal(await metric('ipmasq_fast_path_mismatches_total', { path: 'commit-notifications' }), 1);
  },
);

t.test(
  'a minute of 100 commits a second elsewhere, heard: the periodic audit still needs no listing',
  async (t) => {
    const { kernel, reconciler } = setup();
    reconciler.heard.hearBy(() => true);
    await reconciler.sync();
    for (let i = 0; i < 6_000; i++) {
      kernel.tamper({ family: 'ip', name: 'kube-proxy' });
      reconciler.heard.elsewhere(kernel.genId);
    }
    const reads = kernel.reads;
    const dumps = kernel.chainDumps;
    t.ok(await reconciler.kernelUnchangedForProbe(), 'known for a probe');
    t.same(await reconciler.sync('periodic'), { ok: true });
    t.equal(kernel.reads, reads, 'no libnftables listing');
    t.ok(kernel.chainDumps > dumps, 'audited over netlink');
    t.ok(reconciler.status(true).ready, 'ready');
  },
);

t.test(
  'the netlink audit finds what a lying notification hid: a mismatch, and our tables written whole',
  async (t) => {
    const { kernel, reconciler, metric, logs } = setup();
    reconciler.heard.hearBy(() => true);
    await reconciler.sync();
    // A commit that changed our set, heard as if it named none of our tables.
    kernel.tamper(ip, (listing) => listing.replace('10.0.0.0/8', '10.0.0.0/9'));
    reconciler.heard.elsewhere(kernel.genId);
    t.notMatch(kernel.tables.get('ip ipmasq'), /10\.0\.0\.0\/8/, 'tampered');
    const reads = kernel.reads;
    t.same(await reconciler.sync('periodic'), { ok: true });
    t.equal(kernel.reads, reads, 'found without a libnftables listing');
    t.equal(await metric('ipmasq_fast_path_mismatches_total', { path: 'commit-notifications' }), 1);
    t.equal(await metric('ipmasq_drift_repairs_total'), 1, 'repaired as drift');
    t.match(kernel.tables.get('ip ipmasq'), /10\.0\.0\.0\/8/, 'the element is back');
    t.ok(
      logs.some(
        (l) =>
          l.level === 50 &&
          /over netlink: table ip ipmasq set nonmasq: 1 missing/.test(
            String((l as { difference?: string }).difference),
          ),
      ),
      'the log line names the set and what is missing',
    );
    t.ok(reconciler.status(true).ready, 'ready');
  },
);

t.test(
  "an element-only write is audited across others' commits heard to name none of our tables",
  async (t) => {
    const { kernel, reconciler, setConfig, metric } = setup();
    await reconciler.sync();
    setConfig({ ok: true, config: config(['10.0.0.0/8', '192.0.2.0/24']), warnings: [] });
    await reconciler.sync('config changed');
    t.equal(kernel.edits.length, 1, 'an element-only write');
    // Another tool commits elsewhere before the audit reads: heard, its step is left alone.
    kernel.tamper({ family: 'ip', name: 'kube-proxy' });
    reconciler.heard.elsewhere(kernel.genId);
    const audits = kernel.audits.length;
    await reconciler.sync('periodic');
    t.ok(kernel.audits.length > audits, 'audited all the same');
    t.equal(await metric('ipmasq_fast_path_mismatches_total', { path: 'element-write' }), 0);

    // Not heard: the audit finds another commit in its way and does not read.
    setConfig({ ok: true, config: config(['10.0.0.0/8']), warnings: [] });
    await reconciler.sync('config changed');
    t.equal(kernel.edits.length, 2);
    kernel.tamper({ family: 'ip', name: 'kube-proxy' });
    const before = kernel.audits.length;
    await reconciler.sync('periodic');
    t.equal(
      kernel.audits.length,
      before,
      'not audited while the step is not known to be elsewhere',
    );
  },
);

t.test('drift is repaired, warned about and counted', async (t) => {
  const drifts: Array<[string, (s: string) => string | null]> = [
    ['table deleted', () => null],
    ['set flushed', (s) => s.replace(/\t\telements = .*\n/, '')],
    ['rule deleted', (s) => s.replace(/\t\tip daddr @nonmasq counter name "exempt" return\n/, '')],
  ];
  for (const [name, edit] of drifts) {
    const { kernel, reconciler, logs, metric } = setup();
    await reconciler.sync();
    const good = kernel.tables.get('ip ipmasq')!;
    kernel.tamper(ip, edit);
    t.not(kernel.tables.get('ip ipmasq'), good, `${name}: tampered`);
    await reconciler.sync();
    // The table's own comment stays as created where the table stayed; the mark moves on.
    t.equal(
      withoutTableComment(kernel.tables.get('ip ipmasq') ?? ''),
      withoutTableComment(good).replace('generation 1', 'generation 2'),
      `${name}: repaired`,
    );
    t.equal(await metric('ipmasq_drift_repairs_total'), 1, `${name}: counted`);
    t.ok(
      logs.some((l) => l.level === 40 && /drifted/.test(l.msg)),
      `${name}: warned`,
    );
  }
});

t.test('a restart adopts a right table without writing and continues the count', async (t) => {
  const first = setup();
  await first.reconciler.sync();
  first.setConfig({ ok: true, config: config(['10.0.0.0/8', '192.168.0.0/16']), warnings: [] });
  await first.reconciler.sync();
  t.equal(first.reconciler.status(true).generation, 2);

  const second = setup(first.kernel, {
    ok: true,
    config: config(['10.0.0.0/8', '192.168.0.0/16']),
    warnings: [],
  });
  await second.reconciler.sync();
  t.equal(first.kernel.applies.length, 2, 'no write');
  t.equal(second.reconciler.status(true).generation, 2);

  const third = setup(first.kernel, { ok: true, config: config(['172.16.0.0/12']), warnings: [] });
  await third.reconciler.sync();
  t.equal(first.kernel.applies.length, 3);
  t.equal(third.reconciler.status(true).generation, 3);
  t.equal(
    await third.metric('ipmasq_drift_repairs_total'),
    0,
    'a config change while down is not drift',
  );
});

t.test(
  'an invalid config keeps the last good ruleset, still drift-repaired, error logged once',
  async (t) => {
    const { kernel, reconciler, logs, metric, setConfig } = setup();
    await reconciler.sync();
    const good = kernel.tables.get('ip ipmasq');
    setConfig(invalid);
    for (let i = 0; i < 4; i++) await reconciler.sync();
    t.equal(kernel.tables.get('ip ipmasq'), good, 'unchanged');
    t.equal(logs.filter((l) => l.level === 50).length, 1, 'one error line');
    t.equal(await metric('ipmasq_config_valid'), 0);
    const status = reconciler.status(true);
    t.match(status.configError, /is not a CIDR/);
    t.notOk(status.ready);
    kernel.tamper(ip, () => null);
    await reconciler.sync();
    t.match(kernel.tables.get('ip ipmasq'), /10\.0\.0\.0\/8/, 'repaired to the last good config');
    setConfig({ ok: true, config: config(['10.0.0.0/8']), warnings: [] });
    await reconciler.sync();
    t.ok(reconciler.status(true).ready);
    t.equal(reconciler.status(true).configError, null);
  },
);

t.test('invalid at start with no table of ours: nothing is applied', async (t) => {
  const { kernel, reconciler } = setup(new FakeKernel(), invalid);
  await reconciler.sync();
  t.equal(kernel.applies.length, 0);
  t.equal(kernel.tables.size, 0);
  t.match(reconciler.status(true).notReadyReason, /nothing applied/);
});

t.test('a failed write is an error outcome and unhealthy; the next success recovers', async (t) => {
  const { kernel, reconciler, metric } = setup();
  kernel.failWrites = new Error('Operation not permitted');
  const outcome = await reconciler.sync();
  t.equal(outcome.ok, false);
  t.equal(reconciler.status(true).lastWriteOk, false);
  t.match(reconciler.status(true).lastError, /not permitted/);
  t.equal(await metric('ipmasq_syncs_total', { result: 'error' }), 1);
  kernel.failWrites = undefined;
  t.same(await reconciler.sync(), { ok: true });
  t.equal(reconciler.status(true).lastWriteOk, true);
  t.equal(reconciler.status(true).generation, 1);
});

const ourComment = `\tcomment "ipmasq-agent generation 4 config sha256:${'ab'.repeat(32)}"`;

t.test('with IPv6 off, a stale ip6 table of ours is deleted in the same transaction', async (t) => {
  const kernel = new FakeKernel();
  kernel.tables.set('ip6 ipmasq', `table ip6 ipmasq {\n${ourComment}\n}\n`);
  const { reconciler } = setup(kernel);
  await reconciler.sync();
  t.notOk(kernel.tables.has('ip6 ipmasq'));
  t.match(kernel.applies[0], /delete table ip6 ipmasq\n$/);
  t.ok(kernel.tables.has('ip ipmasq'));
});

const explicitInterval = {
  compileOptions: compileOptions({ setLayout: 'interval' }),
};

t.test(
  'a large set with an explicit interval layout sets the warning gauge and logs once',
  async (t) => {
    const { reconciler, logs, metric, setConfig } = setup(undefined, undefined, explicitInterval);
    await reconciler.sync();
    t.equal(await metric('ipmasq_large_set_warning'), 0);
    setConfig({
      ok: true,
      config: config(['1.0.0.0/24', '2.0.0.0/24', '3.0.0.0/24', '4.0.0.0/24']),
      warnings: [],
    });
    await reconciler.sync();
    await reconciler.sync();
    t.equal(await metric('ipmasq_large_set_warning'), 1);
    t.equal(logs.filter((l) => /set is large/.test(l.msg)).length, 1);
  },
);

t.test(
  'no large-set warning with the auto layout (the default): it switches instead',
  async (t) => {
    const { reconciler, logs, metric, setConfig } = setup();
    setConfig({
      ok: true,
      config: config(['1.0.0.0/24', '2.0.0.0/24', '3.0.0.0/24', '4.0.0.0/24']),
      warnings: [],
    });
    await reconciler.sync();
    t.equal(await metric('ipmasq_large_set_warning'), 0);
    t.equal(logs.filter((l) => /set is large/.test(l.msg)).length, 0);
  },
);

t.test('counts report what the kernel holds, not what a failed write wanted', async (t) => {
  const { kernel, reconciler, metric, setConfig } = setup();
  kernel.failWrites = new Error('Operation not permitted');
  await reconciler.sync();
  t.same(reconciler.status(true).nonMasqueradeCIDRs, { ipv4: 0, ipv6: 0 });
  kernel.failWrites = undefined;
  await reconciler.sync();
  t.same(reconciler.status(true).nonMasqueradeCIDRs, { ipv4: 1, ipv6: 0 });
  kernel.failWrites = new Error('Operation not permitted');
  setConfig({ ok: true, config: config(['10.0.0.0/8', '192.168.0.0/16']), warnings: [] });
  await reconciler.sync();
  t.same(reconciler.status(true).nonMasqueradeCIDRs, { ipv4: 1, ipv6: 0 }, 'still the old set');
  t.equal(await metric('ipmasq_nonmasquerade_cidrs', { family: 'ipv4' }), 1);
});

t.test(
  'a loader that fails (not a config error) is an error outcome; the kernel is untouched',
  async (t) => {
    const { kernel, reconciler } = setup(new FakeKernel(), undefined, {
      loadConfig: async () => {
        throw new Error('config worker exited with code 1');
      },
    });
    const outcome = await reconciler.sync();
    t.equal(outcome.ok, false);
    t.match(reconciler.status(true).lastError, /loading the config failed: config worker exited/);
    t.equal(kernel.applies.length, 0);
  },
);

t.test('no large-set warning with the concatenated layout', async (t) => {
  const big: LoadResult = {
    ok: true,
    config: config(['1.0.0.0/24', '2.0.0.0/24', '3.0.0.0/24', '4.0.0.0/24']),
    warnings: [],
  };
  const concat = compileOptions({ setLayout: 'concat' });
  const { kernel, reconciler, logs, metric } = setup(new FakeKernel(), big, {
    compileOptions: concat,
  });
  await reconciler.sync();
  t.match(kernel.tables.get('ip ipmasq'), /typeof ip daddr \. meta l4proto/);
  t.equal(await metric('ipmasq_large_set_warning'), 0);
  t.notOk(logs.some((l) => /set is large/.test(l.msg)));
});

/** Every other /24 from `start` on: 2 500 ranges that never merge (a set filled apart). */
function spaced2500(start: number): string[] {
  return Array.from({ length: 2500 }, (_, i) => {
    const n = 2 * i + start;
    return `10.${(n >> 8) & 255}.${n & 255}.0/24`;
  });
}

t.test(
  'a concatenated set changed wholesale: its new sets filled over netlink, audited against the whole list, a wrong fill mended',
  async (t) => {
    const concat = compileOptions({ setLayout: 'concat' });
    const kernel = new FakeKernel();
    const first: LoadResult = { ok: true, config: config(spaced2500(0)), warnings: [] };
    const { reconciler, setConfig, metric, logs, writer } = setup(kernel, first, {
      compileOptions: concat,
    });
    t.same(await reconciler.sync(), { ok: true });
    t.equal(kernel.fills.length, 0, 'a table made anew is written by libnftables alone');
    const wanted = (next: Config) =>
      compile(next, concat, reconciler.status(true).generation!, writer);
    const b = config(spaced2500(1));
    setConfig({ ok: true, config: b, warnings: [] });
    t.same(await reconciler.sync(), { ok: true });
    t.same(
      kernel.fills.map((fill) => fill.tables.flatMap((x) => x.sets.map((set) => set.name))),
      [['nonmasq-next'], ['nonmasq']],
      'the temporary set, then the set under its own name, each filled apart',
    );
    t.ok(
      listingIs(kernel.tables.get('ip ipmasq')!, wanted(b)[0]!),
      'the kernel holds the new table',
    );
    const audits = kernel.audits.length;
    await reconciler.sync();
    t.same(kernel.audits.slice(audits), ['nonmasq'], 'the filled set audited by the next sync');
    t.equal(await metric('ipmasq_fast_path_mismatches_total', { path: 'element-write' }), 0);

    // A fill that loses an element: the audit finds it, and the tables are written again whole.
    const fill = kernel.fill.bind(kernel);
    kernel.fill = async (request) =>
      fill({
        tables: request.tables.map((x) => ({
          ...x,
          sets: x.sets.map((set) => ({
            ...set,
            elements: frozenElements(set.elements.slice(1)),
          })),
        })),
      });
    const c = config(spaced2500(0));
    setConfig({ ok: true, config: c, warnings: [] });
    t.same(await reconciler.sync(), { ok: true });
    kernel.fill = fill;
    t.notOk(listingIs(kernel.tables.get('ip ipmasq')!, wanted(c)[0]!), 'a range short');
    await reconciler.sync();
    t.equal(await metric('ipmasq_fast_path_mismatches_total', { path: 'element-write' }), 1);
    t.ok(logs.some((l) => l.level === 50 && /disagreed with the whole path/.test(l.msg)));
    await reconciler.sync();
    t.ok(
      listingIs(kernel.tables.get('ip ipmasq')!, wanted(c)[0]!),
      'mended from the whole compare',
    );
    t.equal(reconciler.status(true).ready, true);
  },
);

t.test(
  'a fill refused because another tool deleted its set between the steps: read back, written again, right',
  async (t) => {
    const concat = compileOptions({ setLayout: 'concat' });
    const kernel = new FakeKernel();
    const first: LoadResult = { ok: true, config: config(spaced2500(0)), warnings: [] };
    const { reconciler, setConfig, writer } = setup(kernel, first, { compileOptions: concat });
    t.same(await reconciler.sync(), { ok: true });
    // Another tool deletes the new set right after the transaction that made it.
    const fill = kernel.fill.bind(kernel);
    let struck = 0;
    kernel.fill = async (request) => {
      if (struck++ === 0)
        kernel.tamper(ip, (listing) =>
          listing.replace(/\tset nonmasq-next \{\n(?:\t\t.*\n)*?\t\}\n/, ''),
        );
      return fill(request);
    };
    const b = config(spaced2500(1));
    setConfig({ ok: true, config: b, warnings: [] });
    let tries = 0;
    while (tries++ < 5 && !(await reconciler.sync()).ok);
    kernel.fill = fill;
    t.ok(struck >= 2, `the refused fill was followed by another (${struck} fills)`);
    await reconciler.sync();
    const generation = reconciler.status(true).generation!;
    t.ok(
      listingIs(kernel.tables.get('ip ipmasq')!, compile(b, concat, generation, writer)[0]!),
      `the new table, after ${tries} syncs`,
    );
    t.notMatch(kernel.tables.get('ip ipmasq'), /nonmasq-next/, 'no temporary set left');
    t.equal(reconciler.status(true).ready, true);
  },
);

t.test(
  'a libnftables crash names the foreign table it cannot read, is counted, logged once, and recovers',
  async (t) => {
    const kernel = new FakeKernel();
    kernel.unreadable.add('ip kp');
    kernel.failWrites = new NftError('libnftables crashed (SIGSEGV)', 'crash');
    const { reconciler, logs, metric } = setup(kernel);
    for (let i = 0; i < 3; i++) t.equal((await reconciler.sync()).ok, false);
    const status = reconciler.status(true);
    t.match(
      status.lastError,
      /libnftables crashed \(SIGSEGV\).*cannot read table ip kp \(not ours\)/,
    );
    t.equal(status.ready, false);
    t.equal(await metric('ipmasq_libnftables_failures_total', { kind: 'crash' }), 3);
    t.equal(await metric('ipmasq_libnftables_failures_total', { kind: 'timeout' }), 0);
    const errors = logs.filter((l) => l.level === 50);
    t.equal(errors.length, 1, 'one error line for three failures of the same cause');
    t.match(errors[0], { kind: 'crash', unreadableTables: ['ip kp'] });

    kernel.unreadable.delete('ip kp');
    kernel.failWrites = undefined;
    t.same(await reconciler.sync(), { ok: true });
    t.equal(reconciler.status(true).lastError, null);
    t.ok(logs.some((l) => l.level === 30 && l.msg === 'kernel writes work again'));
  },
);

t.test(
  'a libnftables error of another kind is reported as it is, with no table probing',
  async (t) => {
    const kernel = new FakeKernel();
    kernel.unreadable.add('ip kp');
    kernel.failWrites = new NftError('Error: Could not process rule: Operation not permitted');
    const { reconciler, metric } = setup(kernel);
    await reconciler.sync();
    t.equal(
      reconciler.status(true).lastError,
      'nftables: Error: Could not process rule: Operation not permitted',
    );
    t.equal(await metric('ipmasq_libnftables_failures_total', { kind: 'error' }), 1);
  },
);

t.test('a same-named table that is not ours is an error and left untouched', async (t) => {
  const kernel = new FakeKernel();
  const theirs = 'table ip ipmasq {\n\tchain POSTROUTING {\n\t}\n}\n';
  kernel.tables.set('ip ipmasq', theirs);
  kernel.tables.set('ip6 ipmasq', 'table ip6 ipmasq {\n}\n');
  const { reconciler } = setup(kernel);
  t.equal((await reconciler.sync()).ok, false);
  t.match(reconciler.status(true).lastError, /table ip ipmasq exists and is not ipmasq-agent's/);
  t.same(kernel.applies, [], 'nothing written');
  t.equal(kernel.tables.get('ip ipmasq'), theirs);
  t.ok(kernel.tables.has('ip6 ipmasq'), 'a foreign ip6 table is not "stale" either');
});

t.test('a table with a planted, unparsable comment is replaced, counting from 1', async (t) => {
  const kernel = new FakeKernel();
  const planted = `\tcomment "ipmasq-agent generation 1000000000000000000000 config sha256:${'ab'.repeat(32)}"`;
  kernel.tables.set('ip ipmasq', `table ip ipmasq {\n${planted}\n}\n`);
  const { reconciler } = setup(kernel);
  t.same(await reconciler.sync(), { ok: true });
  t.equal(reconciler.status(true).generation, 1);
  t.match(kernel.tables.get('ip ipmasq'), /generation 1 config/);
  t.same(await reconciler.sync(), { ok: true }, 'and it stays repaired');
});

t.test(
  'the generation never goes backwards: past 15 digits it counts from 1, with a warning',
  async (t) => {
    const kernel = new FakeKernel();
    const { reconciler } = setup(kernel);
    await reconciler.sync();
    // A table of ours whose jump rule says 999999999999999: the next write wraps, and says so.
    kernel.tamper({ family: 'ip', name: 'ipmasq' }, (listing) =>
      // (as markText writes it at 15 digits: no `by:` field, which would not fit)
      listing
        .replace(/generation 1 config/, 'generation 999999999999999 config')
        .replace(/ by:[^"]*"/, '"'),
    );
    const { reconciler: restarted, logs: restartedLogs, setConfig: setRestarted } = setup(kernel);
    await restarted.sync();
    t.equal(restarted.status(true).generation, MAX_GENERATION, 'adopted at the bound');
    setRestarted({ ok: true, config: config(['10.0.0.0/8', '192.168.0.0/16']), warnings: [] });
    await restarted.sync();
    t.equal(restarted.status(true).generation, 1);
    t.ok(
      restartedLogs.some((l) => l.level === 40 && /reached its bound/.test(l.msg)),
      'warned',
    );
    // A planted mark past the bound is not read as a count, nor is the table's older one used.
    kernel.tamper({ family: 'ip', name: 'ipmasq' }, (listing) =>
      listing.replace(/generation 1 config/, 'generation 1000000000000001 config'),
    );
    const { reconciler: third, logs: thirdLogs } = setup(kernel, {
      ok: true,
      config: config(['10.0.0.0/8']),
      warnings: [],
    });
    await third.sync();
    t.equal(third.status(true).generation, 1, 'counted from 1 again');
    t.ok(
      thirdLogs.some((l) => l.level === 40 && /does not parse/.test(l.msg)),
      'warned',
    );
    t.match(kernel.tables.get('ip ipmasq'), /generation 1 config/);
  },
);

t.test(
  "an interrupted upgrade: a stand-in of ours left is deleted; another's is never touched",
  async (t) => {
    const kernel = new FakeKernel();
    const older = `table ip ipmasq {\n\tcomment "ipmasq-agent generation 4 config sha256:${'ee'.repeat(32)}"\n}\n`;
    const { reconciler: first } = setup(kernel);
    await first.sync();
    // What a crash between the upgrade's steps leaves: our table made anew, the stand-in still
    // there.
    const standIn = kernel.tables
      .get('ip ipmasq')!
      .replace('table ip ipmasq {', 'table ip ipmasq_upgrade {')
      .replace(/\tcomment "[^"]*"/, `\tcomment "${STAND_IN_COMMENT}"`);
    kernel.tables.set('ip ipmasq_upgrade', standIn);
    const { reconciler } = setup(kernel);
    t.same(await reconciler.sync(), { ok: true });
    t.notOk(kernel.tables.has('ip ipmasq_upgrade'), 'the stand-in is gone');
    t.equal(reconciler.status(true).ready, true);
    // Another's table under the stand-in's name: the older release's table is replaced whole
    // instead.
    const theirs = 'table ip ipmasq_upgrade {\n\tchain c {\n\t}\n}\n';
    kernel.tables.set('ip ipmasq_upgrade', theirs);
    kernel.tables.set('ip ipmasq', older);
    const { reconciler: again } = setup(kernel);
    const applies = kernel.applies.length;
    t.same(await again.sync(), { ok: true });
    t.equal(kernel.applies.length, applies + 1, 'one transaction');
    t.match(kernel.applies.at(-1), /delete table ip ipmasq\n/);
    t.notMatch(kernel.applies.at(-1), /ipmasq_upgrade/);
    t.equal(kernel.tables.get('ip ipmasq_upgrade'), theirs, 'theirs byte for byte');
    t.match(kernel.tables.get('ip ipmasq'), `comment "${TABLE_COMMENT}"`);
  },
);

t.test(
  'a commit by someone else right after ours is not taken for ours: read back and repaired in the same sync',
  async (t) => {
    const { kernel, reconciler, metric, setConfig } = setup();
    await reconciler.sync();
    // Another tool's commit lands right after ours, before we read the id again.
    kernel.afterCommit = () => {
      kernel.afterCommit = undefined;
      kernel.tamper(ip, (listing) =>
        listing.replace('elements = { ', 'elements = { 198.51.100.0/24, '),
      );
    };
    setConfig({ ok: true, config: config(['10.0.0.0/8', '192.168.0.0/16']), warnings: [] });
    const reads = kernel.reads;
    t.same(await reconciler.sync(), { ok: true });
    t.ok(kernel.reads > reads, 'this sync read the table back');
    t.notMatch(kernel.tables.get('ip ipmasq'), /198\.51\.100\.0\/24/, 'and repaired it');
    t.match(kernel.tables.get('ip ipmasq'), /192\.168\.0\.0\/16/, 'the new config in place');
    t.equal(await metric('ipmasq_drift_repairs_total'), 1);
    t.equal(reconciler.status(true).ready, true);
    const after = kernel.reads;
    await reconciler.sync();
    t.equal(kernel.reads, after, 'and known again: the next idle sync reads nothing');
  },
);

t.test(
  'a commit by someone else just before ours (our change refused, or applied on a changed table): repaired in the same sync',
  async (t) => {
    const { kernel, reconciler, metric, setConfig, logs } = setup(undefined, {
      ok: true,
      config: config(['10.0.0.0/8', '192.168.0.0/16']),
      warnings: [],
    });
    await reconciler.sync();
    // Someone deletes the element our change deletes too: nft refuses our delete.
    kernel.beforeCommit = () => {
      kernel.beforeCommit = undefined;
      kernel.tamper(ip, (listing) => listing.replace(', 192.168.0.0/16', ''));
    };
    setConfig({ ok: true, config: config(['10.0.0.0/8']), warnings: [] });
    t.same(await reconciler.sync(), { ok: true }, 'no failure, no backoff');
    t.match(kernel.tables.get('ip ipmasq'), /generation 2 config/, 'our mark written');
    t.notMatch(kernel.tables.get('ip ipmasq'), /192\.168/);
    t.equal(reconciler.status(true).ready, true);
    // Someone adds an element just before our (otherwise valid) change: it lands, and is repaired.
    kernel.beforeCommit = () => {
      kernel.beforeCommit = undefined;
      kernel.tamper(ip, (listing) =>
        listing.replace('elements = { ', 'elements = { 198.51.100.0/24, '),
      );
    };
    setConfig({ ok: true, config: config(['10.0.0.0/8', '172.16.0.0/12']), warnings: [] });
    t.same(await reconciler.sync(), { ok: true });
    t.notMatch(kernel.tables.get('ip ipmasq'), /198\.51\.100/, 'the foreign element is gone');
    t.match(kernel.tables.get('ip ipmasq'), /172\.16\.0\.0\/12/);
    // Both were changes of our table by someone else, repaired: each counted (an element-only
    // change refused because another commit came first is drift when that commit changed our
    // tables).
    t.equal(await metric('ipmasq_drift_repairs_total'), 2);
    t.equal(logs.filter((l) => /drifted from the config/.test(l.msg)).length, 2, 'each logged');
    t.equal(reconciler.status(true).ready, true);
  },
);

t.test(
  'other commits around every look: written, not ready, and looked at again soon',
  async (t) => {
    const { kernel, reconciler, setConfig } = setup();
    await reconciler.sync();
    let other = 0;
    kernel.afterCommit = () => {
      other++;
      kernel.tamper({ family: 'ip', name: 'other' });
    };
    const listTable = kernel.listTable.bind(kernel);
    kernel.listTable = async (ref) => {
      const listing = await listTable(ref);
      kernel.tamper({ family: 'ip', name: 'other' }); // a commit during every read, too
      return listing;
    };
    setConfig({ ok: true, config: config(['10.0.0.0/8', '192.168.0.0/16']), warnings: [] });
    const outcome = await reconciler.sync();
    t.equal(outcome.ok, false, 'the runner retries it with backoff');
    t.ok(other > 0);
    t.match(kernel.tables.get('ip ipmasq'), /192\.168\.0\.0\/16/, 'our config is written');
    const status = reconciler.status(true);
    t.equal(status.ready, false);
    t.match(status.notReadyReason, /not yet confirmed/);
    t.equal(status.lastWriteOk, true, '/healthz stays 200: nothing failed');
    kernel.afterCommit = undefined;
    kernel.listTable = listTable;
    t.same(await reconciler.sync(), { ok: true }, 'once the namespace is quiet');
    t.equal(reconciler.status(true).ready, true);
  },
);

t.test('our own held replies between syncs are not taken for another tool', async (t) => {
  const { kernel, reconciler } = setup();
  await reconciler.sync();
  const reads = kernel.reads;
  // A commit of ours that leaves the tables as they were (the flush's held replies).
  const before = kernel.genId++;
  reconciler['converger'].noteCommit({ before, after: kernel.genId });
  await reconciler.sync();
  t.equal(kernel.reads, reads, 'known: nothing read back');
  kernel.genId++; // another tool's commit
  await reconciler.sync();
  t.equal(kernel.reads, reads + 2, 'unknown: both families read back');
});

t.test(
  'another agent writing our table with another config: held back from, 1, 2 resyncs; over once it leaves',
  async (t) => {
    const kernel = new FakeKernel();
    let now = 1_000_000;
    const { reconciler, logs, metric } = setup(kernel, undefined, { now: () => now });
    await reconciler.sync();
    t.equal(kernel.applies.length, 1, 'our first write');
    // A newer agent (a later start) writes its config: its mark on the jump rule.
    const other = (generation: number) => writtenBy(kernel, 'zzzzzzzz.zzz', generation);
    other(2);
    await reconciler.sync();
    t.equal(
      kernel.applies.length,
      2,
      'a writer seen for the first time may be a restore: repaired',
    );
    t.equal(await metric('ipmasq_drift_repairs_total'), 1);
    t.equal(await metric('ipmasq_conflicting_writer'), 0);
    other(4); // it writes again: alive
    await reconciler.sync();
    t.equal(kernel.applies.length, 2, 'no rewrite: holding back');
    t.equal(await metric('ipmasq_conflicting_writer'), 1);
    t.equal(reconciler.status(true).ready, false);
    t.match(reconciler.status(true).notReadyReason, /another ipmasq-agent/);
    now += 30_000;
    await reconciler.sync();
    t.equal(kernel.applies.length, 2, 'still holding back within the resync interval');
    now += 30_000;
    await reconciler.sync();
    t.equal(kernel.applies.length, 3, 'after one interval: ours again');
    t.match(kernel.tables.get('ip ipmasq'), /generation 5 config/, 'counting on from theirs');
    other(6);
    await reconciler.sync();
    now += 60_000;
    await reconciler.sync();
    t.equal(kernel.applies.length, 3, 'the second time, two intervals');
    now += 60_000;
    await reconciler.sync();
    t.equal(kernel.applies.length, 4);
    // The other agent is gone: our write stays; after the longest hold (8 intervals) the conflict
    // ends.
    await reconciler.sync();
    t.equal(await metric('ipmasq_conflicting_writer'), 1, 'too soon to tell it is gone');
    now += 8 * 60_000;
    await reconciler.sync();
    t.equal(await metric('ipmasq_conflicting_writer'), 0);
    t.equal(reconciler.status(true).ready, true);
    t.equal(
      logs.filter((l) => l.level === 40 && /another ipmasq-agent/.test(l.msg)).length,
      1,
      'warned once',
    );
    t.equal(kernel.applies.length, 4);
    t.equal(await metric('ipmasq_drift_repairs_total'), 1, 'only the first sight was drift');
  },
);

t.test(
  'an older agent writing our table: the newer one writes its config again at once',
  async (t) => {
    const kernel = new FakeKernel();
    const { reconciler, logs, metric } = setup(kernel);
    await reconciler.sync();
    const older = (generation: number) => writtenBy(kernel, 'a0000000.000', generation);
    older(5);
    await reconciler.sync();
    t.equal(kernel.applies.length, 2, 'first sight: repaired as drift');
    older(7);
    await reconciler.sync();
    t.equal(kernel.applies.length, 3, 'it writes again: rewritten at once');
    t.match(
      kernel.tables.get('ip ipmasq'),
      /jump IP-MASQ-AGENT comment "ipmasq-agent generation 8 /,
    );
    t.equal(await metric('ipmasq_conflicting_writer'), 1, 'the conflict is open');
    t.ok(logs.some((l) => l.level === 40 && /ours wins/.test(l.msg)));
    t.equal(await metric('ipmasq_drift_repairs_total'), 1, 'the second write not counted as drift');
  },
);

t.test(
  "restores of another process's writes are drift: an older one of ours, a newer one from elsewhere, or the same again",
  async (t) => {
    const kernel = new FakeKernel();
    let now = 1_000_000;
    const { reconciler, metric } = setup(kernel, undefined, { now: () => now });
    await reconciler.sync();
    const restore = (generation: number, writer: string) =>
      writtenBy(kernel, writer, generation, (listing) =>
        listing.replace('elements = { ', 'elements = { 198.51.100.0/24, '),
      );
    const snapshots: Array<[number, string, string]> = [
      [40, 'a0000000.000', "our previous process's older write"],
      [9, 'zzzzzzzz.zzz', 'a later-started writer elsewhere'],
      [9, 'zzzzzzzz.zzz', 'the same snapshot again'],
      [3, 'zzzzzzzz.zzz', 'an older one of the same writer'],
    ];
    for (const [i, [generation, writer, what]] of snapshots.entries()) {
      restore(generation, writer);
      now += 1_000;
      await reconciler.sync();
      t.notMatch(kernel.tables.get('ip ipmasq'), /198\.51\.100/, `${what}: repaired at once`);
      t.equal(await metric('ipmasq_drift_repairs_total'), i + 1, 'counted as drift');
      t.equal(await metric('ipmasq_conflicting_writer'), 0, 'never taken for another agent');
      t.equal(reconciler.status(true).ready, true);
    }
  },
);

t.test('an older write of ours put back (a restore): drift, repaired at once', async (t) => {
  const kernel = new FakeKernel();
  const { reconciler, setConfig, metric } = setup(kernel);
  await reconciler.sync();
  const saved = kernel.tables.get('ip ipmasq')!;
  setConfig({ ok: true, config: config(['10.0.0.0/8', '192.168.0.0/16']), warnings: [] });
  await reconciler.sync();
  const current = kernel.tables.get('ip ipmasq')!;
  kernel.tamper(ip, () => saved); // nft -f of a saved ruleset: our generation 1 again
  await reconciler.sync();
  t.equal(kernel.applies.length, 3, 'repaired at the next sync');
  t.equal(
    withoutTableComment(kernel.tables.get('ip ipmasq')!),
    withoutTableComment(current).replace('generation 2', 'generation 3'),
  );
  t.equal(await metric('ipmasq_drift_repairs_total'), 1);
  t.equal(await metric('ipmasq_conflicting_writer'), 0, 'not another agent');
  t.equal(reconciler.status(true).ready, true);
});

t.test('a change is written in place: element deltas, never the table anew', async (t) => {
  const { kernel, reconciler, setConfig } = setup();
  await reconciler.sync();
  t.match(kernel.applies[0], /^table ip ipmasq \{/m, 'created whole');
  setConfig({ ok: true, config: config(['10.0.0.0/8', '192.168.0.0/16']), warnings: [] });
  await reconciler.sync();
  setConfig({ ok: true, config: config(['192.168.0.0/16']), warnings: [] });
  await reconciler.sync();
  const [, add, remove] = kernel.applies;
  t.notMatch(add, /table ip ipmasq$|delete table|flush set/m, 'no table written, no set flushed');
  t.match(add, /elements = \{ 192\.168\.0\.0\/16 \}/, 'one element added');
  t.match(remove, /^delete element ip ipmasq nonmasq \{ 10\.0\.0\.0\/8 \}$/m, 'one deleted');
  t.notMatch(remove, /IP-MASQ-AGENT\n/, 'the decision chain untouched');
  t.match(remove, /^add rule ip ipmasq postrouting .* comment "ipmasq-agent generation 3 /m);
});

t.test(
  'across the auto layout switch: four transactions, then exactly the new table',
  async (t) => {
    const many = (n: number) =>
      Array.from(
        { length: n },
        (_, i) => `${20 + ((i * 2) >> 16)}.${((i * 2) >> 8) & 255}.${(i * 2) & 255}.0/24`,
      );
    const auto = {
      compileOptions: { ...explicitInterval.compileOptions, setLayout: 'auto' as const },
    };
    const { kernel, reconciler, setConfig, writer } = setup(
      undefined,
      { ok: true, config: config(many(1_990)), warnings: [] },
      auto,
    );
    await reconciler.sync();
    t.match(kernel.tables.get('ip ipmasq'), /typeof ip daddr\n/);
    setConfig({ ok: true, config: config(many(2_010)), warnings: [] });
    await reconciler.sync();
    // Four transactions, and the new set (over 2 000 ranges) filled apart after each of the two
    // that make it (the fake writes a fill as its script too).
    t.equal(kernel.applies.length, 7, 'one write of four transactions and two fills');
    t.equal(kernel.fills.length, 2, 'two fills over netlink');
    t.match(kernel.applies[1], /set nonmasq-next \{\n\t\ttypeof ip daddr \. meta l4proto/);
    t.notMatch(kernel.applies[1], /elements/, 'made empty');
    t.match(kernel.applies[3], /@nonmasq-next counter name "exempt" return/);
    t.match(kernel.applies[6], /^delete set ip ipmasq nonmasq-next$/m);
    const wanted = compile(config(many(2_010)), auto.compileOptions, 2, writer);
    t.ok(listingIs(kernel.tables.get('ip ipmasq') ?? '', wanted[0]!), 'the concat table, in place');
    t.equal(reconciler.status(true).generation, 2, 'one generation for the six');
  },
);

t.test(
  'the egress policy appears and goes in place: its sets made before the rules using them, deleted after',
  async (t) => {
    const policy = (egress: EgressPolicy | undefined): LoadResult & { ok: true } => {
      const base = config(['10.0.0.0/8']);
      return {
        ok: true,
        config: {
          ...base,
          keys: egressKeys(egress),
          hash: createHash('sha256')
            .update(JSON.stringify(egress ?? null))
            .digest('hex'),
        },
        warnings: [],
      };
    };
    const withPolicy = policy({
      sourceCIDRs: { ipv4: ['10.244.0.0/16'], ipv6: [] },
      egressInterfaces: ['eth1', 'ens*'],
    });
    const { kernel, reconciler, setConfig, writer } = setup();
    await reconciler.sync();
    setConfig(withPolicy);
    await reconciler.sync();
    t.equal(kernel.applies.length, 3, 'one write of two transactions');
    t.match(kernel.applies[1], /set egress-interfaces \{[\s\S]*set sources \{/, 'the sets first');
    t.notMatch(kernel.applies[1], /add rule|flush chain/, 'no rule in that transaction');
    t.match(
      kernel.applies[2],
      /^add rule ip ipmasq IP-MASQ-AGENT oifname != @egress-interfaces counter name "skipped" return$/m,
    );
    t.match(
      kernel.applies[2],
      /^add rule ip ipmasq IP-MASQ-AGENT ip saddr != @sources counter name "skipped" return$/m,
    );
    const wanted = compile(withPolicy.config, compileOptions(), 2, writer);
    t.ok(listingIs(kernel.tables.get('ip ipmasq') ?? '', wanted[0]!), 'exactly the new table');

    // A restart finds the policy's sets and a config without it: refilled in place, the sets
    // deleted once the rules no longer use them.
    const second = setup(kernel, policy(undefined));
    await second.reconciler.sync();
    const last = kernel.applies.at(-1) ?? '';
    t.notMatch(last, /delete table/, 'not written anew');
    t.ok(
      last.indexOf('flush chain ip ipmasq IP-MASQ-AGENT') <
        last.indexOf('delete set ip ipmasq sources'),
      'the rules go before the set',
    );
    t.match(last, /^delete set ip ipmasq egress-interfaces$/m);
    t.notMatch(kernel.tables.get('ip ipmasq'), /sources|egress-interfaces/, 'no leftovers');
  },
);

t.test(
  'a restart that adopts the table then changes it: exactly the new config, no leftovers',
  async (t) => {
    const first = setup();
    first.setConfig({ ok: true, config: config(['10.0.0.0/8', '192.168.0.0/16']), warnings: [] });
    await first.reconciler.sync();
    const second = setup(first.kernel, {
      ok: true,
      config: config(['10.0.0.0/8', '192.168.0.0/16']),
      warnings: [],
    });
    await second.reconciler.sync();
    t.equal(first.kernel.applies.length, 1, 'adopted without a write');
    second.setConfig({ ok: true, config: config(['172.16.0.0/12']), warnings: [] });
    await second.reconciler.sync();
    const listing = first.kernel.tables.get('ip ipmasq') ?? '';
    t.match(listing, /elements = \{ 172\.16\.0\.0\/12 \}/);
    t.notMatch(listing, /10\.0\.0\.0|192\.168/, 'the adopted elements are gone');
  },
);

t.test('a table of another config found at start is the last run, not another agent', async (t) => {
  const kernel = new FakeKernel();
  kernel.tables.set(
    'ip ipmasq',
    `table ip ipmasq {\n\tcomment "ipmasq-agent generation 9 config sha256:${'ee'.repeat(32)}"\n}\n`,
  );
  const { reconciler, metric } = setup(kernel);
  await reconciler.sync();
  // An older release's table (the mark in its comment): made anew beside a stand-in, in five steps.
  t.equal(kernel.applies.length, 5, 'written at once, as an upgrade');
  t.equal(reconciler.status(true).generation, 10);
  t.equal(await metric('ipmasq_conflicting_writer'), 0);
  t.match(kernel.tables.get('ip ipmasq'), `comment "${TABLE_COMMENT}"`);
  t.notOk(kernel.tables.has('ip ipmasq_upgrade'), 'no stand-in left');
  // This release's table of another config: one write.
  const { reconciler: next } = setup(kernel, {
    ok: true,
    config: config(['10.0.0.0/8', '192.168.0.0/16']),
    warnings: [],
  });
  const applies = kernel.applies.length;
  await next.sync();
  t.equal(kernel.applies.length, applies + 1, 'one write');
  t.equal(next.status(true).generation, 11);
});

t.test(
  'two agents, same config, one with IPv6: they hold back from each other; the one that stays wins',
  async (t) => {
    const kernel = new FakeKernel();
    let now = 1_000_000;
    const clock = { now: () => now };
    const withoutIPv6 = setup(kernel, undefined, clock);
    const withIPv6 = setup(kernel, undefined, {
      ...clock,
      compileOptions: { ...explicitInterval.compileOptions, setLayout: 'auto', enableIPv6: true },
    });
    const conflicts = { without: 0, with: 0 };
    for (let round = 0; round < 20; round++) {
      now += 60_000;
      await withoutIPv6.reconciler.sync();
      await withIPv6.reconciler.sync();
      conflicts.without ||= (await withoutIPv6.metric('ipmasq_conflicting_writer')) ?? 0;
      conflicts.with ||= (await withIPv6.metric('ipmasq_conflicting_writer')) ?? 0;
    }
    // Fighting, each rewrites at every resync: 40 writes in 20 rounds.
    t.ok(kernel.applies.length <= 12, `${kernel.applies.length} writes in 20 rounds`);
    t.same(conflicts, { without: 1, with: 1 }, 'both saw the other agent');
    // The agent without IPv6 leaves.
    for (let round = 0; round < 20; round++) {
      now += 60_000;
      await withIPv6.reconciler.sync();
    }
    t.ok(kernel.tables.has('ip6 ipmasq'), "the staying agent's ip6 table is in place");
    t.equal(await withIPv6.metric('ipmasq_conflicting_writer'), 0);
    t.equal(withIPv6.reconciler.status(true).ready, true);
    const settled = kernel.applies.length;
    now += 60_000;
    await withIPv6.reconciler.sync();
    t.equal(kernel.applies.length, settled, 'and it writes no more');
  },
);

t.test(
  "the original agent's chain: warned about before the first sync, removed only after our first write",
  async (t) => {
    const legacy = { chains: ['IP-MASQ-AGENT', 'IP-MASQ'], remove: true };
    const kernel = new FakeKernel();
    kernel.legacy.set('IP-MASQ', 2);
    kernel.failWrites = new Error('Operation not permitted');
    const { reconciler, logs, metric } = setup(kernel, undefined, { legacy });
    await reconciler.sync();
    // The look that finds it runs beside the syncs (docs/observability.md, "Other NAT on the
    // node").
    await reconciler.lookSettled();
    t.ok(kernel.legacy.has('IP-MASQ'), 'kept while our table is not in the kernel');
    t.ok(logs.some((l) => l.level === 40 && /removed once our table is in the kernel/.test(l.msg)));
    t.equal(await metric('ipmasq_legacy_chain_present'), 1);
    kernel.failWrites = undefined;
    await reconciler.sync();
    t.notOk(kernel.legacy.has('IP-MASQ'), 'removed after the first good sync');
    t.equal(await metric('ipmasq_legacy_chain_present'), 0);
    t.ok(logs.some((l) => /removed the original agent's chain/.test(l.msg)));
    kernel.legacy.set('IP-MASQ', 0);
    await reconciler.sync();
    t.ok(kernel.legacy.has('IP-MASQ'), 'removed once: a chain put back later is left');
  },
);

t.test('without --remove-legacy-chain the chain is only warned about, once', async (t) => {
  const kernel = new FakeKernel();
  kernel.legacy.set('IP-MASQ-AGENT', 1);
  const legacy = { chains: ['IP-MASQ-AGENT', 'IP-MASQ'], remove: false };
  const { reconciler, logs, metric } = setup(kernel, undefined, { legacy });
  await reconciler.sync();
  await reconciler.sync();
  t.ok(kernel.legacy.has('IP-MASQ-AGENT'));
  const warnings = logs.filter((l) => /run with --remove-legacy-chain/.test(l.msg));
  t.equal(warnings.length, 1);
  t.equal(await metric('ipmasq_legacy_chain_present'), 1);
});

t.test(
  'conntrack: a config change judges the flipped ranges once committed; the first write, a drift repair and none do not',
  async (t) => {
    const a: LoadResult = { ok: true, config: config(['10.0.0.0/8']), warnings: [] };
    const b: LoadResult = { ok: true, config: config(['10.0.0.0/9']), warnings: [] };
    const kernel = new FakeKernel();
    const { reconciler, setConfig, logs, metric } = setup(kernel, a, { conntrackFlush: 'udp' });
    await reconciler.sync();
    t.same(kernel.judgements, [], 'the first write has nothing to compare with');
    setConfig(b);
    let appliesAtJudgement = -1;
    const judge = kernel.judgeFlows.bind(kernel);
    kernel.judgeFlows = async (request) => {
      appliesAtJudgement = kernel.applies.length;
      return judge(request);
    };
    kernel.plan = { seen: 9, unjudged: 0, now: 3, later: 0, hold: 0 };
    await reconciler.sync();
    await reconciler.flushesSettled();
    t.equal(appliesAtJudgement, 2, 'after the new ruleset was committed');
    t.match(kernel.judgements, [
      {
        family: 4,
        protocols: [17, 136],
        lost: [[0x0a800000n, 0x0affffffn]],
        gained: [],
        exemptAfter: null,
        before: { sources: null, interfaces: null, snat: null },
        after: { sources: null, interfaces: null, snat: null },
      },
    ]);
    t.same(kernel.deletions, [{ family: 4, which: 'now', count: 3 }]);
    t.same(kernel.holds, [], 'no reply to hold: nothing written');
    t.equal(await metric('ipmasq_conntrack_flushed_total', { family: 'ipv4', protocol: 'udp' }), 3);
    t.ok(logs.some((l) => /deleted the conntrack entries/.test(l.msg)));
    t.equal(kernel.applies.length, 2);
    kernel.tamper(ip, () => null);
    await reconciler.sync();
    await reconciler.flushesSettled();
    t.equal(kernel.applies.length, 3, 'drift repaired');
    t.equal(kernel.judgements.length, 1, 'a drift repair to the same config judges nothing');

    const all = setup(new FakeKernel(), a, { conntrackFlush: 'all' });
    await all.reconciler.sync();
    all.setConfig(b);
    await all.reconciler.sync();
    await all.reconciler.flushesSettled();
    t.same(all.kernel.judgements[0]?.protocols, [], 'all: every protocol');

    const none = setup(new FakeKernel(), a, { conntrackFlush: 'none' });
    await none.reconciler.sync();
    none.setConfig(b);
    await none.reconciler.sync();
    await none.reconciler.flushesSettled();
    t.same(none.kernel.judgements, [], 'none: nothing');
  },
);

t.test(
  'conntrack: a policy change is judged with both policies and every exempt destination; an unchanged one only where destinations flipped',
  async (t) => {
    const policy = (egress: EgressPolicy | undefined): LoadResult => ({
      ok: true,
      config: {
        ...config(['10.0.0.0/8']),
        keys: egressKeys(egress),
        hash: createHash('sha256')
          .update(JSON.stringify(egress ?? null))
          .digest('hex'),
      },
      warnings: [],
    });
    const kernel = new FakeKernel();
    const { reconciler, setConfig } = setup(kernel, policy(undefined), { conntrackFlush: 'udp' });
    await reconciler.sync();
    setConfig(
      policy({
        sourceCIDRs: { ipv4: ['10.244.0.0/16'], ipv6: [] },
        egressInterfaces: ['eth*'],
        snat: { ipv4: { first: '192.0.2.10', last: '192.0.2.10' } },
      }),
    );
    await reconciler.sync();
    await reconciler.flushesSettled();
    t.match(kernel.judgements.at(-1), {
      lost: [],
      gained: [],
      exemptAfter: [[0x0a000000n, 0x0affffffn]],
      before: { sources: null, interfaces: null, snat: null },
      after: {
        sources: [[0x0af40000n, 0x0af4ffffn]],
        interfaces: ['eth*'],
        snat: [0xc000020an, 0xc000020an],
      },
    });
    const judged = kernel.judgements.length;
    // The same decisions under another hash (cidrLimit, say): nothing flips, nothing is judged.
    setConfig({
      ok: true,
      config: {
        ...config(['10.0.0.0/8'], 'ff'.repeat(32)),
        keys: egressKeys({
          sourceCIDRs: { ipv4: ['10.244.0.0/16'], ipv6: [] },
          egressInterfaces: ['eth*'],
          snat: { ipv4: { first: '192.0.2.10', last: '192.0.2.10' } },
        }),
      },
      warnings: [],
    });
    await reconciler.sync();
    await reconciler.flushesSettled();
    t.equal(kernel.judgements.length, judged, 'nothing to judge');
  },
);

t.test(
  'conntrack: replies still going to the pod are held before the entries go; queries in flight go after their grace',
  async (t) => {
    const a: LoadResult = { ok: true, config: config(['10.0.0.0/8']), warnings: [] };
    const b: LoadResult = { ok: true, config: config(['10.0.0.0/9']), warnings: [] };
    const kernel = new FakeKernel();
    const { reconciler, setConfig, logs, metric } = setup(kernel, a, {
      conntrackFlush: 'udp',
      conntrackGraceMs: 50,
    });
    await reconciler.sync();
    const order: string[] = [];
    const hold = kernel.holdReplies.bind(kernel);
    kernel.holdReplies = async (...args) => {
      order.push('hold');
      return hold(...args);
    };
    const remove = kernel.deleteFlows.bind(kernel);
    kernel.deleteFlows = async (plan, which) => {
      order.push(which);
      return remove(plan, which);
    };
    kernel.plan = { seen: 5, unjudged: 0, now: 2, later: 1, hold: 1 };
    setConfig(b);
    const started = Date.now();
    await reconciler.sync();
    await reconciler.flushesSettled();
    t.same(order, ['hold', 'now', 'later'], 'held before the entries are deleted');
    t.ok(Date.now() - started >= 50, 'the flows in flight after their grace');
    t.same(kernel.holds, [{ family: 4, table: 'ipmasq', set: 'late-replies', hold: 1 }]);
    t.equal(reconciler.status(true).ready, true, 'still in sync: the hold is not drift');
    // The write was an element edit: the next sync reads it back once, its audit (docs/writes.md,
    // "The everyday edit"), past the hold's step.
    const audited = kernel.audits.length;
    await reconciler.sync();
    t.ok(kernel.audits.length > audited, 'the element write read back by its audit');
    const mismatches = await metric('ipmasq_fast_path_mismatches_total', { path: 'element-write' });
    t.equal(mismatches, 0, 'and found right');
    const reads = kernel.reads;
    await reconciler.sync();
    t.equal(kernel.reads, reads, 'the hold moved the generation id by one: no read-back');
    t.match(
      logs.find((l) => /masquerade decision changed/.test(l.msg)),
      { lateRepliesHeld: 1, inFlight: 1, deleted: { ipv4: { udp: 2 } } },
    );
    t.ok(logs.some((l) => /a query in flight at the change/.test(l.msg)));
  },
);

t.test('conntrack: a failed flush is counted and logged, and the write stands', async (t) => {
  const kernel = new FakeKernel();
  const a: LoadResult = { ok: true, config: config(['10.0.0.0/8']), warnings: [] };
  const { reconciler, setConfig, logs, metric } = setup(kernel, a, { conntrackFlush: 'udp' });
  await reconciler.sync();
  kernel.plan = { seen: 5, unjudged: 0, now: 2, later: 0, hold: 0 };
  kernel.deleteFlows = async () => ({ deleted: new Map(), error: 'delete: ENOBUFS' });
  setConfig({ ok: true, config: config(['10.0.0.0/9']), warnings: [] });
  t.same(await reconciler.sync(), { ok: true });
  await reconciler.flushesSettled();
  t.ok(reconciler.status(true).ready);
  t.equal(await metric('ipmasq_conntrack_flush_failures_total'), 1);
  t.ok(logs.some((l) => l.level === 50 && /could not delete the conntrack entries/.test(l.msg)));
});

t.test(
  'conntrack: a slow flush does not hold up the next sync; flushes run in order',
  async (t) => {
    const kernel = new FakeKernel();
    const a: LoadResult = { ok: true, config: config(['10.0.0.0/8']), warnings: [] };
    const { reconciler, setConfig } = setup(kernel, a, { conntrackFlush: 'udp' });
    await reconciler.sync();
    let release: () => void = () => undefined;
    const order: string[] = [];
    const judge = kernel.judgeFlows.bind(kernel);
    kernel.judgeFlows = async (request) => {
      order.push(`start ${request.lost.length + request.gained.length}`);
      if (order.length === 1) await new Promise<void>((resolve) => (release = resolve));
      order.push('end');
      return judge(request);
    };
    setConfig({ ok: true, config: config(['10.0.0.0/9']), warnings: [] });
    await reconciler.sync();
    setConfig({ ok: true, config: config(['10.0.0.0/10', '192.168.0.0/16']), warnings: [] });
    await reconciler.sync();
    t.equal(kernel.applies.length, 3, 'both writes done while the first flush waits');
    t.same(order, ['start 1'], 'the second flush waits for the first');
    release();
    await reconciler.flushesSettled();
    t.same(order, ['start 1', 'end', 'start 2', 'end']);
  },
);

t.test('Events on the Node (--kubernetes): each cause once, where its log line is', async (t) => {
  const events: Array<[string, string]> = [];
  const kernel = new FakeKernel();
  kernel.legacy.set('IP-MASQ', 1);
  kernel.failWrites = new Error('Operation not permitted');
  const { reconciler, setConfig } = setup(kernel, undefined, {
    legacy: { chains: ['IP-MASQ'], remove: false },
    events: (reason, message) => events.push([reason, message]),
  });
  await reconciler.sync();
  await reconciler.sync();
  kernel.failWrites = undefined;
  await reconciler.sync();
  setConfig(invalid);
  await reconciler.sync();
  await reconciler.sync();
  setConfig({ ok: true, config: config(['10.0.0.0/8']), warnings: [] });
  await reconciler.sync();
  t.same(
    events.map(([reason]) => reason),
    // The look that finds the legacy chain comes after the sync's write (docs/observability.md,
    // "Other NAT on the node"): the write's failure is told first.
    ['KernelWriteFailed', 'LegacyChainPresent', 'ConfigInvalid', 'ConfigRecovered'],
  );
  t.match(events[1]![1], /IP-MASQ is still in table ip nat/);
  t.match(events[0]![1], /kernel write failed: .*not permitted/);
  t.match(events[2]![1], /"x" is not a CIDR/);
});

t.test('Events: another agent writing our table is a ConflictingWriter', async (t) => {
  const kernel = new FakeKernel();
  let now = 1_000_000;
  const events: string[] = [];
  const first = setup(kernel, undefined, {
    now: () => now,
    events: (reason) => events.push(reason),
  });
  const second = setup(
    kernel,
    { ok: true, config: config(['10.1.0.0/16']), warnings: [] },
    {
      now: () => now,
    },
  );
  for (let round = 0; round < 3; round++) {
    now += 60_000;
    await first.reconciler.sync();
    await second.reconciler.sync();
  }
  t.same(events, ['ConflictingWriter'], 'once while the conflict lasts');
});

t.test(
  'the look at other NAT runs beside the syncs: a print never holds a write back, nor starts during one',
  async (t) => {
    const kernel = new FakeKernel();
    // Another table's nat postrouting chain that masquerades: the look prints it.
    kernel.chains = async () => [
      {
        family: 'ip',
        table: 'mesh',
        name: 'post',
        hook: { name: 'postrouting', priority: 110, type: 'nat' },
      },
    ];
    let handle = 7;
    let shapesHeld: Promise<void> = Promise.resolve();
    kernel.ruleShapes = async () => {
      await shapesHeld;
      return [{ handle, translates: true, jumps: [], expressions: ['masq'] }];
    };
    const listing = () =>
      `table ip mesh {\n\tchain post {\n\t\tmasquerade # handle ${handle}\n\t}\n}\n`;
    const prints: string[] = [];
    let writing = false;
    let printHeld: Promise<void> = Promise.resolve();
    const printer = kernel as unknown as { listRules: Kernel['listRules'] };
    printer.listRules = async (chains) => {
      prints.push(`${chains.map((c) => c.chain).join()}${writing ? ' during a write' : ''}`);
      // libnftables downloading a large set: the print ends when the test says.
      await printHeld;
      return listing();
    };
    const apply = kernel.apply.bind(kernel);
    let writeHeld: Promise<void> = Promise.resolve();
    let writeStarted = () => {};
    kernel.apply = async (script) => {
      writing = true;
      writeStarted();
      try {
        await writeHeld;
        return await apply(script);
      } finally {
        writing = false;
      }
    };
    const { reconciler, setConfig, logs } = setup(kernel);

    let endPrint = () => {};
    printHeld = new Promise((resolve) => (endPrint = resolve));
    t.same(await reconciler.sync(), { ok: true }, 'the first sync written');
    await new Promise((resolve) => setImmediate(resolve));
    t.same(prints, ['post'], 'its look prints');
    const generation = reconciler.status(true).generation;
    setConfig({ ok: true, config: config(['10.0.0.0/9']), warnings: [] });
    t.same(await reconciler.sync('config changed'), { ok: true }, 'a change while it prints');
    t.equal(reconciler.status(true).generation, generation + 1, 'written, not held for the print');
    endPrint();
    await reconciler.lookSettled();
    t.ok(
      logs.some((l) => l.level === 40 && (l as Record<string, unknown>).table === 'ip mesh'),
      'the look then reports what it printed',
    );

    // A look reaching its print while a write is under way waits for that sync to end.
    handle = 8;
    let dumped = () => {};
    shapesHeld = new Promise((resolve) => (dumped = resolve));
    let endWrite = () => {};
    writeHeld = new Promise((resolve) => (endWrite = resolve));
    const started = new Promise<void>((resolve) => (writeStarted = resolve));
    t.same(await reconciler.sync('SIGHUP'), { ok: true }, 'a resync: its look is due');
    setConfig({ ok: true, config: config(['10.0.0.0/10']), warnings: [] });
    const change = reconciler.sync('config changed');
    await started;
    dumped(); // the look has what it needs to print, during the write
    await new Promise((resolve) => setTimeout(resolve, 20));
    t.same(prints.slice(1), [], 'no print while the write is under way');
    endWrite();
    t.same(await change, { ok: true }, 'the change written');
    await reconciler.lookSettled();
    t.same(prints.slice(1), ['post'], 'printed once the sync ended');
  },
);
