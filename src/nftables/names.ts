// What a table, chain or set name may be. nft's scanner turns its keywords into tokens wherever they
// appear, so a name that is one (`ip`, `counter`, `masquerade`) makes every script fail with a syntax
// error. The list is nft's global keywords (1.0.6 to 1.1.x), checked against both versions here.
const NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

const KEYWORDS: ReadonlySet<string> = new Set(
  (
    'accept add ah all and arp auto-merge bridge cgroup chain comment comp constant continue counter ' +
    'cpu create ct day dccp define delete describe destroy device devices dnat drop dst dup dynamic ' +
    'ecn element elements esp ether exists expires export exthdr fib flags flow flowtable flush frag ' +
    'fwd geneve get goto gre gretap handle hbh hook hour ibriport ibrname icmp icmpv6 igmp iif iifgroup ' +
    'iifname iiftype import include index inet insert interval ip ip6 ipsec jhash jump last limit list ' +
    'log map mark masquerade meta meter mh missing monitor netdev not notrack nftrace numgen obriport ' +
    'obrname offload oif oifgroup oifname oiftype or osf pkttype policy position priority queue quota ' +
    'random redefine redirect reject rename replace reset return rt rt0 rt2 rtclassid rule ruleset ' +
    'sctp secmark set size skgid skuid snat socket srh symhash synproxy table tcp th time timeout ' +
    'tproxy tunnel type typeof udp udplite undefine update vlan vmap vni vxlan xor xt gc-interval'
  ).split(' '),
);

/** Why `name` cannot be an nftables object name, or undefined when it can. */
export function nameProblem(name: string): string | undefined {
  if (!NAME.test(name))
    return 'not a valid name (a letter, then up to 63 letters, digits, "_" or "-")';
  if (KEYWORDS.has(name)) return 'an nftables keyword, which nft cannot take as a name';
  return undefined;
}
