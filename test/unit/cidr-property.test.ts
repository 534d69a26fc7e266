import { isIP } from 'node:net';
import fc from 'fast-check';
import t, { type Test } from 'tap';
import {
  type Family,
  type Prefix,
  formatAddress,
  formatPrefix,
  mergePrefixes,
  mergeToText,
  parseAddress,
  parseCidr,
  prefixRange,
} from '../../src/cidr/index.js';

/** Runs a fast-check property as one tap assertion; the counterexample is in the failure message. */
function check<Ts>(t: Test, property: fc.IProperty<Ts>, params: fc.Parameters<Ts>): void {
  t.doesNotThrow(() => fc.assert(property, params), 'property holds');
}

const BITS = { 4: 32, 6: 128 } as const;
const RUNS = { numRuns: 300 };

function addressArb(family: Family): fc.Arbitrary<bigint> {
  return fc.bigInt({ min: 0n, max: (1n << BigInt(BITS[family])) - 1n });
}

/** Prefixes clustered in a small region so overlaps, duplicates and adjacency actually occur. */
function prefixArb(family: Family): fc.Arbitrary<Prefix> {
  const bits = BITS[family];
  const base = family === 4 ? 0x0a000000n : 0xfd00n << 112n;
  return fc
    .record({
      offset: fc.bigInt({ min: 0n, max: 4095n }),
      len: fc.integer({ min: bits - 12, max: bits }),
    })
    .map(({ offset, len }) => {
      const host = BigInt(bits - len);
      return { family, addr: ((base + offset) >> host) << host, len };
    });
}

function covers(prefixes: readonly Prefix[], addr: bigint): boolean {
  return prefixes.some((p) => {
    const [first, last] = prefixRange(p);
    return addr >= first && addr <= last;
  });
}

function probeArb(family: Family): fc.Arbitrary<bigint[]> {
  const base = family === 4 ? 0x0a000000n : 0xfd00n << 112n;
  const near = fc.bigInt({ min: base - 16n, max: base + 4200n });
  return fc.array(fc.oneof(near, addressArb(family)), { minLength: 1, maxLength: 60 });
}

for (const family of [4, 6] as const) {
  t.test(`IPv${family}: merge keeps exactly the same addresses`, async (t) => {
    check(
      t,
      fc.property(
        fc.array(prefixArb(family), { maxLength: 40 }),
        probeArb(family),
        (input, probes) => {
          const merged = mergePrefixes(input);
          for (const addr of probes) {
            // Check the boundaries of every input too, where off-by-one errors live.
            if (covers(merged, addr) !== covers(input, addr)) return false;
          }
          for (const p of input) {
            const [first, last] = prefixRange(p);
            if (!covers(merged, first) || !covers(merged, last)) return false;
            if (covers(merged, first - 1n) !== covers(input, first - 1n)) return false;
            if (covers(merged, last + 1n) !== covers(input, last + 1n)) return false;
          }
          return true;
        },
      ),
      RUNS,
    );
  });

  t.test(
    `IPv${family}: mergeToText prints what mergePrefixes gives, parsed or built`,
    async (t) => {
      check(
        t,
        fc.property(fc.array(prefixArb(family), { maxLength: 40 }), (input) => {
          const expected = mergePrefixes(input).map(formatPrefix).join(',');
          // Prefixes parsed from text (an IPv4 one keeps its address as a number) and plain objects.
          const parsed = input.map((p) => parseCidr(formatPrefix(p)));
          return (
            mergeToText(input).join(',') === expected && mergeToText(parsed).join(',') === expected
          );
        }),
        RUNS,
      );
    },
  );

  t.test(`IPv${family}: merge is idempotent, order-independent and minimal`, async (t) => {
    check(
      t,
      fc.property(
        fc
          .array(prefixArb(family), { maxLength: 40 })
          .chain((input) =>
            fc.tuple(fc.constant(input), fc.shuffledSubarray(input, { minLength: input.length })),
          ),
        ([input, shuffled]) => {
          const merged = mergePrefixes(input);
          const text = merged.map(formatPrefix).join(',');
          if (mergePrefixes(merged).map(formatPrefix).join(',') !== text) return false;
          if (mergePrefixes(shuffled).map(formatPrefix).join(',') !== text) return false;
          for (let i = 1; i < merged.length; i++) {
            const previous = merged[i - 1] as Prefix;
            const current = merged[i] as Prefix;
            const [, previousLast] = prefixRange(previous);
            const [currentFirst] = prefixRange(current);
            if (previousLast >= currentFirst) return false; // sorted, no overlap
            // Mergeable siblings: same length, adjacent, and together aligned to the shorter prefix.
            const host = BigInt(BITS[family] - current.len + 1);
            const siblings =
              previous.len === current.len &&
              previousLast + 1n === currentFirst &&
              (previous.addr >> host) << host === previous.addr;
            if (siblings) return false;
          }
          return true;
        },
      ),
      RUNS,
    );
  });

  t.test(`IPv${family}: format and parse round-trip`, async (t) => {
    check(
      t,
      fc.property(addressArb(family), fc.integer({ min: 0, max: BITS[family] }), (addr, len) => {
        const host = BigInt(BITS[family] - len);
        const prefix: Prefix = { family, addr: (addr >> host) << host, len };
        const text = formatPrefix(prefix);
        const again = parseCidr(text);
        const address = formatAddress(family, addr);
        return (
          again.family === family &&
          again.addr === prefix.addr &&
          again.len === len &&
          formatPrefix(again) === text &&
          text === text.toLowerCase() &&
          isIP(address) === family &&
          parseAddress(address).addr === addr
        );
      }),
      { numRuns: 1000 },
    );
  });
}

t.test('IPv6 parser agrees with node:net on random group spellings', async (t) => {
  const group = fc.oneof(
    fc.integer({ min: 0, max: 0xffff }).map((n) => n.toString(16)),
    fc.constantFrom('0', '00', '0000', '00000', 'FFFF', 'g', '', '12345'),
  );
  check(
    t,
    fc.property(
      fc.array(group, { minLength: 1, maxLength: 9 }),
      fc.integer({ min: -1, max: 9 }),
      (groups, gap) => {
        const text =
          gap >= 0 && gap <= groups.length
            ? `${groups.slice(0, gap).join(':')}::${groups.slice(gap).join(':')}`
            : groups.join(':');
        let ours = true;
        try {
          parseAddress(text);
        } catch {
          ours = false;
        }
        return ours === (isIP(text) === 6);
      },
    ),
    { numRuns: 2000 },
  );
});
