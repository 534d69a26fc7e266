// --explain and --diff along the egress policy (docs/egress-policy.md, "Egress policy"): the
// decision order of the README against a reference written from its six steps, for random configs,
// sources, interfaces and destinations of both families; and what --diff says of a changed policy.
import fc from 'fast-check';
import t from 'tap';
import { inRanges, parseAddress, parseCidr, prefixRange } from '../../src/cidr/index.js';
import { parseConfigText, type Config } from '../../src/config/index.js';
import { diffConfigs, diffText } from '../../src/diff.js';
import { explain, explanationText } from '../../src/explain.js';
import { flowPolicy, samePolicy } from '../../src/reconcile/conntrack.js';
import { compileOptions } from '../helpers/compile-options.js';

const options = compileOptions({ enableIPv6: true });

function load(text: string): Config {
  const result = parseConfigText(text, 'cfg', {
    enableIPv6: true,
    nomasqAllReservedRanges: false,
    provenance: true,
  });
  if (!result.ok) throw result.error;
  return result.config;
}

const NON_MASQ = ['10.0.0.0/8', '192.168.0.0/16', 'fd00::/8'];
const MASQ = ['10.9.0.0/16', 'fd00:9::/32'];
const SOURCES = ['10.244.0.0/16', '10.250.0.0/16', 'fd00:10:244::/48'];
const INTERFACES = ['eth0', 'eth1', 'ens*', 'bond0'];
const DESTINATIONS = [
  '10.9.0.1',
  '10.1.2.3',
  '192.168.4.4',
  '198.19.0.4',
  'fd00:9::1',
  'fd00::5',
  'fd34::1',
];
const FROM = ['10.244.1.2', '10.250.1.2', '172.20.0.1', 'fd00:10:244::2', 'fd00:250::2'];
const VIA = ['eth0', 'eth1', 'ens3', 'ens', 'wlan0', 'bond0'];

const within = (cidrs: readonly string[], address: string) => {
  const { family, addr } = parseAddress(address);
  return cidrs
    .map(parseCidr)
    .filter((p) => p.family === family)
    .some((p) => inRanges([prefixRange(p)], addr));
};

/** The README's six steps, written out plainly: true when the flow is translated. */
function reference(
  c: { sources: string[]; interfaces: string[]; snat: boolean },
  from: string,
  via: string,
  to: string,
): boolean {
  const listed = (name: string) =>
    c.interfaces.some((i) => (i.endsWith('*') ? name.startsWith(i.slice(0, -1)) : name === i));
  if (c.interfaces.length > 0 && !listed(via)) return false; // 1
  if (c.sources.length > 0 && !within(c.sources, from)) return false; // 2
  // 3: no destination here is local to a node.
  if (within(MASQ, to)) return true; // 4
  if (within([...NON_MASQ, '169.254.0.0/16', 'fe80::/10'], to)) return false; // 5
  return true; // 6
}

t.test('explain follows the decision order, for random policies and flows', async (t) => {
  await fc.assert(
    fc.property(
      fc.record({
        sources: fc.subarray(SOURCES),
        interfaces: fc.subarray(INTERFACES),
        snat: fc.boolean(),
      }),
      fc.constantFrom(...FROM),
      fc.constantFrom(...VIA),
      fc.constantFrom(...DESTINATIONS),
      (c, from, via, to) => {
        const sameFamily = from.includes(':') === to.includes(':');
        fc.pre(sameFamily);
        const config = load(
          `nonMasqueradeCIDRs: [${NON_MASQ.map((x) => `"${x}"`).join(', ')}]\n` +
            `masqueradeCIDRs: [${MASQ.map((x) => `"${x}"`).join(', ')}]\n` +
            `sourceCIDRs: [${c.sources.map((x) => `"${x}"`).join(', ')}]\n` +
            `egressInterfaces: [${c.interfaces.map((x) => `"${x}"`).join(', ')}]\n` +
            (c.snat ? 'snatAddress: 192.0.2.10\nsnatAddressIPv6: "2001:db8::10"\n' : ''),
        );
        const e = explain(config, options, to, { from, via });
        const translated = reference(c, from, via, to);
        if (e.masqueraded !== translated) return false;
        // Translated to the SNAT address exactly when there is one.
        return !translated || (e.policy?.snat !== undefined) === c.snat;
      },
    ),
    { numRuns: 500 },
  );
  t.pass('500 random cases');
});

