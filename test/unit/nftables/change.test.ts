// How each set is changed (src/nftables/render.ts, setChange, as measured in docs/design.md "Writes
// on the wire"): deltas where few elements go, a refill of an interval set where many do, new sets
// for a concatenated one, and the everyday edit of a large set compared only where it differs.
import t from 'tap';
import { watchRenders } from '../../helpers/render-watch.js';
import { elementDiff, renderInPlace, setChange } from '../../../src/nftables/change.js';
import { compile } from '../../../src/compile.js';
import { elementList, prerenderElements, renderTable } from '../../../src/nftables/render.js';
import { frozenElements, type Elements, type NamedSet } from '../../../src/nftables/types.js';
import { configWith } from '../../helpers/config.js';
import {
  compareStructure,
  listingIs,
  listingIsApartFromTransient,
  transientDrift,
} from '../../../src/nftables/listing.js';
import { compileOptions } from '../../helpers/compile-options.js';

const prefixes = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => {
    const b = (i + from) * 2;
    return `${10 + (b >> 16)}.${(b >> 8) & 255}.${b & 255}.0/24`;
  });
const set = (elements: readonly string[], concat: boolean): NamedSet => ({
  name: 'nonmasq',
  key: concat
    ? { expression: 'ip daddr . meta l4proto', elementSuffix: ' . 0-255' }
    : { expression: 'ip daddr', elementSuffix: '' },
  flags: ['interval'],
  elements: frozenElements(elements),
});

t.test('concatenated sets: deltas for an edit, new sets for a whole change', async (t) => {
  const big = prefixes(100_000);
  const edited = [...big.slice(0, 50_000), '14.255.255.0/24', ...big.slice(50_000)];
  t.equal(setChange(set(edited, true), set(big, true)), 'delta', 'one added in the middle');
  t.equal(setChange(set(big, true), set(edited, true)), 'delta', 'one removed');
  t.equal(setChange(set(prefixes(100_000, 1), true), set(big, true)), 'rebuild', 'all replaced');
  t.equal(setChange(set(big, true), undefined), 'rebuild', 'content not known, large');
  t.equal(setChange(set(prefixes(500), true), undefined), 'refill', 'content not known, small');
  const some = [...prefixes(4_000, 40_000), ...prefixes(6_000, 4_000)];
  t.equal(setChange(set(some, true), set(prefixes(10_000), true)), 'rebuild', '4 000 of 10 000');
});

t.test(
  'interval sets: deltas for a few deletions in a small set, a refill otherwise',
  async (t) => {
    const small = prefixes(1_000);
    t.equal(setChange(set(small.slice(1), false), set(small, false)), 'delta', 'one removed');
    t.equal(setChange(set(small.slice(20), false), set(small, false)), 'refill', '20 removed');
    const big = prefixes(10_000);
    t.equal(setChange(set(big.slice(1), false), set(big, false)), 'refill', 'one of 10 000');
    t.equal(
      setChange(set([...big, '14.255.255.0/24'], false), set(big, false)),
      'delta',
      'added only',
    );
  },
);

t.test('elementDiff: exactly the elements only one side has, in any order', async (t) => {
  const list = (...elements: string[]) => frozenElements(elements);
  const diff = (a: Elements, b: Elements) => ({ ...elementDiff(a, b) });
  t.same(diff(list('a', 'b', 'c', 'd'), list('a', 'x', 'c', 'd')), {
    removed: ['b'],
    added: ['x'],
  });
  t.same(diff(list('a', 'b'), list('b', 'a')), { removed: [], added: [] }, 'order alone');
  t.same(diff(list(), list('a')), { removed: [], added: ['a'] });
  t.same(diff(list('a', 'b', 'c'), list('c')), { removed: ['a', 'b'], added: [] });
});

/** A table of three /24s, as the structure tests compile it. */
const options = compileOptions();
const config = configWith({ nonMasquerade: { ipv4: prefixes(3), ipv6: [] } });

