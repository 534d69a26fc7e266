// src/reconcile/commit-watch.ts with a scripted notification socket: a commit naming our table (or
// dropped notifications) makes the generation check, and a sync is asked for only when the kernel
// is no longer known to hold our tables; commits to other tables cost nothing but the drain, and
// are told on (a readiness probe needs no look for them).
import t from 'tap';
import type { CommitsHeard } from '../../../src/kernel/addon.js';
import { CommitWatch, FOREIGN_COMMIT } from '../../../src/reconcile/commit-watch.js';

function watch(heard: CommitsHeard[], unchanged: boolean) {
  const asked: string[] = [];
  const elsewhere: number[] = [];
  let checks = 0;
  let closed = false;
  const w = new CommitWatch({
    open: () => ({
      drain: () => heard.shift() ?? { commits: [], overflow: false },
      close: () => {
        closed = true;
      },
    }),
    ours: (table) => table === 'ip ipmasq',
    unchanged: async () => {
      checks++;
      return unchanged;
    },
    requestSync: (why) => asked.push(why),
    elsewhere: (genId) => elsewhere.push(genId),
    unavailable: () => {},
    intervalMs: 3_600_000, // driven by hand below
  });
  w.start();
  return { w, asked, elsewhere, checks: () => checks, closed: () => closed };
}

t.test('commits to other tables: no check, no sync', async (t) => {
  const { w, asked, checks } = watch(
    [{ commits: [{ genId: 5, tables: ['ip kube-proxy', 'inet filter'] }], overflow: false }],
    false,
  );
  await w.poll();
  t.equal(checks(), 0, 'the generation not even read');
  t.same(asked, []);
  w.stop();
});

t.test('each commit naming none of our tables is told on by its generation', async (t) => {
  const { w, asked, checks, elsewhere } = watch(
    [
      {
        commits: [
          { genId: 5, tables: ['ip kube-proxy', 'inet filter'] },
          { genId: 6, tables: ['ip kube-proxy', 'ip ipmasq'] },
          { genId: 7, tables: ['ip6 nat'] },
        ],
        overflow: false,
      },
    ],
    true,
  );
  await w.poll();
  t.equal(checks(), 1, 'the one naming ours checked');
  t.same(asked, []);
  t.same(elsewhere, [5, 7], 'those naming none of ours told on, the other not');
  w.stop();
});

t.test('a commit naming our table: a sync when the kernel moved without us', async (t) => {
  const moved = watch([{ commits: [{ genId: 6, tables: ['ip ipmasq'] }], overflow: false }], false);
  await moved.w.poll();
  t.same(moved.asked, [FOREIGN_COMMIT], 'asked once');
  t.equal(moved.w.touched, 1);
  moved.w.stop();
  t.ok(moved.closed(), 'the socket closed at stop');
  const ownWrite = watch(
    [{ commits: [{ genId: 7, tables: ['ip ipmasq'] }], overflow: false }],
    true,
  );
  await ownWrite.w.poll();
  t.equal(ownWrite.checks(), 1, 'checked');
  t.same(ownWrite.asked, [], 'our own commit: the kernel is where we know it is, no sync');
  ownWrite.w.stop();
});

t.test('dropped notifications: checked as if our table were named', async (t) => {
  const { w, asked } = watch([{ commits: [], overflow: true }], false);
  await w.poll();
  t.same(asked, [FOREIGN_COMMIT]);
  w.stop();
});

t.test('a socket that cannot be made is said once; nothing polls', async (t) => {
  const said: unknown[] = [];
  const w = new CommitWatch({
    open: () => {
      throw new Error('netlink bind: Operation not permitted');
    },
    ours: () => true,
    unchanged: async () => false,
    requestSync: () => t.fail('no sync'),
    unavailable: (err) => said.push(err),
  });
  w.start();
  await w.poll();
  t.equal(said.length, 1);
  w.stop();
});
