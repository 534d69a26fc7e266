// The map of the code cannot go stale (docs/design.md, the module table): every file of src/ and
// native/ is named there, and every name there is a file (or a folder) that exists. A row's first
// cell lists backticked paths; a name without a slash lives in the folder of the path before it.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import t from 'tap';
import { packageRoot } from '../../../harness/netns.js';

/** The names in the module table's first column, expanded to paths from the package root. */
function mapped(text: string): string[] {
  const lines = text.split('\n');
  const header = lines.findIndex((line) => /^\| module +\| its one job/.test(line));
  const names: string[] = [];
  for (const line of lines.slice(header + 2)) {
    if (!line.startsWith('|')) break;
    let folder = '';
    for (const [, name] of line.split('|')[1]!.matchAll(/`([^`]+)`/g)) {
      if (name!.includes('/')) {
        names.push(name!);
        folder = name!.endsWith('/') ? name! : `${dirname(name!)}/`;
      } else names.push(folder + name);
    }
  }
  return names;
}

function sources(folder: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(join(packageRoot, folder))) {
    const path = join(folder, entry);
    if (statSync(join(packageRoot, path)).isDirectory()) found.push(...sources(path));
    else if (/\.(ts|cc|h|c)$/.test(entry)) found.push(path);
  }
  return found;
}

t.test('docs/design.md names every module of src/ and native/, and nothing else', async (t) => {
  const names = mapped(readFileSync(join(packageRoot, 'docs', 'design.md'), 'utf8'));
  t.ok(names.length > 50, `${names.length} names in the table`);
  const folders = names.filter((name) => name.endsWith('/'));
  const covered = (file: string) =>
    names.includes(file) || folders.some((folder) => file.startsWith(folder));
  const files = [...sources('src'), ...sources('native')].map((file) => relative('.', file));
  t.same(
    files.filter((file) => !covered(file)),
    [],
    'every file in the table (add a row, or a name to a row, with its one job)',
  );
  t.same(
    names.filter((name) => !existsSync(join(packageRoot, name))),
    [],
    'every name in the table is there',
  );
});
