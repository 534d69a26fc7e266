// Reading other tables' nat rules as nft prints them: which translating rules unmarked traffic
// reaches (reported), which only marked traffic does (kube-proxy's shapes: not reported), and what a
// rule's own matches say of one flow. The listings are nft 1.0.6's and 1.1.x's own output.
import t from 'tap';
import { parseAddress } from '../../../src/cidr/index.js';
import {
  parseListing,
  readRule,
  ruleHolds,
  tokens,
  unmarkedTranslations,
  verdictFor,
  type NatFlow,
} from '../../../src/other-nat/rules.js';

const addr = (text: string) => parseAddress(text).addr;
const v4 = (dst: string, extra: Partial<NatFlow> = {}): NatFlow => ({
  family: 4,
  daddr: addr(dst),
  mark: 0,
  ...extra,
});

// `nft -a -s list chain ip nat POSTROUTING; list chain ip nat KUBE-POSTROUTING` by nft 1.0.6, for
// kube-proxy's iptables mode, a Flannel-like rule and a mark-only one, as iptables-nft wrote them.
const IPTABLES_NFT = `table ip nat {
	chain POSTROUTING { # handle 2
		type nat hook postrouting priority srcnat; policy accept;
		 counter jump KUBE-POSTROUTING # handle 3
		ip saddr 10.244.0.0/16 counter masquerade # handle 7
		oifname "eth0" meta l4proto udp ip saddr 10.244.0.0/16 ip daddr != 10.244.0.0/16 counter snat to 192.0.2.1 # handle 8
		meta mark & 0x00000001 == 0x00000001 counter masquerade # handle 9
	}
}
table ip nat {
	chain KUBE-POSTROUTING { # handle 1
		meta mark & 0x00004000 != 0x00004000 counter return # handle 4
		counter meta mark set mark xor 0x4000 # handle 5
		 counter masquerade fully-random # handle 6
	}
}
`;

// kube-proxy's nftables mode, as nft prints its table.
const KUBE_PROXY_NFT = `table ip kube-proxy {
	chain nat-postrouting { # handle 20
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading # handle 21
	}
	chain masquerading { # handle 10
		meta mark & 0x00004000 == 0x00000000 return # handle 11
		meta mark set meta mark ^ 0x00004000 # handle 12
		masquerade fully-random # handle 13
	}
}
`;

t.test('tokens keep quoted strings and brace groups whole', async (t) => {
  t.same(tokens('oifname "a b" ip daddr { 10.0.0.0/8, 192.0.2.1 } masquerade'), [
    'oifname',
    '"a b"',
    'ip',
    'daddr',
    '{ 10.0.0.0/8, 192.0.2.1 }',
    'masquerade',
  ]);
});

t.test('a listing parses into each chain’s rules by handle, hook lines left out', async (t) => {
  const chains = parseListing(IPTABLES_NFT);
  t.same([...chains.keys()], ['POSTROUTING', 'KUBE-POSTROUTING']);
  t.same(
    chains.get('POSTROUTING')!.map((rule) => rule.handle),
    [3, 7, 8, 9],
  );
  t.equal(chains.get('KUBE-POSTROUTING')![2]!.text, 'counter masquerade fully-random');
});

