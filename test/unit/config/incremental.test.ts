// A load worked out from the last (config/incremental.ts) is a whole load's result, whatever the
// edit: random edit sequences over small and large configs, one file and a directory of two, each
// step compared with a cold load of the same bytes — the Config (sets, hash, keys), the warnings,
// or the error — and the sets' lists rebuilt from the splices equal to the cold ones.
import { deepStrictEqual } from 'node:assert';
import { Buffer } from 'node:buffer';
import fc from 'fast-check';
import { assertSplicesRebuild, sourceOf } from '../../helpers/incremental.js';
import t, { type Test } from 'tap';
import { ConfigCache } from '../../../src/config/incremental.js';
import { loadFiles, type FileBytes } from '../../../src/config/load.js';
import type { LoadOptions, LoadResult } from '../../../src/config/types.js';

const V4_ONLY: LoadOptions = { enableIPv6: false, nomasqAllReservedRanges: false };
const V6: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };

function check<Ts>(t: Test, property: fc.IProperty<Ts>, params: fc.Parameters<Ts>): void {
  t.doesNotThrow(() => fc.assert(property, params), 'property holds');
}

/** Item lines: mostly valid /20-/26s near each other (so they overlap and adjoin), a few odd ones. */
const item = fc
  .oneof(
    {
      weight: 12,
      arbitrary: fc.tuple(fc.integer({ min: 0, max: 63 }), fc.integer({ min: 20, max: 26 })),
    },
    { weight: 1, arbitrary: fc.constant('odd' as const) },
  )
  .chain((value) =>
    value === 'odd'
      ? fc.constantFrom(
          '  - 10.0.0.1/8', // not aligned: an error
          '  - fd00::/8',
          '  - "10.5.0.0/16"',
          '  - 10.6.0.0/16 # a comment',
          '  # a comment line',
          '',
          '    - 10.7.0.0/16', // another indent
          '  - 10.8.0.0/16:',
          '  - 0.0.0.0/0',
          '\t- 10.9.0.0/16',
          '  - 192.168.0.0/16',
          'cidrLimit: 3',
        )
      : fc.constant(cidrLine(value[0], value[1])),
  );

function cidrLine(block: number, len: number): string {
  // 10.0.(block * 4).x aligned to len: /20 and /21 overlap their neighbours, /22s adjoin.
  const third = len <= 24 ? (block * 4) & (0xff << (24 - len)) & 255 : (block * 4) & 255;
  const fourth = len === 25 ? (block % 2) * 128 : len === 26 ? (block % 4) * 64 : 0;
  return `  - 10.0.${third}.${fourth}/${len}`;
}

/** A file's two lists, as lines: nonMasqueradeCIDRs' and masqueradeCIDRs'. */
type Lists = [string[], string[]];

function configText([nonMasq, masq]: Lists, extra: string): string {
  return `cidrLimit: 100000\nresyncInterval: 30s\n${extra}nonMasqueradeCIDRs:\n${nonMasq.join('\n')}\nmasqueradeCIDRs:\n${masq.join('\n')}\n`;
}

type Edit = { list: number; at: number; remove: number; insert: string[] };
const edit = fc.record({
  list: fc.oneof(
    { weight: 3, arbitrary: fc.constant(0) },
    { weight: 1, arbitrary: fc.constant(1) },
  ),
  at: fc.nat(),
  remove: fc.nat({ max: 3 }),
  insert: fc.array(item, { maxLength: 3 }),
});

function applyEdit(lists: Lists, e: Edit): Lists {
  const lines = lists[e.list % 2] as string[];
  const at = lines.length === 0 ? 0 : e.at % (lines.length + 1);
  const next = [...lines];
  next.splice(at, e.remove, ...e.insert);
  return e.list % 2 === 0 ? [next, lists[1]] : [lists[0], next];
}

/** Runs a sequence of edits over the files, each load compared with a cold one; counts the spliced loads. */
function run(
  starts: readonly Lists[],
  edits: readonly { file: number; edit: Edit }[],
  options: LoadOptions,
  counted: { spliced: number; loads: number },
): void {
  const names = starts.map((_, i) => `/cfg/ip-masq-${i}`);
  const src = sourceOf(names);
  const cache = new ConfigCache();
  let lines: Lists[] = starts.map(([a, b]) => [[...a], [...b]]);
  let last: LoadResult | undefined;
  const step = () => {
    const files: FileBytes[] = lines.map((l, i) => ({
      file: names[i] as string,
      bytes: Buffer.from(
        configText(
          l,
          i === 0
            ? 'egressInterfaces: [eth0, "ens*"]\n'
            : 'masqLinkLocal: true\nsourceCIDRs: [10.0.0.0/8] # pods\n',
        ),
      ),
    }));
    const cold = loadFiles(src, files, options);
    const warm = cache.load(src, files, options);
    deepStrictEqual(warm.result, cold);
    assertSplicesRebuild(last, warm.splices, warm.result);
    counted.loads++;
    if (warm.splices) counted.spliced++;
    last = warm.result;
    if (Math.random() < 0.5) cache.prepare(options);
  };
  step();
  for (const { file, edit: e } of edits) {
    const index = file % lines.length;
    lines = lines.map((l, i) => (i === index ? applyEdit(l, e) : l));
    step();
  }
}

