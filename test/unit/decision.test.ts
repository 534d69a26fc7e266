// Which destinations a config exempts, and which change between two configs: checked address by
// address against the decision order the rules implement (masqueradeCIDRs first, then the set).
import fc from 'fast-check';
import type { Worker } from 'node:worker_threads';
import t from 'tap';
import {
  normalise,
  packRanges,
  PackedRanges,
  subtract,
  symmetricDifference,
  type Range,
} from '../../src/cidr/index.js';
import { parseConfigText } from '../../src/config/index.js';
import type { Config } from '../../src/config/types.js';
import {
  decideBy,
  decisionOf,
  exemptRanges as exemptOfDecision,
  flippedRanges,
  Judge,
  type ListStep,
  STEPS,
  stepsOf,
} from '../../src/decision.js';
import { compileOptions } from '../helpers/compile-options.js';
import {
  decisionChangesOffThread,
  type DecisionChange,
} from '../../src/reconcile/changed-ranges.js';
import { smallConfigArb, smallConfigText } from '../fuzz/helpers/generators.js';

const V6 = { enableIPv6: true, nomasqAllReservedRanges: false };

function config(text: string): Config {
  const result = parseConfigText(text, 'test', V6);
  if (!result.ok) throw result.error;
  return result.config;
}

const v4 = (text: string) => {
  const [a = 0, b = 0, c = 0, d = 0] = text.split('.').map(Number);
  return BigInt(((a * 256 + b) * 256 + c) * 256 + d);
};
const inside = (ranges: readonly Range[], x: bigint) => ranges.some(([f, l]) => f <= x && x <= l);
const exemptRanges = (c: Config, family: 'ipv4' | 'ipv6') => exemptOfDecision(stepsOf(c, family));
/** The destinations whose decision differs, per family that has any: both directions together. */
const changedRanges = (a: Config, b: Config, which: Array<'ipv4' | 'ipv6'>) =>
  flippedRanges(a, b, which)
    .map(({ family, lost, gained }) => ({ family, ranges: normalise([...lost, ...gained]) }))
    .filter((change) => change.ranges.length > 0);

t.test(
  'the steps of docs/egress-policy.md "Egress policy", in order, each with its key, set and outcome',
  async (t) => {
    const plain = config('nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqueradeCIDRs: [10.9.0.0/16]\n');
    t.same(
      stepsOf(plain, 'ipv4').steps.map((s) => [s.field, s.key, s.field && s.takes, s.outcome]),
      [
        ['daddr', 'masqueradeCIDRs', 'listed', 'translated'],
        ['daddr', 'nonMasqueradeCIDRs', 'listed', 'exempt'],
        [undefined, undefined, undefined, 'translated'],
      ],
      'the original: masqueradeCIDRs, then the non-masquerade set, then the rest translated',
    );
    const policy = config(
      'nonMasqueradeCIDRs: [10.0.0.0/8]\nsourceCIDRs: [10.244.0.0/16]\negressInterfaces: [eth0]\nsnatAddress: 192.0.2.10\n',
    );
    const steps = decisionOf(
      policy,
      'ipv4',
      compileOptions({ toPorts: [{ first: 2000, last: 2999 }] }),
    );
    t.same(
      steps.steps
        .slice(0, 2)
        .map((s) => (s.field ? [s.field, s.key, s.set, s.takes, s.outcome, s.list] : [])),
      [
        ['oifname', 'egressInterfaces', 'egress-interfaces', 'unlisted', 'skipped', ['eth0']],
        ['saddr', 'sourceCIDRs', 'sources', 'unlisted', 'skipped', ['10.244.0.0/16']],
      ],
      'the policy steps come first',
    );
    t.same(
      steps.translation,
      {
        snat: { first: '192.0.2.10', last: '192.0.2.10' },
        ports: [{ first: 2000, last: 2999 }],
        fullyRandom: true,
      },
      "the translation: the snatAddress, with the flags' ports",
    );
    const sixSources = stepsOf(policy, 'ipv6').steps[1];
    t.same(
      sixSources?.field === 'saddr' ? sixSources.list : undefined,
      [],
      'no IPv6 source listed: the IPv6 list is empty',
    );
    const flow = (daddr: string, extra: { saddr?: string; oifname?: string } = {}) => ({
      daddr: v4(daddr),
      ...(extra.saddr ? { saddr: v4(extra.saddr) } : {}),
      ...(extra.oifname ? { oifname: extra.oifname } : {}),
    });
    const judge = new Judge(steps);
    const verdict = (daddr: string, extra?: { saddr?: string; oifname?: string }) => {
      const v = judge.decide(flow(daddr, extra));
      return [v.outcome, v.step.key ?? 'last', v.unjudged.map((s) => s.key)];
    };
    t.same(verdict('198.19.0.4', { saddr: '10.244.1.2', oifname: 'eth0' }), [
      'translated',
      'last',
      [],
    ]);
    t.same(verdict('10.1.2.3', { saddr: '10.244.1.2', oifname: 'eth0' }), [
      'exempt',
      'nonMasqueradeCIDRs',
      [],
    ]);
    t.same(verdict('198.19.0.4', { saddr: '10.250.1.2', oifname: 'eth0' }), [
      'skipped',
      'sourceCIDRs',
      [],
    ]);
    t.same(verdict('198.19.0.4', { saddr: '10.244.1.2', oifname: 'eth1' }), [
      'skipped',
      'egressInterfaces',
      [],
    ]);
    t.same(
      verdict('198.19.0.4'),
      ['translated', 'last', ['egressInterfaces', 'sourceCIDRs']],
      'what is not said is passed as a condition',
    );
    t.same(
      new Judge(stepsOf(plain, 'ipv4')).decide(flow('10.9.1.1')).step.key,
      'masqueradeCIDRs',
      'masqueradeCIDRs first',
    );
  },
);

