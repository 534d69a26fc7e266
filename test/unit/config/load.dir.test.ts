// Directory mode (README, "Configuration") and file reading limits, on real files in a temporary directory.
import { chmod, mkdir, mkdtemp, open, rm, symlink, writeFile } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { tmpdir } from 'node:os';
import { promisify } from 'node:util';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import {
  type LoadOptions,
  MAX_CONFIG_BYTES,
  loadConfig,
  parseConfigText,
} from '../../../src/config/index.js';
import { ok } from '../../helpers/results.js';
import { scalars } from '../../helpers/config.js';

const run = promisify(execFile);
const V6: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };

async function tempDir(t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'ipmasq-dir-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

const FILES: [string, string][] = [
  ['ip-masq-a', 'nonMasqueradeCIDRs: [10.0.0.0/9]\nresyncInterval: 30s\ncidrLimit: 10\n'],
  [
    'ip-masq-b.json',
    '{"nonMasqueradeCIDRs": ["10.128.0.0/9", "fd00::/8"], "masqLinkLocal": true, "resyncInterval": "2m"}',
  ],
  ['ip-masq-c', 'masqueradeCIDRs: [10.1.0.0/16]\ncidrLimit: 5\nmasqLinkLocalIPv6: false\n'],
];

t.test('files merge: lists unioned, booleans ORed, smallest resync, largest limit', async (t) => {
  const dir = await tempDir(t);
  for (const [name, text] of FILES) await writeFile(join(dir, name), text);
  const config = ok(t, await loadConfig(dir, V6));
  t.same(config.nonMasquerade, { ipv4: ['10.0.0.0/8'], ipv6: ['fd00::/8', 'fe80::/10'] });
  t.same(config.masquerade, { ipv4: ['10.1.0.0/16'], ipv6: [] });
  t.match(scalars(config), {
    masqLinkLocal: true,
    masqLinkLocalIPv6: false,
    resyncIntervalMs: 30_000,
    cidrLimit: 10,
  });
  t.same(
    config.sources,
    FILES.map(([name]) => join(dir, name)),
    'sources in name order',
  );

  const limited = await tempDir(t);
  await writeFile(
    join(limited, 'ip-masq-1'),
    'cidrLimit: 2\nnonMasqueradeCIDRs: [1.0.0.0/8, 2.0.0.0/8]',
  );
  await writeFile(join(limited, 'ip-masq-2'), 'masqueradeCIDRs: [3.0.0.0/8]');
  const result = await loadConfig(limited, V6);
  t.notOk(result.ok, 'the limit applies to the union of all files');
  if (!result.ok) {
    t.equal(
      result.error.message,
      `${limited}: cidrLimit: 2 is less than the 3 entries of nonMasqueradeCIDRs + masqueradeCIDRs across 2 files (raise cidrLimit to at least 3, or list fewer CIDRs)`,
    );
  }
});

t.test('the order files are created in never changes the result', async (t) => {
  const hashes = new Set<string>();
  for (const order of [
    [0, 1, 2],
    [2, 1, 0],
    [1, 2, 0],
  ]) {
    const dir = await tempDir(t);
    for (const index of order) {
      const [name, text] = FILES[index] as [string, string];
      await writeFile(join(dir, name), text);
    }
    hashes.add(ok(t, await loadConfig(dir, V6)).hash);
  }
  // Renaming files reorders them; the meaning, and so the hash, must stay.
  const renamed = await tempDir(t);
  for (const [i, [, text]] of FILES.entries())
    await writeFile(join(renamed, `ip-masq-${9 - i}`), text);
  hashes.add(ok(t, await loadConfig(renamed, V6)).hash);
  t.equal(hashes.size, 1);
});

t.test('one bad file invalidates the whole directory', async (t) => {
  const dir = await tempDir(t);
  await writeFile(join(dir, 'ip-masq-good'), 'nonMasqueradeCIDRs: [1.0.0.0/8]');
  await writeFile(join(dir, 'ip-masq-zbad'), 'nonMasqueradeCIDRs:\n  - 10.0.0.1/8\n');
  const result = await loadConfig(dir, V6);
  t.notOk(result.ok);
  if (!result.ok)
    t.match(
      result.error.message,
      `${join(dir, 'ip-masq-zbad')}: nonMasqueradeCIDRs[0]: "10.0.0.1/8"`,
    );
});

t.test('only regular ip-masq* files count; dot-names skipped', async (t) => {
  const dir = await tempDir(t);
  await writeFile(join(dir, '.ip-masq-hidden'), 'nonMasqueradeCIDRs: [broken');
  await writeFile(join(dir, 'other-config'), 'nonMasqueradeCIDRs: [2.0.0.0/8]');
  await writeFile(join(dir, 'config'), '*');
  await mkdir(join(dir, 'ip-masq-subdir'));
  const none = await loadConfig(dir, V6);
  const config = ok(t, none);
  t.same(
    config.nonMasquerade.ipv4,
    ['10.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.168.0.0/16'],
    'defaults',
  );
  t.same(config.sources, []);
  t.same(none.warnings, [`${join(dir, 'ip-masq-subdir')}: skipped: not a regular file`]);
  await writeFile(join(dir, 'ip-masq-agent'), 'nonMasqueradeCIDRs: [1.0.0.0/8]');
  await symlink(join(dir, 'missing'), join(dir, 'ip-masq-dangling'));
  const one = await loadConfig(dir, V6);
  t.same(ok(t, one).nonMasquerade.ipv4, ['1.0.0.0/8', '169.254.0.0/16']);
  t.match(one.warnings, [/ip-masq-dangling: skipped: a dangling symlink/]);
});

t.test('a ConfigMap volume layout works', async (t) => {
  const dir = await tempDir(t);
  const stamped = '..2026_01_02_03_04_05.123456789';
  await mkdir(join(dir, stamped));
  await writeFile(
    join(dir, stamped, 'ip-masq-agent'),
    'nonMasqueradeCIDRs:\n  - 10.244.0.0/16\nmasqLinkLocal: true\n',
  );
  await symlink(stamped, join(dir, '..data'));
  await symlink('..data/ip-masq-agent', join(dir, 'ip-masq-agent'));
  const config = ok(t, await loadConfig(dir, V6));
  t.same(config.nonMasquerade.ipv4, ['10.244.0.0/16']);
  t.same(config.sources, [join(dir, 'ip-masq-agent')]);
  const viaFile = ok(t, await loadConfig(join(dir, 'ip-masq-agent'), V6));
  t.equal(viaFile.hash, config.hash, 'the symlinked file read directly gives the same config');
});

t.test('a file over 16 MiB is refused without reading it', async (t) => {
  const dir = await tempDir(t);
  const file = join(dir, 'ip-masq-agent');
  const handle = await open(file, 'w');
  await handle.truncate(MAX_CONFIG_BYTES + 1); // sparse: costs no disk and no read
  await handle.close();
  const result = await loadConfig(file, V6);
  t.notOk(result.ok);
  if (!result.ok)
    t.match(result.error.message, `${file}: is ${MAX_CONFIG_BYTES + 1} bytes, above the`);
  const inDir = await loadConfig(dir, V6);
  t.notOk(inDir.ok, 'also in directory mode');
  const exact = join(dir, 'exact');
  const exactHandle = await open(exact, 'w');
  await exactHandle.truncate(MAX_CONFIG_BYTES);
  await exactHandle.close();
  const atLimit = await loadConfig(exact, V6);
  // 16 MiB of NUL bytes is read (it is not over the limit) and then fails as YAML, not as too large.
  t.notOk(atLimit.ok);
  if (!atLimit.ok) t.notMatch(atLimit.error.message, /above the/);
});

t.test(
  'a file reads as its text does: one byte order mark taken off, a second one content',
  async (t) => {
    const dir = await tempDir(t);
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const one = join(dir, 'one');
    const two = join(dir, 'two');
    await writeFile(one, Buffer.concat([bom, Buffer.from('{}')]));
    await writeFile(two, Buffer.concat([bom, bom, Buffer.from('{}')]));
    t.ok((await loadConfig(one, V6)).ok, 'one mark: the JSON after it');
    const second = await loadConfig(two, V6);
    const asText = parseConfigText('\uFEFF\uFEFF{}', two, V6);
    t.notOk(second.ok, 'two marks: the second is a character the JSON does not take');
    t.same(
      second.ok ? 'ok' : second.error.message,
      asText.ok ? 'ok' : asText.error.message,
      'as its text reads',
    );
  },
);

t.test('unreadable and odd paths are config errors, not crashes', async (t) => {
  const dir = await tempDir(t);
  const file = join(dir, 'ip-masq-agent');
  await writeFile(file, 'masqLinkLocal: true');
  await writeFile(join(dir, 'latin1'), Buffer.from([0x6d, 0x3a, 0xe9, 0x0a]));
  const notUtf8 = await loadConfig(join(dir, 'latin1'), V6);
  t.notOk(notUtf8.ok);
  if (!notUtf8.ok) t.match(notUtf8.error.message, /latin1: is not valid UTF-8 text$/);
  const notDir = await loadConfig(join(file, 'below'), V6);
  t.notOk(notDir.ok, 'ENOTDIR is an error, only ENOENT means "no config"');
  const device = await loadConfig('/dev/null', V6);
  t.notOk(device.ok);
  if (!device.ok)
    t.match(device.error.message, /^\/dev\/null: is neither a regular file nor a directory$/);
  await chmod(file, 0o000);
  t.equal(await loadUnprivileged(file), `${file}: cannot be read: permission denied (EACCES)`);
});

/**
 * loadConfig(file) where file permissions apply. Root reads everything, so as root the loader runs
 * in a child without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (still uid 0, so it can read the repo,
 * wherever it is checked out, but not a mode-000 file).
 */
async function loadUnprivileged(file: string): Promise<string> {
  if (process.getuid?.() !== 0) {
    const result = await loadConfig(file, V6);
    return result.ok ? 'ok' : result.error.message;
  }
  const moduleUrl = new URL('../../../src/config/index.ts', import.meta.url).href;
  const script = `const { loadConfig } = await import(${JSON.stringify(moduleUrl)});
const result = await loadConfig(${JSON.stringify(file)}, { enableIPv6: true, nomasqAllReservedRanges: false });
process.stdout.write(result.ok ? 'ok' : result.error.message);`;
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      ([key]) => key !== 'NODE_OPTIONS' && !key.startsWith('_TAPJS_'),
    ),
  );
  const drop = '-dac_override,-dac_read_search';
  const { stdout } = await run(
    'setpriv',
    [
      `--inh-caps=${drop}`,
      `--bounding-set=${drop}`,
      process.execPath,
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      script,
    ],
    { env, timeout: 20_000 },
  );
  return stdout;
}