const start = (max: number): fc.Arbitrary<Lists> =>
  fc.tuple(
    fc.array(item, { minLength: 1, maxLength: max }),
    fc.array(item, { minLength: 1, maxLength: 6 }),
  );

t.test('one file: random edits load as a whole load does', async (t) => {
  const counted = { spliced: 0, loads: 0 };
  check(
    t,
    fc.property(
      start(40),
      fc.array(fc.record({ file: fc.constant(0), edit }), { maxLength: 12 }),
      fc.boolean(),
      (lines, edits, v6) => run([lines], edits, v6 ? V6 : V4_ONLY, counted),
    ),
    { numRuns: 600 },
  );
  t.ok(counted.spliced > counted.loads / 4, `${counted.spliced} of ${counted.loads} loads spliced`);
});

t.test('a directory of two files: random edits of either', async (t) => {
  const counted = { spliced: 0, loads: 0 };
  check(
    t,
    fc.property(
      start(30),
      start(30),
      fc.array(fc.record({ file: fc.nat({ max: 1 }), edit }), { maxLength: 12 }),
      (a, b, edits) => run([a, b], edits, V6, counted),
    ),
    { numRuns: 400 },
  );
  t.ok(counted.spliced > counted.loads / 4, `${counted.spliced} of ${counted.loads} loads spliced`);
});

t.test('a large config: single-line edits anywhere, first and last included', async (t) => {
  const counted = { spliced: 0, loads: 0 };
  const big = Array.from({ length: 3000 }, (_, i) => {
    const b = i * 2;
    return `  - ${10 + (b >> 16)}.${(b >> 8) & 255}.${b & 255}.0/24`;
  });
  check(
    t,
    fc.property(
      fc.array(
        fc.record({
          file: fc.constant(0),
          edit: fc.record({
            list: fc.constant(0),
            at: fc.oneof(fc.constant(0), fc.constant(3000), fc.nat({ max: 3001 })),
            remove: fc.nat({ max: 1 }),
            insert: fc.array(
              fc.oneof(
                fc
                  .nat({ max: 6000 })
                  .map((b) => `  - ${10 + (b >> 16)}.${(b >> 8) & 255}.${b & 255}.0/24`),
                fc
                  .nat({ max: 6000 })
                  .map((b) => `  - ${10 + (b >> 16)}.${(b >> 8) & 255}.${b & 254}.0/23`),
              ),
              { maxLength: 1 },
            ),
          }),
        }),
        { minLength: 1, maxLength: 8 },
      ),
      (edits) => run([[big, ['  - 10.200.0.0/16']]], edits, V4_ONLY, counted),
    ),
    { numRuns: 60 },
  );
  t.ok(counted.spliced > counted.loads / 2, `${counted.spliced} of ${counted.loads} loads spliced`);
});

t.test('an invalid edit is refused whole, and the next valid one loads', async (t) => {
  const cache = new ConfigCache();
  const src = sourceOf(['/cfg/ip-masq-agent']);
  const load = (lines: string[]) => {
    const files: FileBytes[] = [
      {
        file: '/cfg/ip-masq-agent',
        bytes: Buffer.from(configText([lines, ['  - 10.9.0.0/16']], '')),
      },
    ];
    return { warm: cache.load(src, files, V4_ONLY), cold: loadFiles(src, files, V4_ONLY) };
  };
  const base = ['  - 10.0.0.0/24', '  - 10.0.2.0/24'];
  t.ok(load(base).warm.result.ok);
  const bad = load([...base, '  - 10.0.4.1/24']);
  t.notOk(bad.warm.result.ok, 'an unaligned entry is an error');
  t.same(bad.warm.result, bad.cold, 'the error a whole load gives');
  const good = load([...base, '  - 10.0.4.0/24']);
  t.same(good.warm.result, good.cold);
  const spliced = load([...base, '  - 10.0.6.0/24']);
  t.ok(spliced.warm.splices, 'the next one-line edit is spliced');
  t.same(spliced.warm.result, spliced.cold);
});