t.test('lost and gained each say their own direction', async (t) => {
  const exempt = config('nonMasqueradeCIDRs: [10.0.0.0/8]\n');
  const translated = config('nonMasqueradeCIDRs: [10.0.0.0/9]\n');
  const [change] = flippedRanges(exempt, translated, ['ipv4']);
  t.same(
    change?.lost,
    [[v4('10.128.0.0'), v4('10.255.255.255')]],
    'exempt before, translated after: lost',
  );
  t.same(change?.gained, [], 'nothing gained');
  const [back] = flippedRanges(translated, exempt, ['ipv4']);
  t.same(
    [back?.lost, back?.gained],
    [[], [[v4('10.128.0.0'), v4('10.255.255.255')]]],
    'and back: gained',
  );
});

t.test('masqueradeCIDRs inside a non-masquerade range are carved out of it', async (t) => {
  const c = config(
    'nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqueradeCIDRs: [10.9.0.0/16]\nmasqLinkLocal: true\n',
  );
  t.same(exemptRanges(c, 'ipv4'), [
    [v4('10.0.0.0'), v4('10.8.255.255')],
    [v4('10.10.0.0'), v4('10.255.255.255')],
  ]);
});

t.test(
  'a change yields exactly the flipped ranges, per family; no change yields none',
  async (t) => {
    const before = config('nonMasqueradeCIDRs: [10.0.0.0/8, "fd12::/16"]\n');
    const after = config('nonMasqueradeCIDRs: [10.0.0.0/9, "fd12::/16", 198.19.0.0/24]\n');
    const changes = changedRanges(before, after, ['ipv4', 'ipv6']);
    t.same(changes, [
      {
        family: 4,
        ranges: [
          [v4('10.128.0.0'), v4('10.255.255.255')],
          [v4('198.19.0.0'), v4('198.19.0.255')],
        ],
      },
    ]);
    t.same(changedRanges(before, before, ['ipv4', 'ipv6']), []);
    const linkLocal = config(
      'nonMasqueradeCIDRs: [10.0.0.0/8, "fd12::/16"]\nmasqLinkLocalIPv6: true\n',
    );
    t.same(
      changedRanges(before, linkLocal, ['ipv4', 'ipv6']).map((c) => c.family),
      [6],
      'masqLinkLocalIPv6 flips fe80::/10 only',
    );
    t.same(changedRanges(before, linkLocal, ['ipv4']), [], 'IPv6 not managed: nothing for it');
  },
);

const configArb = smallConfigArb();

function decidesExempt(nonMasq: string[], masq: string[], host: number): boolean {
  const covers = (cidr: string) => {
    const [base = '', len = '32'] = cidr.split('/');
    const first = Number(base.split('.')[3]);
    return host >= first && host < first + 2 ** (32 - Number(len));
  };
  return !masq.some(covers) && nonMasq.some(covers);
}

const text = smallConfigText;

