// Which configs the agent parses on its own thread and which on the worker (config/loader.ts): the
// linear-time shapes up to 64 KiB here, anything that needs the full YAML parser above 4 KiB there,
// with the same result either way.
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { tempDir } from '../../../harness/netns.js';
import { loadSource } from '../../../src/config/load.js';
import { IN_THREAD_BUDGET, loadAdaptive, type SourceLoader } from '../../../src/config/loader.js';
import { loadSourceOffThread } from '../../../src/config/load-worker.js';
import { findConfigSource } from '../../../src/config/source.js';
import type { LoadOptions } from '../../../src/config/types.js';
import { ParseDeferred, parseConfigDocument } from '../../../src/config/yaml.js';

const options: LoadOptions = { enableIPv6: false, nomasqAllReservedRanges: false };

const cidrs = (count: number) =>
  Array.from({ length: count }, (_, i) => `10.${(i >> 8) & 255}.${i & 255}.0/24`);

const shapes: Record<string, { text: string; worker: boolean }> = {
  'a few CIDRs': { text: 'nonMasqueradeCIDRs: [10.0.0.0/8]\n', worker: false },
  '3 000 CIDRs one per line': {
    text: `cidrLimit: 4000\nmasqLinkLocal: true\nnonMasqueradeCIDRs:\n${cidrs(3000)
      .map((c) => `  - ${c}\n`)
      .join('')}`,
    worker: false,
  },
  '3 000 CIDRs as JSON': {
    text: JSON.stringify({ cidrLimit: 4000, nonMasqueradeCIDRs: cidrs(3000) }),
    worker: false,
  },
  '3 000 CIDRs in a flow sequence (full parser)': {
    text: `cidrLimit: 4000\nnonMasqueradeCIDRs: [${cidrs(3000).join(', ')}]\n`,
    worker: true,
  },
  'CIDRs one per line beside 2 000 other keys': {
    text: `nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n${Array.from({ length: 2000 }, (_, i) => `k${i}: v\n`).join('')}`,
    worker: true,
  },
  '4 000 CIDRs one per line (above 64 KiB)': {
    text: `cidrLimit: 5000\nnonMasqueradeCIDRs:\n${cidrs(4000)
      .map((c) => `  - "${c}"\n`)
      .join('')}`,
    worker: true,
  },
};

t.test('each shape parses where it should, with the same result as in-thread', async (t) => {
  const dir = tempDir(t, 'loader');
  let workers = 0;
  const offThread: SourceLoader = (source, opts) => {
    workers++;
    return loadSourceOffThread(source, opts);
  };
  for (const [name, { text, worker }] of Object.entries(shapes)) {
    const file = join(dir, 'ip-masq-agent');
    writeFileSync(file, text);
    const source = await findConfigSource(file);
    const before = workers;
    const result = await loadAdaptive(source, options, offThread);
    t.equal(
      workers > before,
      worker,
      `${name} (${text.length} bytes): ${worker ? 'worker' : 'in-thread'}`,
    );
    t.same(result, await loadSource(source, options), `${name}: same result`);
  }
});

t.test('a budget defers rather than parses what it cannot afford', async (t) => {
  const budget = IN_THREAD_BUDGET;
  const deferred = (text: string) => {
    try {
      parseConfigDocument(text, budget);
      return false;
    } catch (err) {
      return err instanceof ParseDeferred;
    }
  };
  const keys = Array.from({ length: 6_000 }, (_, i) => `k${i}: 1`).join('\n');
  t.ok(deferred(keys), `${keys.length} bytes of keys (the full parser's slowest)`);
  t.ok(deferred(`nonMasqueradeCIDRs: []\n${' '.repeat(budget.maxBytes)}`), 'above 64 KiB');
  const small = parseConfigDocument('}'.repeat(100), budget);
  t.equal(small.ok, false, 'within 4 KiB the full parser still gives its verdict');
  const json = parseConfigDocument(JSON.stringify({ nonMasqueradeCIDRs: cidrs(2000) }), budget);
  t.ok(json.ok, 'JSON is linear: parsed at any size within the budget');
});

/** This process's thread ids (Linux): a worker thread is one more. */
const threads = () => new Set(readdirSync('/proc/self/task'));

/** The thread ids once they have not changed for 100 ms (within 5 s). */
async function stable(): Promise<Set<string>> {
  let last = threads();
  let same = 0;
  for (const deadline = Date.now() + 5_000; same < 5 && Date.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    const now = threads();
    same = now.size === last.size && [...now].every((id) => last.has(id)) ? same + 1 : 0;
    last = now;
  }
  return last;
}

t.test('the worker stays while loads go to it and ends at one that fits in-thread', async (t) => {
  const dir = tempDir(t, 'loader-thread-life');
  const large = join(dir, 'large');
  const small = join(dir, 'small');
  writeFileSync(
    large,
    (shapes['4 000 CIDRs one per line (above 64 KiB)'] as { text: string }).text,
  );
  writeFileSync(small, 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
  const load = async (path: string) => {
    const result = await loadAdaptive(await findConfigSource(path), options);
    t.ok(result.ok, `${path} loads`);
  };
  const settled = async (gone: readonly string[]) => {
    const deadline = Date.now() + 5_000;
    while (gone.some((id) => threads().has(id)) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  // An earlier test's worker ends here, and the libuv pool's threads exist from here on.
  await load(small);
  const before = await stable();
  await load(large);
  const withWorker = threads();
  const added = [...withWorker].filter((id) => !before.has(id));
  t.ok(added.length >= 1, 'the large config started the worker');
  await new Promise((resolve) => setTimeout(resolve, 200));
  await load(large);
  t.same(threads(), withWorker, 'the next large load ran on the same worker, still alive');
  await load(small);
  await settled(added);
  const now = threads();
  // Judged by the worker's own threads: an earlier test's worker may still be ending meanwhile.
  t.same(
    added.filter((id) => now.has(id)),
    [],
    'a load that fits in-thread ended the worker',
  );
  t.same(
    [...now].filter((id) => !withWorker.has(id)),
    [],
    'and started no other thread',
  );
});
