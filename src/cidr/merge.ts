// Union of prefixes as the smallest list of aligned prefixes: sort ranges, sweep, split back.
// IPv4 runs on plain numbers (exact below 2^53) because bigint arithmetic is ~10x slower.
import { ADDRESS_BITS, CidrError, type Family, formatIPv4 } from './address.js';
import { formatPrefix, ipv4Number, type Prefix, prefixRange } from './prefix.js';

function bitLength(x: bigint): number {
  let n = 0;
  while (x > 0xffffffffn) {
    x >>= 32n;
    n += 32;
  }
  return n + 32 - Math.clz32(Number(x));
}

function splitRange(family: Family, first: bigint, last: bigint, out: Prefix[]): void {
  const bits = ADDRESS_BITS[family];
  let start = first;
  while (start <= last) {
    // The block is limited by the alignment of `start` and by the room left up to `last`.
    const alignBits = start === 0n ? bits : bitLength(start & -start) - 1;
    const roomBits = bitLength(last - start + 1n) - 1;
    const hostBits = Math.min(alignBits, roomBits);
    out.push({ family, addr: start, len: bits - hostBits });
    start += 1n << BigInt(hostBits);
  }
}

/**
 * Appends (start, len) for each of the fewest aligned IPv4 prefixes covering [first, last], in order:
 * pairs of numbers in one array, so that the callers below build Prefixes or text without a call per
 * block (the loop runs once per entry of a 100 000-entry list).
 */
function splitRangeV4(first: number, last: number, blocks: number[]): void {
  let start = first;
  while (start <= last) {
    // 32-bit operators see the same bit pattern for start < 2^32, so these give the trailing zeros
    // of `start` and the floor(log2) of the room left.
    const alignBits = start === 0 ? 32 : 31 - Math.clz32(start & -start);
    const room = last - start + 1;
    const roomBits = room >= 2 ** 32 ? 32 : 31 - Math.clz32(room);
    const hostBits = Math.min(alignBits, roomBits);
    blocks.push(start, 32 - hostBits);
    start += 2 ** hostBits;
  }
}

function v4Prefixes(blocks: readonly number[]): Prefix[] {
  const out: Prefix[] = [];
  for (let i = 0; i < blocks.length; i += 2) {
    out.push({ family: 4, addr: BigInt(blocks[i] as number), len: blocks[i + 1] as number });
  }
  return out;
}

/** The fewest aligned prefixes that cover exactly [first, last], in address order. */
export function rangeToPrefixes(family: Family, first: bigint, last: bigint): Prefix[] {
  const top = (1n << BigInt(ADDRESS_BITS[family])) - 1n;
  if (first < 0n || last > top || first > last) {
    throw new CidrError(`invalid IPv${family} range ${first}-${last}`);
  }
  if (family === 4) {
    const blocks: number[] = [];
    splitRangeV4(Number(first), Number(last), blocks);
    return v4Prefixes(blocks);
  }
  const out: Prefix[] = [];
  splitRange(family, first, last, out);
  return out;
}

/** The union of IPv4 prefixes as the fewest aligned blocks, (start, len) pairs in address order. */
function mergedBlocksV4(prefixes: readonly Prefix[]): number[] {
  // Each prefix packed as addr * 64 + len (< 2^38, exact in a double) so a typed-array sort orders them.
  const packed = new Float64Array(prefixes.length);
  for (let i = 0; i < prefixes.length; i++) {
    const p = prefixes[i] as Prefix;
    packed[i] = ipv4Number(p) * 64 + p.len;
  }
  packed.sort();
  const blocks: number[] = [];
  let start = -1;
  let end = -2;
  for (let i = 0; i < packed.length; i++) {
    const value = packed[i] as number;
    const len = value % 64;
    const nextStart = (value - len) / 64;
    const nextEnd = nextStart + 2 ** (32 - len) - 1;
    if (nextStart <= end + 1) {
      if (nextEnd > end) end = nextEnd;
      continue;
    }
    if (start >= 0) splitRangeV4(start, end, blocks);
    start = nextStart;
    end = nextEnd;
  }
  splitRangeV4(start, end, blocks);
  return blocks;
}

function mergeBig(family: Family, prefixes: readonly Prefix[]): Prefix[] {
  const ranges = prefixes.map(prefixRange);
  ranges.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const out: Prefix[] = [];
  let [start, end] = ranges[0] as [bigint, bigint];
  for (let i = 1; i < ranges.length; i++) {
    const [nextStart, nextEnd] = ranges[i] as [bigint, bigint];
    if (nextStart <= end + 1n) {
      if (nextEnd > end) end = nextEnd;
      continue;
    }
    splitRange(family, start, end, out);
    start = nextStart;
    end = nextEnd;
  }
  splitRange(family, start, end, out);
  return out;
}

/**
 * Smallest list of prefixes covering exactly the addresses of the input (duplicates, overlaps and
 * adjacent blocks merged), sorted by address. All inputs must be of one family.
 */
export function mergePrefixes(prefixes: readonly Prefix[]): Prefix[] {
  const family = familyOf(prefixes);
  if (family === undefined) return [];
  return family === 4 ? v4Prefixes(mergedBlocksV4(prefixes)) : mergeBig(family, prefixes);
}

/** The one family of all the prefixes (undefined when there are none); mixed ones are an error. */
function familyOf(prefixes: readonly Prefix[]): Family | undefined {
  const family = prefixes[0]?.family;
  for (const p of prefixes) {
    if (p.family !== family) throw new CidrError('mergePrefixes: mixed IPv4 and IPv6 prefixes');
  }
  return family;
}

/**
 * mergePrefixes, printed (`formatPrefix` of each): IPv4 goes from numbers to text directly, without
 * a Prefix and a bigint per block — 100 000 CIDRs are a config's largest list.
 */
export function mergeToText(prefixes: readonly Prefix[]): string[] {
  if (familyOf(prefixes) !== 4) return mergePrefixes(prefixes).map(formatPrefix);
  const blocks = mergedBlocksV4(prefixes);
  const out: string[] = [];
  for (let i = 0; i < blocks.length; i += 2) {
    out.push(formatIPv4(blocks[i] as number) + SLASH_LENGTH[blocks[i + 1] as number]);
  }
  return out;
}

/** "/0" … "/32", so a printed prefix is one concatenation. */
const SLASH_LENGTH: readonly string[] = Array.from({ length: 33 }, (_, len) => `/${len}`);
