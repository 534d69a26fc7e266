// Nesting is bounded before any parser runs (src/config/bounds.ts): thousands of "[" used to overflow
// the YAML parser's stack and abort the whole process. The same file must give the same message.
import t from 'tap';
import { parseFragment } from '../../../src/config/fragment.js';
import { MAX_INDENT, MAX_NESTING, nestingProblem } from '../../../src/config/bounds.js';
import { duplicateTopLevelKey } from '../../../src/config/yaml.js';

const options = { enableIPv6: true, nomasqAllReservedRanges: false };

t.test('deep flow nesting is refused, in YAML and in JSON, with the line', async (t) => {
  for (const depth of [MAX_NESTING + 1, 5_000, 100_000]) {
    t.match(nestingProblem('['.repeat(depth), true), /^nested more than 64 levels deep at line 1$/);
  }
  t.equal(
    nestingProblem(`a: 1\nb: ${'{x: '.repeat(MAX_NESTING + 1)}`, true),
    `nested more than ${MAX_NESTING} levels deep at line 2`,
  );
  t.equal(
    nestingProblem(`{"nonMasqueradeCIDRs": ${'['.repeat(200)}`, false),
    'nested more than 64 levels deep at line 1',
  );
  t.equal(nestingProblem('['.repeat(MAX_NESTING) + ']'.repeat(MAX_NESTING), true), undefined);
});

t.test('deep block nesting is refused by its indentation', async (t) => {
  t.match(
    nestingProblem(`k: ${'- '.repeat(MAX_INDENT)}x`, true) ?? '',
    /^$/,
    'after a key: a plain scalar',
  );
  t.equal(
    nestingProblem(`${'- '.repeat(MAX_INDENT)}x`, true),
    `indented more than ${MAX_INDENT} columns at line 1`,
  );
  const block = Array.from({ length: 600 }, (_, i) => `${' '.repeat(i)}k:`).join('\n');
  t.equal(nestingProblem(block, true), `indented more than ${MAX_INDENT} columns at line 514`);
});

t.test('brackets in quotes and comments do not count; real configs pass', async (t) => {
  t.equal(nestingProblem(`a: "${'['.repeat(1000)}"\nb: '${'{'.repeat(1000)}'`, true), undefined);
  t.equal(nestingProblem(`a: 1 # ${'['.repeat(1000)}\n`, true), undefined);
  t.equal(nestingProblem(`{"a": "${'['.repeat(1000)}\\"${'['.repeat(10)}"}`, false), undefined);
  t.equal(
    nestingProblem(
      'nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - "172.16.0.0/12"\nmasqLinkLocal: true\nx: {a: [1, [2]]}\n',
      true,
    ),
    undefined,
  );
});

t.test('the loader reports the same error for the same deep file, every time', async (t) => {
  const text = '['.repeat(100_000);
  const messages = new Set<string>();
  for (let i = 0; i < 5; i++) {
    const result = parseFragment(text, '/cfg', options);
    t.notOk(result.ok);
    if (!result.ok) messages.add(result.error.message);
  }
  t.same([...messages], ['/cfg: invalid YAML: nested more than 64 levels deep at line 1']);
});

t.test(
  "JSON is held to YAML's rules: no duplicate keys; errors never quote the input",
  async (t) => {
    const dup = parseFragment(
      '{"nonMasqueradeCIDRs": ["10.0.0.0/8"], "nonMasqueradeCIDRs": []}',
      '/cfg',
      options,
    );
    t.notOk(dup.ok);
    if (!dup.ok)
      t.equal(dup.error.message, '/cfg: invalid JSON: the key "nonMasqueradeCIDRs" is given twice');
    const yamlDup = parseFragment(
      'nonMasqueradeCIDRs: [10.0.0.0/8]\nnonMasqueradeCIDRs: []\n',
      '/cfg',
      options,
    );
    t.notOk(yamlDup.ok, 'YAML refuses the same');
    t.ok(
      parseFragment(
        '{"nonMasqueradeCIDRs": ["10.0.0.0/8"], "masqLinkLocal": true}',
        '/cfg',
        options,
      ).ok,
    );
    t.equal(
      duplicateTopLevelKey('{"a": {"b": 1, "b": 2}, "c": "a"}'),
      undefined,
      'nested and values do not count',
    );
    t.equal(duplicateTopLevelKey('{"a\\u0062": 1, "ab": 2}'), 'ab', 'compared as decoded');

    const secret = parseFragment('{"a": SECRETVALUE123}', '/cfg', options);
    t.notOk(secret.ok);
    if (!secret.ok) t.notMatch(secret.error.message, /SECRETVALU/, 'no excerpt of the input');
    const environ = parseFragment('SECRET_TOKEN=hunter2\u0000SHELL=/bin/bash', '/cfg', options);
    t.notOk(environ.ok);
    if (!environ.ok) {
      t.notMatch(
        environ.error.message,
        /hunter2|SECRET/,
        'a file that is not a mapping is not quoted',
      );
      t.match(environ.error.message, /got a string of \d+ characters \(not shown\)/);
    }
  },
);
