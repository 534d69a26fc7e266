import t from 'tap';
import {
  CidrError,
  familyOf,
  type Prefix,
  formatAddress,
  formatPrefix,
  ipv4Number,
  mergePrefixes,
  parseAddress,
  parseCidr,
  prefixRange,
  rangeToPrefixes,
} from '../../../src/cidr/index.js';

const formatAll = (prefixes: readonly Prefix[]) => prefixes.map(formatPrefix);
const merge = (texts: string[]) => formatAll(mergePrefixes(texts.map(parseCidr)));

t.test('parseCidr accepts canonical and standard spellings', async (t) => {
  const cases: [string, string][] = [
    ['10.0.0.0/8', '10.0.0.0/8'],
    ['0.0.0.0/0', '0.0.0.0/0'],
    ['255.255.255.255/32', '255.255.255.255/32'],
    ['192.168.1.0/24', '192.168.1.0/24'],
    ['::/0', '::/0'],
    ['::/128', '::/128'],
    ['::1/128', '::1/128'],
    ['FD00:10:244:0:0:0:0:0/64', 'fd00:10:244::/64'],
    ['fd00:0010:0244::/64', 'fd00:10:244::/64'],
    ['fe80::/10', 'fe80::/10'],
    ['fc00::/7', 'fc00::/7'],
    ['2001:db8:0:0:1:0:0:1/128', '2001:db8::1:0:0:1/128'], // first of two equal zero runs
    ['2001:db8:0:0:1:0:0:0/128', '2001:db8:0:0:1::/128'], // the longest run
    ['2001:db8:0:1:0:0:0:0/128', '2001:db8:0:1::/128'], // the longer run wins
    ['2001:db8:0:1:2:3:4:5/128', '2001:db8:0:1:2:3:4:5/128'], // a single zero group stays
    ['1:2:3:4:5:6:7::/128', '1:2:3:4:5:6:7:0/128'],
    ['::ffff:1.2.3.4/128', '::ffff:1.2.3.4/128'],
    ['::ffff:0:0/96', '::ffff:0.0.0.0/96'],
    ['1:2:3:4:5:6:1.2.3.4/128', '1:2:3:4:5:6:102:304/128'],
  ];
  for (const [input, canonical] of cases) {
    t.equal(formatPrefix(parseCidr(input)), canonical, input);
  }
  // Field by field: an IPv4 prefix parsed from text keeps its address as a number until asked.
  const fields = ({ family, addr, len }: Prefix) => ({ family, addr, len });
  t.same(fields(parseCidr('10.0.0.0/8')), { family: 4, addr: 0x0a000000n, len: 8 });
  t.same(fields(parseCidr('fd00::/8')), { family: 6, addr: 0xfdn << 120n, len: 8 });
  t.equal(ipv4Number(parseCidr('10.0.0.0/8')), 0x0a000000);
  t.equal(ipv4Number({ family: 4, addr: 0x0a000000n, len: 8 }), 0x0a000000, 'a plain Prefix too');
});

t.test('parseCidr rejects everything that is not strictly a CIDR', async (t) => {
  const bad: [string, RegExp][] = [
    ['010.0.0.0/8', /leading zero/],
    ['10.0.0.0/33', /above the maximum of 32/],
    ['::/129', /above the maximum of 128/],
    ['10.0.0.0/08', /leading zero/],
    ['1.2.3/24', /expected 4 octets, got 3/],
    ['1.2.3.4.5/32', /expected 4 octets/],
    ['10.256.0.0/16', /above 255/],
    [' 10.0.0.0/8', /whitespace/],
    ['10.0.0.0/8 ', /whitespace/],
    ['10.0.0.0 /8', /whitespace/],
    ['10.0. 0.0/8', /whitespace/],
    ['fe80::1%eth0/64', /zone id/],
    ['10.0.0.0', /missing "\/length"/],
    ['abcdefg', /missing "\/length"/],
    ['', /missing/],
    ['/8', /not a CIDR/],
    ['10.0.0.0/', /empty prefix length/],
    ['10.0.0.0/-1', /invalid prefix length/],
    ['10.0.0.0/+8', /invalid prefix length/],
    ['10.0.0.0/8/8', /invalid prefix length/],
    ['1.2.3.4e/32', /not a CIDR/],
    ['00000::/8', /invalid group "00000"/],
    ['1::2::/64', /more than once/],
    ['1:2:3:4:5:6:7:8::/128', /too many groups/],
    ['1:2:3:4:5:6:7/112', /expected 8 groups/],
    [':1::/64', /empty group/],
    ['1:::2/64', /empty group/],
    ['g::/16', /invalid group/],
    ['::ffff:1.2.3/128', /embedded IPv4/],
    ['::1.2.3.4:5/128', /invalid group/],
    ['10.0.0.0/8\n', /whitespace/],
  ];
  for (const [input, reason] of bad) {
    t.throws(() => parseCidr(input), reason, JSON.stringify(input));
    try {
      parseCidr(input);
    } catch (err) {
      t.ok(err instanceof CidrError, `${JSON.stringify(input)} throws CidrError`);
      t.ok((err as Error).message.startsWith(JSON.stringify(input)), 'message quotes the input');
    }
  }
});

t.test('host bits set: message and suggestion name the network', async (t) => {
  const err = t.throws(() => parseCidr('10.0.0.1/8')) as CidrError;
  t.equal(err.message, '"10.0.0.1/8" is not aligned to its prefix (did you mean 10.0.0.0/8?)');
  t.equal(err.suggestion, '10.0.0.0/8');
  const v6 = t.throws(() => parseCidr('fd00::1/64')) as CidrError;
  t.equal(v6.suggestion, 'fd00::/64');
  const spaced = t.throws(() => parseCidr(' 10.0.0.0/8')) as CidrError;
  t.equal(spaced.suggestion, '10.0.0.0/8');
  const noSuggestion = t.throws(() => parseCidr('010.0.0.0/8')) as CidrError;
  t.equal(noSuggestion.suggestion, undefined, 'no guess where the intent is ambiguous');
});