t.test(
  'property: an address is in the changed ranges exactly when its decision differs',
  async (t) => {
    t.doesNotThrow(() =>
      fc.assert(
        fc.property(configArb, configArb, fc.integer({ min: 0, max: 255 }), (a, b, host) => {
          const [change] = changedRanges(config(text(a)), config(text(b)), ['ipv4']);
          const flipped = decidesExempt(...a, host) !== decidesExempt(...b, host);
          return inside(change?.ranges ?? [], v4(`10.0.0.${host}`)) === flipped;
        }),
        { numRuns: 500 },
      ),
    );
  },
);

t.test('property: range algebra matches sets of small integers', async (t) => {
  const setArb = fc.array(
    fc.tuple(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 6 })),
    {
      maxLength: 6,
    },
  );
  const ranges = (spec: Array<[number, number]>) =>
    normalise(spec.map(([first, size]) => [BigInt(first), BigInt(first + size)] as const));
  const members = (r: readonly Range[]) =>
    new Set(Array.from({ length: 50 }, (_, i) => i).filter((i) => inside(r, BigInt(i))));
  t.doesNotThrow(() =>
    fc.assert(
      fc.property(setArb, setArb, (x, y) => {
        const [a, b] = [ranges(x), ranges(y)];
        const [ma, mb] = [members(a), members(b)];
        const minus = members(subtract(a, b));
        const either = members(symmetricDifference(a, b));
        return Array.from({ length: 50 }, (_, i) => i).every(
          (i) =>
            minus.has(i) === (ma.has(i) && !mb.has(i)) &&
            either.has(i) === (ma.has(i) !== mb.has(i)),
        );
      }),
      { numRuns: 500 },
    ),
  );
});

