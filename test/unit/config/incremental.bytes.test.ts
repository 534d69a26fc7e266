// The incremental load (config/incremental.ts) against a whole load over edits made byte by byte,
// as an editor or an attacker makes them: text put in or taken out at column 0 and mid-line, lines
// joined and split, comment markers, CRLF, tabs, a BOM, quotes, the final newline dropped, lines
// swapped, and invalid results. Every load is compared with a cold load of the same bytes. The
// number of sequences is IPMASQ_PROPERTY_RUNS when set (docs/writes.md, "The everyday edit": the
// nightly size), else a CI size.
import { deepStrictEqual } from 'node:assert';
import { Buffer } from 'node:buffer';
import fc from 'fast-check';
import { assertSplicesRebuild, sourceOf } from '../../helpers/incremental.js';
import t from 'tap';
import { ConfigCache, changedLines } from '../../../src/config/incremental.js';
import { loadFiles, type FileBytes } from '../../../src/config/load.js';
import type { LoadOptions, LoadResult } from '../../../src/config/types.js';

const V6: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };
const RUNS = Number(process.env.IPMASQ_PROPERTY_RUNS ?? 0) || 0;

function cidr(i: number, len = 24): string {
  const b = i * 2;
  return `${10 + (b >> 16)}.${(b >> 8) & 255}.${b & 255}.0/${len}`;
}

/** A config with both lists, indented or not, and a few plain keys around them. */
function baseText(n: number, indent: string, masq: number): string {
  const items = Array.from({ length: n }, (_, i) => `${indent}- ${cidr(i)}`);
  const masqItems = Array.from({ length: masq }, (_, i) => `${indent}- ${cidr(5000 + i)}`);
  return (
    `cidrLimit: 100000\nresyncInterval: 30s\nnonMasqueradeCIDRs:\n${items.join('\n')}\n` +
    `masqueradeCIDRs:\n${masqItems.join('\n')}\nmasqLinkLocal: false\n`
  );
}

/** Text an edit puts in: markers, line breaks, whitespace, quotes, whole item lines, a BOM. */
const PIECES = [
  '#',
  '# ',
  '#  - ',
  '\n',
  '\r\n',
  '\r',
  '\t',
  ' ',
  '  ',
  '"',
  "'",
  '-',
  '- ',
  '  - ',
  '/',
  '0',
  '1',
  '.',
  ':',
  'x',
  '\ufeff',
  ' # note',
  '  - 10.0.4.0/24',
  '  - 10.0.4.0/24\n',
  '- 10.1.0.0/16\n',
  '  - "10.2.0.0/16"\n',
  '  - 10.3.0.1/16\n',
  '  - fd00::/8\n',
  'masqLinkLocal: true\n',
  'masqueradeCIDRs:\n',
];

/** Where an edit happens: any byte, the start of a line, or the end of one. */
type Spot = { kind: 'byte' | 'line-start' | 'line-end'; at: number };
const spot: fc.Arbitrary<Spot> = fc.record({
  kind: fc.constantFrom('byte' as const, 'line-start' as const, 'line-end' as const),
  at: fc.nat(),
});

type ByteEdit =
  | { op: 'insert'; where: Spot; text: string }
  | { op: 'delete'; where: Spot; length: number }
  | { op: 'join'; line: number }
  | { op: 'comment'; line: number; marker: string }
  | { op: 'uncomment'; line: number }
  | { op: 'crlf'; line: number }
  | { op: 'swap'; line: number }
  | { op: 'final-newline' }
  | { op: 'bom' };

const byteEdit: fc.Arbitrary<ByteEdit> = fc.oneof(
  fc.record({
    op: fc.constant('insert' as const),
    where: spot,
    text: fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom(...PIECES) },
      {
        weight: 1,
        arbitrary: fc
          .array(fc.constantFrom(...PIECES), { minLength: 2, maxLength: 4 })
          .map((p) => p.join('')),
      },
    ),
  }),
  fc.record({
    op: fc.constant('delete' as const),
    where: spot,
    length: fc.oneof(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 4, max: 40 })),
  }),
  fc.record({ op: fc.constant('join' as const), line: fc.nat() }),
  fc.record({
    op: fc.constant('comment' as const),
    line: fc.nat(),
    marker: fc.constantFrom('#', '# ', '#  ', '  #'),
  }),
  fc.record({ op: fc.constant('uncomment' as const), line: fc.nat() }),
  fc.record({ op: fc.constant('crlf' as const), line: fc.nat() }),
  fc.record({ op: fc.constant('swap' as const), line: fc.nat() }),
  fc.constant({ op: 'final-newline' as const }),
  fc.constant({ op: 'bom' as const }),
);

