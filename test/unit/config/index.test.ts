// Every config case of kubernetes-sigs/ip-masq-agent's cmd/ip-masq-agent tests, with the same
// accept/reject and the same CIDRs, plus the semantics the README's "Configuration" adds.
import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import {
  ConfigError,
  type LoadOptions,
  type LoadResult,
  defaultConfig,
  loadConfig,
  parseConfigText,
} from '../../../src/config/index.js';
import { ok } from '../../helpers/results.js';
import { scalars } from '../../helpers/config.js';

const V4: LoadOptions = { enableIPv6: false, nomasqAllReservedRanges: false };
const V6: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };
const FILE = '/etc/config/ip-masq-agent';

function failed(t: Test, result: LoadResult): string {
  t.notOk(result.ok, 'config is rejected');
  if (result.ok) return '';
  t.ok(result.error instanceof ConfigError);
  return result.error.message;
}
const parse = (text: string, options = V6) => parseConfigText(text, FILE, options);
const DEFAULT_V4 = ['10.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.168.0.0/16'];

t.test('upstream syncConfig cases (run with --enable-ipv6, as upstream does)', async (t) => {
  const accepted: [string, string, Partial<ReturnType<typeof scalars>> & { v4: string[] }][] = [
    [
      'valid yaml file, all keys',
      'nonMasqueradeCIDRs:\n  - 172.16.0.0/12\n  - 10.0.0.0/8\ncidrLimit: 64\nmasqLinkLocal: true\nresyncInterval: 5s\n',
      {
        v4: ['10.0.0.0/8', '172.16.0.0/12'],
        masqLinkLocal: true,
        resyncIntervalMs: 5000,
        cidrLimit: 64,
      },
    ],
    [
      'valid yaml file, just nonMasqueradeCIDRs',
      'nonMasqueradeCIDRs:\n  - 192.168.0.0/16\n',
      { v4: ['169.254.0.0/16', '192.168.0.0/16'], masqLinkLocal: false, resyncIntervalMs: 60000 },
    ],
    [
      'valid yaml file, just masqLinkLocal',
      'masqLinkLocal: true\n',
      { v4: DEFAULT_V4.filter((c) => !c.startsWith('169')), masqLinkLocal: true },
    ],
    [
      'valid yaml file, just masqLinkLocal false',
      'masqLinkLocal: false\n',
      { v4: DEFAULT_V4, masqLinkLocal: false },
    ],
    [
      'valid yaml file, just masqLinkLocalIPv6',
      'masqLinkLocalIPv6: false\n',
      { v4: DEFAULT_V4, masqLinkLocalIPv6: false },
    ],
    [
      'valid yaml file, just resyncInterval',
      'resyncInterval: 5m\n',
      { v4: DEFAULT_V4, resyncIntervalMs: 300_000 },
    ],
    [
      'valid json file, all keys',
      '\n{\n  "nonMasqueradeCIDRs": ["172.16.0.0/12", "10.0.0.0/8"],\n  "masqLinkLocal": true,\n  "resyncInterval": "5s"\n}\n',
      {
        v4: ['10.0.0.0/8', '172.16.0.0/12'],
        masqLinkLocal: true,
        resyncIntervalMs: 5000,
        cidrLimit: 64,
      },
    ],
    [
      'valid json file, just nonMasqueradeCIDRs',
      '{\n\t"nonMasqueradeCIDRs": ["192.168.0.0/16"]\n}\n',
      { v4: ['169.254.0.0/16', '192.168.0.0/16'] },
    ],
    [
      'valid json file, just masqLinkLocal',
      '{\n\t"masqLinkLocal": true\n}\n',
      { v4: DEFAULT_V4.filter((c) => !c.startsWith('169')) },
    ],
    [
      'valid json file, just resyncInterval',
      '{\n\t"resyncInterval": "5m"\n}\n',
      { v4: DEFAULT_V4, resyncIntervalMs: 300_000 },
    ],
    [
      'valid json file, \\u-escaped strings and keys',
      '{"nonMasquerade\\u0043IDRs": ["\\u0031\\u0030.0.0.0\\/8"], "resyncInterval": "5\\u0073"}',
      { v4: ['10.0.0.0/8', '169.254.0.0/16'], resyncIntervalMs: 5000 },
    ],
    [
      'valid json file, all keys with ipv6 cidr',
      '\t\t{\n\t\t  "nonMasqueradeCIDRs": ["172.16.0.0/12", "10.0.0.0/8", "fc00::/7"],\n\t\t  "masqLinkLocal": true,\n\t\t  "resyncInterval": "5s"\n\t\t}\n\t\t',
      { v4: ['10.0.0.0/8', '172.16.0.0/12'], masqLinkLocal: true, resyncIntervalMs: 5000 },
    ],
  ];
  for (const [name, text, want] of accepted) {
    const config = ok(t, parse(text));
    const { v4, ...rest } = want;
    t.same(config.nonMasquerade.ipv4, v4, `${name}: ipv4 set`);
    t.match(scalars(config), rest, `${name}: scalars`);
  }
  const v6 = ok(t, parse('{"nonMasqueradeCIDRs": ["172.16.0.0/12", "10.0.0.0/8", "fc00::/7"]}'));
  t.same(
    v6.nonMasquerade.ipv6,
    ['fc00::/7', 'fe80::/10'],
    'ipv6 CIDRs and link-local go to the ipv6 set',
  );

  t.match(
    failed(t, parse('*')),
    /^\/etc\/config\/ip-masq-agent: invalid YAML: /,
    'invalid yaml file',
  );
  t.match(
    failed(t, parse('{*')),
    /^\/etc\/config\/ip-masq-agent: invalid JSON: /,
    'invalid json file',
  );

  const dir = await mkdtemp(join(tmpdir(), 'ipmasq-config-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const missing = ok(t, await loadConfig(join(dir, 'ip-masq-agent'), V4));
  t.same(missing.nonMasquerade.ipv4, DEFAULT_V4, 'no config file: defaults');
  t.same(missing.sources, []);
  t.same(missing, defaultConfig(V4), 'missing file equals defaultConfig');
});

t.test('upstream validate cases', async (t) => {
  const empty = ok(t, parse('nonMasqueradeCIDRs: []\ncidrLimit: 64\n', V4));
  t.same(empty.nonMasquerade.ipv4, ['169.254.0.0/16'], 'empty CIDR list: only link-local stays');
  t.same(empty.nonMasquerade.ipv6, []);
  ok(
    t,
    parse('nonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16]\ncidrLimit: 64\n', V4),
  );
  const rejected: [string[], string][] = [
    [['abcdefg'], 'nonMasqueradeCIDRs[0]: "abcdefg"'],
    [['10.0.0.0/8', 'abcdefg'], 'nonMasqueradeCIDRs[1]: "abcdefg"'],
    [['10.256.0.0/16'], 'nonMasqueradeCIDRs[0]: "10.256.0.0/16"'],
    [
      ['10.0.0.1/8'],
      'nonMasqueradeCIDRs[0]: "10.0.0.1/8" is not aligned to its prefix (did you mean 10.0.0.0/8?)',
    ],
  ];
  for (const [cidrs, message] of rejected) {
    const yaml = failed(
      t,
      parse(`nonMasqueradeCIDRs:\n${cidrs.map((c) => `  - ${c}\n`).join('')}`, V4),
    );
    t.ok(yaml.startsWith(`${FILE}: ${message}`), yaml);
    const json = failed(t, parse(JSON.stringify({ nonMasqueradeCIDRs: cidrs }), V4));
    t.ok(json.startsWith(`${FILE}: ${message}`), json);
  }
});

t.test('error messages name the file, key, index, value and fix', async (t) => {
  const text =
    'nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 172.16.0.0/12\n  - 192.168.0.0/16\n  - 10.0.0.1/8\n';
  t.equal(
    failed(t, parse(text)),
    '/etc/config/ip-masq-agent: nonMasqueradeCIDRs[3]: "10.0.0.1/8" is not aligned to its prefix (did you mean 10.0.0.0/8?)',
  );
  t.equal(
    failed(t, parse('masqueradeCIDRs: ["203.0.113.8/24"]')),
    '/etc/config/ip-masq-agent: masqueradeCIDRs[0]: "203.0.113.8/24" is not aligned to its prefix (did you mean 203.0.113.0/24?)',
  );
  const v6 = failed(t, parse('nonMasqueradeCIDRs: [10.0.0.0/8, "fc00::/7"]', V4));
  t.equal(
    v6,
    '/etc/config/ip-masq-agent: nonMasqueradeCIDRs[1]: "fc00::/7" is an IPv6 CIDR but IPv6 is off (start the agent with --enable-ipv6, or remove it)',
  );
  t.match(
    failed(t, parse('masqueradeCIDRs: ["fd00::/8"]', V4)),
    /masqueradeCIDRs\[0\]: "fd00::\/8" is an IPv6 CIDR/,
  );
  t.equal(
    failed(t, parse('nonMasqueradeCIDRs: [" 10.0.0.0/8"]')),
    '/etc/config/ip-masq-agent: nonMasqueradeCIDRs[0]: " 10.0.0.0/8" contains whitespace (did you mean 10.0.0.0/8?)',
  );
  t.equal(
    failed(t, parse('cidrLimit: 2\nnonMasqueradeCIDRs: [10.0.0.0/8, 10.0.0.0/8, 10.0.0.0/9]')),
    '/etc/config/ip-masq-agent: cidrLimit: 2 is less than the 3 entries of nonMasqueradeCIDRs + masqueradeCIDRs (raise cidrLimit to at least 3, or list fewer CIDRs)',
    'entries are counted as written, before merging',
  );
});

t.test('defaults', async (t) => {
  const plain = defaultConfig(V4);
  t.same(plain.nonMasquerade, { ipv4: DEFAULT_V4, ipv6: [] });
  t.same(plain.masquerade, { ipv4: [], ipv6: [] });
  t.match(scalars(plain), {
    masqLinkLocal: false,
    masqLinkLocalIPv6: false,
    cidrLimit: 64,
    resyncIntervalMs: 60_000,
  });
  t.same(
    defaultConfig(V6).nonMasquerade.ipv6,
    ['fe80::/10'],
    'IPv6 link-local only with --enable-ipv6',
  );
  const reserved = defaultConfig({ enableIPv6: false, nomasqAllReservedRanges: true });
  t.same(reserved.nonMasquerade.ipv4, [
    '10.0.0.0/8',
    '100.64.0.0/10',
    '169.254.0.0/16',
    '172.16.0.0/12',
    '192.0.0.0/24',
    '192.0.2.0/24',
    '192.88.99.0/24',
    '192.168.0.0/16',
    '198.18.0.0/15',
    '198.51.100.0/24',
    '203.0.113.0/24',
    '240.0.0.0/4',
  ]);
  const replaced = ok(
    t,
    parseConfigText('nonMasqueradeCIDRs: [1.0.0.0/8]', FILE, {
      ...V4,
      nomasqAllReservedRanges: true,
    }),
  );
  t.same(
    replaced.nonMasquerade.ipv4,
    ['1.0.0.0/8', '169.254.0.0/16'],
    'a given list replaces the reserved defaults',
  );
  t.ok(ok(t, parse('', V4)).nonMasquerade.ipv4.includes('10.0.0.0/8'), 'empty file: defaults');
  t.same(
    ok(t, parse('# just a comment\n\n   \n', V4)).nonMasquerade.ipv4,
    DEFAULT_V4,
    'only comments: defaults',
  );
  t.same(ok(t, parse('{}', V4)).nonMasquerade.ipv4, DEFAULT_V4, 'empty JSON object: defaults');
  t.same(ok(t, parse('---\n', V4)).nonMasquerade.ipv4, DEFAULT_V4, 'empty document: defaults');
  t.throws(() => {
    (plain as { hash: string }).hash = '';
  }, 'the config is frozen');
  t.throws(() => (plain.nonMasquerade.ipv4 as string[]).push('1.0.0.0/8'), 'its lists are frozen');
  t.ok(Object.isFrozen(plain.nonMasquerade) && Object.isFrozen(plain.sources));
});

t.test('masqueradeCIDRs and link-local flags', async (t) => {
  const config = ok(
    t,
    parse(
      'masqueradeCIDRs: [10.1.0.0/16, 10.0.0.0/16, 10.1.0.0/17, "fd00:1::/64"]\nmasqLinkLocalIPv6: true\nnonMasqueradeCIDRs: [10.0.0.0/8]',
    ),
  );
  t.same(
    config.masquerade,
    { ipv4: ['10.0.0.0/15'], ipv6: ['fd00:1::/64'] },
    'merged, not subtracted',
  );
  t.same(config.nonMasquerade, { ipv4: ['10.0.0.0/8', '169.254.0.0/16'], ipv6: [] });
  const linkLocalGiven = ok(t, parse('nonMasqueradeCIDRs: [169.254.0.0/17, 169.254.128.0/17]', V4));
  t.same(
    linkLocalGiven.nonMasquerade.ipv4,
    ['169.254.0.0/16'],
    'link-local merged with what the file lists',
  );
});

t.test('the hash is the one earlier releases computed for the same config', async (t) => {
  // sha256 of JSON.stringify(['ipmasq-config-v2', the four merged lists]): an agent of another
  // release with this config adopts the table instead of taking it for another agent's (README).
  const config = ok(
    t,
    parse(
      'nonMasqueradeCIDRs: [10.0.0.0/9, 10.128.0.0/9, 192.0.2.1/32, "fd00::/8"]\nmasqueradeCIDRs: [10.1.0.0/16, "fd00:1::/64"]',
    ),
  );
  const canonical = JSON.stringify([
    'ipmasq-config-v2',
    ['10.0.0.0/8', '169.254.0.0/16', '192.0.2.1/32'],
    ['fd00::/8', 'fe80::/10'],
    ['10.1.0.0/16'],
    ['fd00:1::/64'],
  ]);
  t.equal(config.hash, createHash('sha256').update(canonical).digest('hex'));
  const none = ok(t, parse('nonMasqueradeCIDRs: []\nmasqLinkLocal: true', V4));
  const empty = JSON.stringify(['ipmasq-config-v2', [], [], [], []]);
  t.equal(none.hash, createHash('sha256').update(empty).digest('hex'), 'empty lists');
});

t.test('hash depends on meaning only', async (t) => {
  const a = ok(
    t,
    parse('nonMasqueradeCIDRs: [10.0.0.0/9, 10.128.0.0/9, "FD00:0::/8"]\nresyncInterval: 1m'),
  );
  const b = ok(
    t,
    parse(
      '{"NONMASQUERADECIDRS": ["fd00::/8", "10.0.0.0/8", "10.0.0.0/8"], "resyncInterval": "60s"}',
    ),
  );
  t.equal(a.hash, b.hash);
  t.match(a.hash, /^[0-9a-f]{64}$/);
  const differs = [
    'nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 61s',
    'nonMasqueradeCIDRs: [10.0.0.0/8, "fd00::/8"]\nmasqLinkLocal: true',
    'nonMasqueradeCIDRs: [10.0.0.0/8, "fd00::/8"]\nmasqueradeCIDRs: [10.1.0.0/16]',
    'nonMasqueradeCIDRs: [10.0.0.0/8, "fd00::/9"]',
  ];
  for (const text of differs) t.not(ok(t, parse(text)).hash, a.hash, text);
  // The hash covers exactly what compile consumes: the timer and the limit change no rule.
  const same = [
    'nonMasqueradeCIDRs: [10.0.0.0/8, "fd00::/8"]\nresyncInterval: 61s',
    'nonMasqueradeCIDRs: [10.0.0.0/8, "fd00::/8"]\ncidrLimit: 65',
  ];
  for (const text of same) t.equal(ok(t, parse(text)).hash, a.hash, text);
});
