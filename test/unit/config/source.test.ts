// The config source names a path's files once: what the loader reads, what the cache stamps, the size
// that picks the worker, and the directory the watcher watches.
import { execFileSync } from 'node:child_process';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { tempDir } from '../../../harness/netns.js';
import { findConfigSource, watchedDirectory } from '../../../src/config/source.js';

t.test(
  'directory: regular ip-masq* files in name order, the rest skipped with a warning',
  async (t) => {
    const dir = tempDir(t, 'source');
    writeFileSync(join(dir, 'ip-masq-b'), 'masqLinkLocal: true\n');
    writeFileSync(join(dir, 'ip-masq-a'), 'cidrLimit: 70\n');
    writeFileSync(join(dir, 'unrelated'), 'x'.repeat(10_000));
    mkdirSync(join(dir, 'ip-masq-dir'));
    symlinkSync('nowhere', join(dir, 'ip-masq-dangling'));
    const source = await findConfigSource(dir);
    t.equal(source.kind, 'directory');
    if (source.kind !== 'directory') return;
    t.same(source.files, [join(dir, 'ip-masq-a'), join(dir, 'ip-masq-b')]);
    t.equal(source.bytes, 'masqLinkLocal: true\n'.length + 'cidrLimit: 70\n'.length);
    t.same(source.warnings, [
      `${join(dir, 'ip-masq-dangling')}: skipped: a dangling symlink`,
      `${join(dir, 'ip-masq-dir')}: skipped: not a regular file`,
    ]);
    t.equal(watchedDirectory(dir), dir);

    const before = source.stamp;
    t.equal((await findConfigSource(dir)).stamp, before, 'unchanged: same stamp');
    writeFileSync(join(dir, 'unrelated'), 'y');
    t.equal((await findConfigSource(dir)).stamp, before, 'a file it ignores does not count');
    writeFileSync(join(dir, 'ip-masq-a'), 'cidrLimit: 71\n');
    t.not((await findConfigSource(dir)).stamp, before, 'a file it reads changed');
  },
);

t.test('file, missing path, and a path that is neither', async (t) => {
  const dir = tempDir(t, 'source');
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, 'resyncInterval: 5s\n');
  const source = await findConfigSource(file);
  t.match(source, { kind: 'file', files: [file], bytes: 19 });
  t.equal(watchedDirectory(file), dir);
  const missing = await findConfigSource(join(dir, 'nope'));
  t.equal(missing.kind, 'missing');
  t.equal(
    watchedDirectory(join(dir, 'nope')),
    dir,
    'a missing file is watched for where it appears',
  );
  execFileSync('mkfifo', [join(dir, 'fifo')]);
  t.match(await findConfigSource(join(dir, 'fifo')), {
    kind: 'error',
    message: 'is neither a regular file nor a directory',
  });
});