/** Line starts of a text (0 first). */
function lineStarts(text: string): number[] {
  const starts = [0];
  for (let i = text.indexOf('\n'); i >= 0 && i + 1 < text.length; i = text.indexOf('\n', i + 1))
    starts.push(i + 1);
  return starts;
}

function offset(text: string, where: Spot): number {
  if (where.kind === 'byte') return where.at % (text.length + 1);
  const starts = lineStarts(text);
  const start = starts[where.at % starts.length] as number;
  if (where.kind === 'line-start') return start;
  const newline = text.indexOf('\n', start);
  return newline < 0 ? text.length : newline;
}

/**
 * The text after one edit (UTF-8 text: a BOM or a multibyte character makes the file non-ASCII).
 */
export function applyByteEdit(text: string, e: ByteEdit): string {
  const starts = lineStarts(text);
  const line = (n: number) => {
    const start = starts[n % starts.length] as number;
    const newline = text.indexOf('\n', start);
    return { start, end: newline < 0 ? text.length : newline };
  };
  switch (e.op) {
    case 'insert': {
      const at = offset(text, e.where);
      return text.slice(0, at) + e.text + text.slice(at);
    }
    case 'delete': {
      const at = offset(text, e.where);
      return text.slice(0, at) + text.slice(at + e.length);
    }
    case 'join': {
      const { end } = line(e.line);
      return end < text.length ? text.slice(0, end) + text.slice(end + 1) : text;
    }
    case 'comment': {
      const { start } = line(e.line);
      return text.slice(0, start) + e.marker + text.slice(start);
    }
    case 'uncomment': {
      const { start, end } = line(e.line);
      const hash = text.indexOf('#', start);
      return hash >= 0 && hash < end ? text.slice(0, hash) + text.slice(hash + 1) : text;
    }
    case 'crlf': {
      const { end } = line(e.line);
      return end < text.length ? `${text.slice(0, end)}\r${text.slice(end)}` : text;
    }
    case 'swap': {
      const a = line(e.line);
      const b = line(e.line + 1);
      if (b.start <= a.start) return text;
      const first = text.slice(a.start, a.end);
      const second = text.slice(b.start, b.end);
      return (
        text.slice(0, a.start) + second + text.slice(a.end, b.start) + first + text.slice(b.end)
      );
    }
    case 'final-newline':
      return text.endsWith('\n') ? text.slice(0, -1) : `${text}\n`;
    case 'bom':
      return text.startsWith('\ufeff') ? text.slice(1) : `\ufeff${text}`;
  }
}

const counted = { loads: 0, spliced: 0, invalid: 0 };

/** Edits applied to file `file % texts.length` one after another, each load compared whole. */
function run(texts: string[], edits: readonly { file: number; edit: ByteEdit }[]): void {
  const names = texts.map((_, i) => `/cfg/ip-masq-${i}`);
  const src = sourceOf(names);
  const cache = new ConfigCache();
  let current = [...texts];
  let last: LoadResult | undefined;
  const step = () => {
    const files: FileBytes[] = current.map((text, i) => ({
      file: names[i] as string,
      bytes: Buffer.from(text),
    }));
    const cold = loadFiles(src, files, V6);
    const warm = cache.load(src, files, V6);
    deepStrictEqual(warm.result, cold);
    assertSplicesRebuild(last, warm.splices, warm.result);
    counted.loads++;
    if (warm.splices) counted.spliced++;
    if (!cold.ok) counted.invalid++;
    if (warm.result.ok) last = warm.result;
    if (Math.random() < 0.5) cache.prepare(V6);
  };
  step();
  for (const { file, edit } of edits) {
    const i = file % current.length;
    current = current.map((text, j) => (j === i ? applyByteEdit(text, edit) : text));
    step();
  }
}

