// Fuzz of the config reader (README, "Configuration" and "What it does" "no CIDR text reaches nftables as written"): 10 000+
// generated files, text and bytes. Each either gives exactly one ConfigError naming the file, or a
// config whose CIDRs are the formatter's own output and whose rendered script has the fixed shape
// of ours with only those addresses in it.
import { writeFileSync } from 'node:fs';
import { isUtf8 } from 'node:buffer';
import { join } from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { tempDir } from '../../harness/netns.js';
import { formatPrefix, mergePrefixes, parseCidr } from '../../src/cidr/index.js';
import { compile } from '../../src/compile.js';
import {
  ConfigError,
  defaultConfig,
  loadConfig,
  parseConfigText,
  type LoadOptions,
  type LoadResult,
} from '../../src/config/index.js';
import { renderReplace } from '../../src/nftables/render.js';
import { configBytes, configText } from './helpers/generators.js';
import { compileOptions } from '../helpers/compile-options.js';

const TEXT_RUNS = Number(process.env.FUZZ_TEXT_RUNS ?? 8_000);
const FILE_RUNS = Number(process.env.FUZZ_FILE_RUNS ?? 2_000);
const FILE = '/etc/config/ip-masq-agent';
const COMPILE = compileOptions({
  toPorts: [
    { first: 1024, last: 29999 },
    { first: 32768, last: 65535 },
  ],
  enableIPv6: true,
});
// Everything our script may contain: the shape uses nothing else, and addresses are hex, digits, . : /
const SCRIPT_CHARACTERS = /^[A-Za-z0-9 \t\n{}:;,./@!=<>"_-]*$/;
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;
const MAX_MESSAGE = 2_000;

/** The script with set contents and the config hash blanked: what no config may change. */
function skeleton(script: string): string {
  return script
    .replace(/^\t\telements = \{ .* \}\n/gm, '')
    .replace(/sha256:[0-9a-f]{64}/g, 'sha256:X');
}
const expectedSkeleton = (enableIPv6: boolean) =>
  skeleton(
    renderReplace(
      compile(
        defaultConfig({ enableIPv6, nomasqAllReservedRanges: false }),
        { ...COMPILE, enableIPv6 },
        1,
      ),
    ),
  );
const skeletons = new Map([true, false].map((v6) => [v6, expectedSkeleton(v6)]));

function canonical(cidr: string): boolean {
  return formatPrefix(parseCidr(cidr)) === cidr;
}

/** Throws (failing the property) unless `result` obeys the contract for `file`. */
function checkResult(result: LoadResult, file: string, options: LoadOptions): 'valid' | 'invalid' {
  for (const warning of result.warnings) {
    if (!warning.startsWith(`${file}: `))
      throw new Error(`warning does not name the file: ${warning}`);
    if (CONTROL.test(warning) || warning.length > MAX_MESSAGE)
      throw new Error(`unclear warning: ${JSON.stringify(warning.slice(0, 300))}`);
  }
  if (!result.ok) {
    const { error } = result;
    if (!(error instanceof ConfigError)) throw new Error(`not a ConfigError: ${String(error)}`);
    if (error.file !== file || !error.message.startsWith(`${file}: `))
      throw new Error(`error does not name the file: ${error.message}`);
    if (error.message.length <= file.length + 3) throw new Error('empty error message');
    if (CONTROL.test(error.message) || error.message.length > MAX_MESSAGE) {
      throw new Error(`unclear error message: ${JSON.stringify(error.message.slice(0, 300))}`);
    }
    return 'invalid';
  }
  const { config } = result;
  const sets = [config.nonMasquerade, config.masquerade];
  for (const set of sets) {
    for (const [family, list] of [
      ['ipv4', set.ipv4],
      ['ipv6', set.ipv6],
    ] as const) {
      for (const cidr of list)
        if (!canonical(cidr)) throw new Error(`${family} ${JSON.stringify(cidr)} is not canonical`);
      const merged = mergePrefixes(list.map(parseCidr)).map(formatPrefix);
      if (merged.join() !== list.join())
        throw new Error(`${family} set is not merged: ${list.join()}`);
    }
  }
  if (!options.enableIPv6 && sets.some((s) => s.ipv6.length > 0))
    throw new Error('IPv6 accepted with IPv6 off');
  const script = renderReplace(compile(config, { ...COMPILE, enableIPv6: options.enableIPv6 }, 1));
  const bad = [...script].find((c) => !SCRIPT_CHARACTERS.test(c));
  if (bad !== undefined) throw new Error(`script holds ${JSON.stringify(bad)}`);
  if (skeleton(script) !== skeletons.get(options.enableIPv6))
    throw new Error(`script shape changed:\n${script}`);
  for (const match of script.matchAll(/^\t\telements = \{ (.*) \}$/gm)) {
    for (const element of (match[1] as string).split(', ')) {
      const full = element.includes('/')
        ? element
        : `${element}/${element.includes(':') ? 128 : 32}`;
      if (!canonical(full)) throw new Error(`element ${JSON.stringify(element)} is not canonical`);
    }
  }
  return 'valid';
}

const optionsArb = fc.record({ enableIPv6: fc.boolean(), nomasqAllReservedRanges: fc.boolean() });

t.test(`${TEXT_RUNS} generated texts through parseConfigText`, async (t) => {
  const seen = { valid: 0, invalid: 0 };
  const started = Date.now();
  t.doesNotThrow(() =>
    fc.assert(
      fc.property(configText, optionsArb, (text, options) => {
        seen[checkResult(parseConfigText(text, FILE, options), FILE, options)]++;
      }),
      { numRuns: TEXT_RUNS },
    ),
  );
  t.comment(`texts: ${seen.valid} valid, ${seen.invalid} invalid, ${Date.now() - started} ms`);
  t.equal(seen.valid + seen.invalid, TEXT_RUNS);
  // Both branches must be exercised, or the canonical and script checks prove nothing.
  t.ok(seen.valid >= TEXT_RUNS * 0.1, `at least 10% valid (${seen.valid})`);
  t.ok(seen.invalid >= TEXT_RUNS * 0.3, `at least 30% invalid (${seen.invalid})`);
});

t.test(`${FILE_RUNS} generated files (bytes, often not UTF-8) through loadConfig`, async (t) => {
  const dir = tempDir(t, 'fuzz');
  const file = join(dir, 'ip-masq-agent');
  const seen = { valid: 0, invalid: 0, notUtf8: 0 };
  const started = Date.now();
  await t.resolves(
    fc.assert(
      fc.asyncProperty(configBytes, optionsArb, async (bytes, options) => {
        writeFileSync(file, bytes);
        const result = await loadConfig(file, options);
        seen[checkResult(result, file, options)]++;
        if (!isUtf8(bytes)) {
          seen.notUtf8++;
          if (result.ok || result.error.message !== `${file}: is not valid UTF-8 text`) {
            throw new Error(
              `bytes that are not UTF-8 were not refused as such: ${result.ok ? 'ok' : result.error.message}`,
            );
          }
          return;
        }
        // Valid UTF-8: the file reads exactly as its text does.
        const expected = parseConfigText(bytes.toString('utf8'), file, options);
        const summary = (r: LoadResult) => (r.ok ? `ok ${r.config.hash}` : r.error.message);
        if (summary(result) !== summary(expected))
          throw new Error(`file ${summary(result)} != text ${summary(expected)}`);
      }),
      { numRuns: FILE_RUNS },
    ),
  );
  t.comment(
    `files: ${seen.valid} valid, ${seen.invalid} invalid (${seen.notUtf8} not UTF-8), ${Date.now() - started} ms`,
  );
  t.ok(seen.notUtf8 >= FILE_RUNS * 0.2, `at least 20% not UTF-8 (${seen.notUtf8})`);
  t.ok(seen.valid >= FILE_RUNS * 0.05, `some valid (${seen.valid})`);
});

t.test('extremes, one each', async (t) => {
  const dir = tempDir(t, 'fuzz');
  const options: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };
  const texts: Record<string, string> = {
    'JSON nested 100 000 deep': `{"nonMasqueradeCIDRs": ${'['.repeat(100_000)}${']'.repeat(100_000)}}`,
    'YAML nested 20 000 deep': `nonMasqueradeCIDRs: ${'['.repeat(20_000)}${']'.repeat(20_000)}`,
    'YAML block nesting 3 000 deep': Array.from(
      { length: 3_000 },
      (_, i) => `${' '.repeat(i)}k:`,
    ).join('\n'),
    'alias bomb':
      'a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n' +
      'c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n' +
      'e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n',
    'a 10 MB CIDR string': `nonMasqueradeCIDRs: ["10.0.0.0/8${'0'.repeat(10_000_000)}"]`,
    'a 10 MB key': `${'k'.repeat(10_000_000)}: 1`,
    'a 1 MB duration': `resyncInterval: "${'1h'.repeat(500_000)}"`,
    'JSON objects with toString keys':
      '{"cidrLimit": {"toString": 1}, "masqLinkLocal": {"valueOf": 1}}',
    'nft statements in a CIDR':
      'nonMasqueradeCIDRs: ["10.0.0.0/8 }\\n flush ruleset\\n table ip x {"]',
    'NUL in the middle': 'nonMasqueradeCIDRs: ["10.0.0.0\u0000/8"]',
  };
  for (const [name, text] of Object.entries(texts)) {
    const started = Date.now();
    let outcome: string;
    try {
      outcome = checkResult(parseConfigText(text, FILE, options), FILE, options);
    } catch (err) {
      outcome = `failed: ${(err as Error).message.slice(0, 300)}`;
    }
    t.match(outcome, /^(valid|invalid)$/, `${name}: ${outcome} in ${Date.now() - started} ms`);
  }
  t.equal(parseConfigText(texts['nft statements in a CIDR'] as string, FILE, options).ok, false);

  // Over the 16 MiB limit: refused by size, without parsing.
  const big = join(dir, 'ip-masq-big');
  writeFileSync(big, Buffer.alloc(16 * 1024 * 1024 + 1, 0x20));
  const result = await loadConfig(big, options);
  t.equal(checkResult(result, big, options), 'invalid');
  t.match(!result.ok && result.error.message, /above the 16777216-byte \(16 MiB\) limit/);
});
