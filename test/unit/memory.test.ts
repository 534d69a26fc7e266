// What the agent keeps once its work is done (docs/design.md, "Memory"): the config worker's full
// collection after a load, the agent's thread's once it is back on a small config (HeapTidier),
// glibc's fixed threshold for giving a large block its own mapping, and the program's pages handed
// back to the kernel.
import { execFile } from 'node:child_process';
import {
  closeSync,
  fsyncSync,
  openSync,
  readFileSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { getHeapSpaceStatistics, getHeapStatistics } from 'node:v8';
import t from 'tap';
import { tempDir } from '../../harness/netns.js';
import { collectGarbage, HeapTidier } from '../../src/memory.js';
import { MemoryPolicy, SMALL_CONFIG_CIDRS } from '../../src/memory-policy.js';
import { mapLargeAllocations, pageOutFileMappings } from '../../src/kernel/addon.js';

t.test('collectGarbage frees what is no longer reachable at once', async (t) => {
  collectGarbage();
  const before = getHeapStatistics().used_heap_size;
  let garbage: string[] | undefined = Array.from({ length: 300_000 }, (_, i) => `10.${i}.0.0/24`);
  t.ok(getHeapStatistics().used_heap_size > before + 8 * 2 ** 20, 'the list takes room');
  t.equal(garbage.length, 300_000);
  garbage = undefined;
  collectGarbage();
  t.ok(getHeapStatistics().used_heap_size < before + 2 * 2 ** 20, 'and it is gone after the call');
  t.equal(garbage, undefined);
});

t.test("collectGarbage compacts the old generation's pages left mostly free", async (t) => {
  collectGarbage();
  const oldSpace = () => {
    const space = getHeapSpaceStatistics().find((s) => s.space_name === 'old_space');
    if (!space) throw new Error('no old_space');
    return space;
  };
  // One object in twenty survives a pass, then one in ten of those: spread thinly over many pages,
  // the way a stream of edits leaves the agent's kept answers among its garbage.
  let kept: Array<{ v: string }> = [];
  for (let pass = 0; pass < 30; pass++) {
    for (let i = 0; i < 100_000; i++) {
      const o = { v: `${'x'.repeat(10)}${i}.${pass}` };
      if (i % 20 === 0) kept.push(o);
    }
  }
  collectGarbage();
  const spread = oldSpace();
  t.ok(
    spread.space_size > 32 * 2 ** 20,
    `they fill the old generation (${spread.space_size} bytes)`,
  );
  kept = kept.filter((_, i) => i % 10 === 0);
  collectGarbage();
  const after = oldSpace();
  t.ok(
    after.space_size - after.space_used_size < 8 * 2 ** 20,
    `after the collection the old generation holds little free room: ${after.space_size} bytes for ${after.space_used_size} used`,
  );
  t.equal(kept.length, 15_000);
});

t.test("a worker's load does not grow the agent's thread's young generation", async (t) => {
  // In a process of its own: this one's young generation grew while tap and tsx loaded. A worker's
  // start sets V8's flags back to their defaults; without restoreYoungGrowth the agent's thread's
  // young generation grew to 32 MiB along a stream of edits (docs/design.md, "Memory").
  const dir = tempDir(t, 'young');
  const file = join(dir, 'ip-masq-agent');
  const items = Array.from({ length: 20_000 }, (_, i) => `  - 10.${i >> 8}.${i & 255}.0/24`);
  writeFileSync(file, `cidrLimit: 30000\nnonMasqueradeCIDRs:\n${items.join('\n')}\n`);
  // The built modules (npm test builds them): the worker's module runs as the agent runs it.
  const src = (path: string) => JSON.stringify(new URL(`../../dist/${path}`, import.meta.url).href);
  const script = `const { conserveMemory } = await import(${src('memory.js')});
conserveMemory();
const { getHeapSpaceStatistics } = await import('node:v8');
const young = () => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size;
const { findConfigSource } = await import(${src('config/source.js')});
const { loadSourceOffThread, endLoaderThread } = await import(${src('config/load-worker.js')});
const before = young();
const result = await loadSourceOffThread(await findConfigSource(${JSON.stringify(file)}), { enableIPv6: false, nomasqAllReservedRanges: false });
endLoaderThread();
// What survives a scavenge or two: V8 grows the young generation for this when it may.
const kept = [];
for (let pass = 0; pass < 10; pass++) for (let i = 0; i < 300000; i++) kept.push({ x: i + 'y' + pass });
process.stdout.write(JSON.stringify({ ok: result.ok, entries: result.ok ? result.config.nonMasquerade.ipv4.length : 0, kept: kept.length, before, after: young() }));`;
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      ([key]) => key !== 'NODE_OPTIONS' && !key.startsWith('_TAPJS_'),
    ),
  );
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--input-type=module', '-e', script],
    { env, timeout: 60_000 },
  );
  const answer = JSON.parse(stdout) as {
    ok: boolean;
    entries: number;
    before: number;
    after: number;
  };
  t.ok(answer.ok, 'the worker loaded the config');
  t.ok(answer.entries > 0, `${answer.entries} entries after merging`);
  t.ok(
    answer.after <= Math.max(answer.before, 4 * 2 ** 20),
    `young generation ${answer.before} bytes before, ${answer.after} after`,
  );
});