t.test('changed lines end at a line start of both texts', async (t) => {
  const cases: [string, string][] = [
    ['a\n  - X\nb\n', 'a\n#  - X\nb\n'],
    ['a\n#  - X\nb\n', 'a\n  - X\nb\n'],
    ['a\n- X\nb\n', 'a\n#- X\nb\n'],
    ['  - A\n  - B\n', '  - A  - B\n'],
    ['  - A  - B\n', '  - A\n  - B\n'],
    ['x\n', 'x\ny\n'],
    ['x\ny\n', 'y\n'],
    ['x', 'xy'],
  ];
  for (const [before, after] of cases) {
    const { start, oldEnd, newEnd } = changedLines(Buffer.from(before), Buffer.from(after));
    const atLine = (text: string, at: number) =>
      at === 0 || at === text.length || text[at - 1] === '\n';
    t.ok(atLine(before, start) && atLine(before, oldEnd), `${JSON.stringify(before)}: old range`);
    t.ok(atLine(after, newEnd), `${JSON.stringify(after)}: new range ends at a line start`);
    t.equal(before.slice(0, start), after.slice(0, start), 'the same before the range');
    t.equal(before.slice(oldEnd), after.slice(newEnd), 'the same after the range');
  }
});

t.test(
  'the issue cases: a commented-out item and two items joined, as a whole load reads them',
  async (t) => {
    for (const indent of ['  ', '']) {
      const base = baseText(40, indent, 3);
      const target = `${indent}- ${cidr(7)}\n`;
      const commented = base.replace(target, `#${target}`);
      const joined = base.replace(
        `${target}${indent}- ${cidr(8)}`,
        `${target.slice(0, -1)}  ${indent}- ${cidr(8)}`,
      );
      const masqTarget = `${indent}- ${cidr(5001)}\n`;
      const masqCommented = base.replace(masqTarget, `#${masqTarget}`);
      for (const [name, after] of [
        ['commented out', commented],
        ['joined', joined],
        ['masqueradeCIDRs item commented out', masqCommented],
      ] as const) {
        t.not(after, base, `${name}: the edit changed the text`);
        const cache = new ConfigCache();
        const src = sourceOf(['/cfg/ip-masq-0']);
        const files = (text: string): FileBytes[] => [
          { file: '/cfg/ip-masq-0', bytes: Buffer.from(text) },
        ];
        cache.load(src, files(base), V6);
        cache.prepare(V6);
        const warm = cache.load(src, files(after), V6).result;
        t.same(
          warm,
          loadFiles(src, files(after), V6),
          `${name} (indent ${JSON.stringify(indent)})`,
        );
        // And back: the line uncommented or split again is the base once more, not a duplicate.
        const back = cache.load(src, files(base), V6).result;
        t.same(back, loadFiles(src, files(base), V6), `${name}, undone`);
      }
    }
  },
);

t.test('byte-level edit sequences load as a whole load does', async (t) => {
  const runs = RUNS || 1500;
  t.doesNotThrow(
    () =>
      fc.assert(
        fc.property(
          fc.integer({ min: 1, max: 60 }),
          fc.constantFrom('  ', '', '    '),
          fc.array(byteEdit, { minLength: 1, maxLength: 10 }),
          (n, indent, edits) =>
            run(
              [baseText(n, indent, 2)],
              edits.map((edit) => ({ file: 0, edit })),
            ),
        ),
        { numRuns: runs },
      ),
    'property holds',
  );
  t.ok(
    counted.spliced > counted.loads / 16,
    `${counted.spliced} of ${counted.loads} loads spliced`,
  );
  t.ok(counted.invalid > 0, `${counted.invalid} invalid results among them`);
});

t.test('a directory of two files: byte-level edits of either', async (t) => {
  const runs = Math.ceil((RUNS || 1500) / 3);
  t.doesNotThrow(
    () =>
      fc.assert(
        fc.property(
          fc.integer({ min: 1, max: 30 }),
          fc.array(fc.record({ file: fc.nat({ max: 1 }), edit: byteEdit }), {
            minLength: 1,
            maxLength: 10,
          }),
          (n, edits) => run([baseText(n, '  ', 2), baseText(n + 3, '', 1)], edits),
        ),
        { numRuns: runs },
      ),
    'property holds',
  );
});
