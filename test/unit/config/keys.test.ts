// Key handling, type checks and the Go duration grammar of resyncInterval.
import t from 'tap';
import { type LoadOptions, parseConfigText } from '../../../src/config/index.js';
import { error, ok } from '../../helpers/results.js';
import { scalars } from '../../helpers/config.js';

const V4: LoadOptions = { enableIPv6: false, nomasqAllReservedRanges: false };
const FILE = 'cfg';
const parse = (text: string) => parseConfigText(text, FILE, V4);

t.test('keys match case-insensitively; unknown keys give one warning', async (t) => {
  const result = parse(
    'NonMasqueradeCidrs: [1.0.0.0/8]\nMASQLINKLOCAL: true\nsnatTarget: 1.2.3.4\nfoo: 1\nresyncinterval: 2s',
  );
  const config = ok(t, result);
  t.same(config.nonMasquerade.ipv4, ['1.0.0.0/8']);
  t.equal(scalars(config).masqLinkLocal, true);
  t.equal(scalars(config).resyncIntervalMs, 2000);
  t.same(result.warnings, ['cfg: unknown keys ignored: snatTarget, foo']);
  t.same(parse('masqLinkLocal: true').warnings, [], 'no warning without unknown keys');
  t.match(
    error(t, parse('masqLinkLocal: true\nMasqLinkLocal: false')),
    /^cfg: masqLinkLocal: given twice \(as "masqLinkLocal" and "MasqLinkLocal"\)$/,
  );
  t.match(
    error(t, parse('cidrLimit: 1\ncidrLimit: 2')),
    /^cfg: invalid YAML: Map keys must be unique/,
  );
});

t.test('YAML 1.1 booleans', async (t) => {
  for (const word of ['yes', 'Yes', 'on', 'ON', 'true', 'y']) {
    t.equal(scalars(ok(t, parse(`masqLinkLocal: ${word}`))).masqLinkLocal, true, word);
  }
  for (const word of ['no', 'off', 'false', 'n']) {
    t.equal(scalars(ok(t, parse(`masqLinkLocal: ${word}`))).masqLinkLocal, false, word);
  }
  t.match(
    error(t, parse('masqLinkLocal: "yes"')),
    /^cfg: masqLinkLocal: expected true or false, got a string \("yes"\)$/,
  );
  t.match(error(t, parse('{"masqLinkLocal": "true"}')), /masqLinkLocal: expected true or false/);
  t.match(
    error(t, parse('masqLinkLocalIPv6: [true]')),
    /^cfg: masqLinkLocalIPv6: expected true or false, got a list$/,
  );
  t.match(
    error(t, parse('masqLinkLocal: 1')),
    /masqLinkLocal: expected true or false, got number 1/,
  );
});

t.test('CIDR lists: types and null', async (t) => {
  t.match(
    error(t, parse('nonMasqueradeCIDRs: 10.0.0.0/8')),
    /^cfg: nonMasqueradeCIDRs: expected a list of CIDR strings, got a string \("10.0.0.0\/8"\) \(write a list: \[10.0.0.0\/8\]\)$/,
  );
  t.match(
    error(t, parse('masqueradeCIDRs: {a: 1}')),
    /^cfg: masqueradeCIDRs: expected a list of CIDR strings, got a mapping$/,
  );
  t.match(
    error(t, parse('nonMasqueradeCIDRs:\n  -\n')),
    /^cfg: nonMasqueradeCIDRs\[0\]: expected a CIDR string, got null$/,
  );
  t.match(
    error(t, parse('nonMasqueradeCIDRs:\n  - ""\n')),
    /^cfg: nonMasqueradeCIDRs\[0\]: "" is not a CIDR/,
  );
  t.match(
    error(t, parse('{"nonMasqueradeCIDRs": [null, "172.168.0.0/16"]}')),
    /nonMasqueradeCIDRs\[0\]: expected a CIDR string, got null/,
  );
  t.match(
    error(t, parse('nonMasqueradeCIDRs: [10]')),
    /nonMasqueradeCIDRs\[0\]: expected a CIDR string, got number 10/,
  );
  t.match(
    error(t, parse('nonMasqueradeCIDRs: [[10.0.0.0/8]]')),
    /nonMasqueradeCIDRs\[0\]: expected a CIDR string, got a list/,
  );
  const nulls = ok(t, parse('nonMasqueradeCIDRs:\nmasqueradeCIDRs: null'));
  t.same(
    nulls.nonMasquerade.ipv4,
    ['169.254.0.0/16'],
    'null nonMasqueradeCIDRs is an empty list, not the default',
  );
  t.same(nulls.masquerade.ipv4, []);
});