t.test(
  'reported: what unmarked traffic reaches; not: kube-proxy’s mark-guarded rules',
  async (t) => {
    const chains = parseListing(IPTABLES_NFT);
    t.same(
      unmarkedTranslations(chains, 'POSTROUTING').map((rule) => `${rule.chain}/${rule.handle}`),
      ['POSTROUTING/7', 'POSTROUTING/8'],
      'the pod-source rules are; the mark-only rule and KUBE-POSTROUTING (after its return) are not',
    );
    const everything = parseListing(`table ip x {
	chain p { # handle 1
		counter masquerade # handle 2
		ip saddr 10.0.0.0/8 masquerade # handle 3
	}
}`);
    t.same(
      unmarkedTranslations(everything, 'p').map((rule) => rule.handle),
      [2],
      'nothing reaches a rule after one that translates every flow',
    );
    t.same(unmarkedTranslations(parseListing(KUBE_PROXY_NFT), 'nat-postrouting'), []);
    // The guard removed: the masquerade of kube-proxy's chain is reached by unmarked traffic.
    const unguarded = parseListing(KUBE_PROXY_NFT.replace(/.*# handle 11\n/, ''));
    t.same(
      unmarkedTranslations(unguarded, 'nat-postrouting').map((rule) => rule.handle),
      [13],
    );
  },
);

// kube-proxy 1.36's nftables mode, as nft 1.0.6 and 1.1.3 print it on a real node
// (test/node/node.test.ts): the marked, and hairpin connections — those it translated the
// destination of itself, back to their own source.
const KUBE_PROXY_136 = `table ip kube-proxy {
	chain nat-postrouting { # handle 20
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading # handle 21
	}
	chain masquerading { # handle 10
		meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random # handle 11
		ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random # handle 12
	}
}
`;

t.test(
  "a connection's translated destination: ct status, as kube-proxy 1.36 guards its hairpin",
  async (t) => {
    const chains = parseListing(KUBE_PROXY_136);
    t.same(
      unmarkedTranslations(chains, 'nat-postrouting'),
      [],
      'neither rule reaches a plain flow',
    );
    t.equal(verdictFor(chains, 'nat-postrouting', v4('10.244.0.5')), undefined, 'nor --explain');
    t.equal(
      verdictFor(chains, 'nat-postrouting', v4('10.244.0.5', { dnat: true }))?.rule.handle,
      12,
      'a redirected connection may meet the hairpin rule (its set is not looked into)',
    );
    t.same(
      unmarkedTranslations(
        parseListing(KUBE_PROXY_136.replace('ct status dnat ', '')),
        'nat-postrouting',
      ).map((rule) => rule.handle),
      [12],
      'without its guard the hairpin rule is reported',
    );
    const plain = v4('10.9.0.1', { dnat: false });
    const redirected = v4('10.9.0.1', { dnat: true });
    const holds = (text: string, flow: NatFlow) => ruleHolds(readRule(`${text} masquerade`), flow);
    t.equal(holds('ct status dnat', plain), false);
    t.equal(holds('ct status dnat', redirected), true);
    t.equal(holds('ct status ! dnat', plain), true);
    t.equal(holds('ct status ! dnat', redirected), false);
    t.equal(holds('ct status & dnat == dnat', plain), false);
    t.equal(holds('ct status & dnat == dnat', redirected), true);
    t.equal(holds('ct status snat,dnat', plain), undefined, 'snat is not known');
    t.equal(holds('ct status snat,dnat', redirected), true);
    t.equal(holds('ct status ! snat,dnat', redirected), false);
    t.equal(holds('ct status & snat,dnat == snat,dnat', plain), false);
    t.equal(holds('ct status snat', plain), undefined);
    t.equal(
      holds('ct status != dnat', plain),
      undefined,
      'an operator nft reads otherwise: not judged',
    );
    t.equal(holds('ct status == dnat', plain), undefined);
    t.equal(holds('ct status & dnat == 0', plain), undefined);
    t.equal(holds('ct status dnat', v4('10.9.0.1', { dnat: undefined })), undefined);
  },
);

t.test(
  'the rule’s own matches judge one flow: translates, may translate, or not at all',
  async (t) => {
    const flannel = parseListing(`table ip flannel {
	chain postrtg { # handle 1
		type nat hook postrouting priority srcnat + 10; policy accept;
		ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return # handle 2
		ip saddr 10.244.0.0/16 ip daddr != 10.244.0.0/16 masquerade # handle 3
	}
}`);
    const from = { saddr: addr('10.244.1.5') };
    t.equal(verdictFor(flannel, 'postrtg', v4('10.9.0.1', from))?.verdict, 'translates');
    t.equal(verdictFor(flannel, 'postrtg', v4('10.244.7.7', from)), undefined, 'returned first');
    t.equal(
      verdictFor(flannel, 'postrtg', v4('10.9.0.1', { saddr: addr('192.168.0.1') })),
      undefined,
      'a source the rule does not take',
    );
    t.equal(
      verdictFor(flannel, 'postrtg', v4('10.9.0.1'))?.verdict,
      'may translate',
      'no --from: the source match cannot be judged',
    );
    const sets = parseListing(`table inet mesh {
	chain post { # handle 1
		ip saddr @pods ip daddr != { 10.0.0.0/8, 192.168.0.0/16 } oifname "eth*" meta l4proto { tcp, udp } masquerade # handle 2
	}
}`);
    t.equal(verdictFor(sets, 'post', v4('10.1.2.3'))?.verdict, undefined, 'destination listed');
    t.equal(
      verdictFor(sets, 'post', v4('198.51.100.1', { oifname: 'eth0', protocol: 17 }))?.verdict,
      'may translate',
      'a named set: cannot tell',
    );
    t.equal(
      verdictFor(sets, 'post', v4('198.51.100.1', { oifname: 'wg0' })),
      undefined,
      'an interface the wildcard does not take',
    );
    t.equal(
      verdictFor(sets, 'post', v4('198.51.100.1', { protocol: 1 })),
      undefined,
      'a protocol the set does not hold',
    );
    t.equal(
      verdictFor(sets, 'post', { family: 6, daddr: addr('2001:db8::1'), mark: 0 }),
      undefined,
      'an IPv6 flow in an inet chain is not matched by ip saddr',
    );
  },
);

t.test('iptables-nft rules printed by a newer nft as xt expressions', async (t) => {
  const rule = readRule('xt match "comment" ip saddr 10.244.0.0/16 counter xt target "MASQUERADE"');
  t.ok(rule.translates, 'an x_tables MASQUERADE translates');
  t.equal(ruleHolds(rule, v4('10.9.0.1', { saddr: addr('10.244.0.9') })), true, 'comment ignored');
  const marked = readRule('xt match "mark" counter xt target "SNAT"');
  t.equal(ruleHolds(marked, v4('10.9.0.1')), undefined, 'an x_tables match cannot be judged');
});

t.test(
  'a rule the kernel shows translating is read so even when its text is not understood',
  async (t) => {
    const chains = new Map([
      ['p', [{ chain: 'p', handle: 4, text: 'some-future-statement 1', translates: true }]],
    ]);
    const [reached] = unmarkedTranslations(chains, 'p');
    t.equal(reached?.handle, 4);
    t.equal(verdictFor(chains, 'p', v4('10.0.0.1'))?.verdict, 'may translate');
  },
);

t.test('marks: a match that takes unmarked packets is no guard', async (t) => {
  const chains = parseListing(`table ip x {
	chain p { # handle 1
		meta mark != 0x00000001 masquerade # handle 2
		ct mark 0x00000002 masquerade # handle 3
	}
}`);
  t.same(
    unmarkedTranslations(chains, 'p').map((rule) => rule.handle),
    [2],
  );
});

// nft 1.0.6's print of the red team's shapes (issue 51, item 2): verdict maps, anonymous and named,
// marks set in the same chain, a comment holding a newline.
const SHAPES = `table ip vm {
	chain post { # handle 2
		type nat hook postrouting priority srcnat + 10; policy accept;
		ip daddr vmap { 10.9.0.0/16 : jump masqit, 192.0.2.0/24 : accept } # handle 7
	}
}
table ip vm {
	chain named { # handle 4
		type nat hook postrouting priority srcnat + 10; policy accept;
		ip daddr vmap @m # handle 8
	}
}
table ip vm {
	chain iface { # handle 6
		type nat hook postrouting priority srcnat + 10; policy accept;
		oifname vmap { "veth0" : goto masqit } # handle 10
	}
}
table ip vm {
	chain post2 { # handle 3
		type nat hook postrouting priority 120; policy accept;
		meta mark set 0x00004000 # handle 11
		ct mark set 0x00000007 counter # handle 12
		meta mark 0x00004000 masquerade # handle 13
		ct mark 0x00000007 masquerade # handle 14
	}
}
table ip vm {
	chain masqit { # handle 1
		masquerade # handle 5
	}
}
`;

t.test('a verdict map leads where its elements say, never for certain', async (t) => {
  const chains = parseListing(SHAPES);
  t.same(readRule(chains.get('post')![0]!.text).branches, ['masqit'], 'an anonymous map’s text');
  t.same(
    unmarkedTranslations(chains, 'post').map((rule) => `${rule.chain}/${rule.handle}`),
    ['masqit/5'],
    'anonymous map: jump followed',
  );
  t.same(
    unmarkedTranslations(chains, 'iface').map((rule) => `${rule.chain}/${rule.handle}`),
    ['masqit/5'],
    'goto followed, whatever the key',
  );
  t.same(unmarkedTranslations(chains, 'named'), [], 'a named map’s text names no chain');
  const named = new Map(chains);
  named.set('named', [{ ...chains.get('named')![0]!, branches: ['masqit'] }]);
  t.same(
    unmarkedTranslations(named, 'named').map((rule) => `${rule.chain}/${rule.handle}`),
    ['masqit/5'],
    'a named map: where the kernel’s elements lead',
  );
  t.equal(
    verdictFor(chains, 'post', v4('10.9.0.1'))?.verdict,
    'may translate',
    'the key is the map’s: not judged',
  );
  t.equal(
    verdictFor(chains, 'post', { family: 6, daddr: addr('2001:db8::1'), mark: 0 }),
    undefined,
    'an ip daddr key takes no IPv6 flow',
  );
});

t.test('a mark set on the way is what the rules after it see', async (t) => {
  const chains = parseListing(SHAPES);
  const post2 = chains.get('post2')!;
  t.same(readRule(post2[0]!.text).sets, [{ field: 'mark', value: 0x4000 }]);
  t.same(readRule(post2[1]!.text).sets, [{ field: 'ctMark', value: 7 }]);
  t.same(
    unmarkedTranslations(chains, 'post2').map((rule) => rule.handle),
    [13],
    'the packet mark set first: the masquerade matching it translates every flow',
  );
  t.equal(verdictFor(chains, 'post2', v4('10.9.0.1'))?.verdict, 'translates');
  const ctOnly = new Map([['p', post2.filter((rule) => rule.handle !== 11 && rule.handle !== 13)]]);
  t.same(
    unmarkedTranslations(ctOnly, 'p').map((rule) => rule.handle),
    [14],
    'the conntrack mark likewise (the packet mark untouched by it)',
  );
  const maybe = parseListing(`table ip x {
	chain p { # handle 1
		ip daddr 10.9.0.0/16 meta mark set 0x00004000 # handle 2
		meta mark 0x00004000 masquerade # handle 3
		meta mark set meta mark | 0x00000010 # handle 4
		meta mark 0x00000010 masquerade # handle 5
	}
}`);
  t.equal(
    verdictFor(maybe, 'p', v4('10.9.0.1'))?.rule.handle,
    3,
    'set where the flow surely passes: the next rule translates it',
  );
  t.equal(verdictFor(maybe, 'p', v4('10.9.0.1'))?.verdict, 'translates');
  t.same(
    unmarkedTranslations(maybe, 'p').map((rule) => rule.handle),
    [3, 5],
    'set where it may pass, or to a value not known: what follows may translate',
  );
  t.equal(verdictFor(maybe, 'p', v4('192.0.2.1'))?.rule.handle, 5, 'another destination: rule 5');
  const chained = readRule('meta mark set 0x00000001 ct mark set meta mark counter');
  t.same(chained.sets, [{ field: 'mark', value: 1 }, { field: 'ctMark' }], 'two sets in a rule');
  t.same(unmarkedTranslations(parseListing(KUBE_PROXY_NFT), 'nat-postrouting'), [], 'kube-proxy');
});

t.test('an address rewritten on the way is not known to the rules after it', async (t) => {
  const chains = parseListing(`table ip x {
	chain p { # handle 1
		ip daddr set 203.0.113.1 # handle 2
		ip daddr 203.0.113.1 masquerade # handle 3
	}
}`);
  t.equal(verdictFor(chains, 'p', v4('10.9.0.1'))?.verdict, 'may translate');
});

t.test('a comment holding a newline is read with its rule', async (t) => {
  const listing = `table ip vm {
	chain post2 { # handle 3
		type nat hook postrouting priority 120; policy accept;
		ip daddr 10.9.0.0/16 masquerade comment "a
meta mark 0x1" # handle 15
		ip daddr 10.8.0.0/16 masquerade # handle 16
	}
}
`;
  const rules = parseListing(listing).get('post2')!;
  t.same(
    rules.map((rule) => rule.handle),
    [15, 16],
  );
  t.equal(rules[0]!.text, 'ip daddr 10.9.0.0/16 masquerade comment "a\nmeta mark 0x1"');
  t.equal(verdictFor(parseListing(listing), 'post2', v4('10.9.0.1'))?.verdict, 'translates');
  // A quote inside a string (written over netlink) runs lines together past another rule's handle:
  // neither text is taken (the kernel's expressions judge them).
  const quoted = parseListing(`table ip vm {
	chain p { # handle 3
		masquerade comment "a"b" # handle 4
		ip daddr 10.9.0.0/16 return # handle 5
		masquerade comment "c"d" # handle 6
		ip daddr 10.7.0.0/16 return # handle 7
	}
}
`);
  t.same(
    quoted.get('p')!.map((rule) => rule.handle),
    [7],
  );
});
