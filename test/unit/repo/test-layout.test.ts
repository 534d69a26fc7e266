// The unit tests are laid out by the module they test (docs/development.md): a test of
// src/DIR/MODULE.ts is test/unit/DIR/MODULE.test.ts, or MODULE.ASPECT.test.ts beside it when a
// module's tests are split; what tests the repository as a whole (its documents, manifests and
// dashboards) is under test/unit/repo/. So a module's tests are found from its name.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import t from 'tap';
import { packageRoot } from '../../../harness/netns.js';

const unit = join(packageRoot, 'test', 'unit');

function testFiles(folder: string): string[] {
  return readdirSync(folder).flatMap((name) => {
    const path = join(folder, name);
    if (statSync(path).isDirectory()) return testFiles(path);
    return name.endsWith('.test.ts') ? [relative(unit, path)] : [];
  });
}

/** The module of src/ a test file is named after, or why it names none. */
function moduleOf(file: string): string | undefined {
  const match = /^((?:[a-z-]+\/)?)([a-z-]+)(\.[a-z-]+)?\.test\.ts$/.exec(file);
  if (!match) return undefined;
  return `${match[1]}${match[2]}.ts`;
}

t.test('every unit test file is named after a module of src/, or tests the repo', async (t) => {
  const files = testFiles(unit);
  t.ok(files.length > 50, `${files.length} files`);
  const astray = files.filter((file) => {
    if (file.startsWith('repo/')) return false;
    const module = moduleOf(file);
    return module === undefined || !existsSync(join(packageRoot, 'src', module));
  });
  t.same(astray, [], 'each found from the name of the module it tests');
});

t.test('the names are read as the layout says', async (t) => {
  t.equal(moduleOf('config/incremental.fs.test.ts'), 'config/incremental.ts');
  t.equal(moduleOf('nftables/change.test.ts'), 'nftables/change.ts');
  t.equal(moduleOf('explain.egress.test.ts'), 'explain.ts');
  t.equal(moduleOf('a/b/c.test.ts'), undefined, 'no deeper than src/ goes');
  t.equal(moduleOf('set_change.test.ts'), undefined);
});
