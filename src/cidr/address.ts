// Strict textual IPv4/IPv6 addresses <-> bigint, written by hand: config text must never reach nftables
// as written, so every accepted spelling is parsed here and printed back canonically.

export type Family = 4 | 6;

export class CidrError extends Error {
  /** A corrected spelling when one is obvious (host bits cleared, whitespace trimmed). */
  readonly suggestion?: string;
  constructor(message: string, suggestion?: string) {
    super(message);
    this.name = 'CidrError';
    if (suggestion !== undefined) this.suggestion = suggestion;
  }
}

const QUOTE_LIMIT = 100;
// Control, invisible and line-breaking characters, and lone surrogates: a log line must show them plainly.
const UNPRINTABLE =
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  /[\u0000-\u001f\u007f-\u009f\u00ad\u200b-\u200f\u2028\u2029\u2060\ufeff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const escapeCharacter = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/** Text with unprintable characters written as \uXXXX escapes. */
export function escapeUnprintable(text: string): string {
  return text.replace(UNPRINTABLE, escapeCharacter);
}

/** JSON-quoted (unprintable characters escaped) and cut short: a huge value must not make a huge message. */
export function quote(text: string): string {
  const shown = text.length <= QUOTE_LIMIT ? text : text.slice(0, QUOTE_LIMIT);
  const quoted = JSON.stringify(shown).replace(UNPRINTABLE, escapeCharacter);
  return text.length <= QUOTE_LIMIT ? quoted : `${quoted}… (${text.length} characters)`;
}

export const ADDRESS_BITS: Readonly<Record<Family, number>> = { 4: 32, 6: 128 };

const CODE_0 = 48;
const CODE_9 = 57;

/** Parses a dotted quad; returns a reason string instead of throwing so callers can word the error. */
export function parseIPv4(text: string): number | string {
  const end = text.length;
  let value = 0;
  let octets = 0;
  let start = 0;
  for (let i = 0; i <= end; i++) {
    if (i < end && text.charCodeAt(i) !== 46 /* . */) continue;
    const digits = i - start;
    if (digits === 0) return `has an empty octet`;
    if (digits > 3) return `has an octet longer than 3 digits`;
    let octet = 0;
    for (let j = start; j < i; j++) {
      const c = text.charCodeAt(j);
      if (c < CODE_0 || c > CODE_9) return `is not a valid IPv4 address`;
      octet = octet * 10 + (c - CODE_0);
    }
    if (digits > 1 && text.charCodeAt(start) === CODE_0) {
      return `has an octet with a leading zero ("${text.slice(start, i)}"), which is ambiguous (octal or decimal?)`;
    }
    if (octet > 255) return `has an octet above 255 ("${text.slice(start, i)}")`;
    value = value * 256 + octet;
    octets++;
    start = i + 1;
  }
  if (octets !== 4) return `is not a valid IPv4 address (expected 4 octets, got ${octets})`;
  return value;
}

function parseHexGroup(text: string): number {
  if (text.length === 0 || text.length > 4) return -1;
  let value = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    let digit: number;
    if (c >= CODE_0 && c <= CODE_9) digit = c - CODE_0;
    else if (c >= 97 && c <= 102) digit = c - 87;
    else if (c >= 65 && c <= 70) digit = c - 55;
    else return -1;
    value = value * 16 + digit;
  }
  return value;
}

/** Parses the groups on one side of "::" into 16-bit values; an embedded IPv4 may end the address. */
function parseGroups(text: string, allowIPv4Tail: boolean): number[] | string {
  if (text === '') return [];
  const parts = text.split(':');
  const groups: number[] = [];
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i] as string;
    if (allowIPv4Tail && i === parts.length - 1 && part.includes('.')) {
      const v4 = parseIPv4(part);
      if (typeof v4 === 'string') return `has an embedded IPv4 address that ${v4}`;
      groups.push(Math.floor(v4 / 65536), v4 % 65536);
      continue;
    }
    const group = parseHexGroup(part);
    if (group < 0) {
      return part === ''
        ? `has an empty group (a lone ":")`
        : `has an invalid group ${quote(part)} (1 to 4 hex digits)`;
    }
    groups.push(group);
  }
  return groups;
}

export function parseIPv6(text: string): bigint | string {
  if (text.includes('%')) return `has a zone id, which a CIDR cannot have`;
  const halves = text.split('::');
  if (halves.length > 2) return `has "::" more than once`;
  const head = parseGroups(halves[0] as string, halves.length === 1);
  if (typeof head === 'string') return head;
  let groups = head;
  if (halves.length === 2) {
    const tail = parseGroups(halves[1] as string, true);
    if (typeof tail === 'string') return tail;
    // "::" stands for at least one zero group.
    if (head.length + tail.length > 7) return `has too many groups for "::"`;
    groups = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  } else if (groups.length !== 8) {
    return `is not a valid IPv6 address (expected 8 groups, got ${groups.length})`;
  }
  let value = 0n;
  for (const group of groups) value = (value << 16n) | BigInt(group);
  return value;
}

export function parseAddress(text: string): { family: Family; addr: bigint } {
  if (text.includes(':')) {
    const v6 = parseIPv6(text);
    if (typeof v6 === 'string') throw new CidrError(`${quote(text)} ${v6}`);
    return { family: 6, addr: v6 };
  }
  const v4 = parseIPv4(text);
  if (typeof v4 === 'string') throw new CidrError(`${quote(text)} ${v4}`);
  return { family: 4, addr: BigInt(v4) };
}

const OCTETS: readonly string[] = Array.from({ length: 256 }, (_, i) => String(i));

/** Dotted quad of an IPv4 address given as a number below 2^32. */
export function formatIPv4(value: number): string {
  const a = OCTETS[value >>> 24] as string;
  const b = OCTETS[(value >>> 16) & 255] as string;
  const c = OCTETS[(value >>> 8) & 255] as string;
  return `${a}.${b}.${c}.${OCTETS[value & 255] as string}`;
}

/** RFC 5952: lower case, no leading zeros, the longest run (first on a tie) of 2+ zero groups as "::". */
function formatIPv6(addr: bigint): string {
  // IPv4-mapped addresses print their last 32 bits as a dotted quad (RFC 5952 section 5).
  if (addr >> 32n === 0xffffn) return `::ffff:${formatIPv4(Number(addr & 0xffffffffn))}`;
  const groups: number[] = new Array<number>(8);
  for (let i = 7; i >= 0; i--) {
    groups[i] = Number(addr & 0xffffn);
    addr >>= 16n;
  }
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = (from: number, to: number) =>
    groups
      .slice(from, to)
      .map((g) => g.toString(16))
      .join(':');
  if (bestStart < 0) return hex(0, 8);
  return `${hex(0, bestStart)}::${hex(bestStart + bestLength, 8)}`;
}

export function formatAddress(family: Family, addr: bigint): string {
  return family === 4 ? formatIPv4(Number(addr)) : formatIPv6(addr);
}
