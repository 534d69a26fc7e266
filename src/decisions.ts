// Which destinations a config exempts from masquerading, as address ranges, and which ones change
// their decision between two configs (README, "When it writes": what happens to existing flows).
// Pure: the same order of decision the rules implement (compile.ts): masqueradeCIDRs first, then
// the non-masquerade set. Local destinations are never touched, whatever the config says.
import {
  type Bound,
  type Family,
  ipv4Number,
  normalise,
  parseCidr,
  prefixRange,
  type Range,
  subtract,
  symmetricDifference,
} from './cidr/index.js';
import type { AddressFamily, Config } from './config/types.js';

/** What decides: the two effective sets of a Config. */
export type Decisive = Pick<Config, 'nonMasquerade' | 'masquerade'>;

const families: Record<AddressFamily, Family> = { ipv4: 4, ipv6: 6 };

/** An IPv4 CIDR as a number range: no bigint for the largest lists a config has. */
function v4Range(cidr: string): Range<number> {
  const prefix = parseCidr(cidr);
  const first = ipv4Number(prefix);
  return [first, first + 2 ** (32 - prefix.len) - 1];
}

function ranges<T extends Bound>(
  cidrs: readonly string[],
  parse: (cidr: string) => Range<T>,
): Range<T>[] {
  return normalise(cidrs.map(parse));
}

function exempt<T extends Bound>(
  config: Decisive,
  family: AddressFamily,
  parse: (cidr: string) => Range<T>,
): Range<T>[] {
  return subtract(
    ranges(config.nonMasquerade[family], parse),
    ranges(config.masquerade[family], parse),
  );
}

const v6Range = (cidr: string): Range => prefixRange(parseCidr(cidr));
const toBig = (r: readonly Range<number>[]): Range[] => r.map(([a, b]) => [BigInt(a), BigInt(b)]);

/** One of a config's sets (its canonical CIDRs) as ranges in normal form. */
export function setRanges(cidrs: readonly string[], family: AddressFamily): Range[] {
  return family === 'ipv4' ? toBig(ranges(cidrs, v4Range)) : ranges(cidrs, v6Range);
}

/** Destinations the config leaves unmasqueraded: in the non-masquerade set and not in masqueradeCIDRs. */
export function exemptRanges(config: Decisive, family: AddressFamily): Range[] {
  return family === 'ipv4'
    ? toBig(exempt(config, family, v4Range))
    : exempt(config, family, v6Range);
}

/** Both families' exempt sets compared in their fastest form; the results as bigint ranges. */
function compare(
  before: Decisive,
  after: Decisive,
  family: AddressFamily,
  combine: <T extends Bound>(was: Range<T>[], will: Range<T>[]) => Range<T>[],
): Range[] {
  if (family === 'ipv4')
    return toBig(combine(exempt(before, family, v4Range), exempt(after, family, v4Range)));
  return combine(exempt(before, family, v6Range), exempt(after, family, v6Range));
}

/** Per family: destinations exempt before and masqueraded after (`lost`), and the reverse (`gained`). */
export function flippedRanges(
  before: Decisive,
  after: Decisive,
  which: readonly AddressFamily[],
): Array<{ family: Family; lost: Range[]; gained: Range[] }> {
  return which.map((family) => {
    const lost = compare(before, after, family, (was, will) => subtract(was, will));
    const gained = compare(before, after, family, (was, will) => subtract(will, was));
    return { family: families[family], lost, gained };
  });
}

/** Destinations whose decision differs between the two configs, per address family. */
export function changedRanges(
  before: Decisive,
  after: Decisive,
  which: readonly AddressFamily[],
): Array<{ family: Family; ranges: Range[] }> {
  return which
    .map((family) => ({
      family: families[family],
      ranges: compare(before, after, family, symmetricDifference),
    }))
    .filter((change) => change.ranges.length > 0);
}
