// Lists made by splicedList (src/cidr/lines.ts) keep no list made before them alive: the agent
// makes a new list at every edit, and a chain of them held from the newest was the ~8 MiB an edit
// the agent grew by at 100 000 CIDRs (docs/writes.md, "The everyday edit"). listWindow still finds
// where a list and the one it was made from differ without walking them, from the token of the
// list it was made from: no list refers to another.
import t from 'tap';
import { familyLists, listWindow, splicedList } from '../../../src/cidr/index.js';
import { collectGarbage } from '../../../src/memory.js';

/** A list as the config loader makes one (familyLists), with its token. */
const made = (entries: string[]) => familyLists({ ipv4: entries.join('\n'), ipv6: '' }).ipv4;

t.test('an edit chain keeps only the lists still referenced', async (t) => {
  let list = made(Array.from({ length: 10_000 }, (_, i) => `10.${i >> 8}.${i & 255}.0/24`));
  const first = new WeakRef(list);
  const kept: WeakRef<readonly string[]>[] = [];
  for (let i = 0; i < 50; i++) {
    const at = (i * 37) % list.length;
    list = splicedList(list, { at, deleteCount: 1, inserted: [`11.0.${i}.0/24`] });
    kept.push(new WeakRef(list));
  }
  // Past the current turn: a WeakRef made in it keeps its target until it ends.
  await new Promise((resolve) => setImmediate(resolve));
  collectGarbage();
  t.equal(first.deref(), undefined, 'the first list is gone');
  const alive = kept.filter((ref) => ref.deref() !== undefined).length;
  t.equal(alive, 1, 'of the 50 made, only the newest is alive');
  t.equal(list.length, 10_000);
});

t.test('listWindow from a splice, as by walking the lists', async (t) => {
  const before = made(Array.from({ length: 1_000 }, (_, i) => `10.0.${i}.0/24`));
  const after = splicedList(before, { at: 400, deleteCount: 2, inserted: ['x', 'y', 'z'] });
  t.same(listWindow(before, after), { head: 400, endBefore: 402, endAfter: 403 });
  const walked = listWindow([...before], [...after]);
  t.same(walked, { head: 400, endBefore: 402, endAfter: 403 }, 'the same when walked');
});

t.test('the splice is trusted for the list it was made from, and for no other', async (t) => {
  const entries = Array.from({ length: 1_000 }, (_, i) => `10.0.${i}.0/24`);
  const before = made(entries);
  // A splice that changes nothing: judged from the splice, the window closes at its end; walked,
  // no element differs anywhere (both an empty window, at different places).
  const after = splicedList(before, { at: 10, deleteCount: 1, inserted: [entries[10]!] });
  t.same(listWindow(before, after), { head: 11, endBefore: 11, endAfter: 11 }, 'from the splice');
  const twin = made(entries);
  t.same(
    listWindow(twin, after),
    { head: 1_000, endBefore: 1_000, endAfter: 1_000 },
    'an equal list of its own token: walked',
  );
  t.same(
    listWindow(Object.freeze([...entries]), after),
    { head: 1_000, endBefore: 1_000, endAfter: 1_000 },
    'a list lines.ts did not make: walked',
  );
  const next = splicedList(after, { at: 500, deleteCount: 0, inserted: ['x'] });
  t.same(
    listWindow(after, next),
    { head: 500, endBefore: 500, endAfter: 501 },
    'a splice of a splice',
  );
  t.same(
    listWindow(before, next),
    { head: 500, endBefore: 500, endAfter: 501 },
    'two splices apart: walked, the same window',
  );
});
