// The config source names a path's files once: what the loader reads, what the cache stamps, the size
// that picks the worker, and the directory the watcher watches.
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { tempDir } from '../../../harness/netns.js';
import {
  DirectoryListings,
  findConfigSource,
  LISTING_AUDIT_MS,
  LISTING_SETTLED_MS,
  watchedDirectory,
} from '../../../src/config/source.js';

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

// A directory's listing is used again while its own metadata stays (docs/writes.md, "When it
// writes"): a fast path, held here against a fresh listing (the whole path) and audited.
t.test(
  'a listing used again always equals a fresh one, whatever is done to the directory',
  async (t) => {
    const dir = tempDir(t, 'listings');
    let listed = 0;
    // The clock runs ahead by jumps the test makes: a directory's last change may look settled at
    // once, as after a quiet second.
    let ahead = 0;
    const listings = new DirectoryListings({
      listed: () => listed++,
      now: () => Date.now() + ahead,
    });
    const fresh = async () =>
      (await readdir(dir)).filter((name) => name.startsWith('ip-masq')).sort();
    let seed = 7;
    const random = (n: number) => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % n;
    const names = ['ip-masq-a', 'ip-masq-b', 'ip-masq-c', 'other', 'ip-masq-d'];
    let calls = 0;
    for (let step = 0; step < 400; step++) {
      const name = names[random(names.length)]!;
      const path = join(dir, name);
      switch (random(6)) {
        case 0:
          writeFileSync(path, `x${step}\n`);
          break;
        case 1:
          rmSync(path, { force: true });
          break;
        case 2:
          if (existsSync(path)) renameSync(path, join(dir, names[random(names.length)]!));
          break;
        case 3:
          ahead += LISTING_SETTLED_MS + 1; // a quiet second
          break;
        case 4:
          ahead += LISTING_AUDIT_MS; // past the audit's interval
          break;
        default:
          break; // nothing: listed again at once
      }
      const source = await findConfigSource(dir, listings);
      calls++;
      t.equal(source.kind, 'directory');
      if (source.kind !== 'directory') return;
      const want = (await fresh()).filter((n) => !n.endsWith('-dir')).map((n) => join(dir, n));
      if (JSON.stringify(source.files) !== JSON.stringify(want)) {
        t.same(source.files, want, `step ${step}: the files a fresh listing finds`);
        return;
      }
      // A change right after a listing may share its clock tick: wait one out, as a reader would
      // not, so that the next step's change is one the stamp shows (the settled rule covers the
      // rest, tested below).
      await new Promise((r) => setTimeout(r, 5));
    }
    t.ok(listed < calls, `listed ${listed} times in ${calls} reads: used again while it stayed`);
    t.ok(listed > calls / 10, 'and listed again whenever it changed');
  },
);

t.test('a directory changed in the tick it was listed in is listed again', async (t) => {
  const dir = tempDir(t, 'listings');
  const listings = new DirectoryListings();
  for (let i = 0; i < 100; i++) {
    await findConfigSource(dir, listings);
    writeFileSync(join(dir, `ip-masq-${i}`), '');
    const source = await findConfigSource(dir, listings);
    if (source.kind !== 'directory' || source.files.length !== i + 1) {
      t.fail(`file ${i} not seen right after the listing before it`);
      return;
    }
  }
  t.pass('each new file seen at the next read');
  // Where a filesystem's timestamps are coarse (a clock tick; kernels before multigrain
  // timestamps), that change could leave the stamp as it was: a listing is used again only once
  // the directory's last change is LISTING_SETTLED_MS older than the listing.
  let listed = 0;
  let now = Date.now();
  const counted = new DirectoryListings({ listed: () => listed++, now: () => now });
  writeFileSync(join(dir, 'ip-masq-new'), '');
  await findConfigSource(dir, counted);
  await findConfigSource(dir, counted);
  t.equal(listed, 2, 'changed just now: listed at every read');
  now += LISTING_SETTLED_MS + 10;
  await findConfigSource(dir, counted); // listed: the last listing was not settled
  await findConfigSource(dir, counted);
  t.equal(listed, 3, 'settled: listed once more, then used again');
});

t.test(
  'an idle directory is not listed again until the audit; the audit reports a difference',
  async (t) => {
    const dir = tempDir(t, 'listings');
    writeFileSync(join(dir, 'ip-masq-a'), '');
    const past = new Date(Date.now() - 10_000);
    utimesSync(dir, past, past);
    let now = Date.now() + 5_000; // the directory's ctime is now: settled 5 s on
    let shown = ['ip-masq-a'];
    let listed = 0;
    const mismatches: string[] = [];
    const listings = new DirectoryListings({
      listed: () => listed++,
      mismatch: (d) => mismatches.push(d.difference),
      // A listing the test controls: the directory itself stays as it is.
      readdir: async () => [...shown],
      now: () => now,
    });
    await findConfigSource(dir, listings);
    t.equal(listed, 1);
    for (let i = 0; i < 10; i++) {
      now += 1_000;
      await findConfigSource(dir, listings);
    }
    t.equal(listed, 1, 'ten idle reads list nothing');
    t.same(mismatches, []);
    shown = ['ip-masq-a', 'ip-masq-b']; // a listing the stamp did not show
    now += LISTING_AUDIT_MS;
    const source = await findConfigSource(dir, listings);
    t.equal(listed, 2, 'listed again at the audit');
    t.equal(mismatches.length, 1, 'the difference reported');
    t.match(mismatches[0], /1 name\(s\) added \(ip-masq-b\), 0 gone/);
    t.same(
      source.kind === 'directory' ? source.files.length : -1,
      1,
      "the fresh listing's answer used (ip-masq-b does not exist, so it is skipped)",
    );
  },
);

t.test('a directory over the limit is refused and, idle, not listed again', async (t) => {
  const dir = tempDir(t, 'listings');
  for (let i = 0; i <= 1000; i++) writeFileSync(join(dir, `ip-masq-${i}`), '');
  const past = new Date(Date.now() - 10_000);
  utimesSync(dir, past, past);
  let listed = 0;
  const listings = new DirectoryListings({ listed: () => listed++, now: () => Date.now() + 5_000 });
  for (let i = 0; i < 5; i++) {
    const source = await findConfigSource(dir, listings);
    t.equal(source.kind, 'error');
  }
  t.equal(listed, 1, 'listed once in five reads');
  rmSync(join(dir, 'ip-masq-0'));
  t.equal((await findConfigSource(dir, listings)).kind, 'directory', 'one removed: read again');
  t.equal(listed, 2);
});
