// Union of prefixes as the smallest list of aligned prefixes: sort ranges, sweep, split back.
// IPv4 runs on plain numbers (exact below 2^53): bigint arithmetic is far slower (docs/design.md, "Figures").
import { Buffer } from 'node:buffer';
import { ADDRESS_BITS, CidrError, type Family } from './address.js';
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

/** 2 ** n for n in 0…32: a table read, where `**` is a call to pow in optimized code. */
const POW2: Float64Array = Float64Array.from({ length: 33 }, (_, n) => 2 ** n);

/**
 * IPv4 blocks as (start, len) pairs in one typed array that doubles as it fills: the loops below run
 * once per entry of the largest lists, where pushes to a number[] and `**` (a call to pow) cost
 * several times more.
 */
interface Blocks {
  data: Float64Array;
  size: number;
}

/** The most blocks one IPv4 range splits into ([1, 2^32 - 2]: 31 growing, 31 shrinking), as numbers. */
const MOST_PER_RANGE = 2 * 62;

/** Room for one more range's blocks. */
function reserve(blocks: Blocks): void {
  if (blocks.data.length - blocks.size >= MOST_PER_RANGE) return;
  const grown = new Float64Array(blocks.data.length * 2 + MOST_PER_RANGE);
  grown.set(blocks.data.subarray(0, blocks.size));
  blocks.data = grown;
}

/** Appends (start, len) for each of the fewest aligned IPv4 prefixes covering [first, last], in order. */
function splitRangeV4(first: number, last: number, blocks: Blocks): void {
  reserve(blocks);
  const data = blocks.data;
  let size = blocks.size;
  let start = first;
  while (start <= last) {
    // 32-bit operators see the same bit pattern for start < 2^32, so these give the trailing zeros
    // of `start` and the floor(log2) of the room left.
    const alignBits = start === 0 ? 32 : 31 - Math.clz32(start & -start);
    const room = last - start + 1;
    const roomBits = room >= 4294967296 ? 32 : 31 - Math.clz32(room);
    const hostBits = alignBits < roomBits ? alignBits : roomBits;
    data[size++] = start;
    data[size++] = 32 - hostBits;
    start += POW2[hostBits] as number;
  }
  blocks.size = size;
}

function v4Prefixes({ data, size }: Blocks): Prefix[] {
  const out: Prefix[] = [];
  for (let i = 0; i < size; i += 2) {
    out.push({ family: 4, addr: BigInt(data[i] as number), len: data[i + 1] as number });
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
    const blocks: Blocks = { data: new Float64Array(MOST_PER_RANGE), size: 0 };
    splitRangeV4(Number(first), Number(last), blocks);
    return v4Prefixes(blocks);
  }
  const out: Prefix[] = [];
  splitRange(family, first, last, out);
  return out;
}

/** The union of IPv4 prefixes as the fewest aligned blocks, in address order. */
function mergedBlocksV4(prefixes: readonly Prefix[]): Blocks {
  // Each prefix packed as addr * 64 + len (< 2^38, exact in a double) so a typed-array sort orders them.
  const packed = new Float64Array(prefixes.length);
  for (let i = 0; i < prefixes.length; i++) {
    const p = prefixes[i] as Prefix;
    packed[i] = ipv4Number(p) * 64 + p.len;
  }
  packed.sort();
  // The union of n prefixes needs at most n blocks (the prefixes themselves cover it).
  const blocks: Blocks = { data: new Float64Array(2 * prefixes.length + MOST_PER_RANGE), size: 0 };
  let start = -1;
  let end = -2;
  for (let i = 0; i < packed.length; i++) {
    const value = packed[i] as number;
    const nextStart = Math.floor(value / 64);
    const nextEnd = nextStart + (POW2[32 - (value - nextStart * 64)] as number) - 1;
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
 * The digits of 0…255 as bytes, four per number: the count, then up to three ASCII digits. A merged
 * list is printed into one buffer from these, faster than a string per prefix, and leaves one
 * string to collect rather than one per entry.
 */
const DECIMAL: Uint8Array = (() => {
  const table = new Uint8Array(256 * 4);
  for (let n = 0; n < 256; n++) {
    const digits = String(n);
    table[n * 4] = digits.length;
    for (let i = 0; i < digits.length; i++) table[n * 4 + 1 + i] = digits.charCodeAt(i);
  }
  return table;
})();

/** Writes the decimal digits of n (0…255) at `at`; returns the offset after them. */
function writeDecimal(out: Uint8Array, at: number, n: number): number {
  const base = n * 4;
  const count = DECIMAL[base] as number;
  for (let i = 1; i <= count; i++) out[at++] = DECIMAL[base + i] as number;
  return at;
}

/** The blocks printed as `a.b.c.d/len`, one per line (no newline after the last). */
function printBlocksV4({ data, size }: Blocks): string {
  const longest = '255.255.255.255/32\n'.length;
  const out = Buffer.allocUnsafe((size / 2) * longest);
  let at = 0;
  for (let i = 0; i < size; i += 2) {
    if (i > 0) out[at++] = 10; // \n
    const addr = data[i] as number;
    at = writeDecimal(out, at, addr >>> 24);
    out[at++] = 46; // .
    at = writeDecimal(out, at, (addr >>> 16) & 255);
    out[at++] = 46;
    at = writeDecimal(out, at, (addr >>> 8) & 255);
    out[at++] = 46;
    at = writeDecimal(out, at, addr & 255);
    out[at++] = 47; // /
    at = writeDecimal(out, at, data[i + 1] as number);
  }
  return out.toString('latin1', 0, at);
}

/**
 * mergePrefixes, printed (`formatPrefix` of each) one prefix per line: IPv4 goes from numbers to
 * text directly, without a Prefix, a bigint or a string per block — 100 000 CIDRs are a config's
 * largest list. Empty for no prefixes.
 */
export function mergeToLines(prefixes: readonly Prefix[]): string {
  if (familyOf(prefixes) !== 4) return mergePrefixes(prefixes).map(formatPrefix).join('\n');
  return printBlocksV4(mergedBlocksV4(prefixes));
}
