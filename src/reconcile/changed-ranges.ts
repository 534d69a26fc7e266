// The ranges a config change flips, computed off the JavaScript thread for large configs: parsing
// and sweeping both configs would hold /healthz up (docs/design.md, "Figures"). A worker is started
// for that one computation and ends with it; small configs stay in-thread.
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { startWorker } from '../worker.js';
import {
  familyLines,
  familyLists,
  packRanges,
  PackedRanges,
  type FamilyLines,
  type Family,
  type RangeList,
} from '../cidr/index.js';
import type { AddressFamily } from '../config/types.js';
import { changedRanges, type Decisive } from '../decisions.js';

/** Up to this many entries in both configs together, the computation is cheaper than a worker. */
export const IN_THREAD_MAX_ENTRIES = 4_000;

/** Each set as one newline-joined string: one string is copied to the worker far faster than 100 000. */
type Packed = { readonly [K in keyof Decisive]: FamilyLines };

interface Job {
  readonly kind: 'ipmasq-changed-ranges';
  readonly before: Packed;
  readonly after: Packed;
  readonly which: readonly AddressFamily[];
}

const pack = (sets: Decisive): Packed => ({
  nonMasquerade: familyLines(sets.nonMasquerade),
  masquerade: familyLines(sets.masquerade),
});
const unpack = (sets: Packed): Decisive => ({
  nonMasquerade: familyLists(sets.nonMasquerade),
  masquerade: familyLists(sets.masquerade),
});

/** Per family, the ranges whose decision changed: packed when they come from the worker. */
type Changes = Array<{ family: Family; ranges: RangeList }>;

/** What the worker posts: each family's ranges packed, their buffers moved rather than copied. */
type PostedChanges = Array<{ family: Family; bytes: Uint8Array }>;

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
    before: pack(before),
    after: pack(after),
    which,
  };
  return new Promise((resolve, reject) => {
    const worker = startWorker(new URL(import.meta.url), job);
    worker.once('message', (changes: PostedChanges) =>
      resolve(
        changes.map(({ family, bytes }) => ({ family, ranges: new PackedRanges(family, bytes) })),
      ),
    );
    worker.once('error', reject);
    worker.once('exit', (code) =>
      reject(new Error(`changed-ranges worker exited with code ${code}`)),
    );
  });
}

const job = workerData as Job | undefined;
if (!isMainThread && parentPort && job?.kind === 'ipmasq-changed-ranges') {
  const posted: PostedChanges = changedRanges(unpack(job.before), unpack(job.after), job.which).map(
    ({ family, ranges }) => ({ family, bytes: packRanges(family, ranges).bytes }),
  );
  parentPort.postMessage(
    posted,
    posted.map(({ bytes }) => bytes.buffer as ArrayBuffer),
  );
}
