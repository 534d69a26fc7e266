import t, { type Test } from 'tap';
import { mkdirSync, readFileSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { configMapWrite } from '../../helpers/configmap.js';
import { tempDir } from '../../../harness/netns.js';
import { watchConfig, type WatchConfigOptions } from '../../../src/reconcile/watcher.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Starts a watcher that records when it was called, with a tap teardown that closes it. */
function record(t: Test, path: string, opts?: WatchConfigOptions & { onCall?: () => void }) {
  const calls: number[] = [];
  const watcher = watchConfig(
    path,
    () => {
      calls.push(performance.now());
      opts?.onCall?.();
    },
    opts,
  );
  t.teardown(() => watcher.close());
  /** Resolves with the time of the first call after `since`, or undefined after timeoutMs. */
  const callAfter = async (since: number, timeoutMs = 2000): Promise<number | undefined> => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const hit = calls.find((at) => at >= since);
      if (hit !== undefined || performance.now() > deadline) return hit;
      await sleep(10);
    }
  };
  return { calls, watcher, callAfter };
}

/** Acts, then checks onChange follows within 1 s. */
async function expectCallWithin1s(
  t: Test,
  callAfter: (since: number) => Promise<number | undefined>,
  act: () => void,
  what: string,
) {
  const start = performance.now();
  act();
  const at = await callAfter(start);
  t.ok(at !== undefined && at - start <= 1000, `${what}: onChange within 1 s`, {
    latencyMs: at === undefined ? 'never' : Math.round(at - start),
  });
}

t.test('file mode: in-place write, rename-write, delete and re-create', async (t) => {
  const dir = tempDir(t, 'watch');
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, 'nonMasqueradeCIDRs: []\n');
  const { callAfter } = record(t, file);

  await expectCallWithin1s(
    t,
    callAfter,
    () => writeFileSync(file, 'masqLinkLocal: true\n'),
    'in-place write',
  );
  await sleep(200);
  await expectCallWithin1s(
    t,
    callAfter,
    () => {
      writeFileSync(join(dir, '.ip-masq-agent.swp'), 'masqLinkLocal: false\n');
      renameSync(join(dir, '.ip-masq-agent.swp'), file);
    },
    'rename over the file',
  );
  await sleep(200);
  await expectCallWithin1s(t, callAfter, () => unlinkSync(file), 'delete');
  await sleep(200);
  await expectCallWithin1s(t, callAfter, () => writeFileSync(file, 'cidrLimit: 3\n'), 're-create');
});

t.test('file mode: a file that does not exist at start is seen when it appears', async (t) => {
  const dir = tempDir(t, 'watch');
  const file = join(dir, 'ip-masq-agent');
  const { calls, callAfter } = record(t, file);
  await sleep(200);
  t.equal(calls.length, 0, 'no call without a change');
  await expectCallWithin1s(
    t,
    callAfter,
    () => writeFileSync(file, 'cidrLimit: 3\n'),
    'file created',
  );
});

t.test('file mode: a directory that does not exist at start is found and watched', async (t) => {
  const root = tempDir(t, 'watch');
  const dir = join(root, 'etc', 'config');
  const file = join(dir, 'ip-masq-agent');
  const { callAfter } = record(t, file);
  await sleep(100);
  await expectCallWithin1s(
    t,
    callAfter,
    () => {
      mkdirSync(dir, { recursive: true });
      writeFileSync(file, 'cidrLimit: 3\n');
    },
    'directory and file created',
  );
  await sleep(200);
  await expectCallWithin1s(
    t,
    callAfter,
    () => writeFileSync(file, 'cidrLimit: 4\n'),
    'later write',
  );
});

t.test('the watched directory deleted and re-created is watched again', async (t) => {
  const root = tempDir(t, 'watch');
  const dir = join(root, 'config');
  const file = join(dir, 'ip-masq-agent');
  mkdirSync(dir);
  writeFileSync(file, 'cidrLimit: 3\n');
  const { callAfter } = record(t, file, { pollMs: 50 });
  await expectCallWithin1s(
    t,
    callAfter,
    () => rmSync(dir, { recursive: true }),
    'directory removed',
  );
  await sleep(200);
  await expectCallWithin1s(
    t,
    callAfter,
    () => {
      mkdirSync(dir);
      writeFileSync(file, 'cidrLimit: 4\n');
    },
    'directory re-created',
  );
  await sleep(200);
  await expectCallWithin1s(
    t,
    callAfter,
    () => writeFileSync(file, 'cidrLimit: 5\n'),
    'write into it',
  );

  // Replaced within one debounce window: the old inode's watch is dead, the new one must be set up.
  await sleep(200);
  await expectCallWithin1s(
    t,
    callAfter,
    () => {
      rmSync(dir, { recursive: true });
      mkdirSync(dir);
    },
    'directory swapped at once',
  );
  await sleep(200);
  await expectCallWithin1s(
    t,
    callAfter,
    () => writeFileSync(file, 'cidrLimit: 6\n'),
    'write into the swapped directory',
  );
});

