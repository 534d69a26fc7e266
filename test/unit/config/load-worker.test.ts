// The agent loads its config on a worker thread: same results as loadConfig, classes and freeze revived.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { tempDir } from '../../../harness/netns.js';
import { loadConfig } from '../../../src/config/index.js';
import { loadSourceOffThread, workerAnswers } from '../../../src/config/load-worker.js';
import { findConfigSource } from '../../../src/config/source.js';
import { ConfigError, type LoadOptions } from '../../../src/config/types.js';
import { scalars } from '../../helpers/config.js';

const options: LoadOptions = { enableIPv6: true, nomasqAllReservedRanges: false };

t.test('valid, invalid and missing configs give what loadConfig gives', async (t) => {
  const dir = tempDir(t, 'worker');
  const cases = {
    valid:
      'nonMasqueradeCIDRs: [10.0.0.0/8, "fd00::/8", 10.1.0.0/16]\nmasqueradeCIDRs: [10.9.0.0/16]\nfoo: 1\n',
    invalid: 'nonMasqueradeCIDRs: [10.0.0.1/8]\n',
  };
  for (const [name, text] of Object.entries(cases)) writeFileSync(join(dir, name), text);
  for (const name of [...Object.keys(cases), 'missing']) {
    const path = join(dir, name);
    const [inThread, offThread] = await Promise.all([
      loadConfig(path, options),
      findConfigSource(path).then((source) => loadSourceOffThread(source, options)),
    ]);
    t.same(offThread, inThread, `${name}: same result`);
    if (offThread.ok) {
      t.ok(
        Object.isFrozen(offThread.config) && Object.isFrozen(offThread.config.nonMasquerade.ipv4),
        `${name}: frozen`,
      );
    } else {
      t.ok(offThread.error instanceof ConfigError, `${name}: a ConfigError`);
      t.match(offThread.error.message, /nonMasqueradeCIDRs\[0\]: "10\.0\.0\.1\/8" is not aligned/);
    }
  }
});

t.test('a config that takes too long is refused, and the next load works', async (t) => {
  const dir = tempDir(t, 'worker');
  const slow = join(dir, 'slow');
  // Thousands of stray closing brackets: the yaml parser builds one error object each (seconds).
  // 9 000 keys: within the parse limits, and a few hundred ms in the full parser.
  writeFileSync(slow, Array.from({ length: 9_000 }, (_, i) => `k${i}: 1`).join('\n'));
  const refused = await loadSourceOffThread(await findConfigSource(slow), options, 50);
  t.notOk(refused.ok);
  if (!refused.ok) t.match(refused.error.message, /slow: reading took longer than 50 ms; refused/);
  const good = join(dir, 'good');
  writeFileSync(good, 'masqLinkLocal: true\n');
  const next = await loadSourceOffThread(await findConfigSource(good), options);
  t.ok(next.ok && scalars(next.config).masqLinkLocal, 'a new worker answers');
});

t.test(
  'an edit of a large list crosses as a splice, with the result of a whole load',
  async (t) => {
    const dir = tempDir(t, 'worker');
    const path = join(dir, 'ip-masq-agent');
    const lines = Array.from(
      { length: 5000 },
      (_, i) => `  - 10.${(i >> 8) & 255}.${i & 255}.0/24`,
    );
    const text = (list: readonly string[]) =>
      `cidrLimit: 10000\nnonMasqueradeCIDRs:\n${list.join('\n')}\nmasqueradeCIDRs:\n  - 10.99.0.0/16\n`;
    const steps: [readonly string[], boolean][] = [
      [lines, false],
      [[...lines, '  - 10.200.0.0/24'], true], // added last
      [['  - 9.0.0.0/24', ...lines, '  - 10.200.0.0/24'], true], // added first
      // 9.0.0.0/24 and 10.0.0.0/24 removed: 10.0.0.0/23 before, 10.0.1.0/24 now.
      [[...lines.slice(1), '  - 10.200.0.0/24'], true],
      [[...lines.slice(1), '  - 10.0.0.1/24'], false], // invalid
      // The worker holds no valid config after an invalid one: whole again, then spliced.
      [[...lines.slice(1), '  - 10.200.0.0/24'], false],
      [lines.slice(1), true],
    ];
    for (const [i, [list, splice]] of steps.entries()) {
      writeFileSync(path, text(list));
      const source = await findConfigSource(path);
      const before = workerAnswers.spliced;
      const offThread = await loadSourceOffThread(source, options);
      t.same(offThread, await loadConfig(path, options), `step ${i}: the result of a whole load`);
      t.equal(workerAnswers.spliced - before, splice ? 1 : 0, `step ${i}: spliced or not`);
    }
  },
);
