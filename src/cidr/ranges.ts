// Sets of addresses as sorted, disjoint, non-adjacent [first, last] ranges: union, difference and
// symmetric difference by one sweep, and back to the fewest prefixes. Bounds are bigints, or plain
// numbers for IPv4 (exact below 2^53, and much faster for long lists: docs/design.md, "Figures").
import { ADDRESS_BITS, type Family } from './address.js';
import { rangeToPrefixes } from './merge.js';
import type { Prefix } from './prefix.js';

export type Bound = bigint | number;
export type Range<T extends Bound = bigint> = readonly [first: T, last: T];

/** The next and the previous address, in the bound's own type. */
const succ = <T extends Bound>(x: T): T =>
  (typeof x === 'bigint' ? x + 1n : (x as number) + 1) as T;
const pred = <T extends Bound>(x: T): T =>
  (typeof x === 'bigint' ? x - 1n : (x as number) - 1) as T;

const byFirst = <T extends Bound>(a: Range<T>, b: Range<T>) =>
  a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;

function isSorted<T extends Bound>(ranges: readonly Range<T>[]): boolean {
  for (let i = 1; i < ranges.length; i++) if (ranges[i]![0] < ranges[i - 1]![0]) return false;
  return true;
}

/** The normal form: sorted, overlapping and adjacent ranges joined. Sorted input is not sorted again. */
export function normalise<T extends Bound>(ranges: readonly Range<T>[]): Range<T>[] {
  const sorted = isSorted(ranges) ? ranges : [...ranges].sort(byFirst);
  const out: Array<[T, T]> = [];
  for (const [first, last] of sorted) {
    const top = out[out.length - 1];
    if (top && first <= succ(top[1])) {
      if (last > top[1]) top[1] = last;
    } else out.push([first, last]);
  }
  return out;
}

/** The addresses in `a` and not in `b` (both in normal form); the result is in normal form. */
export function subtract<T extends Bound>(
  a: readonly Range<T>[],
  b: readonly Range<T>[],
): Range<T>[] {
  const out: Range<T>[] = [];
  let j = 0;
  for (const [first, last] of a) {
    let start = first;
    while (j < b.length && b[j]![1] < start) j++;
    let k = j;
    while (start <= last) {
      const cut = b[k];
      if (!cut || cut[0] > last) {
        out.push([start, last]);
        break;
      }
      if (cut[0] > start) out.push([start, pred(cut[0])]);
      start = succ(cut[1]);
      k++;
    }
  }
  return out;
}

/** The addresses in exactly one of `a` and `b` (both in normal form). */
export function symmetricDifference<T extends Bound>(
  a: readonly Range<T>[],
  b: readonly Range<T>[],
): Range<T>[] {
  // Both differences are sorted and disjoint from each other: merge them, then join neighbours.
  const [x, y] = [subtract(a, b), subtract(b, a)];
  const merged: Range<T>[] = [];
  let i = 0;
  let j = 0;
  while (i < x.length || j < y.length) {
    if (j >= y.length || (i < x.length && x[i]![0] < y[j]![0])) merged.push(x[i++]!);
    else merged.push(y[j++]!);
  }
  return normalise(merged);
}

/** Whether `x` lies in one of the ranges (normal form), by binary search. */
export function inRanges<T extends Bound>(ranges: readonly Range<T>[], x: T): boolean {
  let low = 0;
  let high = ranges.length - 1;
  while (low <= high) {
    const mid = (low + high) >> 1;
    const [first, last] = ranges[mid]!;
    if (x < first) high = mid - 1;
    else if (x > last) low = mid + 1;
    else return true;
  }
  return false;
}

/** The fewest aligned prefixes covering exactly these ranges, in address order. */
export function rangesToPrefixes(family: Family, ranges: readonly Range[]): Prefix[] {
  return ranges.flatMap(([first, last]) => rangeToPrefixes(family, first, last));
}

/**
 * Ranges as the addon takes them: each bound big-endian (4 bytes for IPv4, 16 for IPv6), first then
 * last. A list computed on a worker is packed there, so 100 000 ranges cross to the agent's thread
 * as one buffer and never become bigint pairs on it (docs/design.md, "Figures").
 */
export class PackedRanges {
  constructor(
    readonly family: Family,
    readonly bytes: Uint8Array,
  ) {}

  get length(): number {
    return this.bytes.byteLength / (boundBytes(this.family) * 2);
  }
}

/** Ranges as a list, or packed. */
export type RangeList = readonly Range<Bound>[] | PackedRanges;

/** A bound's width when packed: 4 bytes for IPv4, 16 for IPv6. */
const boundBytes = (family: Family) => ADDRESS_BITS[family] / 8;

/** The ranges packed (PackedRanges); a packed list as it is. */
export function packRanges(family: Family, ranges: RangeList): PackedRanges {
  if (ranges instanceof PackedRanges) return ranges;
  const width = boundBytes(family);
  const bytes = new Uint8Array(ranges.length * 2 * width);
  const view = new DataView(bytes.buffer);
  let offset = 0;
  const put = (bound: Bound) => {
    if (family === 4) {
      view.setUint32(offset, Number(bound));
    } else {
      const value = BigInt(bound);
      view.setBigUint64(offset, value >> 64n);
      view.setBigUint64(offset + 8, BigInt.asUintN(64, value));
    }
    offset += width;
  };
  for (const [first, last] of ranges) {
    put(first);
    put(last);
  }
  return new PackedRanges(family, bytes);
}
