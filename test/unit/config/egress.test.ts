// The egress policy keys (docs/egress-policy.md, "Egress policy"): parsed, validated with file,
// key, index and value in every error, merged across a directory, scoped to nodes; a config without
// them is unchanged.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { egressOf } from '../../../src/config/build.js';
import fc from 'fast-check';
import t, { type Test } from 'tap';
import { type LoadOptions, loadConfig, parseConfigText } from '../../../src/config/index.js';
import { error, ok } from '../../helpers/results.js';

const V4: LoadOptions = { enableIPv6: false, nomasqAllReservedRanges: false };
const V6: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };
const parse = (text: string, options: LoadOptions = V6) => parseConfigText(text, 'cfg', options);

async function directory(t: Test, files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'ipmasq-egress-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  return dir;
}

t.test('each key, case-insensitive, in the agent spelling', async (t) => {
  const config = ok(
    t,
    parse(
      'SourceCIDRs: [10.244.0.0/16, "FD00:10:244:0::/48", 10.245.0.0/16]\n' +
        'EGRESSINTERFACES: [eth1, "ens*", eth1]\n' +
        'snataddress: 192.0.2.10 \n' +
        'snatAddressIPv6: "2001:DB8::10-2001:db8:0::1f"\n',
    ),
  );
  t.same(egressOf(config.keys), {
    sourceCIDRs: { ipv4: ['10.244.0.0/15'], ipv6: ['fd00:10:244::/48'] },
    egressInterfaces: ['ens*', 'eth1'],
    snat: {
      ipv4: { first: '192.0.2.10', last: '192.0.2.10' },
      ipv6: { first: '2001:db8::10', last: '2001:db8::1f' },
    },
  });
});

t.test('SNAT targets at the edges of what is refused are taken', async (t) => {
  const edges: Array<[string, string, string]> = [
    ['snatAddress: 10.0.0.0-10.0.255.255', '10.0.0.0', '10.0.255.255'],
    ['snatAddress: 1.0.0.0', '1.0.0.0', '1.0.0.0'],
    ['snatAddress: 126.255.255.255', '126.255.255.255', '126.255.255.255'],
    ['snatAddress: 128.0.0.0', '128.0.0.0', '128.0.0.0'],
    ['snatAddress: 223.255.255.255', '223.255.255.255', '223.255.255.255'],
    ['snatAddress: 169.253.255.255-169.253.255.255', '169.253.255.255', '169.253.255.255'],
    ['snatAddressIPv6: "::2"', '::2', '::2'],
    ['snatAddressIPv6: "2001:db8::-2001:db8::ffff"', '2001:db8::', '2001:db8::ffff'],
    ['snatAddressIPv6: "fec0::1"', 'fec0::1', 'fec0::1'],
    ['snatAddressIPv6: "feff:ffff::1"', 'feff:ffff::1', 'feff:ffff::1'],
  ];
  for (const [text, first, last] of edges) {
    const snat = egressOf(ok(t, parse(text)).keys)?.snat;
    t.same(snat?.ipv4 ?? snat?.ipv6, { first, last }, text);
  }
});

t.test('a config without the keys is the original: no policy, the same hash', async (t) => {
  const plain = ok(t, parse('nonMasqueradeCIDRs: [10.0.0.0/8]\n'));
  const empty = ok(
    t,
    parse('nonMasqueradeCIDRs: [10.0.0.0/8]\nsourceCIDRs: []\negressInterfaces:\nsnatAddress:\n'),
  );
  t.equal(egressOf(plain.keys), undefined);
  t.equal(egressOf(empty.keys), undefined, 'empty lists and null are as absent');
  t.equal(empty.hash, plain.hash);
  const withPolicy = ok(t, parse('nonMasqueradeCIDRs: [10.0.0.0/8]\nsnatAddress: 192.0.2.1\n'));
  t.not(withPolicy.hash, plain.hash, 'a policy changes the hash');
  const otherAddress = ok(t, parse('nonMasqueradeCIDRs: [10.0.0.0/8]\nsnatAddress: 192.0.2.2\n'));
  t.not(otherAddress.hash, withPolicy.hash, 'and so does another address');
});