t.test('ConfigMap volume symlink swap is seen, in file and directory mode', async (t) => {
  for (const mode of ['file', 'directory'] as const) {
    const dir = tempDir(t, 'watch');
    await configMapWrite(dir, { 'ip-masq-agent': 'cidrLimit: 1\n' });
    const file = join(dir, 'ip-masq-agent');
    let contentSeen = '';
    const { callAfter } = record(t, mode === 'file' ? file : dir, {
      onCall: () => (contentSeen = readFileSync(file, 'utf8')),
    });
    for (const limit of [2, 3]) {
      await sleep(200);
      await expectCallWithin1s(
        t,
        callAfter,
        () => void configMapWrite(dir, { 'ip-masq-agent': `cidrLimit: ${limit}\n` }),
        `${mode} mode, update ${limit}`,
      );
      t.equal(contentSeen, `cidrLimit: ${limit}\n`, 'the callback reads the new content');
    }
  }
});

t.test('directory mode: a file added to the directory is seen', async (t) => {
  const dir = tempDir(t, 'watch');
  const { callAfter } = record(t, dir);
  await expectCallWithin1s(
    t,
    callAfter,
    () => writeFileSync(join(dir, 'ip-masq-extra'), 'cidrLimit: 3\n'),
    'new file',
  );
});

t.test(
  'a burst of 50 writes in 200 ms gives few calls, the last after the last write',
  async (t) => {
    const dir = tempDir(t, 'watch');
    const file = join(dir, 'ip-masq-agent');
    writeFileSync(file, '');
    const { calls } = record(t, file);
    let lastWrite = 0;
    for (let i = 0; i < 50; i++) {
      writeFileSync(file, `cidrLimit: ${i}\n`);
      lastWrite = performance.now();
      await sleep(4);
    }
    await sleep(1000);
    t.ok(calls.length >= 1 && calls.length <= 3, `1 to 3 calls (${calls.length})`);
    t.ok((calls.at(-1) ?? 0) > lastWrite, 'a call after the last write');
  },
);

t.test('a steady stream of writes does not postpone the call past the maximum wait', async (t) => {
  // Debounce 100 ms, so the maximum wait is 500 ms; writes every 20 ms for 3 s never leave 100 ms
  // of quiet: only the maximum wait can make a call before the stream ends.
  const dir = tempDir(t, 'watch');
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, '');
  const { calls } = record(t, file, { debounceMs: 100 });
  const started = performance.now();
  let lastWrite = started;
  for (let i = 0; i < 150; i++) {
    writeFileSync(file, `cidrLimit: ${i}\n`);
    lastWrite = performance.now();
    await sleep(20);
  }
  const during = calls.filter((at) => at < lastWrite);
  t.ok(during.length >= 2, `${during.length} calls while the writes went on`);
  t.ok(
    during.length > 0 && during[0]! - started < 2_000,
    `the first ${Math.round((during[0] ?? Infinity) - started)} ms after the stream began`,
  );
});

t.test('close() stops callbacks, including one already pending', async (t) => {
  const dir = tempDir(t, 'watch');
  const file = join(dir, 'ip-masq-agent');
  writeFileSync(file, '');
  const { calls, watcher } = record(t, file, { debounceMs: 200 });
  writeFileSync(file, 'cidrLimit: 1\n');
  await sleep(50); // the event has arrived; its debounced call is pending
  watcher.close();
  writeFileSync(file, 'cidrLimit: 2\n');
  await sleep(500);
  t.equal(calls.length, 0);
});

t.test('close() while polling for a missing directory stops the poll', async (t) => {
  const root = tempDir(t, 'watch');
  const dir = join(root, 'later');
  const { calls, watcher } = record(t, join(dir, 'ip-masq-agent'), { pollMs: 20 });
  watcher.close();
  mkdirSync(dir);
  writeFileSync(join(dir, 'ip-masq-agent'), 'cidrLimit: 1\n');
  await sleep(300);
  t.equal(calls.length, 0);
});
