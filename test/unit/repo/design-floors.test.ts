// The floors of src/ hold (docs/design.md, "Data flow"): every module stands on a floor of that
// section's block, imports only from its own floor or below, two folders on one floor import nothing
// of each other, and no imports go round in a circle. Static, dynamic and type-only imports alike.
import { readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import t from 'tap';
import { packageRoot } from '../../../harness/netns.js';
import { srcModules } from '../../helpers/src-modules.js';

const src = join(packageRoot, 'src');

/** Each name of the block (a file, or a folder ending in `/`) with its floor. */
function floors(design: string): Map<string, number> {
  const block = design.slice(design.indexOf('## Data flow')).split('```')[1] ?? '';
  const found = new Map<string, number>();
  for (const line of block.split('\n')) {
    const m = /^floor (\d+) {2}(.*)$/.exec(line);
    if (!m) continue;
    for (const name of m[2]!.split(/\s{2,}/)[0]!.split(' ')) found.set(name, Number(m[1]));
  }
  return found;
}

/** The modules of src/ one module imports (relative specifiers only), as paths under src/. */
function importsOf(module: string, text: string): string[] {
  const specifiers = [
    ...text.matchAll(/^\s*(?:import|export)\b[^;'"]*?(?:from\s*)?['"](\.[^'"]+)['"]/gm),
    ...text.matchAll(/\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g),
  ].map((m) => m[1]!);
  return specifiers.map((s) => normalize(join(dirname(module), s)).replace(/\.js$/, '.ts'));
}

/** The name of the block a module stands under: itself, or its nearest folder named there. */
function placeOf(module: string, names: Map<string, number>): string | undefined {
  if (names.has(module)) return module;
  for (let folder = dirname(module); folder !== '.'; folder = dirname(folder)) {
    if (names.has(`${folder}/`)) return `${folder}/`;
  }
  return undefined;
}

/** Every circle of the graph (its strongly connected parts of more than one module, or a self-import). */
function circles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (stack.includes(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const part: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        part.push(w);
      } while (w !== v);
      if (part.length > 1 || graph.get(v)!.includes(v)) found.push(part.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

const names = floors(readFileSync(join(packageRoot, 'docs', 'design.md'), 'utf8'));
const graph = new Map(
  srcModules().map((m) => [m, importsOf(m, readFileSync(join(src, m), 'utf8'))] as const),
);

t.test('the block names floors, and every name is a module or folder of src/', async (t) => {
  t.ok(names.size > 15, `${names.size} names on the floors`);
  t.ok(new Set(names.values()).size >= 5, 'five floors or more');
  const gone = [...names.keys()].filter((name) => {
    try {
      return statSync(join(src, name)).isDirectory() !== name.endsWith('/');
    } catch {
      return true;
    }
  });
  t.same(gone, [], 'every name there is in src/');
});

t.test('every module of src/ stands on a floor', async (t) => {
  t.same(
    [...graph.keys()].filter((m) => placeOf(m, names) === undefined),
    [],
    'add the module (or its folder) to a floor in docs/design.md, "Data flow"',
  );
});

t.test('no import runs up a floor, nor between two folders of one floor', async (t) => {
  const wrong: string[] = [];
  let counted = 0;
  for (const [module, imported] of graph) {
    const from = placeOf(module, names);
    if (from === undefined) continue;
    for (const target of imported) {
      const to = placeOf(target, names);
      if (to === undefined) continue;
      counted++;
      const [a, b] = [names.get(from)!, names.get(to)!];
      if (b > a) wrong.push(`${module} (floor ${a}) imports ${target} (floor ${b})`);
      else if (a === b && from !== to && from.endsWith('/') && to.endsWith('/')) {
        wrong.push(`${module} imports ${target}: two folders of floor ${a}`);
      }
    }
  }
  t.ok(counted > 300, `${counted} imports judged`);
  t.same(wrong, [], 'imports go down or stay on their floor');
});

t.test('no circle of imports in src/', async (t) => {
  t.same(circles(graph), [], 'no module reaches itself through its imports');
});

t.test('no cache in src/ is keyed by an object (docs/design.md, "Data flow")', async (t) => {
  const keyed = srcModules().filter((m) =>
    /\bnew Weak(Map|Set)\b/.test(readFileSync(join(src, m), 'utf8')),
  );
  t.same(keyed, [], 'what is worked out from a value travels with it');
});

t.test(
  'the reader sees the shapes of import src/ uses, and a circle when there is one',
  async (t) => {
    t.same(
      importsOf(
        'config/a.ts',
        [
          "import type { A } from './types.js';",
          "import {\n  b,\n  c,\n} from '../cidr/index.js';",
          "export { d } from './d.js';",
          "const e = await import('../e.js');",
          "import 'node:fs';",
        ].join('\n'),
      ),
      ['config/types.ts', 'cidr/index.ts', 'config/d.ts', 'e.ts'],
    );
    t.same(
      circles(
        new Map([
          ['a', ['b']],
          ['b', ['c']],
          ['c', ['a']],
          ['d', ['a']],
        ]),
      ),
      [['a', 'b', 'c']],
    );
  },
);
