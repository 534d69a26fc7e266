// fast-check generators for hostile config files: structure that is almost right, CIDRs that are
// almost right, nft syntax hidden in strings, huge numbers, deep nesting, NUL bytes and broken
// UTF-8. Kept cheap: the fuzz runs 10 000 inputs in a few seconds.
import fc from 'fast-check';
import { stringify } from 'yaml';

/** Text that would mean something to nft, YAML or JSON if it ever reached them unparsed. */
export const hostileFragments = [
  '}',
  '{',
  ';',
  '"',
  "'",
  '\n',
  '\r\n',
  '\t',
  '\\',
  '#',
  '`',
  '$x',
  '@nonmasq',
  'flush ruleset',
  '; flush ruleset',
  '\n flush ruleset\n',
  ' }; delete table inet canary; {',
  '" ; add table ip evil ; "',
  'include "/etc/passwd"',
  'define x = 1',
  '\u0000',
  '\u0001',
  '\u007f',
  '\u2028',
  '\uFEFF',
  '\uD800',
  '\uDFFF',
  '\u00a0',
  '０',
  '/',
  '::',
  '%eth0',
  ' ',
];

const mutation = fc.oneof(
  fc.record({
    kind: fc.constant('insert' as const),
    at: fc.nat(),
    what: fc.constantFrom(...hostileFragments),
  }),
  fc.record({
    kind: fc.constant('delete' as const),
    at: fc.nat(),
    length: fc.integer({ min: 1, max: 4 }),
  }),
  fc.record({
    kind: fc.constant('replace' as const),
    at: fc.nat(),
    what: fc.string({ maxLength: 2 }),
  }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant('duplicate' as const),
    at: fc.nat(),
    length: fc.integer({ min: 1, max: 20 }),
  }),
);

/** Applies a few random edits to text, at positions taken modulo its length. */
export function mutated(text: fc.Arbitrary<string>, maxEdits = 3): fc.Arbitrary<string> {
  return fc.tuple(text, fc.array(mutation, { maxLength: maxEdits })).map(([start, edits]) => {
    let s = start;
    for (const edit of edits) {
      const at = s.length === 0 ? 0 : edit.at % (s.length + 1);
      if (edit.kind === 'insert') s = s.slice(0, at) + edit.what + s.slice(at);
      else if (edit.kind === 'delete') s = s.slice(0, at) + s.slice(at + edit.length);
      else if (edit.kind === 'replace')
        s = s.slice(0, at) + edit.what + s.slice(at + edit.what.length);
      else if (edit.kind === 'truncate') s = s.slice(0, at);
      else s = s.slice(0, at) + s.slice(at, at + edit.length) + s.slice(at);
    }
    return s;
  });
}

