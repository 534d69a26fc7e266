// The ranges a config change flips, computed off the JavaScript thread for large configs: for
// 100 000 CIDRs, parsing and sweeping both configs takes ~200 ms of CPU, which would hold /healthz
// up. A worker is started for that one computation and ends with it; small configs stay in-thread.
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import type { AddressFamily } from '../config/types.js';
import { changedRanges, type Decisive } from '../decisions.js';

/** Up to this many entries in both configs together, the computation is cheaper than a worker. */
export const IN_THREAD_MAX_ENTRIES = 4_000;

interface Job {
  readonly kind: 'ipmasq-changed-ranges';
  readonly before: Decisive;
  readonly after: Decisive;
  readonly which: readonly AddressFamily[];
}

type Changes = ReturnType<typeof changedRanges>;

const entries = (sets: Decisive) =>
  sets.nonMasquerade.ipv4.length +
  sets.nonMasquerade.ipv6.length +
  sets.masquerade.ipv4.length +
  sets.masquerade.ipv6.length;

export function changedRangesOffThread(
  before: Decisive,
  after: Decisive,
  which: readonly AddressFamily[],
): Promise<Changes> {
  if (entries(before) + entries(after) <= IN_THREAD_MAX_ENTRIES) {
    return Promise.resolve(changedRanges(before, after, which));
  }
  const job: Job = {
    kind: 'ipmasq-changed-ranges',
    // Only the sets cross to the worker: a Config is frozen and carries more than it needs.
    before: { nonMasquerade: before.nonMasquerade, masquerade: before.masquerade },
    after: { nonMasquerade: after.nonMasquerade, masquerade: after.masquerade },
    which,
  };
  return new Promise((resolve, reject) => {
    // Node flags that only make sense for the main script (--input-type with -e) would fail it.
    const execArgv = process.execArgv.filter((arg) => !arg.startsWith('--input-type'));
    const worker = new Worker(new URL(import.meta.url), { workerData: job, execArgv });
    worker.once('message', (changes: Changes) => resolve(changes));
    worker.once('error', reject);
    worker.once('exit', (code) =>
      reject(new Error(`changed-ranges worker exited with code ${code}`)),
    );
  });
}

const job = workerData as Job | undefined;
if (!isMainThread && parentPort && job?.kind === 'ipmasq-changed-ranges') {
  parentPort.postMessage(changedRanges(job.before, job.after, job.which));
}