t.test('the text names the step that decides, and what was not judged', async (t) => {
  const config = load(
    'nonMasqueradeCIDRs: [10.0.0.0/8]\nsourceCIDRs: [10.244.0.0/16]\negressInterfaces: [eth1, "ens*"]\nsnatAddress: 192.0.2.10\n',
  );
  t.equal(
    explanationText(explain(config, options, '198.19.0.4', { via: 'eth0' })).split('\n')[0],
    '198.19.0.4: not touched: it leaves through eth0, which egressInterfaces (ens*, eth1) does not list',
  );
  t.equal(
    explanationText(
      explain(config, options, '198.19.0.4', { via: 'ens5', from: '10.9.9.9' }),
    ).split('\n')[0],
    '198.19.0.4: not touched: its source 10.9.9.9 is not in sourceCIDRs (10.244.0.0/16)',
  );
  const judged = explanationText(
    explain(config, options, '198.19.0.4', { via: 'ens5', from: '10.244.3.3' }),
  );
  t.match(judged, /leaves through ens5: listed, because of cfg egressInterfaces\[1\] "ens\*"/);
  t.match(
    judged,
    /from 10\.244\.3\.3: in sourceCIDRs, because of cfg sourceCIDRs\[0\] "10\.244\.0\.0\/16"/,
  );
  const text = explanationText(explain(config, options, '198.19.0.4'));
  t.match(text, /only traffic leaving through ens\*, eth1 is considered \(give --via/);
  t.match(text, /only traffic from 10\.244\.0\.0\/16 is considered \(give --from/);
  t.match(text, /translated to 192\.0\.2\.10 \(snatAddress\)/);
  t.notMatch(
    explanationText(explain(load('nonMasqueradeCIDRs: [10.0.0.0/8]\n'), options, '198.19.0.4')),
    /considered|translated/,
    'nothing of the policy without its keys',
  );
});

t.test('--diff reports a changed policy even where no destination flips', async (t) => {
  const now = load('nonMasqueradeCIDRs: [10.0.0.0/8]\n');
  const proposed = load(
    'nonMasqueradeCIDRs: [10.0.0.0/8]\nsnatAddress: 192.0.2.10-192.0.2.11\nsourceCIDRs: [10.244.0.0/16]\n',
  );
  const diff = diffConfigs(now, proposed, options);
  t.same(diff.changes, [], 'no destination flips');
  t.same(diff.policy, [
    { key: 'sourceCIDRs', current: [], proposed: ['10.244.0.0/16'] },
    { key: 'snatAddress', current: [], proposed: ['192.0.2.10-192.0.2.11'] },
  ]);
  t.match(
    diffText(diff),
    /^egress policy sourceCIDRs: \(not given: every source\) → 10\.244\.0\.0\/16$/m,
  );
  t.same(diffConfigs(proposed, proposed, options).policy, [], 'the same policy: no change');
});

t.test(
  "what the conntrack flush judges each entry by: each config's policy, per family",
  async (t) => {
    const base = 'nonMasqueradeCIDRs: [10.0.0.0/8]\n';
    const policy = (text: string, family: 'ipv4' | 'ipv6' = 'ipv4') =>
      flowPolicy(load(base + text), family, options);
    t.same(policy(''), { sources: null, interfaces: null, snat: null }, 'no policy: every flow');
    t.same(
      policy('sourceCIDRs: [10.244.0.0/16, 10.245.0.0/16]\negressInterfaces: [eth1, "ens*"]\n'),
      {
        sources: [[BigInt(0x0af40000), BigInt(0x0af5ffff)]],
        interfaces: ['ens*', 'eth1'],
        snat: null,
      },
      'sources merged as ranges, interfaces as the config holds them',
    );
    t.same(
      policy('sourceCIDRs: [10.244.0.0/16]\n', 'ipv6').sources,
      [],
      'sourceCIDRs given, none of the family: no sender of it is considered',
    );
    t.same(policy('snatAddress: 192.0.2.10-192.0.2.11\n').snat, [
      BigInt(0xc000020a),
      BigInt(0xc000020b),
    ]);
    const same = (a: string, b: string) => samePolicy(policy(a), policy(b));
    t.ok(same('', ''), 'no policy either side');
    t.ok(
      same('snatAddress: 192.0.2.1\n', 'snatAddress: 192.0.2.1-192.0.2.1\n'),
      'one address, spelled twice',
    );
    t.ok(same('sourceCIDRs: [10.244.0.0/17, 10.244.128.0/17]\n', 'sourceCIDRs: [10.244.0.0/16]\n'));
    t.notOk(same('', 'snatAddress: 192.0.2.1\n'), 'a snatAddress appearing');
    t.notOk(same('sourceCIDRs: [10.244.0.0/16]\n', 'sourceCIDRs: [10.244.0.0/17]\n'));
    t.notOk(same('', 'sourceCIDRs: []\negressInterfaces: [eth0]\n'), 'an interface list appearing');
    t.notOk(same('egressInterfaces: [eth0]\n', 'egressInterfaces: [eth1]\n'));
  },
);