t.test('bad values: file, key, index and value named; nothing accepted', async (t) => {
  const cases: Array<[string, RegExp, LoadOptions?]> = [
    ['sourceCIDRs: 10.0.0.0/8', /^cfg: sourceCIDRs: expected a list of CIDR strings, got a string/],
    ['sourceCIDRs: [10.0.0.1/8]', /^cfg: sourceCIDRs\[0\]: "10.0.0.1\/8" is not aligned/],
    ['sourceCIDRs: ["fd00::/8"]', /^cfg: sourceCIDRs\[0\]: .* IPv6 is off/, V4],
    ['egressInterfaces: eth0', /^cfg: egressInterfaces: expected a list of interface names/],
    [
      'egressInterfaces: [eth0, 7]',
      /^cfg: egressInterfaces\[1\]: expected interface name, got number 7/,
    ],
    [
      'egressInterfaces: [abcdefghijklmnop]',
      /^cfg: egressInterfaces\[0\]: "abcdefghijklmnop" is not a valid interface name: 16 bytes, Linux takes at most 15$/,
    ],
    [
      'egressInterfaces: [eth0/1]',
      /^cfg: egressInterfaces\[0\]: "eth0\/1" is not a valid interface name: it holds "\/"/,
    ],
    [
      "egressInterfaces: ['et\"h0']",
      /^cfg: egressInterfaces\[0\]: "et\\"h0" is not a valid interface name/,
    ],
    [
      'egressInterfaces: ["eth\'0"]',
      /^cfg: egressInterfaces\[0\]: "eth'0" is not a valid interface name/,
    ],
    [
      'egressInterfaces: ["eth\\n0"]',
      /^cfg: egressInterfaces\[0\]: "eth\\n0" is not a valid interface name: it holds white space/,
    ],
    ['egressInterfaces: ["eth 0"]', /is not a valid interface name: it holds white space/],
    ['egressInterfaces: ["eth0:1"]', /is not a valid interface name: it holds ":"/],
    ['egressInterfaces: ["ëth0"]', /is not a valid interface name: it holds the character "ë"/],
    [
      'egressInterfaces: [".."]',
      /^cfg: egressInterfaces\[0\]: ".." is not a valid interface name$/,
    ],
    ['egressInterfaces: [""]', /^cfg: egressInterfaces\[0\]: an empty interface name$/],
    ['egressInterfaces: ["*"]', /"\*" alone matches every interface/],
    ['egressInterfaces: ["e*th"]', /"e\*th": "\*" is a wildcard only at the end/],
    [
      'snatAddress: [192.0.2.1]',
      /^cfg: snatAddress: expected an address or a range A-B, got a list$/,
    ],
    [
      'snatAddress: "2001:db8::1"',
      /^cfg: snatAddress: "2001:db8::1" is an IPv6 address; this key takes IPv4 \(use snatAddressIPv6/,
    ],
    [
      'snatAddressIPv6: 192.0.2.1',
      /^cfg: snatAddressIPv6: "192.0.2.1" is an IPv4 address; this key takes IPv6 \(use snatAddress/,
    ],
    ['snatAddressIPv6: "2001:db8::1"', /^cfg: snatAddressIPv6: .* IPv6 is off/, V4],
    ['snatAddress: 192.0.2.9-192.0.2.1', /the range ends before it starts/],
    ['snatAddress: 192.0.2.1-', /is not an address or a range of addresses/],
    ['snatAddress: 192.0.2.0/24', /^cfg: snatAddress: "192.0.2.0\/24"/],
    ['snatAddress: 192.0.2.1-2001:db8::1', /is an IPv6 address; this key takes IPv4/],
    // Targets no reply can come back to (issue 40, item 8), each with file, key and value.
    [
      'snatAddress: 0.0.0.0',
      /^cfg: snatAddress: "0.0.0.0" is unspecified \("this network"\) \(0.0.0.0\/8\)/,
    ],
    [
      'snatAddress: 255.255.255.255',
      /^cfg: snatAddress: "255.255.255.255" is reserved or broadcast/,
    ],
    ['snatAddress: 127.0.0.1', /^cfg: snatAddress: "127.0.0.1" is loopback \(127.0.0.0\/8\)/],
    ['snatAddress: 224.0.0.1', /^cfg: snatAddress: "224.0.0.1" is multicast/],
    ['snatAddress: 169.254.1.1', /^cfg: snatAddress: "169.254.1.1" is link-local/],
    [
      'snatAddress: 0.0.0.0-255.255.255.255',
      /^cfg: snatAddress: "0.0.0.0-255.255.255.255" spans 4294967296 addresses; a SNAT range takes at most 65536/,
    ],
    ['snatAddress: 126.255.255.250-127.0.0.3', /^cfg: snatAddress: ".*" holds loopback/],
    ['snatAddress: 10.0.0.0-10.1.0.0', /spans 65537 addresses/],
    ['snatAddressIPv6: "::"', /^cfg: snatAddressIPv6: "::" is unspecified \(::\/128\)/],
    ['snatAddressIPv6: "::1"', /^cfg: snatAddressIPv6: "::1" is loopback/],
    ['snatAddressIPv6: "fe80::1"', /^cfg: snatAddressIPv6: "fe80::1" is link-local \(fe80::\/10\)/],
    [
      'snatAddressIPv6: "::ffff:192.0.2.1"',
      /^cfg: snatAddressIPv6: "::ffff:192.0.2.1" is IPv4-mapped/,
    ],
    ['snatAddressIPv6: "ff02::1"', /is multicast \(ff00::\/8\)/],
    ['snatAddressIPv6: "::-::ff"', /holds unspecified/],
    ['nodeNames: node-a', /^cfg: nodeNames: expected a list of node names/],
    ['nodeNames: [Node_A]', /^cfg: nodeNames\[0\]: "Node_A" is not a node name/],
    [
      'nodeSelector: [a]',
      /^cfg: nodeSelector: expected a mapping of labels to values, got a list$/,
    ],
    ['nodeSelector: {"a b": x}', /^cfg: nodeSelector\["a b"\]: "a b" is not a label key/],
    [
      'nodeSelector: {gpu: 1}',
      /^cfg: nodeSelector\["gpu"\]: expected a string value, got number 1/,
    ],
    ['nodeSelector: {gpu: "a\\nb"}', /^cfg: nodeSelector\["gpu"\]: "a\\nb" is not a label value/],
    ['nonMasqueradeNodePodCIDRs: "yes"', /^cfg: nonMasqueradeNodePodCIDRs: expected true or false/],
  ];
  for (const [text, expected, options] of cases) {
    t.match(error(t, parse(text, options)), expected, text);
  }
});

t.test(
  'node scoping: nodeNames, nodeSelector and what the agent needs to judge them',
  async (t) => {
    const scoped = 'nodeNames: [gpu-1, gpu-2]\nsnatAddress: 192.0.2.10\n';
    t.same(
      egressOf(ok(t, parse(scoped, { ...V6, nodeName: 'gpu-2' })).keys)?.snat?.ipv4?.first,
      '192.0.2.10',
    );
    const elsewhere = ok(t, parse(scoped, { ...V6, nodeName: 'cpu-1' }));
    t.equal(egressOf(elsewhere.keys), undefined, 'skipped on another node');
    t.same(elsewhere.skipped, [{ file: 'cfg', reason: 'nodeNames: cpu-1 is not among them' }]);
    t.match(
      error(t, parse(scoped, V6)),
      /^cfg: nodeNames: .*node's name is not known: set --node-name or the NODE_NAME environment variable/,
    );
    const described = ok(t, parse(scoped, { ...V6, scoping: 'describe' }));
    t.equal(
      egressOf(described.keys),
      undefined,
      '--explain without a node: only unscoped files apply',
    );
    t.match(described.skipped?.[0]?.reason, /node's name is not known/);

    const selected = 'nodeSelector: {pool: gpu}\nsnatAddress: 192.0.2.10\n';
    t.match(
      error(t, parse(selected, { ...V6, nodeName: 'gpu-1' })),
      /^cfg: nodeSelector: .* start it with --kubernetes/,
    );
    const labelled = (pool: string) =>
      ok(t, parse(selected, { ...V6, scoping: 'describe', nodeLabels: new Map([['pool', pool]]) }));
    t.ok(egressOf(labelled('gpu').keys)?.snat, 'applies where the labels match');
    t.match(labelled('cpu').skipped?.[0]?.reason, /label pool is not "gpu"/);
    t.match(
      error(t, parse('nonMasqueradeNodePodCIDRs: true')),
      /^cfg: nonMasqueradeNodePodCIDRs: .* --kubernetes/,
    );
    t.ok(parse('nonMasqueradeNodePodCIDRs: false').ok, 'false asks for nothing');
  },
);

t.test('a directory: every file validated, the applying ones merged', async (t) => {
  const dir = await directory(t, {
    'ip-masq-base': 'nonMasqueradeCIDRs: [10.0.0.0/8]\nsourceCIDRs: [10.244.0.0/16]\n',
    'ip-masq-eth': 'egressInterfaces: [eth1]\nsourceCIDRs: [10.245.0.0/16]\n',
    'ip-masq-gpu': 'nodeNames: [gpu-1]\nsnatAddress: 192.0.2.10\negressInterfaces: ["ens*"]\n',
    'ip-masq-cpu': 'nodeNames: [cpu-1]\nsnatAddress: 192.0.2.99\n',
  });
  const gpu = ok(t, await loadConfig(dir, { ...V4, nodeName: 'gpu-1' }));
  t.same(egressOf(gpu.keys), {
    sourceCIDRs: { ipv4: ['10.244.0.0/15'], ipv6: [] },
    egressInterfaces: ['ens*', 'eth1'],
    snat: { ipv4: { first: '192.0.2.10', last: '192.0.2.10' } },
  });
  t.same(
    gpu.skipped?.map((s) => s.file),
    [join(dir, 'ip-masq-cpu')],
  );
  const other = ok(t, await loadConfig(dir, { ...V4, nodeName: 'other' }));
  t.equal(egressOf(other.keys)?.snat, undefined, 'neither scoped file applies');
  t.same(egressOf(other.keys)?.egressInterfaces, ['eth1']);

  // A bad file is caught on every node, whichever node it is for.
  await writeFile(join(dir, 'ip-masq-bad'), 'nodeNames: [gpu-9]\negressInterfaces: [eth0/1]\n');
  t.match(
    error(t, await loadConfig(dir, { ...V4, nodeName: 'gpu-1' })),
    /ip-masq-bad: egressInterfaces\[0\]: "eth0\/1"/,
  );
});

t.test('files that apply on a node must agree on snatAddress, naming both', async (t) => {
  const dir = await directory(t, {
    'ip-masq-a': 'snatAddress: 192.0.2.10\n',
    'ip-masq-b': 'snatAddress: 192.0.2.10-192.0.2.10\n',
    'ip-masq-c': 'nodeNames: [n1]\nsnatAddress: 198.51.100.1\n',
  });
  t.ok((await loadConfig(dir, { ...V4, nodeName: 'n2' })).ok, 'the same address, spelled twice');
  const message = error(t, await loadConfig(dir, { ...V4, nodeName: 'n1' }));
  t.match(
    message,
    /snatAddress: .*ip-masq-a says 192\.0\.2\.10 and .*ip-masq-c says 198\.51\.100\.1/,
  );
});

t.test('merging is independent of the order of files (property)', async (t) => {
  const pieces = [
    'sourceCIDRs: [10.244.0.0/16]\n',
    'sourceCIDRs: [10.244.128.0/17, 10.250.0.0/16]\n',
    'egressInterfaces: [eth1, "veth*"]\n',
    'egressInterfaces: [eth0]\nsnatAddress: 192.0.2.5\n',
    'nodeNames: [n1]\negressInterfaces: [bond0]\n',
    'nodeNames: [n2]\nsourceCIDRs: [10.9.0.0/16]\n',
  ];
  await fc.assert(
    fc.asyncProperty(
      fc.subarray(pieces, { minLength: 1 }),
      fc.constantFrom('n1', 'n2'),
      async (chosen, node) => {
        const forward = await directory(
          t,
          Object.fromEntries(chosen.map((p, i) => [`ip-masq-${i}`, p])),
        );
        const backward = await directory(
          t,
          Object.fromEntries(chosen.map((p, i) => [`ip-masq-${chosen.length - i}`, p])),
        );
        const a = ok(t, await loadConfig(forward, { ...V4, nodeName: node }));
        const b = ok(t, await loadConfig(backward, { ...V4, nodeName: node }));
        return (
          a.hash === b.hash && JSON.stringify(egressOf(a.keys)) === JSON.stringify(egressOf(b.keys))
        );
      },
    ),
    { numRuns: 40 },
  );
  t.pass('40 random sets of files, in both orders');
});

t.test(
  'interface lists that overlap collapse to what nft can hold, across files too',
  async (t) => {
    const cases: Array<[string, string[]]> = [
      ['[eth0, "eth*"]', ['eth*']],
      ['["e*", "eth*"]', ['e*']],
      ['["ens*", ens3]', ['ens*']],
      ['[eth, "eth*"]', ['eth*']],
      ['["eth1*", eth10, eth1, eth2]', ['eth1*', 'eth2']],
      ['[eth1, eth10]', ['eth1', 'eth10']],
    ];
    for (const [list, collapsed] of cases) {
      const config = ok(t, parse(`egressInterfaces: ${list}\n`));
      t.same(egressOf(config.keys)?.egressInterfaces, collapsed, list);
      const direct = ok(
        t,
        parse(`egressInterfaces: [${collapsed.map((n) => JSON.stringify(n)).join(', ')}]\n`),
      );
      t.equal(config.hash, direct.hash, `${list}: the same config as the collapsed list`);
    }
    const dir = await directory(t, {
      'ip-masq-a': 'egressInterfaces: [eth0]\n',
      'ip-masq-b': 'egressInterfaces: ["eth*", bond0]\n',
    });
    t.same(egressOf(ok(t, await loadConfig(dir, V4)).keys)?.egressInterfaces, ['bond0', 'eth*']);
  },
);

t.test('collapsing never changes which interfaces are listed (property)', async (t) => {
  // Names over a small alphabet, so that prefixes and wildcards meet often.
  const name = fc
    .tuple(fc.stringMatching(/^[ab]{1,3}$/), fc.boolean())
    .map(([stem, wildcard]) => (wildcard ? `${stem}*` : stem));
  const listed = (list: readonly string[], candidate: string) =>
    list.some((entry) =>
      entry.endsWith('*') ? candidate.startsWith(entry.slice(0, -1)) : candidate === entry,
    );
  await fc.assert(
    fc.property(fc.array(name, { minLength: 1, maxLength: 8 }), (names) => {
      const collapsed = egressOf(
        ok(t, parse(`egressInterfaces: [${names.map((n) => JSON.stringify(n)).join(', ')}]\n`))
          .keys,
      )?.egressInterfaces;
      if (!collapsed) return false;
      // What nft refuses: one entry's name or prefix starting with another's wildcard prefix.
      const overlaps = collapsed.some((a) =>
        collapsed.some((b) => a !== b && b.endsWith('*') && a.startsWith(b.slice(0, -1))),
      );
      const candidates = ['a', 'b', 'aa', 'ab', 'ba', 'bb', 'aab', 'abb', 'bab', 'abab', 'c'];
      return !overlaps && candidates.every((c) => listed(collapsed, c) === listed(names, c));
    }),
    { numRuns: 500 },
  );
  t.pass('500 random lists');
});
