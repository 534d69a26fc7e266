// CIDR prefixes: strict parsing (host bits must be clear) and canonical printing.
import {
  ADDRESS_BITS,
  CidrError,
  type Family,
  formatAddress,
  parseIPv4,
  parseIPv6,
  quote,
} from './address.js';

export interface Prefix {
  readonly family: Family;
  readonly addr: bigint;
  readonly len: number;
}

/**
 * An IPv4 prefix as parsed from text (a config's largest lists are of these): the address is kept as
 * a number and made a bigint only when asked for, so 100 000 CIDRs are 100 000 small objects.
 */
class IPv4Prefix implements Prefix {
  readonly family = 4 as const;
  constructor(
    readonly v4: number,
    readonly len: number,
  ) {}
  get addr(): bigint {
    return BigInt(this.v4);
  }
}

/** An IPv4 prefix's address as a number, without a bigint when it was parsed from text. */
export function ipv4Number(p: Prefix): number {
  return p instanceof IPv4Prefix ? p.v4 : Number(p.addr);
}

export function hostMask(family: Family, len: number): bigint {
  return (1n << BigInt(ADDRESS_BITS[family] - len)) - 1n;
}

/** [first, last] address covered by the prefix. */
export function prefixRange(p: Prefix): [bigint, bigint] {
  return [p.addr, p.addr | hostMask(p.family, p.len)];
}

export function formatPrefix(p: Prefix): string {
  return `${formatAddress(p.family, p.addr)}/${p.len}`;
}

function parseLength(text: string, max: number): number | string {
  if (text === '') return `has an empty prefix length`;
  if (!/^[0-9]{1,3}$/.test(text)) return `has an invalid prefix length ${quote(text)}`;
  if (text.length > 1 && text.startsWith('0')) {
    return `has a prefix length with a leading zero ("${text}")`;
  }
  const len = Number(text);
  if (len > max) return `has prefix length ${len}, above the maximum of ${max}`;
  return len;
}

function reject(text: string, reason: string, suggestion?: string): never {
  const hint = suggestion === undefined ? '' : ` (did you mean ${suggestion}?)`;
  throw new CidrError(`${quote(text)} ${reason}${hint}`, suggestion);
}

/**
 * Fast path for the common case, a well-formed IPv4 CIDR, in one pass over the text without a
 * substring: what it accepts, parseCidrSlow accepts with the same prefix (property-tested); anything
 * else (an error to word, IPv6) is undefined and goes there. One pass rather than one for the
 * address and one for the length: the largest lists are of these.
 */
function parseIPv4Cidr(text: string): Prefix | undefined {
  const end = text.length;
  let v4 = 0;
  let octet = 0;
  let digits = 0;
  let leadingZero = false;
  let dots = 0;
  let i = 0;
  for (; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c === 46 /* . */ || c === 47 /* / */) {
      if (digits === 0 || octet > 255 || (digits > 1 && leadingZero)) return undefined;
      v4 = v4 * 256 + octet;
      octet = 0;
      digits = 0;
      if (c === 47) break;
      dots++;
      continue;
    }
    const digit = c - 48;
    if (digit < 0 || digit > 9 || digits === 3) return undefined;
    if (digits === 0) leadingZero = digit === 0;
    octet = octet * 10 + digit;
    digits++;
  }
  const lengthDigits = end - i - 1;
  if (dots !== 3 || lengthDigits < 1 || lengthDigits > 2) return undefined;
  let len = 0;
  for (let j = i + 1; j < end; j++) {
    const digit = text.charCodeAt(j) - 48;
    if (digit < 0 || digit > 9) return undefined;
    len = len * 10 + digit;
  }
  if (len > 32 || (lengthDigits === 2 && len < 10)) return undefined;
  // Host bits clear; `&` reads v4 (< 2^32) as the same 32 bits, and >>> 32 would shift by 0.
  if (len < 32 && (v4 & (0xffffffff >>> len)) !== 0) return undefined;
  return new IPv4Prefix(v4, len);
}

/** Strict parse of "ADDRESS/LENGTH"; throws CidrError naming the input and what is wrong with it. */
export function parseCidr(text: string): Prefix {
  return parseIPv4Cidr(text) ?? parseCidrSlow(text, text.indexOf('/'));
}

function parseCidrSlow(text: string, slash: number): Prefix {
  if (/\s/.test(text)) {
    const trimmed = text.replace(/\s+/g, '');
    let suggestion: string | undefined;
    try {
      suggestion = formatPrefix(parseCidr(trimmed));
    } catch {
      suggestion = undefined;
    }
    reject(text, 'contains whitespace', suggestion);
  }
  if (slash < 0) {
    const hint = /^[0-9.]+$|:/.test(text) ? ' (write ADDRESS/LENGTH, e.g. 10.0.0.0/8)' : '';
    reject(text, `is not a CIDR: missing "/length"${hint}`);
  }
  const addressText = text.slice(0, slash);
  const family: Family = addressText.includes(':') ? 6 : 4;
  let addr: bigint;
  if (family === 6) {
    const v6 = parseIPv6(addressText);
    if (typeof v6 === 'string') reject(text, `is not a CIDR: the address ${v6}`);
    addr = v6;
  } else {
    if (!/^[0-9.]+$/.test(addressText)) {
      reject(text, 'is not a CIDR (expected ADDRESS/LENGTH, e.g. 10.0.0.0/8)');
    }
    const v4 = parseIPv4(addressText);
    if (typeof v4 === 'string') reject(text, `is not a CIDR: the address ${v4}`);
    addr = BigInt(v4);
  }
  const len = parseLength(text.slice(slash + 1), ADDRESS_BITS[family]);
  if (typeof len === 'string') reject(text, `is not a CIDR: it ${len}`);
  const hostBits = addr & hostMask(family, len);
  if (hostBits !== 0n) {
    const network = formatPrefix({ family, addr: addr ^ hostBits, len });
    reject(text, 'is not aligned to its prefix', network);
  }
  return { family, addr, len };
}
