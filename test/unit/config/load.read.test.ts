// Reading one config file: never stat-then-open. A FIFO (or any non-regular file) that appears at the
// path between the loader's stat and its open must be refused at once, not block a pool thread.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { tempDir } from '../../../harness/netns.js';
import { readBounded } from '../../../src/config/load.js';

const dir = tempDir(t, 'read');

t.test('a FIFO is refused without blocking', async (t) => {
  const fifo = join(dir, 'fifo');
  execFileSync('mkfifo', [fifo]);
  let timer: NodeJS.Timeout | undefined;
  const blocked = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve('still blocked after 2 s'), 2_000);
  });
  const outcome = await Promise.race([
    readBounded(fifo).then(
      () => 'read',
      (err: Error) => err.message,
    ),
    blocked,
  ]);
  clearTimeout(timer);
  t.equal(outcome, 'is not a regular file');
  if (outcome === 'still blocked after 2 s') {
    // Unblock the pool thread stuck in open() so the test process can end.
    execFileSync('sh', ['-c', `exec 3<>'${fifo}'; exec 3>&-`]);
  }
});

t.test('a regular file is read whole', async (t) => {
  const file = join(dir, 'config');
  writeFileSync(file, 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
  t.equal(await readBounded(file), 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
});