t.test('large configs: the changed ranges come from a worker, the same as in-thread', async (t) => {
  const many = (variant: 0 | 1) => {
    const cidrs = Array.from({ length: 3_000 }, (_, i) => {
      const block = i * 2 + variant;
      return `10.${(block >> 8) & 255}.${block & 255}.0/24`;
    });
    return config(`cidrLimit: 4000\nnonMasqueradeCIDRs: ${JSON.stringify(cidrs)}\n`);
  };
  const [a, b] = [many(0), many(1)];
  let workers = 0;
  let exited = 0;
  const counted = (worker: Worker) => {
    workers++;
    worker.once('exit', () => exited++);
  };
  process.on('worker', counted);
  t.teardown(() => process.off('worker', counted));
  const threadsBefore = process.getActiveResourcesInfo().length;
  const away = await decisionChangesOffThread(a, b, ['ipv4', 'ipv6'], ['ipv4']);
  t.equal(workers, 1, 'one worker started for it');
  const packed = (changes: DecisionChange[]) =>
    changes.map(({ family, lost, gained, exemptAfter }) => ({
      family,
      lost: packRanges(family, lost).bytes,
      gained: packRanges(family, gained).bytes,
      exempt: exemptAfter && packRanges(family, exemptAfter).bytes,
    }));
  t.ok(away[0]?.lost instanceof PackedRanges, 'packed on the worker');
  const here = flippedRanges(a, b, ['ipv4', 'ipv6']).map((change, i) => ({
    ...change,
    exemptAfter: i === 0 ? exemptRanges(b, 'ipv4') : null,
  }));
  t.same(packed(away), packed(here), 'the same ranges as in-thread');
  t.equal(away[1]?.exemptAfter, null, 'every exempt destination only where asked for');
  t.equal(away[0]?.lost.length, 3_000, "3 000 /24s leave the config, none adjacent to another's");
  const none = await decisionChangesOffThread(a, a, ['ipv4'], []);
  t.same([none[0]?.lost.length, none[0]?.gained.length], [0, 0], 'no change');
  // The sets are cut to where they differ (changed-ranges.ts, narrowed): nothing, in-thread.
  t.equal(workers, 1, 'no change: no worker, however large the sets');
  const small = config('nonMasqueradeCIDRs: [10.0.0.0/8]\n');
  t.same(
    await decisionChangesOffThread(small, a, ['ipv4'], []),
    flippedRanges(small, a, ['ipv4']).map((change) => ({ ...change, exemptAfter: null })),
  );
  t.equal(workers, 1, 'up to 4 000 entries together: in-thread');
  t.ok(process.getActiveResourcesInfo().length <= threadsBefore + 1, 'no handle left behind');
  for (const deadline = Date.now() + 5_000; exited < workers && Date.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  t.equal(exited, workers, 'each worker ended with its computation');
});

t.test('the IPv4 fast path covers the whole address space exactly', async (t) => {
  const all = config(
    'nonMasqueradeCIDRs: [0.0.0.0/0]\nmasqueradeCIDRs: [255.255.255.255/32, 0.0.0.0/32]\n',
  );
  t.same(exemptRanges(all, 'ipv4'), [[1n, 2n ** 32n - 2n]]);
});

t.test('ranges pack as the addon reads them: big-endian bounds, first then last', async (t) => {
  const v4Packed = packRanges(4, [
    [v4('10.0.0.0'), v4('10.255.255.255')],
    [0n, 2n ** 32n - 1n],
  ]);
  t.same([...v4Packed.bytes], [10, 0, 0, 0, 10, 255, 255, 255, 0, 0, 0, 0, 255, 255, 255, 255]);
  t.equal(v4Packed.length, 2);
  t.equal(packRanges(4, [[1, 258]]).bytes.join(), '0,0,0,1,0,0,1,2', 'number bounds too');
  const high = 0x2001_0db8_0000_0000_0000_0000_0000_0001n;
  const v6Packed = packRanges(6, [[high, 2n ** 128n - 1n]]);
  t.equal(
    Buffer.from(v6Packed.bytes).toString('hex'),
    '20010db8000000000000000000000001' + 'ff'.repeat(16),
  );
  t.equal(v6Packed.length, 1);
  t.equal(packRanges(6, v6Packed), v6Packed, 'a packed list as it is');
});

t.test(
  'the step table: each step as its row gives it, in its order, while its key is given',
  async (t) => {
    const c = config(
      'nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqueradeCIDRs: [10.1.0.0/16]\n' +
        'sourceCIDRs: [10.244.0.0/16]\negressInterfaces: [eth0]\n',
    );
    const keys = (cfg: Config, family: 'ipv4' | 'ipv6') =>
      stepsOf(cfg, family).steps.map((step) => step.key ?? 'last');
    t.same(keys(c, 'ipv4'), [...STEPS.map((row) => row.key), 'last'], 'every row, in order');
    t.same(keys(config('nonMasqueradeCIDRs: [10.0.0.0/8]\n'), 'ipv4'), [
      'masqueradeCIDRs',
      'nonMasqueradeCIDRs',
      'last',
    ]);
    for (const step of stepsOf(c, 'ipv6').steps) {
      if (step.field === undefined) continue;
      const row = STEPS.find((r) => r.key === step.key)!;
      const { listOf: _listOf, ...fields } = row;
      t.match(step, fields, `${step.key}: the row's fields`);
      t.same(step.list, row.listOf(c, 'ipv6'), `${step.key}: the row's list`);
    }
    t.same(
      stepsOf(c, 'ipv6').steps.find((s): s is ListStep => s.key === 'sourceCIDRs')?.list,
      [],
      'sourceCIDRs given, none of the family: the step with an empty list',
    );
  },
);

t.test('property: decideBy, asked step by step, decides as the Judge does', async (t) => {
  const c = config(
    'nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\nmasqueradeCIDRs: [10.1.0.0/16]\n' +
      'sourceCIDRs: [10.244.0.0/16]\negressInterfaces: [eth0, "ens*"]\n',
  );
  const decision = stepsOf(c, 'ipv4');
  const judge = new Judge(decision);
  const flowArb = fc.record(
    {
      daddr: fc.constantFrom('10.1.2.3', '10.9.9.9', '192.168.1.1', '198.51.100.7').map(v4),
      saddr: fc.constantFrom('10.244.3.4', '10.245.0.1').map(v4),
      oifname: fc.constantFrom('eth0', 'eth1', 'ens5'),
    },
    { requiredKeys: ['daddr'] },
  );
  await fc.assert(
    fc.asyncProperty(flowArb, async (flow) => {
      const asked: string[] = [];
      const verdict = await decideBy(decision, flow, async (step, f) => {
        asked.push(step.key);
        return judge.holds(step, f);
      });
      const expected = judge.decide(flow);
      return (
        verdict.outcome === expected.outcome &&
        verdict.step === expected.step &&
        verdict.unjudged.length === expected.unjudged.length &&
        asked.length === decision.steps.length - 1
      );
    }),
    { numRuns: 300 },
  );
  t.pass('300 flows');
});