t.test('null scalars keep their defaults', async (t) => {
  const config = ok(
    t,
    parse('masqLinkLocal:\nmasqLinkLocalIPv6: ~\ncidrLimit: null\nresyncInterval:'),
  );
  t.match(scalars(config), {
    masqLinkLocal: false,
    masqLinkLocalIPv6: false,
    cidrLimit: 64,
    resyncIntervalMs: 60_000,
  });
  const json = ok(t, parse('{"cidrLimit": null, "resyncInterval": null}'));
  t.match(scalars(json), { cidrLimit: 64, resyncIntervalMs: 60_000 });
});

t.test('cidrLimit', async (t) => {
  t.equal(scalars(ok(t, parse('cidrLimit: 100'))).cidrLimit, 100);
  t.equal(scalars(ok(t, parse('cidrLimit: 0\nnonMasqueradeCIDRs: []'))).cidrLimit, 0);
  for (const bad of ['-1', '1.5', '"64"', '[64]', 'true']) {
    t.match(
      error(t, parse(`cidrLimit: ${bad}`)),
      /^cfg: cidrLimit: expected a whole number of 0 or more, got /,
      bad,
    );
  }
  const many = Array.from({ length: 65 }, (_, i) => `"10.${i}.0.0/16"`).join(', ');
  t.match(
    error(t, parse(`nonMasqueradeCIDRs: [${many}]`)),
    /cidrLimit: 64 is less than the 65 entries/,
  );
  ok(t, parse(`cidrLimit: 65\nnonMasqueradeCIDRs: [${many}]`));
  t.match(
    error(t, parse('cidrLimit: 3\nmasqueradeCIDRs: [1.0.0.0/8]')),
    /cidrLimit: 3 is less than the 4 entries/,
    'default entries and masqueradeCIDRs count too',
  );
});

t.test('resyncInterval: Go duration grammar', async (t) => {
  const good: [string, number][] = [
    ['1s', 1000],
    ['300ms', 1000], // raised
    ['1.5h', 5_400_000],
    ['2m30s', 150_000],
    ['1h2m3s4ms', 3_723_004],
    ['+5s', 5000],
    ['.5m', 30_000],
    ['1.s', 1000],
    ['1000000us', 1000],
    ['1500µs', 1000],
    ['2000000000ns', 2000],
    ['90m', 5_400_000],
  ];
  for (const [text, ms] of good)
    t.equal(scalars(ok(t, parse(`resyncInterval: "${text}"`))).resyncIntervalMs, ms, text);
  t.same(parse('resyncInterval: 300ms').warnings, [
    'cfg: resyncInterval: "300ms" is below 1s; using 1s',
  ]);
  t.same(parse('resyncInterval: 1000h').warnings, [
    'cfg: resyncInterval: "1000h" is above 596h; using 596h',
  ]);
  t.equal(scalars(ok(t, parse('resyncInterval: 1000h'))).resyncIntervalMs, 2 ** 31 - 1);
  const bad: [string, RegExp][] = [
    [
      '60',
      /expected a duration string, got number 60 \(write a duration with a unit, e\.g\. "60s"\)/,
    ],
    ['"60"', /"60" has no unit/],
    ['""', /"" is empty/],
    ['"0s"', /"0s" must be greater than 0/],
    ['"0"', /has no unit/],
    ['"-1s"', /"-1s" must be greater than 0/],
    ['"5 s"', /is not a Go duration/],
    ['"5S"', /is not a Go duration/],
    ['"5d"', /is not a Go duration/],
    ['"s"', /is not a Go duration/],
    ['"1..5s"', /is not a Go duration/],
    ['"."', /has no unit/],
    ['"99999999999h"', /too large/],
    ['1:30', /got number 90/], // YAML 1.1 sexagesimal
    ['[5s]', /got a list/],
  ];
  for (const [text, reason] of bad) {
    const message = error(t, parse(`resyncInterval: ${text}`));
    t.match(message, /^cfg: resyncInterval: /, text);
    t.match(message, reason, text);
  }
});