t.test('HeapTidier collects once the heap grew and the work went quiet, then trims', async (t) => {
  let used = 10 * 2 ** 20;
  const timers: Array<{ callback: () => void; ms: number; cleared: boolean; unref(): unknown }> =
    [];
  const calls: string[] = [];
  let clock = 0;
  const tidier = new HeapTidier(
    {
      now: () => clock,
      heapUsed: () => used,
      collect: () => {
        calls.push('collect');
        used = 12 * 2 ** 20;
      },
      release: (small) => calls.push(small ? 'release' : 'release, pages kept'),
      setTimeout: (callback, ms) => {
        const timer = { callback, ms, cleared: false, unref: () => timer };
        timers.push(timer);
        return timer;
      },
      clearTimeout: (timer) => {
        for (const fake of timers) if (fake === timer) fake.cleared = true;
      },
    },
    2_000,
    8 * 2 ** 20,
  );
  used += 4 * 2 ** 20;
  tidier.afterWork(true);
  t.equal(timers.length, 0, 'a few MiB more: nothing to do');
  used += 8 * 2 ** 20;
  tidier.afterWork(false);
  t.equal(timers.length, 1, 'more than the growth allowed: a collection is due');
  t.equal(timers[0]?.ms, 2_000);
  tidier.afterWork(true);
  t.equal(timers.length, 2, 'another sync before it ran puts it off again');
  t.ok(timers[0]?.cleared, 'the earlier timer is cleared');
  timers[1]?.callback();
  t.same(calls, ['collect', 'release'], 'collected, then the C heap trimmed and the pages');
  used += 4 * 2 ** 20;
  tidier.afterWork(true);
  t.equal(timers.length, 2, 'measured again from what the collection left');
  used += 8 * 2 ** 20;
  tidier.afterWork(true);
  t.equal(timers.length, 3, 'due again');
  tidier.beforeWork();
  t.ok(timers[2]?.cleared, 'a sync that starts first puts the tidy off until it ends');
  t.same(calls, ['collect', 'release'], 'nothing ran meanwhile');
  tidier.afterWork(false);
  t.equal(timers.length, 4, 'and it ended large: due once more');
  timers[3]?.callback();
  t.same(
    calls,
    ['collect', 'release', 'collect', 'release, pages kept'],
    "with a large config in force: collected and trimmed, the program's pages kept",
  );

  // Syncs that keep coming put it off only so long: past quietMs since it was first due, it runs
  // right after the next sync.
  used += 9 * 2 ** 20;
  tidier.afterWork(false);
  t.equal(timers.length, 5, 'due');
  for (let i = 0; i < 3; i++) {
    clock += 500;
    tidier.beforeWork();
    tidier.afterWork(false);
  }
  t.equal(calls.length, 4, 'put off while less than quietMs passed');
  clock += 600;
  tidier.beforeWork();
  tidier.afterWork(false);
  t.equal(calls.length, 6, 'then collected right after the sync, without waiting for quiet');
  t.same(calls.slice(4), ['collect', 'release, pages kept'], "the program's pages not yet");
  const quiet = timers.at(-1);
  t.ok(quiet && !quiet.cleared, 'the quiet tidy still follows');
  quiet?.callback();
  t.same(calls.slice(6), ['collect', 'release, pages kept'], 'and runs once the work is quiet');
});

