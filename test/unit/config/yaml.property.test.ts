// Properties: no input makes the parser throw; the YAML fast path reads exactly what the full YAML
// parser reads; directory merging does not depend on file order.
import fc from 'fast-check';
import t, { type Test } from 'tap';
import { type LoadOptions, parseConfigText } from '../../../src/config/index.js';
import { parseYaml } from '../../../src/config/yaml.js';
import { parseYamlFast } from '../../../src/config/yaml-fast.js';
import { parseYamlFull } from '../../../src/config/yaml-full.js';

/** Runs a fast-check property as one tap assertion; the counterexample is in the failure message. */
function check<Ts>(t: Test, property: fc.IProperty<Ts>, params: fc.Parameters<Ts>): void {
  t.doesNotThrow(() => fc.assert(property, params), 'property holds');
}

const V6: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };

t.test('random text never throws: ok or a ConfigError', async (t) => {
  const keys = fc.constantFrom(
    'nonMasqueradeCIDRs',
    'masqueradeCIDRs',
    'cidrLimit',
    'masqLinkLocal',
    'resyncInterval',
    'x',
  );
  const jsonish = fc.json().map((s) => s);
  const structured = fc
    .dictionary(
      keys,
      fc.oneof(fc.jsonValue(), fc.array(fc.oneof(fc.string(), fc.ipV4(), fc.ipV6()))),
    )
    .map((o) => JSON.stringify(o));
  const yamlish = fc
    .array(
      fc.oneof(
        fc.constantFrom(
          '- ',
          ': ',
          '  ',
          '\n',
          '{',
          '[',
          '"',
          "'",
          '&a ',
          '*a',
          '#',
          '/8',
          '::',
          '!!str ',
          '? ',
          '|',
        ),
        fc.string(),
      ),
      {
        maxLength: 40,
      },
    )
    .map((parts) => parts.join(''));
  check(
    t,
    fc.property(
      fc.oneof(fc.string(), fc.string({ unit: 'binary' }), jsonish, structured, yamlish),
      fc.boolean(),
      (text, ipv6) => {
        const result = parseConfigText(text, 'f', {
          enableIPv6: ipv6,
          nomasqAllReservedRanges: false,
        });
        if (result.ok)
          return Object.isFrozen(result.config) && /^[0-9a-f]{64}$/.test(result.config.hash);
        return result.error.name === 'ConfigError' && result.error.message.startsWith('f: ');
      },
    ),
    { numRuns: 3000 },
  );
});

function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v instanceof Map ? { map: [...v.entries()] } : v,
  );
}

