// The compiler's output for a range of configs, compared as text with reviewed files under
// test/fixtures/compile. Regenerate with UPDATE_FIXTURES=1 and review the diff.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import t from 'tap';
import {
  remark,
  compile,
  masqueradeRules,
  AUTO_LAYOUT_CROSSOVER,
  chooseLayout,
  type CompileOptions,
} from '../../src/compile.js';
import type { Config } from '../../src/config/types.js';
import {
  isNewerWriter,
  markText,
  MAX_GENERATION,
  newWriterId,
  nextGeneration,
  TABLE_COMMENT,
  tableOwner,
  type WriteMark,
} from '../../src/nftables/ownership.js';
import { normaliseListing, renderReplace, renderTable } from '../../src/nftables/render.js';

import { configWith, egressKeys } from '../helpers/config.js';
import { compileOptions } from '../helpers/compile-options.js';

const fixtures = new URL('../fixtures/compile/', import.meta.url);

function config(over: Partial<Config> = {}): Config {
  const nonMasquerade = {
    ipv4: ['10.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.168.0.0/16'],
    ipv6: [],
  };
  return configWith({ nonMasquerade, ...over });
}

const flags = compileOptions();

const cases: Array<[string, Config, Partial<CompileOptions>]> = [
  ['defaults', config(), {}],
  [
    'masq-link-local',
    config({
      nonMasquerade: { ipv4: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'], ipv6: [] },
    }),
    {},
  ],
  ['empty-list', config({ nonMasquerade: { ipv4: ['169.254.0.0/16'], ipv6: [] } }), {}],
  [
    'masquerade-cidrs',
    config({ masquerade: { ipv4: ['10.9.0.0/16', '192.168.5.1/32'], ipv6: [] } }),
    {},
  ],
  [
    'ipv6',
    config({
      nonMasquerade: { ipv4: ['10.0.0.0/8'], ipv6: ['fd00::/8', 'fe80::/10'] },
      masquerade: { ipv4: [], ipv6: ['fd12::1/128'] },
    }),
    { enableIPv6: true },
  ],
  ['no-random-fully', config(), { randomFully: false }],
  [
    'to-ports-two',
    config(),
    {
      toPorts: [
        { first: 1024, last: 29999 },
        { first: 32768, last: 65535 },
      ],
    },
  ],
  [
    'to-ports-three-and-single',
    config(),
    {
      toPorts: [
        { first: 2000, last: 2999 },
        { first: 8000, last: 8000 },
        { first: 40000, last: 40999 },
      ],
    },
  ],
  ['custom-names', config(), { table: 'masq_v2', masqChain: 'IP-MASQ' }],
  [
    'concat-layout',
    config({
      nonMasquerade: {
        ipv4: ['10.0.0.0/8', '169.254.0.0/16', '192.168.5.1/32'],
        ipv6: ['fd00::/8'],
      },
      masquerade: { ipv4: ['10.9.0.0/16'], ipv6: [] },
    }),
    { setLayout: 'concat', enableIPv6: true },
  ],
  // The egress policy (docs/egress-policy.md, "Egress policy"): its sets and rules come first in
  // the decision chain.
  [
    'egress-sources-interfaces',
    config({
      keys: egressKeys({
        sourceCIDRs: { ipv4: ['10.244.0.0/16'], ipv6: [] },
        egressInterfaces: ['ens*', 'eth1'],
      }),
    }),
    { enableIPv6: true },
  ],
  [
    'egress-snat-to-ports',
    config({
      keys: egressKeys({
        snat: {
          ipv4: { first: '192.0.2.10', last: '192.0.2.20' },
          ipv6: { first: '2001:db8::10', last: '2001:db8::10' },
        },
      }),
    }),
    {
      enableIPv6: true,
      randomFully: false,
      toPorts: [
        { first: 1024, last: 29999 },
        { first: 32768, last: 65535 },
      ],
    },
  ],
  [
    'egress-concat',
    config({
      keys: egressKeys({
        sourceCIDRs: { ipv4: ['10.244.0.0/16'], ipv6: ['fd00:10:244::/48'] },
        snat: { ipv6: { first: '2001:db8::10', last: '2001:db8::1f' } },
      }),
    }),
    { setLayout: 'concat', enableIPv6: true },
  ],
];

for (const [name, cfg, over] of cases) {
  t.test(`compile: ${name}`, async (t) => {
    const script = renderReplace(compile(cfg, { ...flags, ...over }, 7));
    const file = new URL(`${name}.nft`, fixtures);
    // UPDATE_FIXTURES=1 rewrites the golden files; a missing one is a failure, never written here.
    if (process.env.UPDATE_FIXTURES === '1') writeFileSync(file, script);
    t.ok(existsSync(file), `golden file ${name}.nft exists`);
    if (existsSync(file)) t.equal(script, readFileSync(file, 'utf8'), `${name}.nft`);
  });
}

t.test('every table has its sets, the base chains and the decision chain', async (t) => {
  const tables = compile(config(), { ...flags, enableIPv6: true }, 1);
  t.same(
    tables.map((x) => x.family),
    ['ip', 'ip6'],
  );
  for (const table of tables) {
    t.same(
      table.sets.map((s) => s.name),
      ['nonmasq', 'masq', 'late-replies'],
    );
    t.same(table.chains[2], {
      name: 'prerouting',
      base: { type: 'filter', hook: 'prerouting', priority: 'raw', policy: 'accept' },
      rules: [
        `${table.family} saddr . udp sport . ${table.family} daddr . udp dport @late-replies notrack`,
      ],
      transient: true,
    });
    t.same(table.chains[0]?.base, {
      type: 'nat',
      hook: 'postrouting',
      priority: 'srcnat',
      policy: 'accept',
    });
    t.match(
      table.chains[0]?.rules[0],
      /^fib daddr type != local jump IP-MASQ-AGENT comment "ipmasq-agent generation 1 config sha256:[0-9a-f]{64}"$/,
    );
  }
});

t.test('the decision order: masq set, then nonmasq set, then masquerade', async (t) => {
  const [table] = compile(config(), flags, 1);
  t.same(table?.chains[1]?.rules, [
    'ip daddr @masq counter name "translated" masquerade fully-random',
    'ip daddr @nonmasq counter name "exempt" return',
    'counter name "translated" masquerade fully-random',
  ]);
  t.same(table?.counters, ['translated', 'exempt', 'skipped'], 'each outcome counted');
});

t.test('to-ports draws give each range its share of the ports', async (t) => {
  const ranges = [
    { first: 1000, last: 1999 },
    { first: 5000, last: 7999 },
    { first: 9000, last: 9999 },
  ];
  const rules = masqueradeRules({ ports: ranges, fullyRandom: true }, 'ip');
  // Rule i matches with probability size_i / remaining_i; the product of misses before it gives its
  // share.
  let miss = 1;
  const shares = rules.slice(0, ranges.length).map((rule) => {
    const m = / mod (\d+) < (\d+)/.exec(rule);
    const p = m ? Number(m[2]) / Number(m[1]) : 1;
    const share = miss * p;
    miss *= 1 - p;
    return share;
  });
  t.same(
    shares.map((s) => Math.round(s * 5000)),
    [1000, 3000, 1000],
  );
  t.equal(
    rules.at(-1),
    'masquerade fully-random',
    'other protocols fall through to a plain masquerade',
  );
});

t.test("an older release's table comment carries the mark, parsed strictly", async (t) => {
  const listed = (comment: string) => `table ip ipmasq {\n\tcomment "${comment}"\n}`;
  const hash = 'cd'.repeat(32);
  const older = (mark: WriteMark | undefined, unreadableMark = false) => ({
    kind: 'ours',
    mark,
    olderRelease: true,
    unreadableMark,
  });
  t.same(tableOwner(listed(markText({ generation: 42, hash }))), older({ generation: 42, hash }));
  t.same(
    tableOwner(listed(markText({ generation: MAX_GENERATION, hash }))),
    older({ generation: MAX_GENERATION, hash }),
  );
  // Ours, but the count is not read from them: past 15 digits, zero, a leading zero.
  for (const generation of ['1000000000000000', '1000000000000000000000', '0', '007']) {
    const planted = `ipmasq-agent generation ${generation} config sha256:${hash}`;
    t.same(tableOwner(listed(planted)), older(undefined, true), planted);
  }
  for (const planted of [
    `ipmasq-agent generation 1e21 config sha256:${hash}`,
    `ipmasq-agent generation 3 config sha256:abc`,
    'ipmasq-agent',
    'ipmasq-agent table',
  ]) {
    t.same(tableOwner(listed(planted)), { kind: 'corrupt' }, planted);
  }
  t.same(tableOwner('table ip nat {\n\tchain POSTROUTING {\n\t}\n}'), { kind: 'foreign' });
  t.same(tableOwner(listed('made by hand')), { kind: 'foreign' });
});

t.test(
  'the generation never goes backwards but past its bound, where it counts from 1',
  async (t) => {
    t.equal(nextGeneration(1), 2);
    t.equal(nextGeneration(999_999_999_999_998), MAX_GENERATION);
    t.equal(nextGeneration(MAX_GENERATION), 1);
    t.equal(String(MAX_GENERATION).length, 15);
    // The write at the bound still reads back as written.
    const hash = 'ab'.repeat(32);
    const [table] = compile(config({}), flags, MAX_GENERATION, 'minx3e9s.0a1');
    t.same(tableOwner(renderTable(table!)), {
      kind: 'ours',
      mark: {
        generation: MAX_GENERATION,
        hash: table!.chains[0]!.rules[0]!.match(/sha256:([0-9a-f]{64})/)![1],
      },
      olderRelease: false,
      unreadableMark: false,
    });
    // A jump rule whose mark is past the bound (planted): ours, read as no count, never as the
    // table's older mark.
    const planted = renderTable(table!)
      .replace(/^\tcomment "[^"]*"$/m, `\tcomment "${markText({ generation: 5, hash })}"`)
      .replace(/generation 999999999999999 config/, 'generation 1000000000000001 config');
    t.same(tableOwner(planted), {
      kind: 'ours',
      mark: undefined,
      olderRelease: true,
      unreadableMark: true,
    });
  },
);

t.test("the latest write's mark is the jump rule's: generation, hash and writer", async (t) => {
  const hash = 'ab'.repeat(32);
  const [table] = compile(config({}), flags, 7, 'minx3e9s.0a1');
  const listing = renderTable(table!);
  t.match(
    listing,
    new RegExp(`\\tcomment "${TABLE_COMMENT}"\\n`),
    'the table comment names no generation',
  );
  t.equal(listing.match(/generation \d+/g)?.length, 1, 'one mark in the listing');
  t.match(
    listing,
    /jump IP-MASQ-AGENT comment "ipmasq-agent generation 7 config sha256:[0-9a-f]{64} by:minx3e9s\.0a1"/,
  );
  t.same(tableOwner(listing), {
    kind: 'ours',
    mark: { generation: 7, hash: config({}).hash, writer: 'minx3e9s.0a1' },
    olderRelease: false,
    unreadableMark: false,
  });
  // A table an older release created at generation 3, changed in place since: the rule's mark wins.
  const changed = listing.replace(
    `\tcomment "${TABLE_COMMENT}"`,
    `\tcomment "${markText({ generation: 3, hash })}"`,
  );
  const owner = tableOwner(changed);
  t.same(
    owner.kind === 'ours' ? [owner.mark?.generation, owner.mark?.writer, owner.olderRelease] : [],
    [7, 'minx3e9s.0a1', true],
  );
  // A table of an older release has no rule mark: the table comment's.
  t.same(tableOwner(`table ip ipmasq {\n\tcomment "${markText({ generation: 3, hash })}"\n}`), {
    kind: 'ours',
    mark: { generation: 3, hash },
    olderRelease: true,
    unreadableMark: false,
  });
  // This release's table whose jump rule is gone (drift): ours, no mark.
  t.same(tableOwner(`table ip ipmasq {\n\tcomment "${TABLE_COMMENT}"\n}`), {
    kind: 'ours',
    mark: undefined,
    olderRelease: false,
    unreadableMark: false,
  });
  const long = markText({ generation: 999_999_999, hash, writer: 'minx3e9s.0a1' });
  t.ok(long.length <= 128 && long.endsWith(' by:minx3e9s.0a1'), 'fits nftables up to 9 digits');
  t.notMatch(markText({ generation: 9_999_999_999, hash, writer: 'minx3e9s.0a1' }), /by:/);
  t.ok(isNewerWriter('minx3e9t.000', 'minx3e9s.zzz'), 'a later start is newer');
  t.notOk(isNewerWriter('minx3e9s.zzz', 'minx3e9t.000'));
  t.ok(isNewerWriter('minx3e9s.002', 'minx3e9s.001'), 'ties broken by the random part');
  t.ok(isNewerWriter('minx3e9s.001', undefined), 'newer than a table of an older release');
  t.notOk(isNewerWriter(undefined, 'minx3e9s.001'));
  t.match(
    newWriterId(1764640000000, () => 0.5),
    /^minx3e9s\.i00$/,
  );
});

t.test('a full-length prefix is written as nft prints it, a bare address', async (t) => {
  const [table] = compile(config({ masquerade: { ipv4: ['192.168.5.1/32'], ipv6: [] } }), flags, 1);
  t.match(renderTable(table!), /elements = \{ 192\.168\.5\.1 \}/);
});

t.test('the renderer refuses text that did not come from the formatter', async (t) => {
  const bad = config({ nonMasquerade: { ipv4: ['10.0.0.0/8 } ; flush ruleset ; {'], ipv6: [] } });
  t.throws(() => renderReplace(compile(bad, flags, 1)), /not a formatted prefix/);
  t.throws(
    () => renderReplace(compile(config(), { ...flags, table: 'x; flush ruleset' }, 1)),
    /invalid nftables name/,
  );
  t.throws(
    () => compile(config(), { ...flags, masqChain: 'postrouting' }, 1),
    /may not be postrouting/,
  );
});

t.test('normaliseListing ignores only whitespace', async (t) => {
  t.equal(normaliseListing('a {\n\t\tb, c\n\n}'), normaliseListing('a { b,\n\t c }'));
  t.not(normaliseListing('a { b, c }'), normaliseListing('a { b, d }'));
});

t.test(
  'elements are written inside the set block, never as flat add element, never auto-merge',
  async (t) => {
    const many = Array.from({ length: 1000 }, (_, i) => `10.${i >> 8}.${i & 255}.0/24`);
    const script = renderReplace(
      compile(
        config({ nonMasquerade: { ipv4: many, ipv6: [] } }),
        { ...flags, enableIPv6: true },
        1,
      ),
    );
    t.notMatch(script, /add element|auto-merge/);
    t.match(
      script,
      /set nonmasq \{\n\t\ttypeof ip daddr\n\t\tflags interval\n\t\telements = \{ 10\.0\.0\.0\/24, /,
    );
    t.equal(script.match(/^table /gm)?.length, 2, 'one nested block per family');
  },
);

t.test(
  '--set-layout auto: interval up to the crossover, concat above, for every set at once',
  async (t) => {
    const prefixes = (n: number) =>
      Array.from({ length: n }, (_, i) => `10.${(i * 2) >> 8}.${(i * 2) & 255}.0/24`);
    const at = config({ nonMasquerade: { ipv4: prefixes(AUTO_LAYOUT_CROSSOVER), ipv6: [] } });
    const above = config({
      nonMasquerade: { ipv4: prefixes(AUTO_LAYOUT_CROSSOVER - 1), ipv6: [] },
      masquerade: { ipv4: ['192.168.0.0/24', '192.168.2.0/24'], ipv6: [] },
    });
    t.equal(chooseLayout(at, { ...flags, setLayout: 'auto' }), 'interval');
    t.equal(
      chooseLayout(above, { ...flags, setLayout: 'auto' }),
      'concat',
      'masq entries count too',
    );
    t.equal(chooseLayout(above, { ...flags, setLayout: undefined }), 'concat', 'auto by default');
    t.equal(chooseLayout(above, { ...flags, setLayout: 'interval' }), 'interval', 'explicit wins');
    t.equal(chooseLayout(config(), { ...flags, setLayout: 'concat' }), 'concat');
    const [table] = compile(above, { ...flags, setLayout: 'auto' }, 1);
    t.same(
      table?.sets.filter((set) => !set.transient).map((set) => set.key.expression),
      ['ip daddr . meta l4proto', 'ip daddr . meta l4proto'],
    );
    t.match(table?.chains[1]?.rules[0], /^ip daddr \. meta l4proto @masq /);
  },
);

t.test('remark gives what compile gives for another generation and writer', async (t) => {
  for (const [name, c, over] of cases) {
    const options = { ...flags, ...over };
    const first = compile(c, options, 3, 'aaa.1');
    t.same(remark(first, options, 4, c.hash, 'bbb.2'), compile(c, options, 4, 'bbb.2'), name);
    t.same(remark(first, options, 9, c.hash), compile(c, options, 9), `${name}, no writer`);
  }
});
