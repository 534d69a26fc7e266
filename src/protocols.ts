// IP protocol numbers and their names, one table for the whole agent: nft's names as its listings
// print them (the look at other tables' rules reads these), and the name the agent gives a number in
// its own logs and series.

/** The protocols by the names nft prints. */
export const PROTOCOL_NUMBERS: Readonly<Record<string, number>> = Object.freeze({
  icmp: 1,
  igmp: 2,
  tcp: 6,
  udp: 17,
  gre: 47,
  esp: 50,
  ah: 51,
  'ipv6-icmp': 58,
  icmpv6: 58,
  sctp: 132,
  udplite: 136,
});

export const UDP = 17;
export const UDPLITE = 136;

/** The names the agent writes for the protocols it deals with (conntrack's flush): others by number. */
const NAMES: ReadonlyMap<number, string> = new Map([
  [1, 'icmp'],
  [6, 'tcp'],
  [UDP, 'udp'],
  [58, 'icmpv6'],
  [132, 'sctp'],
  [UDPLITE, 'udplite'],
]);

/** A protocol named as nft prints it, or a decimal number; undefined for any other word. */
export function protocolNumber(text: string): number | undefined {
  if (/^\d+$/.test(text)) return Number(text);
  return Object.hasOwn(PROTOCOL_NUMBERS, text) ? PROTOCOL_NUMBERS[text] : undefined;
}

/** A protocol number as the agent names it: its name where it deals with it, else the number. */
export function protocolText(protocol: number): string {
  return NAMES.get(protocol) ?? String(protocol);
}
