// The flips of a config change worked out from the sets cut to where they differ
// (reconcile/changed-ranges.ts, narrowed) are the flips of the whole sets: random sets and edits,
// spliced or made anew, one or both sets changed, with and without every exempt destination asked.
import fc from 'fast-check';
import t from 'tap';
import { listWindow, mergeToLines, parseCidr, splicedList } from '../../../src/cidr/index.js';
import { narrowed } from '../../../src/reconcile/changed-ranges.js';
import { exemptRanges, flippedRanges, stepsOf, type Decisive } from '../../../src/decision.js';

const prefix = fc
  .tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 16, max: 24 }))
  .map(([third, len]) => parseCidr(`10.0.${third & (0xff << (24 - len)) & 255}.0/${len}`));
const v6 = fc
  .tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 32, max: 48 }))
  .map(([n, len]) =>
    parseCidr(`fd00:${((n << 8) & (0xffff << (48 - len)) & 0xffff).toString(16)}::/${len}`),
  );

const merged = (list: string[]) => {
  const text = mergeToLines(list.map(parseCidr));
  return Object.freeze(text === '' ? [] : text.split('\n'));
};
const lines = (prefixes: ReturnType<typeof parseCidr>[]) => prefixes.map((p) => mergeToLines([p]));

t.test('narrowed sets flip what the whole sets flip', async (t) => {
  t.doesNotThrow(() =>
    fc.assert(
      fc.property(
        fc.array(prefix, { maxLength: 30 }),
        fc.array(prefix, { maxLength: 6 }),
        fc.array(v6, { maxLength: 6 }),
        fc.array(prefix, { maxLength: 4 }),
        fc.nat(),
        fc.constantFrom('nonMasquerade', 'masquerade', 'both', 'none'),
        fc.boolean(),
        fc.boolean(),
        (nm, mq, nm6, change, at, which, splice, exempt) => {
          const sets = (n: string[], m: string[], n6: string[]): Decisive => ({
            nonMasquerade: { ipv4: merged(n), ipv6: merged(n6) },
            masquerade: { ipv4: merged(m), ipv6: [] },
            keys: {},
          });
          const before = sets(lines(nm), lines(mq), lines(nm6));
          const edit = (list: readonly string[]) => {
            const next = merged([...list.slice(0, at % (list.length + 1)), ...lines(change)]);
            if (!splice) return next;
            // The same list as a splice of the old one (what an edit of the config crosses as).
            const { head, endBefore, endAfter } = listWindow(list, [...next]);
            return splicedList(list, {
              at: head,
              deleteCount: endBefore - head,
              inserted: next.slice(head, endAfter),
            });
          };
          const after: Decisive = {
            nonMasquerade: {
              ipv4:
                which === 'nonMasquerade' || which === 'both'
                  ? edit(before.nonMasquerade.ipv4)
                  : before.nonMasquerade.ipv4,
              ipv6: before.nonMasquerade.ipv6,
            },
            masquerade: {
              ipv4:
                which === 'masquerade' || which === 'both'
                  ? edit(before.masquerade.ipv4)
                  : before.masquerade.ipv4,
              ipv6: [],
            },
            keys: {},
          };
          const withExempt = exempt ? (['ipv4'] as const) : ([] as const);
          const [b, a] = narrowed(before, after, withExempt);
          const show = (x: ReturnType<typeof flippedRanges>) =>
            JSON.stringify(x, (_, v) => (typeof v === 'bigint' ? String(v) : v));
          const both = ['ipv4', 'ipv6'] as const;
          if (show(flippedRanges(b, a, both)) !== show(flippedRanges(before, after, both)))
            return false;
          if (exempt) {
            const whole = exemptRanges(stepsOf(after, 'ipv4'));
            if (
              show([{ family: 4, lost: whole, gained: [] }]) !==
              show([{ family: 4, lost: exemptRanges(stepsOf(a, 'ipv4')), gained: [] }])
            )
              return false;
          }
          return true;
        },
      ),
      { numRuns: 2000 },
    ),
  );
});

t.test('a one-CIDR edit of a large set is cut to a few entries', async (t) => {
  const big = Object.freeze(
    Array.from({ length: 50_000 }, (_, i) =>
      `10.${i >> 8}.${i & 255}.0/24`.replace(
        /^10\.(\d+)\./,
        (_m, a) => `${10 + (Number(a) >> 8)}.${Number(a) & 255}.`,
      ),
    ),
  );
  const before: Decisive = {
    nonMasquerade: { ipv4: big, ipv6: [] },
    masquerade: { ipv4: ['192.168.0.0/16'], ipv6: [] },
    keys: {},
  };
  const after: Decisive = {
    nonMasquerade: {
      ipv4: splicedList(big, { at: 25_000, deleteCount: 1, inserted: [] }),
      ipv6: [],
    },
    masquerade: before.masquerade,
    keys: {},
  };
  const [b, a] = narrowed(before, after, []);
  t.same(b.nonMasquerade.ipv4, [big[25_000]], 'the removed entry before');
  t.same(a.nonMasquerade.ipv4, [], 'nothing in its place after');
  t.equal(b.masquerade.ipv4, before.masquerade.ipv4, 'the other set whole');
  t.same(flippedRanges(b, a, ['ipv4']), flippedRanges(before, after, ['ipv4']));
});
