import { Buffer } from 'node:buffer';
import { isIP } from 'node:net';
import fc from 'fast-check';
import t, { type Test } from 'tap';
import {
  type Family,
  type Prefix,
  formatAddress,
  formatPrefix,
  MergedSetV4,
  mergePrefixes,
  mergeToLines,
  parseAddress,
  parseCidr,
  prefixRange,
  rangeToPrefixes,
} from '../../../src/cidr/index.js';

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
    `IPv${family}: mergeToLines prints what mergePrefixes gives, parsed or built`,
    async (t) => {
      check(
        t,
        fc.property(fc.array(prefixArb(family), { maxLength: 40 }), (input) => {
          const expected = mergePrefixes(input).map(formatPrefix).join('\n');
          // Prefixes parsed from text (an IPv4 one keeps its address as a number) and plain objects.
          const parsed = input.map((p) => parseCidr(formatPrefix(p)));
          return mergeToLines(input) === expected && mergeToLines(parsed) === expected;
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

/** [first, last] split greedily into the fewest aligned IPv4 blocks with bigints: the reference. */
function referenceSplitV4(first: bigint, last: bigint): string[] {
  const out: string[] = [];
  let start = first;
  while (start <= last) {
    let len = 0;
    // The shortest prefix that starts at `start` and ends by `last`.
    while (len < 32) {
      const size = 1n << BigInt(32 - len);
      if (start % size === 0n && start + size - 1n <= last) break;
      len++;
    }
    out.push(formatPrefix({ family: 4, addr: start, len }));
    start += 1n << BigInt(32 - len);
  }
  return out;
}

/** The union of IPv4 prefixes, split greedily into aligned blocks with bigints: the reference. */
function referenceMergeV4(prefixes: readonly Prefix[]): string[] {
  const ranges = prefixes.map(prefixRange).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const union: [bigint, bigint][] = [];
  for (const [first, last] of ranges) {
    const top = union.at(-1);
    if (top && first <= top[1] + 1n) top[1] = last > top[1] ? last : top[1];
    else union.push([first, last]);
  }
  return union.flatMap(([first, last]) => referenceSplitV4(first, last));
}

t.test('IPv4: rangeToPrefixes of any range agrees with a reference', async (t) => {
  const address = fc.oneof(
    fc.bigInt({ min: 0n, max: 0xffffffffn }),
    fc.constantFrom(0n, 1n, 0xfffffffen, 0xffffffffn, 0x80000000n),
  );
  check(
    t,
    fc.property(address, address, (a, b) => {
      const [first, last] = a <= b ? [a, b] : [b, a];
      const got = rangeToPrefixes(4, first, last).map(formatPrefix).join(',');
      return got === referenceSplitV4(first, last).join(',');
    }),
    { numRuns: 1000 },
  );
  // The range with the most blocks: 31 growing from 0.0.0.1/32, 31 shrinking to 255.255.255.254/32.
  t.equal(rangeToPrefixes(4, 1n, 0xfffffffen).length, 62);
});

t.test(
  'IPv4: merge anywhere in the address space, any length, agrees with a reference',
  async (t) => {
    const edge = fc.constantFrom(0n, 0xffffffffn, 0x80000000n, 0x7fffffffn, 0xffffff00n);
    const prefix = fc
      .record({
        addr: fc.oneof(fc.bigInt({ min: 0n, max: 0xffffffffn }), edge),
        len: fc.integer({ min: 0, max: 32 }),
      })
      .map(({ addr, len }): Prefix => {
        const host = BigInt(32 - len);
        return { family: 4, addr: (addr >> host) << host, len };
      });
    check(
      t,
      fc.property(fc.array(prefix, { minLength: 1, maxLength: 30 }), (input) => {
        const expected = referenceMergeV4(input).join('\n');
        const parsed = input.map((p) => parseCidr(formatPrefix(p)));
        return mergeToLines(input) === expected && mergeToLines(parsed) === expected;
      }),
      { numRuns: 1000 },
    );
  },
);

/** What a strict IPv4 CIDR is, written as a grammar: the prefix, or undefined when it is not one. */
function referenceParseV4(text: string): Prefix | undefined {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(text);
  if (!match) return undefined;
  const numbers = match.slice(1);
  if (numbers.some((n) => n.length > 1 && n.startsWith('0'))) return undefined;
  const octets = numbers.slice(0, 4).map(Number);
  const len = Number(numbers[4]);
  if (octets.some((o) => o > 255) || len > 32) return undefined;
  const addr = octets.reduce((value, o) => (value << 8n) | BigInt(o), 0n);
  if (addr & ((1n << BigInt(32 - len)) - 1n)) return undefined;
  return { family: 4, addr, len };
}

t.test('parseCidr agrees with a strict IPv4 grammar on CIDR-like text', async (t) => {
  // Mostly four numbers, often 0 and a length of 32 so that host bits are clear and an almost valid
  // CIDR is common: the one wrong character is what the parser must notice.
  const number = fc.oneof(
    { arbitrary: fc.integer({ min: 0, max: 300 }).map(String), weight: 4 },
    { arbitrary: fc.constant('0'), weight: 4 },
    {
      arbitrary: fc.constantFrom('', '00', '01', '007', '255', '256', '1000', 'a', ' 1', '1 ', ':'),
      weight: 2,
    },
  );
  const octets = fc.oneof(
    { arbitrary: fc.array(number, { minLength: 4, maxLength: 4 }), weight: 8 },
    { arbitrary: fc.array(number, { minLength: 1, maxLength: 6 }), weight: 2 },
  );
  const length = fc.oneof(
    { arbitrary: fc.constantFrom('32', '0'), weight: 4 },
    { arbitrary: fc.integer({ min: 0, max: 40 }).map(String), weight: 4 },
    { arbitrary: fc.constantFrom('', '08', '032', '100', '3 2'), weight: 2 },
  );
  const text = fc
    .tuple(octets, fc.constantFrom('/', '/', '/', '//', '', ' /'), length)
    .map(([parts, slash, len]) => `${parts.join('.')}${slash}${len}`);
  check(
    t,
    fc.property(text, (input) => {
      const expected = referenceParseV4(input);
      let got: Prefix | undefined;
      try {
        got = parseCidr(input);
      } catch {
        got = undefined;
      }
      if (expected === undefined || got === undefined) return expected === got;
      return got.family === 4 && got.addr === expected.addr && got.len === expected.len;
    }),
    { numRuns: 3000 },
  );
});

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

t.test('a merged set changed in place is the merge of its entries made anew', async (t) => {
  // /16 to /26 near each other, so that changes join, split and adjoin runs.
  const near = fc
    .tuple(fc.integer({ min: 0, max: 4095 }), fc.integer({ min: 16, max: 26 }))
    .map(([n, len]) => {
      const addr = ((10 << 24) | (n << 6)) >>> 0;
      const mask = len === 0 ? 0 : (0xffffffff << (32 - len)) >>> 0;
      const a = (addr & mask) >>> 0;
      return parseCidr(`${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}/${len}`);
    });
  const step = fc.record({
    remove: fc.array(fc.nat(), { maxLength: 3 }),
    add: fc.array(near, { maxLength: 4 }),
  });
  t.doesNotThrow(() =>
    fc.assert(
      fc.property(
        fc.array(near, { maxLength: 40 }),
        fc.array(step, { maxLength: 12 }),
        (start, steps) => {
          let entries = [...start];
          const set = new MergedSetV4(entries);
          const lines = mergeToLines(entries) === '' ? [] : mergeToLines(entries).split('\n');
          for (const { remove, add } of steps) {
            const removed = [];
            for (const i of remove)
              if (entries.length > 0) removed.push(...entries.splice(i % entries.length, 1));
            entries = entries.concat(add);
            const change = set.change(removed, add);
            if (!change) return false;
            lines.splice(change.at, change.deleteCount, ...change.inserted);
            const cold = mergeToLines(entries);
            if (lines.join('\n') !== cold || set.lines() !== cold || set.size !== lines.length)
              return false;
            if (Buffer.from(set.json()).toString() !== JSON.stringify(lines)) return false;
          }
          return true;
        },
      ),
      { numRuns: 3000 },
    ),
  );
  const set = new MergedSetV4([parseCidr('10.0.0.0/24')]);
  t.equal(set.change([parseCidr('10.9.0.0/24')], []), undefined, 'an entry that is not there');
});