t.test('YAML fast path reads the same as the full parser', async (t) => {
  const cidr = fc.oneof(
    { weight: 4, arbitrary: fc.ipV4().map((ip) => `${ip}/32`) },
    { weight: 2, arbitrary: fc.ipV6().map((ip) => `${ip}/128`) },
    fc.constantFrom(
      '10.0.0.0/8',
      'fd00::/8',
      '::/0',
      '1:2::/32',
      'a/b',
      '10.0.0.0/8:',
      '/',
      'fe80::/10/',
      '1e5/2',
      'ab:/1',
      '0/0',
    ),
  );
  const quoted = fc.constantFrom('', '', '', '', '"', "'");
  const tail = fc.constantFrom('', '', '', '', '', ' # c', '#c', '  ', ' x');
  const itemAt = (indent: string) =>
    fc
      .tuple(cidr, quoted, tail)
      .map(([value, quote, end]) => `${indent}- ${quote}${value}${quote}${end}`);
  const listKey = fc.constantFrom(
    'nonMasqueradeCIDRs',
    'MASQUERADECIDRS',
    'masqueradeCIDRs',
    'other',
    'yes',
  );
  const block = fc
    .tuple(
      listKey,
      fc.constantFrom('', '', ' # c', ' 5s', '  '),
      fc.constantFrom('', '  ', '    ', ' '),
    )
    .chain(([k, v, indent]) =>
      fc
        .array(
          fc.oneof(
            { weight: 8, arbitrary: itemAt(indent) },
            { weight: 1, arbitrary: fc.constantFrom('', '# c', '\t- 1.0.0.0/8', '   - 2.0.0.0/8') },
          ),
          {
            maxLength: 6,
          },
        )
        .map((items) => [`${k}:${v}`, ...items]),
    );
  const scalarLine = fc
    .tuple(
      fc.constantFrom(
        'cidrLimit',
        'masqLinkLocal',
        'resyncInterval',
        'on',
        'x',
        'sourceCIDRs',
        'egressInterfaces',
      ),
      fc.constantFrom(
        '',
        ' 5s',
        ' yes',
        ' 1:30',
        ' "q"',
        ' [1]',
        ' [eth0, "ens*"]',
        ' [10.244.0.0/16] # pods',
        " [\"a]\", 'b''c']",
        ' [a,',
        ' {x: [1, {y: 2}]}',
        ' [a] b',
        ' "a\\"b"',
        " 'it''s'",
        ' [a # c]',
        ' ]',
        ' a: b',
        ' # c',
        ' |',
        ' x #y',
        ' 10.0.0.0/8',
        ' 0x10',
        ' ~',
      ),
    )
    .map(([k, v]) => [`${k}:${v}`]);
  const junk = fc
    .constantFrom(
      '',
      '# comment',
      '  # indented',
      '---',
      '...',
      '%YAML 1.2',
      '  continued',
      'plain',
      '? x',
      '- 1.0.0.0/8',
    )
    .map((l) => [l]);
  const section = fc.oneof(
    { weight: 6, arbitrary: block },
    { weight: 3, arbitrary: scalarLine },
    { weight: 1, arbitrary: junk },
  );
  let fastTaken = 0;
  check(
    t,
    fc.property(
      fc.array(section, { maxLength: 6 }),
      fc.oneof(
        { weight: 9, arbitrary: fc.constant(false) },
        { weight: 1, arbitrary: fc.constant(true) },
      ),
      (sections, crlf) => {
        const text = sections.flat().join(crlf ? '\r\n' : '\n');
        const full = parseYamlFull(text);
        if (parseYamlFast(text) !== undefined) fastTaken++;
        const chosen = parseYaml(text);
        if (full.ok !== chosen.ok) return false;
        return full.ok
          ? canonical(full.value) === canonical((chosen as { value: unknown }).value)
          : true;
      },
    ),
    { numRuns: 5000 },
  );
  t.ok(fastTaken > 30, `the fast path was taken in ${fastTaken} of 5000 documents`);
  const cleanList = fc
    .tuple(
      fc.constantFrom('nonMasqueradeCIDRs', 'masqueradecidrs'),
      fc.constantFrom('', '  ', '    '),
      fc.array(
        fc.tuple(
          fc.oneof(fc.ipV4(), fc.ipV6()),
          fc.constantFrom('', '"', "'"),
          fc.constantFrom('', ' # note'),
        ),
        {
          minLength: 1,
          maxLength: 8,
        },
      ),
    )
    .map(([key, indent, items]) => [
      `${key}:`,
      ...items.map(([ip, q, c]) => `${indent}- ${q}${ip}/32${q}${c}`),
    ]);
  check(
    t,
    fc.property(
      cleanList,
      fc.constantFrom('', 'masqLinkLocal: on\n', '# top\nresyncInterval: 5s\n'),
      (lines, extra) => {
        const text = extra + lines.join('\n');
        const fast = parseYamlFast(text);
        return fast !== undefined && canonical(fast) === canonical(parseYamlFull(text));
      },
    ),
    { numRuns: 500 },
  );
  const typical =
    'nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - "fd00::/8"  # pods\n\nmasqLinkLocal: true\nresyncInterval: 60s\n';
  t.ok(parseYamlFast(typical), 'a typical ConfigMap takes the fast path');
  t.equal(canonical(parseYamlFast(typical)), canonical(parseYamlFull(typical)));
});

t.test('parsed configs keep their meaning under reordering of list entries', async (t) => {
  check(
    t,
    fc.property(
      fc.array(fc.tuple(fc.ipV4(), fc.integer({ min: 8, max: 32 })), {
        minLength: 1,
        maxLength: 30,
      }),
      fc.array(fc.tuple(fc.ipV6(), fc.integer({ min: 16, max: 128 })), { maxLength: 10 }),
      fc.integer(),
      (v4, v6, seed) => {
        // Build aligned CIDRs by parsing the address and clearing host bits via the suggestion path.
        const cidrs = [...v4, ...v6].map(([ip, len]) => {
          const result = parseConfigText(`{"nonMasqueradeCIDRs": ["${ip}/${len}"]}`, 'f', V6);
          const message = result.ok ? '' : result.error.message;
          const suggestion = /did you mean (\S+)\?\)/.exec(message)?.[1];
          return suggestion ?? `${ip}/${len}`;
        });
        const shuffled = [...cidrs].sort(
          (a, b) => ((a.length * 31 + seed) % 7) - ((b.length * 31 + seed) % 7) || (a < b ? 1 : -1),
        );
        const limit = `"cidrLimit": ${cidrs.length}`;
        const a = parseConfigText(
          `{${limit}, "nonMasqueradeCIDRs": ${JSON.stringify(cidrs)}}`,
          'f',
          V6,
        );
        const b = parseConfigText(
          `{${limit}, "nonMasqueradeCIDRs": ${JSON.stringify(shuffled)}}`,
          'f',
          V6,
        );
        return (
          a.ok &&
          b.ok &&
          a.config.hash === b.config.hash &&
          canonical(a.config.nonMasquerade) === canonical(b.config.nonMasquerade)
        );
      },
    ),
    { numRuns: 300 },
  );
});
