// What the config worker keeps between loads (docs/design.md, "Memory"): a full collection of its
// garbage once its work is posted.
import { getHeapStatistics } from 'node:v8';
import t from 'tap';
import { collectGarbage } from '../../src/memory.js';

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