const ipv4Cidr = fc
  .tuple(fc.nat({ max: 0xffffffff }), fc.integer({ min: 0, max: 32 }))
  .map(([addr, len]) => {
    const network = len === 0 ? 0 : (addr >>> (32 - len)) << (32 - len);
    const n = network >>> 0;
    return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}/${len}`;
  });

/** IPv6 CIDRs spelled in the full, upper-case, zero-padded form the parser must canonicalise. */
const ipv6Cidr = fc
  .tuple(
    fc.array(fc.nat({ max: 0xffff }), { minLength: 8, maxLength: 8 }),
    fc.integer({ min: 0, max: 128 }),
  )
  .map(([groups, len]) => {
    const bits = groups.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n);
    const host = (1n << BigInt(128 - len)) - 1n;
    const network = bits & ~host;
    const text = Array.from({ length: 8 }, (_, i) =>
      ((network >> BigInt(16 * (7 - i))) & 0xffffn).toString(16).toUpperCase().padStart(4, '0'),
    ).join(':');
    return `${text}/${len}`;
  });

export const validCidr = fc.oneof(
  { weight: 3, arbitrary: ipv4Cidr },
  { weight: 1, arbitrary: ipv6Cidr },
);

const hugeNumberText = fc.constantFrom(
  '1e400',
  '-1e400',
  '9007199254740993',
  '99999999999999999999999999999',
  '0x7fffffffffffffffffff',
  '.inf',
  '-.inf',
  '.nan',
  '1_000',
  '0b101',
  '0o17',
  '017',
  '1:30',
  '-0',
  '64.0',
  '6.4e1',
  '1e-400',
  '2001-12-14',
);

/**
 * A very long string: occasionally generated, so each one is cheap on average. Runs of stray flow
 * indicators (`}`, `]`) are left out: the yaml package needs seconds for them (see the todo test).
 */
const giantString = fc
  .tuple(
    fc.constantFrom('a', '1', '0.', '/', ':', 'ff', ' ', '10.0.0.0/8,'),
    fc.integer({ min: 1_000, max: 20_000 }),
  )
  .map(([unit, count]) => unit.repeat(count));

const scalar: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: validCidr },
  { weight: 4, arbitrary: mutated(validCidr, 2) },
  { weight: 1, arbitrary: fc.constantFrom(...hostileFragments) },
  { weight: 1, arbitrary: fc.boolean() },
  { weight: 1, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: fc.integer() },
  { weight: 1, arbitrary: fc.double() },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '60s',
      '1m30s',
      '500ms',
      '0s',
      '-1s',
      '1e3s',
      '300000000000h',
      'yes',
      'on',
    ),
  },
  { weight: 1, arbitrary: hugeNumberText },
);

const value = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    { weight: 5, arbitrary: scalar },
    { weight: 1, arbitrary: fc.array(tie('value'), { maxLength: 6 }) },
    {
      weight: 1,
      arbitrary: fc.dictionary(fc.string({ maxLength: 8 }), tie('value'), { maxKeys: 3 }),
    },
  ),
})).value;

const realKey = fc.constantFrom(
  'nonMasqueradeCIDRs',
  'masqueradeCIDRs',
  'cidrLimit',
  'masqLinkLocal',
  'masqLinkLocalIPv6',
  'resyncInterval',
);

/** A real key in any letter case (keys match case-insensitively), or something else entirely. */
const key = fc.oneof(
  { weight: 6, arbitrary: fc.tuple(realKey, fc.nat()).map(([k, seed]) => randomCase(k, seed)) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 12 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '__proto__',
      'constructor',
      'toString',
      '<<',
      '?',
      '',
      ...hostileFragments,
    ),
  },
);

function randomCase(text: string, seed: number): string {
  if (seed % 3 !== 0) return text;
  return [...text]
    .map((c, i) => ((seed >> (i % 30)) & 1 ? c.toUpperCase() : c.toLowerCase()))
    .join('');
}

/** Values a real key is likely to get, so that a good share of documents are valid. */
const plausibleDocument = fc.record(
  {
    nonMasqueradeCIDRs: fc.oneof(fc.array(validCidr, { maxLength: 12 }), fc.constant(null)),
    masqueradeCIDRs: fc.array(validCidr, { maxLength: 6 }),
    cidrLimit: fc.oneof(fc.integer({ min: 0, max: 200 }), fc.constant(null)),
    masqLinkLocal: fc.boolean(),
    masqLinkLocalIPv6: fc.boolean(),
    resyncInterval: fc.constantFrom('60s', '1m30s', '500ms', '2h', '1.5s', null),
  },
  { requiredKeys: [] },
);

const wildDocument = fc.dictionary(key, value, { maxKeys: 6 });

/** Plain YAML written by hand: scalars unquoted, so YAML 1.1 gets to misread them. */
function rawYaml(document: Record<string, unknown>, block: boolean): string {
  const inline = (v: unknown): string =>
    Array.isArray(v)
      ? `[${v.map(inline).join(', ')}]`
      : v !== null && typeof v === 'object'
        ? JSON.stringify(v)
        : String(v);
  return Object.entries(document)
    .map(([k, v]) =>
      block && Array.isArray(v)
        ? `${k}:\n${v.map((item) => `  - ${inline(item)}`).join('\n')}`
        : `${k}: ${inline(v)}`,
    )
    .join('\n');
}

/** Wraps a document's text in `depth` levels of flow lists or mappings. */
const deepNesting = fc
  .tuple(fc.integer({ min: 50, max: 2_000 }), fc.boolean(), fc.boolean())
  .map(([depth, json, lists]) => {
    const [open, close] = lists ? ['[', ']'] : [json ? '{"a":' : '{a: ', '}'];
    return `${json ? '{"nonMasqueradeCIDRs": ' : 'nonMasqueradeCIDRs: '}${open.repeat(depth)}1${close.repeat(depth)}${json ? '}' : ''}`;
  });

const serialised = fc.oneof(
  fc
    .tuple(
      fc.oneof(plausibleDocument, wildDocument),
      fc.constantFrom('json', 'yaml', 'raw-flow', 'raw-block'),
    )
    .map(([doc, form]) => {
      if (form === 'json') return JSON.stringify(doc);
      if (form === 'yaml') return stringify(doc, { version: '1.1' });
      return rawYaml(doc as Record<string, unknown>, form === 'raw-block');
    }),
);

/** Config text: mostly near-valid documents, then edits, raw noise, extremes. */
export const configText: fc.Arbitrary<string> = fc.oneof(
  { weight: 8, arbitrary: serialised },
  { weight: 8, arbitrary: mutated(serialised) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme-ascii', maxLength: 200 }) },
  { weight: 1, arbitrary: deepNesting },
  { weight: 1, arbitrary: giantString.map((s) => `nonMasqueradeCIDRs: ["${s}"]`) },
  { weight: 1, arbitrary: giantString.map((s) => `${s}: 1`) },
);

/** Bytes that are not UTF-8 (or only just are): overlongs, lone continuation bytes, surrogates, 0xFF. */
const badUtf8 = fc.constantFrom(
  [0xff],
  [0xfe],
  [0x80],
  [0xc0, 0x80],
  [0xc3],
  [0xe2, 0x82],
  [0xed, 0xa0, 0x80],
  [0xf4, 0x90, 0x80, 0x80],
  [0xf8, 0x88, 0x80, 0x80, 0x80],
  [0xef, 0xbb, 0xbf],
  [0x00],
);

/** File contents: valid UTF-8 config text, sometimes with broken sequences spliced in, or raw bytes. */
export const configBytes: fc.Arbitrary<Buffer> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc
      .tuple(serialised, fc.array(fc.tuple(fc.nat(), badUtf8), { maxLength: 3 }))
      .map(([text, splices]) => {
        let bytes = Buffer.from(text, 'utf8');
        for (const [at, bad] of splices) {
          const i = bytes.length === 0 ? 0 : at % (bytes.length + 1);
          bytes = Buffer.concat([bytes.subarray(0, i), Buffer.from(bad), bytes.subarray(i)]);
        }
        return bytes;
      }),
  },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 256 }).map((a) => Buffer.from(a)) },
);

/**
 * Small IPv4 configs inside one /24 (`10.0.0.` by default), so that random addresses in it hit
 * their edges: [nonMasqueradeCIDRs, masqueradeCIDRs].
 */
export function smallConfigArb(base = '10.0.0.'): fc.Arbitrary<[string[], string[]]> {
  const cidr = fc
    .tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 24, max: 32 }))
    .map(([host, len]) => `${base}${host & ~((1 << (32 - len)) - 1) & 255}/${len}`);
  return fc.tuple(fc.array(cidr, { maxLength: 6 }), fc.array(cidr, { maxLength: 3 }));
}

/** A config file's text for one of smallConfigArb's configs (link-local masqueraded: out of the way). */
export function smallConfigText([nonMasq, masq]: [string[], string[]]): string {
  return `nonMasqueradeCIDRs: ${JSON.stringify(nonMasq)}\nmasqueradeCIDRs: ${JSON.stringify(masq)}\nmasqLinkLocal: true\n`;
}
