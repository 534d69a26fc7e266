// Sets of addresses as sorted, disjoint, non-adjacent [first, last] ranges: union, difference and
// symmetric difference by one sweep, and back to the fewest prefixes.
import type { Family } from './address.js';
import { rangeToPrefixes } from './merge.js';
import { type Prefix, prefixRange } from './prefix.js';

export type Range = readonly [first: bigint, last: bigint];

/** The normal form: sorted, overlapping and adjacent ranges joined. */
export function normalise(ranges: readonly Range[]): Range[] {
  const sorted = [...ranges].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const out: Array<[bigint, bigint]> = [];
  for (const [first, last] of sorted) {
    const top = out[out.length - 1];
    if (top && first <= top[1] + 1n) {
      if (last > top[1]) top[1] = last;
    } else out.push([first, last]);
  }
  return out;
}

export function prefixesToRanges(prefixes: readonly Prefix[]): Range[] {
  return normalise(prefixes.map(prefixRange));
}

/** The addresses in `a` and not in `b` (both in normal form); the result is in normal form. */
export function subtract(a: readonly Range[], b: readonly Range[]): Range[] {
  const out: Range[] = [];
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
      if (cut[0] > start) out.push([start, cut[0] - 1n]);
      start = cut[1] + 1n;
      k++;
    }
  }
  return out;
}

/** The addresses in exactly one of `a` and `b` (both in normal form). */
export function symmetricDifference(a: readonly Range[], b: readonly Range[]): Range[] {
  return normalise([...subtract(a, b), ...subtract(b, a)]);
}

/** The fewest aligned prefixes covering exactly these ranges, in address order. */
export function rangesToPrefixes(family: Family, ranges: readonly Range[]): Prefix[] {
  return ranges.flatMap(([first, last]) => rangeToPrefixes(family, first, last));
}
