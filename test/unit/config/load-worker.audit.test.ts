// The config worker audits its fast answers (docs/writes.md, "The everyday edit"): each answer
// worked out from the last load is compared with a whole load of the same bytes soon after. With
// the test-only fault dropFirstAddition (given to the worker by the load that starts it), the
// first edit adding an entry leaves it out: the audit must find that, name the file and line, and the worker must load whole from
// then on.
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { tempDir } from '../../../harness/netns.js';

import {
  loadSourceOffThread,
  onFastPathMismatch,
  workerAnswers,
  differenceOf,
} from '../../../src/config/load-worker.js';
import { findConfigSource } from '../../../src/config/source.js';
import { loadConfig } from '../../../src/config/index.js';
type Mismatch = Parameters<Parameters<typeof onFastPathMismatch>[0]>[0];

const options = { enableIPv6: false, nomasqAllReservedRanges: false };

/** 4 001 /24s: over the 64 KiB the agent's own thread reads, so the worker does. */
function text(extra: readonly string[]): string {
  const items = Array.from({ length: 4001 }, (_, i) => {
    const b = i * 2;
    return `  - ${10 + (b >> 16)}.${(b >> 8) & 255}.${b & 255}.0/24`;
  });
  return `cidrLimit: 100000\nnonMasqueradeCIDRs:\n${[...items, ...extra].join('\n')}\n`;
}

t.test('a wrong fast answer is found by the audit, and the whole answer loaded', async (t) => {
  const dir = tempDir(t, 'audit');
  const path = join(dir, 'ip-masq-agent');
  const write = (body: string) => {
    writeFileSync(`${path}.tmp`, body);
    renameSync(`${path}.tmp`, path);
  };
  const mismatches: Mismatch[] = [];
  const seen = new Promise<void>((resolve) => {
    const off = onFastPathMismatch((m: Mismatch) => {
      mismatches.push(m);
      off();
      resolve();
    });
  });
  const load = async (whole = false) =>
    loadSourceOffThread(await findConfigSource(path), options, undefined, whole, {
      dropFirstAddition: true,
    });

  write(text([]));
  const first = await load();
  t.ok(first.ok, 'the first load is valid');
  const spliced = workerAnswers.spliced;
  write(text(['  - 203.0.113.0/24']));
  const fast = await load();
  t.equal(workerAnswers.spliced, spliced + 1, 'the edit was answered from the last load');
  t.ok(
    fast.ok && !fast.config.nonMasquerade.ipv4.includes('203.0.113.0/24'),
    'the fault left it out',
  );
  // The worker does not hold the process open between loads (the agent has its server for that).
  const alive = setInterval(() => {}, 1000);
  t.teardown(() => clearInterval(alive));
  await seen;
  t.equal(mismatches.length, 1, 'one mismatch');
  const [mismatch] = mismatches;
  t.match(mismatch?.difference, /nonMasquerade ipv4: .*203\.0\.113\.0\/24/, 'the difference named');
  t.same(mismatch?.edits, [`${path} line 4004`], 'the file and the line edited');

  // The reconciler reads whole after a mismatch; the worker loads whole anyway from now on.
  const whole = workerAnswers.whole;
  const fixed = await load(true);
  t.equal(workerAnswers.whole, whole + 1, 'loaded whole');
  t.same(fixed, await loadConfig(path, options), 'the whole answer, as a fresh process reads it');

  // The state is made again from the whole load: the next edit is fast again, and agrees.
  const audited = workerAnswers.audited;
  write(text(['  - 203.0.113.0/24', '  - 198.51.100.0/24']));
  const next = await load();
  t.equal(workerAnswers.spliced, spliced + 2, 'the next edit answered from the last load');
  t.same(next, await loadConfig(path, options), 'and right');
  for (let i = 0; i < 100 && workerAnswers.audited === audited; i++)
    await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal(workerAnswers.audited, audited + 1, 'audited');
  t.equal(mismatches.length, 1, 'no mismatch');
});

t.test('differenceOf names the first difference, and none for equal answers', async (t) => {
  const dir = tempDir(t, 'audit');
  const a = join(dir, 'a');
  const b = join(dir, 'b');
  writeFileSync(a, 'nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\n');
  writeFileSync(b, 'nonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\n');
  const ra = await loadConfig(a, options);
  const rb = await loadConfig(b, options);
  t.equal(differenceOf(ra, await loadConfig(a, options)), undefined);
  t.match(
    differenceOf(ra, rb),
    /entry \d+ is 192\.168\.0\.0\/16 in the fast answer, 172\.16\.0\.0\/12/,
  );
  writeFileSync(b, 'nonMasqueradeCIDRs: [10.0.0.1/8]\n');
  t.match(differenceOf(ra, await loadConfig(b, options)), /finds the config invalid/);
  writeFileSync(b, 'nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\nresyncInterval: 30s\n');
  t.match(differenceOf(ra, await loadConfig(b, options)), /other keys differ/);
});
