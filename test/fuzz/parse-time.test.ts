// Fuzz for time, not only for values (docs/hardening.md, round 3): every scanner and parser a
// config meets on the agent's own thread, and every operator command's, must be linear (or
// bounded) in its input. Inputs are long repetitions of the characters YAML gives meaning to, each
// parsed at two sizes four times apart: linear work takes about 4 times as long at the larger,
// quadratic 16. The ratio, not a time, is asserted, so a slow machine or coverage instrumentation
// (which slows the parser tenfold) cannot fail it; the few absolute bounds are minutes away from
// what the reported quadratic cases cost.
import fc from 'fast-check';
import t from 'tap';
import { parseConfigText } from '../../src/config/index.js';
import { manifestProblem } from '../../src/config/bounds.js';
import { keyLine, parseYamlFast } from '../../src/config/yaml-fast.js';
import type { LoadOptions } from '../../src/config/types.js';

const options: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };
/** Far above what a linear pass over these sizes takes, far below the quadratic cases reported. */
const BOUND_MS = 30_000;
/** The smaller size of each pair; the larger is four times it. */
const SIZE = 16 * 1024;
/** Growth allowed from SIZE to 4 × SIZE: linear is 4, quadratic 16. */
const MAX_GROWTH = 8;
/** Below this the larger size's time is noise, whatever the ratio. */
const NOISE_MS = 100;

const TOKENS = [
  ' ',
  '#',
  ':',
  ': ',
  '- ',
  'a',
  '1',
  '/',
  '"',
  "'",
  '[',
  ']',
  '{',
  '}',
  ',',
  '&a',
  '*a',
  '\n',
  '? ',
  '!',
  '|',
  '>',
  '\\',
  '%',
  '@',
  '.',
  'y#z',
  'k: ',
  '  - 10.0.0.0/8',
];

function timed(
  t: { ok: (ok: boolean, message: string) => void },
  name: string,
  run: () => unknown,
): void {
  const started = performance.now();
  run();
  const elapsed = performance.now() - started;
  t.ok(elapsed < BOUND_MS, `${name}: ${elapsed.toFixed(0)} ms`);
}

t.test('the key-line scanner is the pattern it replaced, in one pass', async (t) => {
  // The regex the fast path used before round 3, as the reference for what a key line is.
  const KEY_LINE =
    /^([A-Za-z][A-Za-z0-9_-]*):(?:[ ]+([^\s"'[\]{}|>&*!%@`#][^#]*?))?[ ]*(?:[ ]#.*)?$/;
  const line = fc
    .array(
      fc.constantFrom('a', 'B', '1', '_', '-', ':', ' ', '#', 'y', '"', '[', '*', '\u00a0', 'x'),
      {
        maxLength: 14,
      },
    )
    .map((chars) => chars.join(''));
  fc.assert(
    fc.property(line, (text) => {
      const expected = KEY_LINE.exec(text);
      const got = keyLine(text);
      if (expected === null) return got === null;
      return got !== null && got.key === expected[1] && got.value === expected[2];
    }),
    { numRuns: 5_000 },
  );
  timed(t, 'a key line of 60 000 spaces then "y#z"', () =>
    keyLine(`comment: x${' '.repeat(60_000)}y#z`),
  );
  timed(t, 'a key line of 16 MiB', () => keyLine(`comment: x${' '.repeat(16 << 20)}y#z`));
});

t.test("a config the agent parses in-thread: the issue's ReDoS line", async (t) => {
  // The reported case: a valid 60 KB config whose one line held /healthz for seconds.
  for (const spaces of [60_000, 1_000_000]) {
    const text = `comment: x${' '.repeat(spaces)}y#z\nnonMasqueradeCIDRs:\n  - 10.0.0.0/8\n`;
    timed(t, `${text.length} bytes, fast path`, () => parseYamlFast(text));
    timed(t, `${text.length} bytes, whole load`, () => parseConfigText(text, 'f', options));
  }
});

t.test('repetitions of YAML tokens parse in bounded time', async (t) => {
  const pairs: string[][] = [];
  for (const a of TOKENS) pairs.push([a]);
  for (let i = 0; i < 40; i++) {
    pairs.push([TOKENS[(i * 7) % TOKENS.length]!, TOKENS[(i * 11 + 3) % TOKENS.length]!]);
  }
  const once = (text: string) => {
    const started = performance.now();
    parseConfigText(text, 'f', options);
    return performance.now() - started;
  };
  const shapes = (body: string) => [
    body,
    `a: ${body}`,
    `nonMasqueradeCIDRs:\n  - 10.0.0.0/8\nx: ${body}`,
  ];
  for (const pattern of pairs) {
    const unit = pattern.join('');
    const small = shapes(unit.repeat(Math.ceil(SIZE / unit.length)));
    const large = shapes(unit.repeat(Math.ceil((4 * SIZE) / unit.length)));
    for (const [i, text] of large.entries()) {
      // One run of the smaller (a slow one only makes the ratio kinder), the best of two of the larger.
      const [a, b] = [once(small[i]!), Math.min(once(text), once(text))];
      t.ok(
        b < NOISE_MS || b < MAX_GROWTH * a,
        `${JSON.stringify(text.slice(0, 24))}…: ${a.toFixed(0)} ms → ${b.toFixed(0)} ms at 4× the size`,
      );
    }
  }
});

t.test('the inputs round 3 found slow are refused or parsed in bounded time', async (t) => {
  const texts: Record<string, string> = {
    '64 KiB of "}"': '}'.repeat(65_536),
    '70 000 top-level keys': Array.from({ length: 70_000 }, (_, i) => `k${i}: 1`).join('\n'),
    '20 000 anchors': Array.from({ length: 20_000 }, (_, i) => `k${i}: &a${i} 1`).join('\n'),
    '16 MiB flow list': `[${'10.0.0.0/8, '.repeat(1_400_000)}]`,
    '9 000 keys (within the limits)': Array.from({ length: 9_000 }, (_, i) => `k${i}: 1`).join(
      '\n',
    ),
  };
  for (const [name, text] of Object.entries(texts)) {
    let result: ReturnType<typeof parseConfigText> | undefined;
    timed(t, name, () => (result = parseConfigText(text, 'f', options)));
    if (name.includes('within')) t.ok(result?.ok, `${name}: accepted`);
    else t.match(!result?.ok && result?.error.message, /^f: invalid YAML: more than \d+ /, name);
  }
  timed(t, 'a manifest of 300 000 keys', () => {
    const manifest = `apiVersion: v1\n${Array.from({ length: 300_000 }, (_, i) => `k${i}: 1`).join('\n')}`;
    t.match(manifestProblem(manifest), /more than 200000 mapping keys/);
  });
});