t.test('addresses', async (t) => {
  t.same(parseAddress('1.2.3.4'), { family: 4, addr: 0x01020304n });
  t.same(parseAddress('::1'), { family: 6, addr: 1n });
  t.throws(() => parseAddress('1.2.3.04'), CidrError);
  t.throws(() => parseAddress('fe80::1%lo'), CidrError);
  t.throws(() => parseAddress('10.0.0.0/8'), CidrError);
  t.equal(formatAddress(4, 0xffffffffn), '255.255.255.255');
  t.equal(formatAddress(6, 0n), '::');
  t.equal(formatAddress(6, (1n << 128n) - 1n), 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff');
  t.equal(formatAddress(6, 0x20010db8n << 96n), '2001:db8::');
});

t.test('prefixRange and rangeToPrefixes', async (t) => {
  t.same(prefixRange(parseCidr('10.0.0.0/8')), [0x0a000000n, 0x0affffffn]);
  t.same(prefixRange(parseCidr('0.0.0.0/0')), [0n, 0xffffffffn]);
  t.same(prefixRange(parseCidr('::/0')), [0n, (1n << 128n) - 1n]);
  const range = (family: 4 | 6, a: string, b: string) =>
    formatAll(rangeToPrefixes(family, parseAddress(a).addr, parseAddress(b).addr));
  t.same(range(4, '10.0.0.0', '10.0.0.255'), ['10.0.0.0/24']);
  t.same(range(4, '10.0.0.1', '10.0.0.6'), [
    '10.0.0.1/32',
    '10.0.0.2/31',
    '10.0.0.4/31',
    '10.0.0.6/32',
  ]);
  t.same(range(4, '0.0.0.0', '255.255.255.255'), ['0.0.0.0/0']);
  t.same(range(4, '0.0.0.1', '255.255.255.255').length, 32);
  t.same(range(6, '::', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'), ['::/0']);
  t.same(range(6, '::1', '::2'), ['::1/128', '::2/128']);
  t.same(range(6, 'fd00::', 'fd00::ffff'), ['fd00::/112']);
  t.throws(() => rangeToPrefixes(4, 5n, 4n), CidrError);
  t.throws(() => rangeToPrefixes(4, 0n, 1n << 32n), CidrError);
});

t.test('mergePrefixes', async (t) => {
  t.same(merge([]), []);
  t.same(merge(['10.0.0.0/8', '10.0.0.0/8']), ['10.0.0.0/8'], 'duplicates');
  t.same(merge(['10.1.0.0/16', '10.0.0.0/8']), ['10.0.0.0/8'], 'contained');
  t.same(merge(['10.0.0.0/9', '10.128.0.0/9']), ['10.0.0.0/8'], 'siblings');
  t.same(merge(['10.0.0.0/8', '11.0.0.0/8']), ['10.0.0.0/7'], 'adjacent siblings');
  t.same(
    merge(['11.0.0.0/8', '12.0.0.0/8']),
    ['11.0.0.0/8', '12.0.0.0/8'],
    'adjacent, not siblings',
  );
  t.same(merge(['192.168.0.0/16', '10.0.0.0/8', '172.16.0.0/12']), [
    '10.0.0.0/8',
    '172.16.0.0/12',
    '192.168.0.0/16',
  ]);
  t.same(merge(['0.0.0.0/1', '128.0.0.0/1']), ['0.0.0.0/0']);
  t.same(merge(['255.255.255.255/32', '255.255.255.254/32']), ['255.255.255.254/31']);
  t.same(merge(['fd00::/9', 'fd80::/9', 'fe80::/10']), ['fd00::/8', 'fe80::/10']);
  t.same(merge(['::/1', '8000::/1']), ['::/0']);
  t.throws(() => mergePrefixes([parseCidr('10.0.0.0/8'), parseCidr('fd00::/8')]), /mixed/);
});

t.test('100 000 prefixes merge quickly', async (t) => {
  const v4: Prefix[] = [];
  const v6: Prefix[] = [];
  for (let i = 0; i < 100_000; i++) {
    v4.push({ family: 4, addr: BigInt((i * 2654435761) % 2 ** 32) & ~0xffn, len: 24 });
    v6.push({ family: 6, addr: (0xfd00n << 112n) | (BigInt(i * 7919) << 64n), len: 64 });
  }
  let start = performance.now();
  const merged4 = mergePrefixes(v4);
  const ms4 = performance.now() - start;
  start = performance.now();
  const merged6 = mergePrefixes(v6);
  const ms6 = performance.now() - start;
  t.ok(merged4.length > 0 && merged4.length <= 100_000);
  t.equal(merged6.length, 100_000, 'distinct non-adjacent /64s stay apart');
  // Generous bounds so a loaded CI machine passes; they catch an accidental quadratic algorithm.
  t.ok(ms4 < 2000, `IPv4 merge took ${ms4.toFixed(0)} ms`);
  t.ok(ms6 < 4000, `IPv6 merge took ${ms6.toFixed(0)} ms`);
});

t.test('one record per IP family, found from any of its three spellings', async (t) => {
  for (const [number, name, table] of [
    [4, 'ipv4', 'ip'],
    [6, 'ipv6', 'ip6'],
  ] as const) {
    for (const spelling of [number, name, table]) {
      t.same(familyOf(spelling), { number, name, table }, String(spelling));
      t.equal(familyOf(spelling), familyOf(number), `${spelling}: the same record`);
    }
  }
});
