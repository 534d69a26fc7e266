// Which writes are made unheard (src/reconcile/converge.ts, Converger.unheard; docs/performance.md):
// those of 2 000 elements or more (a whole change, a refill's old elements counted too), while the
// agent hears nftables' notifications and has heard no other tool's commit for a while, or found
// none around a write of its own. Small writes, and every write on a busy namespace, are made with
// the notifications on. The fake kernel records what each write was asked.
import { createHash } from 'node:crypto';
import { pino } from 'pino';
import t from 'tap';
import type { Config } from '../../../src/config/types.js';
import type { CommitStep, ElementEdit, WriteOptions } from '../../../src/nftables/types.js';
import { Reconciler } from '../../../src/reconcile/reconciler.js';
import { AgentMetrics } from '../../../src/reconcile/metrics.js';
import { FakeKernel } from '../../helpers/fake-kernel.js';
import { compileOptions } from '../../helpers/compile-options.js';
import { configWith } from '../../helpers/config.js';

/** A config of these IPv4 CIDRs, hashed by them. */
const config = (ipv4: string[]): Config =>
  configWith({
    nonMasquerade: { ipv4, ipv6: [] },
    hash: createHash('sha256').update(ipv4.join(',')).digest('hex'),
  });

/** `count` /24s that never merge: every other one, the odd ones with `odd`. */
const apart = (count: number, odd = 0) =>
  Array.from({ length: count }, (_, i) => {
    const n = 2 * i + odd;
    return `10.${n >> 8}.${n & 255}.0/24`;
  });

/** Records whether each write was asked to be made unheard. */
class RecordingKernel extends FakeKernel {
  asked: Array<{ via: 'apply' | 'edit'; unheard: boolean }> = [];
  private editing = false;

  override async apply(script: string, options?: WriteOptions): Promise<CommitStep> {
    // The fake makes an edit as its script: asked once, as an edit.
    if (!this.editing) this.asked.push({ via: 'apply', unheard: options?.unheard === true });
    return super.apply(script);
  }

  override async edit(edit: ElementEdit, options?: WriteOptions): Promise<CommitStep> {
    this.asked.push({ via: 'edit', unheard: options?.unheard === true });
    this.editing = true;
    try {
      return await super.edit(edit);
    } finally {
      this.editing = false;
    }
  }
}

function setup(hearing: boolean, quietMs?: number) {
  const kernel = new RecordingKernel();
  let current = config(apart(3_000));
  const reconciler = new Reconciler({
    configPath: '/cfg',
    loadOptions: { enableIPv6: false, nomasqAllReservedRanges: false },
    compileOptions: compileOptions({ setLayout: 'interval' }),
    loadConfig: async () => ({ ok: true, config: current, warnings: [] }),
    kernel,
    logger: pino({ level: 'silent' }),
    metrics: new AgentMetrics(),
    largeSetThreshold: 100_000,
    conntrackFlush: 'none',
    legacy: { chains: [], remove: false },
    writer: 'mix3e9s.k2f',
    ...(quietMs !== undefined ? { unheardAfterQuietMs: quietMs } : {}),
  });
  if (hearing) reconciler.heard.hearBy(() => true);
  const write = async (ipv4: string[]) => {
    current = config(ipv4);
    kernel.asked = [];
    const outcome = await reconciler.sync('config changed');
    t.ok(outcome.ok, 'written');
    return kernel.asked;
  };
  return { kernel, reconciler, write };
}

t.test('large writes unheard while nobody else commits; small ones heard', async (t) => {
  const { write } = setup(true);
  await write(apart(3_000));
  t.same(
    await write(apart(3_000, 1)),
    [{ via: 'edit', unheard: true }],
    'a whole change of 3 000: one refill over netlink, unheard',
  );
  t.same(
    await write([...apart(2_999, 1), '192.168.0.0/16']),
    [{ via: 'edit', unheard: false }],
    'one CIDR in, one out: heard',
  );
  t.same(
    await write(apart(5)),
    [{ via: 'edit', unheard: true }],
    'down to five: the refill flushes 3 000 (counted), unheard',
  );
  t.same(
    await write(apart(5, 1)),
    [{ via: 'edit', unheard: false }],
    'five replaced by five: heard',
  );
});

t.test('not while another tool commits, nor without notifications', async (t) => {
  const busy = setup(true, 60_000);
  await busy.write(apart(3_000));
  busy.reconciler.heard.elsewhere(123);
  t.same(
    await busy.write(apart(3_000, 1)),
    [{ via: 'edit', unheard: false }],
    'another tool committed a moment ago: heard',
  );
  const deaf = setup(false, 0);
  await deaf.write(apart(3_000));
  t.same(
    await deaf.write(apart(3_000, 1)),
    [{ via: 'edit', unheard: false }],
    'nothing heard anyway: not asked',
  );
  const quiet = setup(true, 0);
  await quiet.write(apart(3_000));
  quiet.reconciler.heard.elsewhere(123);
  t.same(
    await quiet.write(apart(3_000, 1)),
    [{ via: 'edit', unheard: true }],
    'with no quiet asked for (as the kernel tests run it), unheard all the same',
  );
});

t.test('a large creation through libnftables is unheard too', async (t) => {
  const { kernel, reconciler } = setup(true);
  kernel.asked = [];
  t.ok((await reconciler.sync('start')).ok);
  t.same(kernel.asked, [{ via: 'apply', unheard: true }], 'the table made with 3 000: unheard');
});
