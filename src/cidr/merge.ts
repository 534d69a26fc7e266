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

/** Calls emit(start, len) for the fewest aligned IPv4 prefixes covering [first, last], in order. */
function splitRangeV4(
  first: number,
  last: number,
  emit: (start: number, len: number) => void,
): void {
  let start = first;
  while (start <= last) {
    // 32-bit operators see the same bit pattern for start < 2^32, so these give the trailing zeros
    // of `start` and the floor(log2) of the room left.
    const alignBits = start === 0 ? 32 : 31 - Math.clz32(start & -start);
    const room = last - start + 1;
    const roomBits = room >= 2 ** 32 ? 32 : 31 - Math.clz32(room);
    const hostBits = Math.min(alignBits, roomBits);
    emit(start, 32 - hostBits);
    start += 2 ** hostBits;
  }
}

/** The fewest aligned prefixes that cover exactly [first, last], in address order. */
export function rangeToPrefixes(family: Family, first: bigint, last: bigint): Prefix[] {
  const top = (1n << BigInt(ADDRESS_BITS[family])) - 1n;
  if (first < 0n || last > top || first > last) {
    throw new CidrError(`invalid IPv${family} range ${first}-${last}`);
  }
  const out: Prefix[] = [];
  if (family === 4) {
    splitRangeV4(Number(first), Number(last), (start, len) =>
      out.push({ family: 4, addr: BigInt(start), len }),
    );
  } else {
    splitRange(family, first, last, out);
  }
  return out;
}

/** The union of IPv4 prefixes as maximal [start, end] runs, in address order, given to emit. */
function sweepV4(prefixes: readonly Prefix[], emit: (start: number, end: number) => void): void {
  // Each prefix packed as addr * 64 + len (< 2^38, exact in a double) so a typed-array sort orders them.
  const packed = new Float64Array(prefixes.length);
  for (let i = 0; i < prefixes.length; i++) {
    const p = prefixes[i] as Prefix;
    packed[i] = ipv4Number(p) * 64 + p.len;
  }
  packed.sort();
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
    if (start >= 0) emit(start, end);
    start = nextStart;
    end = nextEnd;
  }
  emit(start, end);
}

function mergeV4(prefixes: readonly Prefix[]): Prefix[] {
  const out: Prefix[] = [];
  const push = (start: number, len: number) => out.push({ family: 4, addr: BigInt(start), len });
  sweepV4(prefixes, (start, end) => splitRangeV4(start, end, push));
  return out;
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
  if (prefixes.length === 0) return [];
  const family = (prefixes[0] as Prefix).family;
  for (const p of prefixes) {
    if (p.family !== family) throw new CidrError('mergePrefixes: mixed IPv4 and IPv6 prefixes');
  }
  return family === 4 ? mergeV4(prefixes) : mergeBig(family, prefixes);
}

/**
 * mergePrefixes, printed (`formatPrefix` of each): IPv4 goes from numbers to text directly, without
 * a Prefix and a bigint per block — 100 000 CIDRs are a config's largest list.
 */
export function mergeToText(prefixes: readonly Prefix[]): string[] {
  if (prefixes.length === 0 || (prefixes[0] as Prefix).family !== 4) {
    return mergePrefixes(prefixes).map(formatPrefix);
  }
  for (const p of prefixes) {
    if (p.family !== 4) throw new CidrError('mergePrefixes: mixed IPv4 and IPv6 prefixes');
  }
  const out: string[] = [];
  sweepV4(prefixes, (first, last) => {
    // splitRangeV4, inlined: this loop prints every block of a 100 000-entry list.
    let start = first;
    while (start <= last) {
      const alignBits = start === 0 ? 32 : 31 - Math.clz32(start & -start);
      const room = last - start + 1;
      const roomBits = room >= 2 ** 32 ? 32 : 31 - Math.clz32(room);
      const hostBits = alignBits < roomBits ? alignBits : roomBits;
      out.push(formatIPv4(start) + SLASH_LENGTH[32 - hostBits]);
      start += 2 ** hostBits;
    }
  });
  return out;
}

/** "/0" … "/32", so a printed prefix is one concatenation. */
const SLASH_LENGTH: readonly string[] = Array.from({ length: 33 }, (_, len) => `/${len}`);
