// The loader's cache: reuse a result only while every file the config source names is unchanged.
import { mkdirSync, renameSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { tempDir } from '../../../harness/netns.js';
import { loadConfig, loadSource } from '../../../src/config/load.js';
import { ConfigError, type LoadOptions } from '../../../src/config/types.js';
import { configLoader } from '../../../src/config/loader.js';

const options: LoadOptions = { enableIPv6: false, nomasqAllReservedRanges: false };

function counted() {
  let reads = 0;
  const load = configLoader(async (source, opts) => {
    reads++;
    return loadSource(source, opts);
  });
  return { load, reads: () => reads };
}

t.test('file: unchanged → no read; rewritten, renamed over, deleted → read', async (t) => {
  const dir = tempDir(t, 'cache');
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
  const { load, reads } = counted();
  const first = await load(file, options);
  const again = await load(file, options);
  t.equal(reads(), 1);
  t.equal(again, first, 'the same result object');
  writeFileSync(`${file}.tmp`, 'nonMasqueradeCIDRs: [10.0.0.0/16]\n');
  renameSync(`${file}.tmp`, file);
  const renamed = await load(file, options);
  t.equal(reads(), 2);
  t.ok(renamed.ok && renamed.config.nonMasquerade.ipv4.includes('10.0.0.0/16'));
  unlinkSync(file);
  const gone = await load(file, options);
  t.equal(reads(), 3);
  t.ok(gone.ok && gone.config.nonMasquerade.ipv4.includes('172.16.0.0/12'), 'defaults');
  await load(file, options);
  t.equal(reads(), 3, 'still missing: cached');
  writeFileSync(file, 'masqLinkLocal: true\n');
  await load(file, options);
  t.equal(reads(), 4, 'appeared');
});

t.test('an invalid file is parsed once while unchanged, and read again once changed', async (t) => {
  const dir = tempDir(t, 'cache');
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, 'nonMasqueradeCIDRs: [10.0.0.1/8]\n');
  const { load, reads } = counted();
  const first = await load(file, options);
  t.notOk(first.ok);
  t.equal(await load(file, options), first, 'the same failure, not parsed again');
  t.equal(reads(), 1);
  writeFileSync(`${file}.tmp`, 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
  renameSync(`${file}.tmp`, file);
  t.ok((await load(file, options)).ok, 'fixed');
  t.equal(reads(), 2);
});

t.test('a failure to read the file is tried again, file unchanged', async (t) => {
  const dir = tempDir(t, 'cache');
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
  let reads = 0;
  const load = configLoader(async () => {
    reads++;
    const error = new ConfigError(file, 'cannot be read: EMFILE', 'unreadable');
    return { ok: false, error, warnings: [] };
  });
  await load(file, options);
  await load(file, options);
  t.equal(reads, 2);
});

t.test('an errno is an unreadable config, by its kind and not its wording', async (t) => {
  const dir = tempDir(t, 'cache');
  writeFileSync(join(dir, 'plain'), 'x');
  // stat through a regular file as if it were a directory: ENOTDIR, a failure to read.
  symlinkSync(join(dir, 'plain', 'sub'), join(dir, 'ip-masq-x'));
  const result = await loadConfig(dir, options);
  t.match(result, {
    ok: false,
    error: { kind: 'unreadable', message: /ip-masq-x: cannot be read: ENOTDIR/ },
  });
  writeFileSync(join(dir, 'bad'), 'nonMasqueradeCIDRs: [10.0.0.1/8]\n');
  const invalid = await loadConfig(join(dir, 'bad'), options);
  t.match(invalid, { ok: false, error: { kind: 'invalid' } });
});

/** A ConfigMap version `name` with these files, swapped in as kubelet does (`..data` renamed over). */
function swapTo(dir: string, name: string, files: Record<string, string>): void {
  mkdirSync(join(dir, name));
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, name, file), text);
  symlinkSync(name, join(dir, '..data_tmp'));
  renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
}

t.test('directory: a ConfigMap symlink swap and a new ip-masq file are seen', async (t) => {
  const dir = tempDir(t, 'cache');
  swapTo(dir, '..v1', { 'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/8]\n' });
  symlinkSync('..data/ip-masq-agent', join(dir, 'ip-masq-agent'));
  const { load, reads } = counted();
  await load(dir, options);
  await load(dir, options);
  t.equal(reads(), 1);
  swapTo(dir, '..v2', { 'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/9]\n' });
  const swapped = await load(dir, options);
  t.equal(reads(), 2);
  t.ok(swapped.ok && swapped.config.nonMasquerade.ipv4.includes('10.0.0.0/9'));
  // A key added the way kubelet adds one: in a new version, then its own symlink.
  swapTo(dir, '..v3', {
    'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/9]\n',
    'ip-masq-extra': 'masqueradeCIDRs: [10.1.0.0/16]\n',
  });
  const added = await load(dir, options);
  t.equal(reads(), 3);
  t.ok(added.ok && added.config.masquerade.ipv4.includes('10.1.0.0/16'), 'read before its symlink');
  writeFileSync(join(dir, 'unrelated'), 'x');
  writeFileSync(join(dir, 'ip-masq-beside'), 'masqueradeCIDRs: [10.2.0.0/16]\n');
  const beside = await load(dir, options);
  t.equal(reads(), 3, 'files beside the ConfigMap version are not part of it');
  t.ok(beside.ok && !beside.config.masquerade.ipv4.includes('10.2.0.0/16'));
});

t.test('a ConfigMap swap is read whole, whichever of its steps came so far', async (t) => {
  const dir = tempDir(t, 'swap');
  swapTo(dir, '..v1', { 'ip-masq-a': 'nonMasqueradeCIDRs: [10.0.0.0/8]\n' });
  symlinkSync('..data/ip-masq-a', join(dir, 'ip-masq-a'));
  const { load } = counted();
  // The next version renames key a to key b; kubelet has swapped ..data but not yet moved the
  // keys' own symlinks: a still points into the new version, where it is gone; b has none yet.
  swapTo(dir, '..v2', { 'ip-masq-b': 'nonMasqueradeCIDRs: [192.168.0.0/16]\n' });
  const midway = await load(dir, options);
  t.ok(midway.ok, 'valid');
  t.same(
    midway.ok ? midway.config.nonMasquerade.ipv4 : [],
    ['169.254.0.0/16', '192.168.0.0/16'],
    "the new version's keys, not the defaults of a directory with no file",
  );
  t.same(midway.warnings, [], 'no dangling symlink to warn about');
});

t.test(
  'options compared by value: a fresh object with the same options is a hit, other ones a miss',
  async (t) => {
    const dir = tempDir(t, 'cache');
    const file = join(dir, 'ip-masq-agent');
    writeFileSync(file, 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
    const { load, reads } = counted();
    const labelled = (labels: Array<[string, string]>): LoadOptions => ({
      ...options,
      nodeLabels: new Map(labels),
    });
    await load(
      file,
      labelled([
        ['pool', 'gpu'],
        ['zone', 'a'],
      ]),
    );
    await load(
      file,
      labelled([
        ['zone', 'a'],
        ['pool', 'gpu'],
      ]),
    );
    t.equal(reads(), 1, 'the same labels in another object (and order): cached');
    await load(
      file,
      labelled([
        ['pool', 'cpu'],
        ['zone', 'a'],
      ]),
    );
    t.equal(reads(), 2, 'another label: read again');
    await load(file, { ...options, enableIPv6: true });
    t.equal(reads(), 3, 'another flag: read again');
  },
);
