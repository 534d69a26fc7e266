// The list answer decoded as it streams (src/kubernetes/list-stream.ts) against JSON.parse of the
// whole answer: random lists (strings holding quotes, backslashes, brackets and non-ASCII; nested
// values; other top-level members before and after `items`), random whitespace, split into chunks
// at random bytes (one byte at a time included); and what it refuses.
import t from 'tap';
import { ListScanner, ListStreamError } from '../../../src/kubernetes/list-stream.js';

/** A small deterministic generator (mulberry32). */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const PIECES = ['"', '\\', '{', '}', '[', ']', ':', ',', 'items', 'metadata', 'é', '😀', ' ', '\n'];

function text(r: () => number): string {
  let out = '';
  const n = Math.floor(r() * 12);
  for (let i = 0; i < n; i++) {
    out +=
      r() < 0.5
        ? PIECES[Math.floor(r() * PIECES.length)]!
        : String.fromCharCode(32 + Math.floor(r() * 90));
  }
  return out;
}

function value(r: () => number, depth: number): unknown {
  const kind = Math.floor(r() * (depth > 3 ? 4 : 6));
  if (kind === 0) return text(r);
  if (kind === 1) return Math.floor(r() * 1e6) - 5e5;
  if (kind === 2) return r() < 0.5;
  if (kind === 3) return null;
  if (kind === 4) return Array.from({ length: Math.floor(r() * 4) }, () => value(r, depth + 1));
  return object(r, depth + 1);
}

function object(r: () => number, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const n = Math.floor(r() * 5);
  for (let i = 0; i < n; i++)
    out[r() < 0.2 ? ['items', 'metadata'][i % 2]! : text(r)] = value(r, depth);
  return out;
}

/** JSON with whitespace sprinkled between tokens (JSON.stringify's indent, or none). */
function serialize(list: unknown, r: () => number): string {
  const indent = [undefined, 1, '\t', ' \n '.slice(0, 1)][Math.floor(r() * 4)];
  return `${r() < 0.3 ? ' \n' : ''}${JSON.stringify(list, null, indent)}${r() < 0.3 ? '\n' : ''}`;
}

function scan(bytes: Buffer, r: () => number): { items: unknown[]; metadata: unknown } {
  const items: unknown[] = [];
  const scanner = new ListScanner((item) => items.push(item));
  let at = 0;
  const oneByOne = r() < 0.1;
  while (at < bytes.length) {
    const size = oneByOne ? 1 : 1 + Math.floor(r() * Math.min(bytes.length, 300));
    scanner.write(bytes.subarray(at, at + size));
    at += size;
  }
  scanner.end();
  return { items, metadata: scanner.metadata };
}

t.test('random lists in random chunks: what JSON.parse of the whole answer says', async (t) => {
  const runs = Number(process.env.IPMASQ_PROPERTY_RUNS ?? 2_000);
  let checked = 0;
  for (let seed = 1; seed <= runs; seed++) {
    const r = random(seed);
    const items = Array.from({ length: Math.floor(r() * 6) }, () => object(r, 1));
    const list: Record<string, unknown> = {};
    if (r() < 0.5) list.kind = text(r);
    if (r() < 0.5) list.apiVersion = value(r, 2);
    list.metadata = { resourceVersion: String(seed), ...(r() < 0.5 ? { continue: text(r) } : {}) };
    if (r() < 0.3) list.extra = { items: [1, 2, 3], metadata: 'not this one' };
    list.items = items;
    if (r() < 0.3) list.after = object(r, 2);
    const bytes = Buffer.from(serialize(list, r), 'utf8');
    const whole = JSON.parse(bytes.toString('utf8')) as { items: unknown[]; metadata: unknown };
    const scanned = scan(bytes, r);
    if (
      JSON.stringify(scanned) !== JSON.stringify({ items: whole.items, metadata: whole.metadata })
    ) {
      t.fail(`seed ${seed}: ${JSON.stringify(scanned).slice(0, 300)}`);
      return;
    }
    checked++;
  }
  t.equal(checked, runs, `${runs} lists decoded as JSON.parse decodes them`);
});

t.test('the items are handed over one by one as their last byte arrives', async (t) => {
  const seen: unknown[] = [];
  const scanner = new ListScanner((item) => seen.push(item));
  scanner.write(Buffer.from('{"metadata":{"resourceVersion":"7"},"items":[{"a":"}"},'));
  t.same(seen, [{ a: '}' }], 'the first, before the rest came');
  scanner.write(Buffer.from('{"b":[1,{"c":"\\""}]}]}'));
  scanner.end();
  t.same(seen, [{ a: '}' }, { b: [1, { c: '"' }] }]);
  t.same(scanner.metadata, { resourceVersion: '7' });
  t.equal(scanner.count, 2);
});

t.test('what it refuses: cut short, not a list, an item not an object, too large', async (t) => {
  const run = (text: string, max?: number) => () => {
    const scanner = new ListScanner(() => undefined, max);
    scanner.write(Buffer.from(text));
    scanner.end();
  };
  t.throws(run('{"items":[{"a":1}'), ListStreamError, 'cut short');
  t.throws(run('{"items":[{"a":"1'), /cut short/, 'cut inside a string');
  t.throws(run('[{"a":1}]'), /not a JSON object/, 'an array');
  t.throws(run('"items"'), /not a JSON object/, 'a string');
  t.throws(run('{"items":[1]}'), /not an object/, 'a number as an item');
  t.throws(run('{"items":["a"]}'), /not an object/, 'a string as an item');
  t.throws(run('{"items":[[1]]}'), /not an object/, 'an array as an item');
  t.throws(run('{"items":[]} x'), /after the end/, 'bytes after the answer');
  t.throws(run('{"items":[{"a":"x".}]}'), /not JSON/, 'an item that is not JSON');
  t.throws(run(`{"items":[{"a":"${'x'.repeat(200)}"}]}`, 100), /larger than 100 bytes/);
  t.doesNotThrow(run('{"items":[{"a":"x"}]}', 100), 'within the bound');
  t.doesNotThrow(run('{"metadata":"x","items":null}'), 'members of other shapes are skipped');
});
