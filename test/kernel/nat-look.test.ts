// The look at other tables' NAT keeps two shortcuts (src/other-nat/chains.ts): the last look is
// reused while the namespace's generation id stands, and a chain is printed again only when its
// rule handles change. Both are held here to the whole look: random commits to other tables' nat
// chains in a real namespace, and after each the kept look equal to a fresh one.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { makeNetns, requireRoot, runNodeInNetns } from '../../harness/netns.js';

const fixture = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'nat-look-steps.ts');

interface Outcome {
  steps: number;
  committed: number;
  reused: number;
  translating: number;
  differ: Array<{ step: number; script: string; kept: string; fresh: string }>;
}

if (requireRoot(t)) {
  t.test('the kept look equals a fresh one after every commit, for random commits', async (t) => {
    let reused = 0;
    let committed = 0;
    let translating = 0;
    for (const seed of [1, 2, 3, 4, 5]) {
      const ns = await makeNetns(t, 'natlook');
      const run = await runNodeInNetns(ns, fixture, [String(seed), '70'], { timeoutMs: 120_000 });
      t.equal(run.code, 0, `seed ${seed} ran: ${run.stderr.slice(-400)}`);
      const outcome = JSON.parse(run.stdout.trim().split('\n').at(-1) ?? '{}') as Outcome;
      t.same(
        outcome.differ,
        [],
        `seed ${seed}: ${outcome.steps} steps, the kept look as a fresh one`,
      );
      reused += outcome.reused;
      committed += outcome.committed;
      translating += outcome.translating;
    }
    // The steps did what they are for: commits, reuses, and tables that translate.
    t.ok(committed > 150, `${committed} commits`);
    t.ok(reused > 20, `${reused} looks reused as they were`);
    t.ok(translating > 0, 'some seeds end with translating chains');
  });
}
