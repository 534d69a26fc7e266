// The values of the egress policy keys (docs/egress-policy.md, "Egress policy"): interface names,
// SNAT addresses, node names and label selectors, each checked and put in the agent's own spelling,
// so that what reaches nftables is text the agent formatted, never the file's.
import { CidrError, formatAddress, parseAddress, quote } from '../cidr/index.js';

/** A value that is not what its key takes; the caller adds the key and index. */
export class ValueError extends Error {}

/**
 * Linux takes an interface name of 1 to 15 bytes other than "." and "..", without "/", ":" or
 * white space (net/core/dev.c, dev_valid_name). The agent also refuses what nft or a log line
 * would read otherwise — quotes, backslashes, control and non-ASCII characters — and takes `*`
 * only last, as nft's wildcard for every name that starts with what comes before it.
 */
const IFNAME_BYTES = 15;
const IFNAME_CHARACTER = /^[\x21-\x7e]$/;
const IFNAME_REFUSED = new Set(['/', ':', '"', "'", '`', '\\']);

/** Checks an egressInterfaces entry; returns it as written (every character was checked). */
export function parseInterfaceName(text: string): string {
  const wildcard = text.endsWith('*');
  const name = wildcard ? text.slice(0, -1) : text;
  if (name === '') {
    throw new ValueError(
      text === ''
        ? 'an empty interface name'
        : '"*" alone matches every interface: leave egressInterfaces out instead',
    );
  }
  for (const c of name) {
    if (c === '*')
      throw new ValueError(`${quote(text)}: "*" is a wildcard only at the end of a name`);
    if (!IFNAME_CHARACTER.test(c) || IFNAME_REFUSED.has(c)) {
      const what = /\s/.test(c)
        ? 'white space'
        : IFNAME_CHARACTER.test(c)
          ? JSON.stringify(c)
          : `the character ${quote(c)}`;
      throw new ValueError(
        `${quote(text)} is not a valid interface name: it holds ${what} (Linux refuses "/", ":" and white space; the agent also quotes, backslashes, control and non-ASCII characters)`,
      );
    }
  }
  if (name === '.' || name === '..')
    throw new ValueError(`${quote(text)} is not a valid interface name`);
  if (name.length > IFNAME_BYTES) {
    throw new ValueError(
      `${quote(text)} is not a valid interface name: ${name.length} bytes, Linux takes at most ${IFNAME_BYTES}`,
    );
  }
  return text;
}

/**
 * The names of an egressInterfaces list that nft can hold together: each name once, and none that a
 * wildcard already covers (`eth0` or `eth1*` beside `eth*`; `eth*` beside `e*`). An interval set of
 * interface names refuses such overlaps ("conflicting intervals specified"), and they match nothing
 * the wildcard does not, so they are dropped rather than refused. Sorted.
 */
export function collapseInterfaces(names: Iterable<string>): string[] {
  const unique = [...new Set(names)].sort();
  const prefixes = unique.filter((name) => name.endsWith('*')).map((name) => name.slice(0, -1));
  return unique.filter((name) => {
    const own = name.endsWith('*') ? name.slice(0, -1) : undefined;
    return !prefixes.some((prefix) => prefix !== own && name.startsWith(prefix));
  });
}

/**
 * snatAddress / snatAddressIPv6: one address (first === last) or a range, formatted by the agent.
 */
export interface SnatRange {
  readonly first: string;
  readonly last: string;
}

/**
 * The source addresses no SNAT target may be (docs/egress-policy.md, "Egress policy"): a reply
 * addressed to any of them never comes back through the network to this node.
 */
const SPECIAL_BLOCKS: Record<4 | 6, readonly (readonly [string, string])[]> = {
  4: [
    ['0.0.0.0/8', 'unspecified ("this network")'],
    ['127.0.0.0/8', 'loopback'],
    ['169.254.0.0/16', 'link-local'],
    ['224.0.0.0/4', 'multicast'],
    ['240.0.0.0/4', 'reserved or broadcast'],
  ],
  6: [
    ['::/128', 'unspecified'],
    ['::1/128', 'loopback'],
    ['::ffff:0:0/96', 'IPv4-mapped'],
    ['fe80::/10', 'link-local'],
    ['ff00::/8', 'multicast'],
  ],
};