t.test('compareStructure: the objects in any order, the key apart', async (t) => {
  const [interval] = compile(config, { ...options, setLayout: 'interval' }, 1);
  const [concat] = compile(config, { ...options, setLayout: 'concat' }, 1);
  // As the kernel lists a table after the layout switch: the kept set first, the sets made anew after.
  const [late, ...keyed] = [interval!.sets[2]!, interval!.sets[0]!, interval!.sets[1]!];
  const reordered = renderTable({ ...interval!, sets: [late!, ...keyed] });
  t.equal(compareStructure(reordered, interval!), 'same', 'sets in another order');
  t.equal(compareStructure(reordered, concat!), 'key', 'another key');
  t.equal(
    compareStructure(renderTable({ ...interval!, sets: keyed }), interval!),
    'same',
    'the late-replies set missing: an in-place write makes the transient objects anew',
  );
  t.same(transientDrift(renderTable({ ...interval!, sets: keyed }), interval!), {
    sets: [],
    chains: ['prerouting'],
  });
  t.equal(transientDrift(renderTable(interval!), interval!), undefined, 'as written: nothing');
  t.equal(
    compareStructure(renderTable({ ...interval!, sets: [late!, keyed[1]!] }), interval!),
    'same',
    'nonmasq missing: the in-place write makes it anew, before the rules that use it',
  );
  const extra = { ...keyed[0]!, name: 'sources' };
  t.equal(
    compareStructure(renderTable({ ...interval!, sets: [...interval!.sets, extra] }), interval!),
    'same',
    'a set of ours the config no longer wants: the in-place write deletes it',
  );
  const counterOf = (name: string) => `\tcounter ${name} {\n\t\tpackets 7 bytes 9\n\t}\n`;
  const withCounter = (listing: string, name: string) =>
    listing.replace(/\n\tset /, `\n${counterOf(name)}\tset `);
  const bogus = withCounter(renderTable(interval!), 'bogus');
  t.match(bogus, /counter bogus \{/);
  t.equal(
    compareStructure(bogus, interval!),
    'other',
    'a counter of someone else’s: no in-place write removes it, the table is written whole',
  );
  t.notOk(listingIs(bogus, interval!), 'and the kernel does not hold what we wrote');
  const withPolicy = {
    ...interval!,
    counters: [...(interval!.counters ?? []), 'pod-policy-0-exempt'],
  };
  t.equal(
    compareStructure(renderTable(interval!), withPolicy),
    'same',
    'a counter only the wanted table has: the in-place write adds it',
  );
});

t.test('a large set is rendered ahead a slice at a time, to the same text', async (t) => {
  const renders = watchRenders(t);
  const big = set([...prefixes(25_000), '192.0.2.1/32'], true);
  // A copy of the list: rendered when asked, not taken from what is rendered ahead below.
  const expected = elementList(big, frozenElements([...big.elements]), 'ip');
  t.match(expected, /, 192\.0\.2\.1 \. 0-255$/, 'a full-length prefix as a bare address');
  let pauses = 0;
  const ahead = await prerenderElements(big, 'ip', async () => {
    pauses++;
  });
  t.equal(pauses, 3, 'the event loop runs between slices of 10 000');
  t.equal(big.rendered, undefined, 'the set given is left as it was');
  renders.most = 0;
  t.equal(elementList(ahead, ahead.elements, 'ip'), expected, 'the same text');
  t.equal(
    elementList(ahead, frozenElements([...big.elements]), 'ip'),
    expected,
    'found for a copy of the same elements too',
  );
  t.equal(renders.most, 0, 'taken as rendered ahead, not rendered again');
  t.not(elementList(ahead, ahead.elements, 'ip6'), expected, 'another family is not taken from it');
  t.equal(renders.most, big.elements.length, 'that one is rendered when asked');
  const swapped = [...big.elements];
  [swapped[0], swapped[1]] = [swapped[1]!, swapped[0]!];
  const other = frozenElements(swapped);
  t.equal(
    elementList({ ...ahead, elements: other }, other, 'ip'),
    elementList(big, other, 'ip'),
    'elements that differ are rendered as they are, whatever the set carries',
  );
  const plain = { ...ahead, key: set([], false).key };
  t.notMatch(elementList(plain, plain.elements, 'ip'), / \. 0-255/, 'nor with another suffix');
  const added = frozenElements(big.elements.slice(12_000));
  const adding = await prerenderElements(big, 'ip', async () => undefined, added);
  const fresh = elementList(big, added, 'ip');
  renders.most = 0;
  t.equal(
    elementList(adding, frozenElements([...added]), 'ip'),
    fresh,
    "a write's additions, rendered ahead, are found the same way",
  );
  t.equal(renders.most, 0, 'taken, not rendered again');
  elementList(adding, adding.elements, 'ip');
  t.equal(renders.most, big.elements.length, 'and only those: the whole set is rendered');
  const few = set(prefixes(100), true);
  t.equal(await prerenderElements(few, 'ip', async () => undefined), few, 'a small set as it is');
  const bad = set([...prefixes(20_000), '10.0.0.0/8 } ; flush ruleset'], false);
  await t.rejects(
    prerenderElements(bad, 'ip', async () => undefined),
    /not a formatted prefix/,
    'a stray character is refused ahead as well',
  );
});

t.test('a diff skips the common head and tail; additions alone skip the sets', async (t) => {
  const small = frozenElements(prefixes(10_000));
  const large = frozenElements(prefixes(100_000));
  const diff = elementDiff(small, large);
  t.same(diff.removed, []);
  t.same(diff.added, large.slice(10_000), 'the 90 000 after the common head');
  t.same(elementDiff(large, small), { removed: large.slice(10_000), added: [] });
});

t.test(
  "an older release's late-replies objects (mangle, drop, no size) are made anew in place, nothing else",
  async (t) => {
    const [table] = compile(config, options, 2);
    const older = renderTable(table!)
      .replace(/\t\tsize 16384\n\t\ttimeout 3s\n/, '\t\tflags timeout\n')
      .replace('priority raw', 'priority mangle')
      .replace('@late-replies notrack', '@late-replies drop');
    t.equal(compareStructure(older, table!), 'same', 'the same decision objects');
    t.notOk(listingIs(older, table!), 'but not what we write');
    t.ok(listingIsApartFromTransient(older, table!), 'apart from the transient objects');
    const remake = transientDrift(older, table!);
    t.same(remake, { sets: ['late-replies'], chains: ['prerouting'] });
    const [script] = renderInPlace(table!, table!, undefined, remake);
    t.match(
      script,
      /flush chain ip ipmasq prerouting\ndelete chain ip ipmasq prerouting\ndelete set ip ipmasq late-replies\ntable ip ipmasq \{\n\tset late-replies \{\n[^]*priority raw[^]*notrack/,
    );
    t.notMatch(script, /nonmasq|IP-MASQ-AGENT \S/, 'the decision untouched');
    // An element someone planted to stay (a timeout of its own): made anew too.
    const planted = renderTable(table!).replace(
      '\t\ttimeout 3s\n',
      '\t\ttimeout 3s\n\t\telements = { 10.0.0.1 . 53 . 10.244.1.2 . 1000 timeout 1h expires 59m59s }\n',
    );
    t.notOk(listingIs(planted, table!), 'a planted element is not what we write');
    t.ok(transientDrift(planted, table!), 'and is removed by remaking the set');
    const ours = renderTable(table!).replace(
      '\t\ttimeout 3s\n',
      '\t\ttimeout 3s\n\t\telements = { 10.0.0.1 . 53 . 10.244.1.2 . 1000 expires 2s100ms }\n',
    );
    t.ok(listingIs(ours, table!), 'our own held replies are never compared');
  },
);

t.test('setChange at each threshold and one past it', async (t) => {
  // Removals of `n` from `size` elements (the last ones: the window is exactly what is removed);
  // each threshold is of the set's size after the change.
  const removing = (size: number, n: number, concat: boolean) => {
    const before = prefixes(size);
    return setChange(set(before.slice(0, size - n), concat), set(before, concat));
  };
  const cases: Array<[string, () => string, string]> = [
    [
      'concat, not known: 1 000 elements',
      () => setChange(set(prefixes(1_000), true), undefined),
      'refill',
    ],
    [
      'concat, not known: 1 001 elements',
      () => setChange(set(prefixes(1_001), true), undefined),
      'rebuild',
    ],
    ['concat, 100 of 600 removed (the floor of 100)', () => removing(600, 100, true), 'delta'],
    ['concat, 101 of 600 removed', () => removing(600, 101, true), 'rebuild'],
    // A tenth of the set's new size: 2 000 of 20 000 left, then 2 001 of 20 000 left.
    ['concat, 2 000 removed, 20 000 left', () => removing(22_000, 2_000, true), 'delta'],
    ['concat, 2 001 removed, 20 000 left', () => removing(22_001, 2_001, true), 'rebuild'],
    ['interval, 10 of 1 000 removed', () => removing(1_000, 10, false), 'delta'],
    ['interval, 11 of 1 000 removed', () => removing(1_000, 11, false), 'refill'],
    ['interval, 1 removed, 5 000 left', () => removing(5_001, 1, false), 'delta'],
    ['interval, 1 removed, 5 001 left', () => removing(5_002, 1, false), 'refill'],
  ];
  for (const [name, change, expected] of cases) t.equal(change(), expected, name);
  // A window over 10 000 is not compared element by element: new sets, even if it is all moves.
  const big = prefixes(40_000);
  const rotated = [...big.slice(10_001), ...big.slice(0, 10_001)];
  t.equal(setChange(set(rotated, true), set(big, true)), 'rebuild', 'a window of over 10 000');
});
