// Pure IPv4/IPv6 CIDR algebra: parse strictly, print canonically, merge into the fewest prefixes.
export {
  CidrError,
  type Family,
  formatAddress,
  parseAddress,
  escapeUnprintable,
  quote,
} from './address.js';
export {
  familyOf,
  managedFamilies,
  type AddressFamily,
  type IpFamily,
  type TableFamily,
} from './family.js';
export {
  type Prefix,
  formatPrefix,
  hostMask,
  ipv4Number,
  parseCidr,
  prefixRange,
} from './prefix.js';
export {
  familyLines,
  familyLists,
  listWindow,
  splicedList,
  type FamilyLines,
  type Splice,
} from './lines.js';
export { MergedSetV4, mergePrefixes, mergeToLines, rangeToPrefixes } from './merge.js';
export {
  inRanges,
  normalise,
  packRanges,
  PackedRanges,
  rangesToPrefixes,
  subtract,
  symmetricDifference,
  type Bound,
  type Range,
  type RangeList,
} from './ranges.js';