interface Block {
  readonly cidr: string;
  readonly what: string;
  readonly first: bigint;
  readonly last: bigint;
}

function blocks(family: 4 | 6): Block[] {
  const bits = family === 4 ? 32 : 128;
  return SPECIAL_BLOCKS[family].map(([cidr, what]) => {
    const [base = '', length = ''] = cidr.split('/');
    const first = parseAddress(base).addr;
    const last = first | ((1n << BigInt(bits - Number(length))) - 1n);
    return { cidr, what, first, last };
  });
}

const NOT_A_SOURCE: Record<4 | 6, readonly Block[]> = { 4: blocks(4), 6: blocks(6) };

/**
 * The most addresses one snatAddress range may span (a /16 of IPv4; docs/egress-policy.md, "Egress
 * policy").
 */
export const SNAT_RANGE_MAX = 65536n;

/**
 * Parses `A` or `A-B`, both of the family the key takes (the caller refuses IPv6 while it is off).
 */
export function parseSnatAddress(text: string, family: 4 | 6): SnatRange {
  const parts = text.split('-');
  if (parts.length > 2 || parts.some((p) => p === '')) {
    throw new ValueError(`${quote(text)} is not an address or a range of addresses (A or A-B)`);
  }
  const parsed = parts.map((part) => {
    try {
      return parseAddress(part);
    } catch (err) {
      if (err instanceof CidrError) throw new ValueError(err.message);
      throw err;
    }
  });
  const [first, last = first] = parsed as [ReturnType<typeof parseAddress>, ...typeof parsed];
  for (const address of [first, last]) {
    if (address.family !== family) {
      const other = family === 4 ? 'snatAddressIPv6' : 'snatAddress';
      throw new ValueError(
        `${quote(text)} is an IPv${address.family} address; this key takes IPv${family} (use ${other} for IPv${address.family})`,
      );
    }
  }
  if (first.addr > last.addr) {
    throw new ValueError(`${quote(text)}: the range ends before it starts`);
  }
  const count = last.addr - first.addr + 1n;
  if (count > SNAT_RANGE_MAX) {
    throw new ValueError(
      `${quote(text)} spans ${count} addresses; a SNAT range takes at most ${SNAT_RANGE_MAX} (docs/egress-policy.md, "Egress policy")`,
    );
  }
  const refused = NOT_A_SOURCE[family].find(
    (block) => first.addr <= block.last && last.addr >= block.first,
  );
  if (refused !== undefined) {
    const what = first.addr === last.addr ? 'is' : 'holds';
    throw new ValueError(
      `${quote(text)} ${what} ${refused.what} (${refused.cidr}): no translation may take such a source address`,
    );
  }
  return { first: formatAddress(family, first.addr), last: formatAddress(family, last.addr) };
}

/** The range as nftables writes it in a `snat to` statement (without ports). */
export function snatText(range: SnatRange): string {
  return range.first === range.last ? range.first : `${range.first}-${range.last}`;
}

// Kubernetes object names (a DNS-1123 subdomain) and label keys and values (apimachinery's
// validation): what the API server accepts, so a name that can never match is caught in the file.
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

/** Checks a nodeNames entry. */
export function parseNodeName(text: string): string {
  if (text.length > 253 || !DNS_SUBDOMAIN.test(text)) {
    throw new ValueError(
      `${quote(text)} is not a node name (lower-case letters, digits, "-" and ".", at most 253 characters)`,
    );
  }
  return text;
}

/** Checks a nodeSelector label key (`[prefix/]name`) and its value. */
export function parseLabel(key: string, value: string): void {
  const slash = key.lastIndexOf('/');
  const prefix = slash === -1 ? undefined : key.slice(0, slash);
  const name = slash === -1 ? key : key.slice(slash + 1);
  const prefixOk = prefix === undefined || (prefix.length <= 253 && DNS_SUBDOMAIN.test(prefix));
  if (!prefixOk || name.length > 63 || !LABEL_NAME.test(name)) {
    throw new ValueError(
      `${quote(key)} is not a label key ([prefix/]name, the name at most 63 characters)`,
    );
  }
  if (value !== '' && (value.length > 63 || !LABEL_NAME.test(value))) {
    throw new ValueError(
      `${quote(value)} is not a label value (at most 63 letters, digits, "-", "_" and ".")`,
    );
  }
}
