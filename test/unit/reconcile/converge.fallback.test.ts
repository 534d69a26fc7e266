// A write of ours the kernel refuses with nobody else committing is our bug, never drift
// (docs/writes.md, "When a write fails"): logged as such, counted apart, and the next write
// replaces our whole tables in one transaction. Against a fake kernel that refuses every in-place
// write, the agent still converges, is ready, and counts no drift.
import { createHash } from 'node:crypto';
import { pino } from 'pino';
import t from 'tap';
import type { Config } from '../../../src/config/types.js';
import { NftError } from '../../../src/kernel/addon.js';
import { listingIs } from '../../../src/nftables/listing.js';
import { compile } from '../../../src/compile.js';
import type { CommitStep, ElementEdit } from '../../../src/nftables/types.js';
import { Reconciler } from '../../../src/reconcile/reconciler.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';
import { FakeKernel } from '../../helpers/fake-kernel.js';
import { compileOptions } from '../../helpers/compile-options.js';

function config(ipv4: string[]): Config {
  return {
    nonMasquerade: { ipv4, ipv6: [] },
    masquerade: { ipv4: [], ipv6: [] },
    hash: createHash('sha256').update(ipv4.join(',')).digest('hex'),
    sources: [],
    keys: {},
  };
}

const BUSY = 'Error: Could not process rule: Device or resource busy\ndelete set ip ipmasq x';

/** Refuses every write but one that makes our table whole (a creation or a replace). */
class RefusingKernel extends FakeKernel {
  refused = 0;
  whole = 0;
  /** Another tool's commit right before each refusal (the refusal is then not ours to blame). */
  othersFirst = false;

  private refuse(): never {
    this.beforeCommit?.();
    if (this.othersFirst) this.tamper({ family: 'ip', name: 'other' });
    this.refused++;
    throw new NftError(BUSY);
  }

  override async apply(script: string): Promise<CommitStep> {
    const whole = /^table ip ipmasq \{/.test(script) || /^add table ip ipmasq\n/.test(script);
    if (!whole) this.refuse();
    this.whole++;
    return super.apply(script);
  }

  override async edit(_edit: ElementEdit): Promise<CommitStep> {
    this.refuse();
  }
}

function setup(kernel: FakeKernel) {
  const logs: Array<{ level: number; msg: string; reason?: string }> = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => logs.push(JSON.parse(line)) });
  const metrics = new AgentMetrics();
  let current = config(['10.0.0.0/8']);
  const reconciler = new Reconciler({
    configPath: '/cfg',
    loadOptions: { enableIPv6: false, nomasqAllReservedRanges: false },
    compileOptions: compileOptions(),
    loadConfig: async () => ({ ok: true, config: current, warnings: [] }),
    kernel,
    logger,
    metrics,
    largeSetThreshold: 3,
    conntrackFlush: 'none',
    legacy: { chains: [], remove: false },
    writer: 'mix3e9s.k2f',
  });
  const metric = async (name: string, labels: Record<string, string> = {}) => {
    const m = await metrics.registry.getSingleMetric(name)?.get();
    return m?.values.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))
      ?.value;
  };
  return { reconciler, logs, metric, set: (ipv4: string[]) => (current = config(ipv4)) };
}

t.test(
  'every in-place write refused: each change still lands whole, ready, no drift',
  async (t) => {
    const kernel = new RefusingKernel();
    const { reconciler, logs, metric, set } = setup(kernel);
    t.same(await reconciler.sync(), { ok: true }, 'created');
    const lists = [
      ['10.0.0.0/8', '192.0.2.0/24'],
      ['10.0.0.0/8'],
      ['10.0.0.0/8', '172.16.0.0/12', '198.51.100.0/24', '203.0.113.0/24'],
      ['100.64.0.0/10'],
    ];
    for (const [i, list] of lists.entries()) {
      set(list);
      t.same(await reconciler.sync('config changed'), { ok: true }, `change ${i + 1}: converged`);
      const [wanted] = compile(config(list), compileOptions(), i + 2, 'mix3e9s.k2f');
      t.ok(
        listingIs(kernel.tables.get('ip ipmasq')!, wanted!),
        `change ${i + 1}: the kernel holds it`,
      );
      t.ok(reconciler.status(true).ready, `change ${i + 1}: ready`);
    }
    t.equal(kernel.refused, lists.length, 'each change was tried in place first, and refused');
    t.equal(await metric('ipmasq_write_fallbacks_total', { reason: 'EBUSY' }), lists.length);
    t.equal(await metric('ipmasq_drift_repairs_total'), 0, 'never counted as drift');
    const errors = logs.filter((l) => l.level === 50 && /refused though nobody else/.test(l.msg));
    t.equal(errors.length, lists.length, 'each logged as our bug');
    t.equal(errors[0]?.reason, 'EBUSY');
    t.notOk(
      logs.some((l) => /drifted/.test(l.msg)),
      'no line says our tables drifted',
    );
  },
);

t.test('a refusal with another commit in its way is not counted as ours', async (t) => {
  const kernel = new RefusingKernel();
  const { reconciler, metric, set } = setup(kernel);
  await reconciler.sync();
  kernel.othersFirst = true;
  set(['10.0.0.0/8', '192.0.2.0/24']);
  const outcome = await reconciler.sync('config changed');
  // Read back, refused again in place, then written whole by the next sync at the latest.
  if (!outcome.ok) t.same(await reconciler.sync('retry'), { ok: true }, 'the retry converges');
  const generation = reconciler.status(true).generation;
  const list = ['10.0.0.0/8', '192.0.2.0/24'];
  const [wanted] = compile(config(list), compileOptions(), generation, 'mix3e9s.k2f');
  t.ok(listingIs(kernel.tables.get('ip ipmasq')!, wanted!), 'the kernel holds the change');
  t.equal(
    (await metric('ipmasq_write_fallbacks_total', { reason: 'EBUSY' })) ?? 0,
    0,
    'no fallback counted: another tool committed',
  );
  t.ok(reconciler.status(true).ready, 'ready');
});

t.test(
  'beside a busy node: a refusal with only commits elsewhere around it, heard, is still ours',
  async (t) => {
    const kernel = new RefusingKernel();
    const { reconciler, metric, set } = setup(kernel);
    reconciler.heard.hearBy(() => true);
    await reconciler.sync();
    // Another tool commits to its own table, heard as such, right before each refusal.
    kernel.beforeCommit = () => {
      kernel.tamper({ family: 'ip', name: 'kube-proxy' });
      reconciler.heard.elsewhere(kernel.genId);
    };
    set(['10.0.0.0/8', '192.0.2.0/24']);
    t.same(await reconciler.sync('config changed'), { ok: true }, 'converged');
    t.equal(await metric('ipmasq_write_fallbacks_total', { reason: 'EBUSY' }), 1, 'our fallback');
    t.equal(await metric('ipmasq_drift_repairs_total'), 0, 'not drift');
  },
);