t.test(
  "HeapTidier gives the program's pages back once a small config follows a large one, even with no garbage left",
  async (t) => {
    const used = 10 * 2 ** 20;
    const timers: Array<{ callback: () => void; cleared: boolean; unref(): unknown }> = [];
    const calls: string[] = [];
    const tidier = new HeapTidier({
      heapUsed: () => used,
      collect: () => calls.push('collect'),
      release: (small) => calls.push(small ? 'release' : 'release, pages kept'),
      setTimeout: (callback) => {
        const timer = { callback, cleared: false, unref: () => timer };
        timers.push(timer);
        return timer;
      },
      clearTimeout: (timer) => {
        for (const fake of timers) if (fake === timer) fake.cleared = true;
      },
    });
    // The large config's sync and the small one's, V8 having collected by itself: the heap is
    // where it was.
    tidier.afterWork(false);
    t.equal(timers.length, 0, 'a large config in force, no garbage: nothing to do yet');
    tidier.afterWork(true);
    t.equal(timers.length, 1, 'a small one now: a quiet tidy is due');
    timers[0]?.callback();
    t.same(calls, ['collect', 'release'], "the program's pages given back");
    tidier.afterWork(true);
    t.equal(timers.length, 1, 'owed once: the next small sync has nothing to do');
  },
);

t.test('HeapTidier with V8 collecting this thread', async (t) => {
  let trimmed!: () => void;
  const done = new Promise<void>((resolve) => (trimmed = resolve));
  collectGarbage();
  const before = getHeapStatistics().used_heap_size;
  const tidier = new HeapTidier({ release: () => trimmed() }, 1);
  let garbage: string[] | undefined = Array.from({ length: 300_000 }, (_, i) => `10.${i}.0.0/24`);
  t.equal(garbage.length, 300_000);
  garbage = undefined;
  // The tidier's timer is unref'd (it never keeps the agent up): this keeps the test's loop alive.
  const keepAlive = setTimeout(() => {}, 30_000);
  tidier.afterWork(true);
  await done;
  clearTimeout(keepAlive);
  t.equal(garbage, undefined);
  t.ok(
    getHeapStatistics().used_heap_size < before + 4 * 2 ** 20,
    'the garbage is gone once the tidy is over',
  );
});

t.test("mapLargeAllocations sets glibc's mapping threshold", async (t) => {
  t.equal(mapLargeAllocations(), true, 'glibc took the fixed threshold');
  t.equal(mapLargeAllocations(256 * 1024), true);
});

/** Resident KiB of this process's mappings of `path`. */
function residentKiB(path: string): number {
  let mine = false;
  let kib = 0;
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const mapping = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (mapping) mine = mapping[1] === path;
    else if (mine) kib += Number(/^Rss:\s+(\d+) kB/.exec(line)?.[1] ?? 0);
  }
  return kib;
}

t.test(
  "pageOutFileMappings hands a file mapping's resident pages back to the kernel",
  async (t) => {
    // A file only this process maps: the addon's shared object is mapped by other test processes too
    // (the kernel leaves shared pages alone), so this loads a private copy of it: a new inode.
    const dir = tempDir(t, 'pageout');
    const require = createRequire(import.meta.url);
    const copy = join(dir, 'copy.node');
    const fd = openSync(copy, 'w');
    writeSync(fd, readFileSync(require.resolve('../../build/Release/nftables_napi.node')));
    fsyncSync(fd); // clean pages: the kernel does not reclaim pages still waiting to be written
    closeSync(fd);
    const loaded = require(copy) as { mapLargeAllocations(bytes: number): boolean };
    const before = residentKiB(copy);
    t.ok(before > 0, `loading the copy made its pages resident (${before} KiB)`);
    const advised = await pageOutFileMappings();
    t.ok(
      advised >= statSync(copy).size,
      `its mappings were among those advised (${advised} bytes)`,
    );
    const after = residentKiB(copy);
    t.ok(after < before, `fewer of its pages resident after: ${before} -> ${after} KiB`);
    t.equal(
      loaded.mapLargeAllocations(128 * 1024),
      true,
      'its code still runs, read back from the file',
    );
  },
);

t.test(
  'the memory policy: the C heap after every sync, the tidy told whether the config is small',
  async (t) => {
    const calls: string[] = [];
    const policy = new MemoryPolicy({
      release: () => calls.push('release'),
      tidier: {
        beforeWork: () => calls.push('before'),
        afterWork: (small: boolean) => calls.push(`after ${small ? 'small' : 'large'}`),
      },
    });
    policy.beforeSync();
    policy.afterSync(SMALL_CONFIG_CIDRS);
    policy.afterSync(SMALL_CONFIG_CIDRS + 1);
    t.same(calls, ['before', 'release', 'after small', 'release', 'after large']);
    t.equal(SMALL_CONFIG_CIDRS, 2_000, 'its own figure (docs/design.md, "Memory")');
  },
);