t.test('document shapes', async (t) => {
  t.match(
    error(t, parse('- 10.0.0.0/8')),
    /^cfg: expected a mapping of keys such as nonMasqueradeCIDRs, got a list$/,
  );
  t.match(error(t, parse('just text')), /got a string of 9 characters \(not shown\)/);
  t.match(error(t, parse('42')), /got number 42/);
  t.match(error(t, parse('a: 1\n---\nb: 2')), /^cfg: invalid YAML: /, 'several documents');
  t.match(error(t, parse('[1, 2')), /^cfg: invalid YAML: /);
  t.match(error(t, parse('{"a": 1,}')), /^cfg: invalid JSON: /);
  t.match(error(t, parse('nonMasqueradeCIDRs: *nope')), /^cfg: invalid YAML: /, 'unknown alias');
  t.match(
    error(t, parse('nonMasqueradeCIDRs: &x [*x]')),
    /^cfg: nonMasqueradeCIDRs\[0\]: expected a CIDR string, got a list$/,
    'a self-referencing list',
  );
  const laughs = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
  for (let i = 1; i < 8; i++)
    laughs.push(
      `${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10)
        .fill(`*${String.fromCharCode(96 + i)}`)
        .join(', ')}]`,
    );
  t.match(error(t, parse(laughs.join('\n'))), /^cfg: invalid YAML: /, 'alias expansion is bounded');
  ok(t, parse('\uFEFFmasqLinkLocal: true'));
  ok(t, parse('\uFEFF{"masqLinkLocal": true}'));
  ok(t, parse('masqLinkLocal: true\r\nnonMasqueradeCIDRs:\r\n  - 10.0.0.0/8\r\n'));
  const anchors = ok(t, parse('a: &nets [10.0.0.0/8]\nnonMasqueradeCIDRs: *nets'));
  t.same(anchors.nonMasquerade.ipv4, ['10.0.0.0/8', '169.254.0.0/16'], 'YAML aliases resolve');
  const json = ok(t, parse('  \n\t{"__proto__": {"cidrLimit": 1}, "constructor": 1}'));
  t.equal(scalars(json).cidrLimit, 64, '__proto__ is just an unknown key');
});

t.test(
  'the hash of a config is what earlier releases computed (the mark compares it)',
  async (t) => {
    // Computed by the release before the key table (commit d252452); a table written by it with the
    // same config is in place for this one: nothing rewritten at an upgrade.
    const pinned: Array<[string, string]> = [
      [
        'nonMasqueradeCIDRs: [10.0.0.0/8]\n',
        '7278f8a1060ea9543ab6280eb91381c4b240fb6b418c90dfb98ab1036e81e81f',
      ],
      ['', 'c876b7f87deb4e5080cf1cc640609ed507c2244a13b1c110a53c96eead9ea86d'],
      [
        'nonMasqueradeCIDRs: [10.0.0.0/8, "fd12::/16"]\nmasqueradeCIDRs: [10.9.0.0/16]\nmasqLinkLocal: true\ncidrLimit: 10\nresyncInterval: 5s\n',
        'b06a12a59aec02742a7608a3be7adaaaee1cc3748a237c0943b7b217ac032d82',
      ],
      [
        'nonMasqueradeCIDRs: [10.0.0.0/8]\nsourceCIDRs: [10.244.0.0/16, "fd00:10:244::/48"]\negressInterfaces: [eth1, "ens*"]\nsnatAddress: 192.0.2.10\nsnatAddressIPv6: "2001:db8::10-2001:db8::1f"\n',
        '03ac58ff802d799416fc2ad01d7e47f4d1437633a3d3c78a34a08d40caca30e5',
      ],
    ];
    for (const [text, hash] of pinned) {
      const result = parseConfigText(text, 'f', {
        enableIPv6: true,
        nomasqAllReservedRanges: false,
      });
      t.equal(result.ok ? result.config.hash : result.error.message, hash, JSON.stringify(text));
    }
  },
);
