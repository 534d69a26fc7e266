// Sentences of docs/design.md that state a rule of the code, kept true: the files of src/ over 600
// lines are the ones it names with why ("Data flow"), and no map in src/ is keyed by an object
// (nor any object held weakly), and every libnftables call beside committed() only reads.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { packageRoot } from '../../../harness/netns.js';
import { srcModules } from '../../helpers/src-modules.js';

const src = join(packageRoot, 'src');
const design = readFileSync(join(packageRoot, 'docs', 'design.md'), 'utf8');

const texts = new Map(srcModules().map((name) => [name, readFileSync(join(src, name), 'utf8')]));

t.test('the files over 600 lines are the ones the design names, each with why', async (t) => {
  const start = design.indexOf('The files of `src/` over 600 lines');
  t.ok(start >= 0, 'the paragraph is there');
  const paragraph = design.slice(start, design.indexOf('\n\n', start));
  const named = [...paragraph.matchAll(/`([\w/-]+\.ts)` is /g)].map((m) => m[1]!);
  const long = [...texts]
    .filter(([, text]) => text.split('\n').length - 1 > 600)
    .map(([name]) => name);
  t.ok(long.length > 0, 'the count finds long files');
  t.same(named.sort(), long.sort(), 'named with why: exactly the long ones');
});

t.test('no map in src/ is keyed by an object, and no object held weakly', async (t) => {
  for (const [name, text] of texts) t.notMatch(text, /\bWeak(Map|Set|Ref)\b/, `${name}: none`);
});

t.test(
  'every commit of ours goes through committed(): a libnftables call beside it only reads',
  async (t) => {
    const calls: string[] = [];
    for (const [name, text] of texts) {
      if (name === 'nftables/addon.ts') continue;
      t.notMatch(text, /\brunNative\(/, `${name}: no libnftables call of its own`);
      for (const m of text.matchAll(/\b(runNft|readNft)\(\s*(`[^`]*`|'[^']*'|[\w.]+)/g))
        calls.push(`${name}: ${m[1]} ${m[2]}`);
    }
    t.ok(calls.length >= 5, `${calls.length} calls found`);
    const writes = calls.filter((call) => !/: (runNft|readNft) [`'](list|get) /.test(call));
    t.same(writes, [], 'each a list or a get, written out where it is called');
  },
);
