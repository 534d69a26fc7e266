// Which destinations a config exempts from masquerading, as address ranges, and which ones change
// their decision between two configs (README, "When it writes": what happens to existing flows).
// Pure: the same order of decision the rules implement (compile.ts): masqueradeCIDRs first, then
// the non-masquerade set. Local destinations are never touched, whatever the config says.
import {
  type Family,
  parseCidr,
  prefixesToRanges,
  type Range,
  subtract,
  symmetricDifference,
} from './cidr/index.js';
import type { AddressFamily, Config } from './config/types.js';

/** What decides: the two effective sets of a Config. */
export type Decisive = Pick<Config, 'nonMasquerade' | 'masquerade'>;

const families: Record<AddressFamily, Family> = { ipv4: 4, ipv6: 6 };

/** Destinations the config leaves unmasqueraded: in the non-masquerade set and not in masqueradeCIDRs. */
export function exemptRanges(config: Decisive, family: AddressFamily): Range[] {
  const ranges = (cidrs: readonly string[]) => prefixesToRanges(cidrs.map(parseCidr));
  return subtract(ranges(config.nonMasquerade[family]), ranges(config.masquerade[family]));
}

/** Per family: destinations exempt before and masqueraded after (`lost`), and the reverse (`gained`). */
export function flippedRanges(
  before: Config,
  after: Config,
  which: readonly AddressFamily[],
): Array<{ family: Family; lost: Range[]; gained: Range[] }> {
  return which.map((family) => {
    const [was, will] = [exemptRanges(before, family), exemptRanges(after, family)];
    return { family: families[family], lost: subtract(was, will), gained: subtract(will, was) };
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
      ranges: symmetricDifference(exemptRanges(before, family), exemptRanges(after, family)),
    }))
    .filter((change) => change.ranges.length > 0);
}
