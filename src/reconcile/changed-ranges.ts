// The destinations a config change flips, per family, computed off the JavaScript thread for large
// configs: parsing and sweeping both configs would hold /healthz up (docs/design.md, "Figures"). A
// worker is started for that one computation and ends with it; small configs stay in-thread.
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { holdYoungGrowth } from '../memory.js';
import { startWorker } from '../worker.js';
import {
  familyLines,
  familyLists,
  listWindow,
  packRanges,
  PackedRanges,
  type FamilyLines,
  type Family,
  type RangeList,
} from '../cidr/index.js';
import type { AddressFamily } from '../config/types.js';
import { exemptRanges, flippedRanges, stepsOf, type Decisive } from '../decision.js';

/** Up to this many entries in both configs together, the computation is cheaper than a worker. */
export const IN_THREAD_MAX_ENTRIES = 4_000;

/** Each set as one newline-joined string: one string is copied to the worker far faster than 100 000. */
type Packed = { readonly [K in 'nonMasquerade' | 'masquerade']: FamilyLines };

interface Job {
  readonly kind: 'ipmasq-changed-ranges';
  readonly before: Packed;
  readonly after: Packed;
  readonly which: readonly AddressFamily[];
  readonly withExempt: readonly AddressFamily[];
}

const pack = (sets: Decisive): Packed => ({
  nonMasquerade: familyLines(sets.nonMasquerade),
  masquerade: familyLines(sets.masquerade),
});
// Only the destination steps are read here (flippedRanges, exemptRanges): no keys cross.
const unpack = (sets: Packed): Decisive => ({
  nonMasquerade: familyLists(sets.nonMasquerade),
  masquerade: familyLists(sets.masquerade),
  keys: {},
});

/**
 * Per family, the destinations exempt before only (`lost`) and after only (`gained`), and where
 * asked for (the families whose egress policy changed), every destination exempt after.
 */
export interface DecisionChange {
  readonly family: Family;
  readonly lost: RangeList;
  readonly gained: RangeList;
  readonly exemptAfter: RangeList | null;
}

/** What the worker posts: each list packed, its buffer moved rather than copied. */
type Posted = Array<{
  family: Family;
  lost: Uint8Array;
  gained: Uint8Array;
  exempt: Uint8Array | null;
}>;

const entries = (sets: Decisive) =>
  sets.nonMasquerade.ipv4.length +
  sets.nonMasquerade.ipv6.length +
  sets.masquerade.ipv4.length +
  sets.masquerade.ipv6.length;

function compute(
  before: Decisive,
  after: Decisive,
  which: readonly AddressFamily[],
  withExempt: readonly AddressFamily[],
): DecisionChange[] {
  return flippedRanges(before, after, which).map(({ family, lost, gained }, i) => {
    const name = which[i]!;
    return {
      family,
      lost,
      gained,
      exemptAfter: withExempt.includes(name) ? exemptRanges(stepsOf(after, name)) : null,
    };
  });
}

/**
 * The two configs cut down, per family, to the part of their sets that differs, where that gives
 * the same flips: a destination's decision flips only where the non-masquerade or the masquerade
 * set differs, so with one set the same in both, the other is cut to its differing window (the
 * same set kept whole), and with both the same, both go. Families whose every exempt destination
 * is asked for are kept whole. An everyday edit of 100 000 CIDRs leaves a few entries: computed
 * here, with no worker and no copy of the lists.
 */
export function narrowed(
  before: Decisive,
  after: Decisive,
  withExempt: readonly AddressFamily[],
): [Decisive, Decisive] {
  const sets = { before: { ...emptySets() }, after: { ...emptySets() } };
  for (const family of ['ipv4', 'ipv6'] as const) {
    const windows = (name: 'nonMasquerade' | 'masquerade') => {
      const was = before[name][family];
      const is = after[name][family];
      const { head, endBefore, endAfter } = listWindow(was, is);
      const same = head === endBefore && head === endAfter;
      return { was, is, same, cut: [was.slice(head, endBefore), is.slice(head, endAfter)] };
    };
    const nonMasq = windows('nonMasquerade');
    const masq = windows('masquerade');
    const whole = withExempt.includes(family) || (!nonMasq.same && !masq.same);
    for (const [name, w, other] of [
      ['nonMasquerade', nonMasq, masq],
      ['masquerade', masq, nonMasq],
    ] as const) {
      // Cut where the other set is the same in both: this one to its window (nothing if the same).
      const cut = !whole && other.same;
      sets.before[name][family] = cut ? (w.same ? [] : w.cut[0]!) : w.was;
      sets.after[name][family] = cut ? (w.same ? [] : w.cut[1]!) : w.is;
    }
  }
  const made = (side: 'before' | 'after', config: Decisive): Decisive => ({
    nonMasquerade: sets[side].nonMasquerade,
    masquerade: sets[side].masquerade,
    keys: config.keys,
  });
  return [made('before', before), made('after', after)];
}

function emptySets(): Record<
  'nonMasquerade' | 'masquerade',
  { ipv4: readonly string[]; ipv6: readonly string[] }
> {
  return { nonMasquerade: { ipv4: [], ipv6: [] }, masquerade: { ipv4: [], ipv6: [] } };
}

export function decisionChangesOffThread(
  wholeBefore: Decisive,
  wholeAfter: Decisive,
  which: readonly AddressFamily[],
  withExempt: readonly AddressFamily[],
): Promise<DecisionChange[]> {
  const [before, after] = narrowed(wholeBefore, wholeAfter, withExempt);
  if (entries(before) + entries(after) <= IN_THREAD_MAX_ENTRIES) {
    return Promise.resolve(compute(before, after, which, withExempt));
  }
  const job: Job = {
    kind: 'ipmasq-changed-ranges',
    // Only the sets cross to the worker: a Config is frozen and carries more than it needs.
    before: pack(before),
    after: pack(after),
    which,
    withExempt,
  };
  return new Promise((resolve, reject) => {
    const worker = startWorker(new URL(import.meta.url), job);
    // The young generation grows on the worker only while it works (src/memory.ts).
    const answered = holdYoungGrowth();
    worker.once('exit', answered);
    worker.once('message', (posted: Posted) => {
      answered();
      resolve(
        posted.map(({ family, lost, gained, exempt }) => ({
          family,
          lost: new PackedRanges(family, lost),
          gained: new PackedRanges(family, gained),
          exemptAfter: exempt === null ? null : new PackedRanges(family, exempt),
        })),
      );
    });
    worker.once('error', reject);
    worker.once('exit', (code) =>
      reject(new Error(`changed-ranges worker exited with code ${code}`)),
    );
  });
}

const job = workerData as Job | undefined;
if (!isMainThread && parentPort && job?.kind === 'ipmasq-changed-ranges') {
  const posted: Posted = compute(
    unpack(job.before),
    unpack(job.after),
    job.which,
    job.withExempt,
  ).map(({ family, lost, gained, exemptAfter }) => ({
    family,
    lost: packRanges(family, lost).bytes,
    gained: packRanges(family, gained).bytes,
    exempt: exemptAfter === null ? null : packRanges(family, exemptAfter).bytes,
  }));
  parentPort.postMessage(
    posted,
    posted.flatMap(({ lost, gained, exempt }) =>
      [lost, gained, ...(exempt ? [exempt] : [])].map((bytes) => bytes.buffer as ArrayBuffer),
    ),
  );
}
