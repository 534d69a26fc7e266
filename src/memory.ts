// Two V8 settings that keep an idle agent's RSS down (docs/design.md, "Memory"), set first thing by
// bin/ipmasq-agent.js before the agent's modules load (V8 reads both flags whenever it acts on them),
// and full collections: a worker's once its work is done, the agent's thread's after its syncs
// (HeapTidier).
//
// - The young generation stays at its first size: V8 grows it while allocation is brisk (loading
//   modules) and keeps its pages afterwards. It grows while a worker does a large piece of work
//   (holdYoungGrowth): the config worker's whole load of what the agent asked (held on the worker
//   itself: an edit's splice and the audits' whole loads do without), the changed ranges' worker
//   (held by the agent's thread, which waits meanwhile). Held any longer, the agent's own thread
//   grows too: ~24 MiB more along a stream of edits when each load was held (docs/design.md).
// - The optimizing compiler (TurboFan) is off until work needs it: compiling hot start-up code costs
//   memory for nothing an idle agent does, which interpreted and baseline code do fast enough.
//   needOptimizer() turns it on for the rest of the process: a config big enough for the worker
//   thread, a large conntrack flush; workOnce() with the young generation's growth, for every
//   one-shot command.
// What each saves is in docs/design.md, "Memory".
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

let optimizerOn = true;
/** This thread wants V8's young generation to grow for good (a one-shot command). */
let growthForGood = true;
/** Large pieces of work under way on workers, each given the young generation's growth. */
let growthHolds = 0;

function setYoungGrowth(): void {
  const factor = growthForGood || growthHolds > 0 ? 2 : 1;
  setFlagsFromString(`--semi-space-growth-factor=${factor}`);
}

export function conserveMemory(): void {
  growthForGood = false;
  setYoungGrowth();
  setFlagsFromString('--no-turbofan');
  optimizerOn = false;
}

/** Turns the optimizing compiler back on (if conserveMemory turned it off). */
export function needOptimizer(): void {
  if (optimizerOn) return;
  setFlagsFromString('--turbofan');
  optimizerOn = true;
}

/** A one-shot command: the optimizing compiler and the young generation's growth, for good. */
export function workOnce(): void {
  needOptimizer();
  growthForGood = true;
  setYoungGrowth();
}

/**
 * This thread's young generation no longer grows but while held (holdYoungGrowth): for a worker,
 * whose start set V8's flags back to their defaults. The optimizing compiler stays as it is.
 */
export function keepYoungGeneration(): void {
  growthForGood = false;
  setYoungGrowth();
}

/**
 * Lets V8's young generation grow while a worker does a large piece of work (a config's whole
 * parse is ~3× slower in 1 MiB semi-spaces), until the function returned is called. The factor is
 * the process's, not an isolate's: held as briefly as the work, since any thread that collects
 * meanwhile grows, and once the hold ends no young generation grows further — a grown one stays
 * as grown (docs/design.md, "Memory"). A worker's start sets V8's flags back to their defaults
 * (growth on): the end of a hold after it, or keepYoungGeneration on the worker, sets them again.
 */
export function holdYoungGrowth(): () => void {
  growthHolds++;
  setYoungGrowth();
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    growthHolds--;
    setYoungGrowth();
  };
}

let gc: (() => void) | undefined;

/**
 * A full garbage collection of the calling thread's isolate: a worker calls it once its work is
 * posted, so that a kept worker holds its live data rather than the garbage of a large parse, and the
 * agent's thread through HeapTidier (docs/design.md, "Memory").
 */
export function collectGarbage(): void {
  if (!gc) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  }
  // Compacting: a full collection otherwise leaves the old generation's pages that still hold a few
  // live objects, and along a stream of edits their free space stays taken (docs/design.md,
  // "Memory"). V8's own collections keep their choice: the flag is on only for this one. Flags are
  // the process's: another thread's collection starting meanwhile compacts too, which costs it time.
  setFlagsFromString('--compact-on-every-full-gc');
  try {
    gc();
  } finally {
    setFlagsFromString('--no-compact-on-every-full-gc');
  }
}

/** What HeapTidier needs of a timer. */
type Timer = { unref(): unknown };

export interface TidyDeps {
  /** Bytes the thread's heap holds, garbage included. */
  heapUsed: () => number;
  collect: () => void;
  /**
   * Gives memory back to the system: the C heap's free pages (the addon's malloc_trim) and, with a
   * small config in force (`small`), the program's pages the large config's work ran (the addon's
   * pageOutFileMappings): a large config's next edit would read them back at once.
   */
  release: (small: boolean) => void;
  setTimeout: (callback: () => void, ms: number) => Timer;
  clearTimeout: (timer: Timer) => void;
  /** The clock the waits are measured on, in ms. */
  now: () => number;
}

/**
 * Collects the agent's thread's garbage once a sync's work is done: V8 collects when it allocates,
 * and an agent idle after a large write allocates little, so that write's garbage would stay
 * (docs/design.md, "Memory", has the figures). `beforeWork()` is called as each sync starts and
 * `afterWork(small)` after it; when the heap grew by more than `growthBytes` since the last
 * collection, one runs once `quietMs` passed without another sync (never during one: at 100 000
 * CIDRs it holds the event loop ~17 ms), then `release` gives back the C heap's free pages, and with
 * a small config in force the program's pages the large config's work ran. Syncs that keep coming
 * (an edit every few hundred ms) would put it off for ever, the garbage of each growing the heap by
 * megabytes: once it has waited `quietMs` since it was first due, or the heap grew by twice
 * `growthBytes`, it runs right after the sync. The first sync with a small config in force after a
 * large one's is followed by a quiet tidy however little the heap grew: the pages are owed.
 */
export class HeapTidier {
  readonly #deps: TidyDeps;
  #settled: number;
  #timer: Timer | undefined;
  /** When a tidy first became due and has not run since (the deps' clock). */
  #dueSince: number | undefined;
  /** A collection ran right after a sync: the quiet tidy is still owed. */
  #quietOwed = false;
  /**
   * A sync with a large config in force ran since the program's pages were last given back: once a
   * small one is in force, they are owed, whether or not the heap grew (V8 may have collected the
   * large config's garbage by itself meanwhile).
   */
  #pagesOwed = false;

  constructor(
    deps: Pick<TidyDeps, 'release'> & Partial<TidyDeps>,
    readonly quietMs = 2_000,
    readonly growthBytes = 8 * 2 ** 20,
  ) {
    this.#deps = {
      heapUsed: () => getHeapStatistics().used_heap_size,
      collect: collectGarbage,
      setTimeout,
      clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout),
      now: () => performance.now(),
      ...deps,
    };
    this.#settled = this.#deps.heapUsed();
  }

  /**
   * A sync is starting: a tidy still due waits for it to end. Run during a large load, the
   * collection would mark its live strings and the released code pages would be read back at once.
   */
  beforeWork(): void {
    if (this.#timer) this.#deps.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  afterWork(small: boolean): void {
    const deps = this.#deps;
    if (this.#timer) deps.clearTimeout(this.#timer);
    this.#timer = undefined;
    if (!small) this.#pagesOwed = true;
    if (deps.heapUsed() > this.#settled + this.growthBytes) {
      const now = deps.now();
      this.#dueSince ??= now;
      const grown = deps.heapUsed() - this.#settled;
      // Put off too long, or grown too much: V8's garbage now, right after this sync. What comes
      // after the work (a flush, a look) runs code again: the quiet tidy below still follows.
      if (now - this.#dueSince >= this.quietMs || grown > 2 * this.growthBytes) {
        this.#collect(false);
        this.#quietOwed = true;
      }
    } else if (!this.#quietOwed && !(small && this.#pagesOwed)) {
      return;
    }
    this.#timer = deps.setTimeout(() => this.#tidy(small), this.quietMs);
    this.#timer.unref();
  }

  /** V8's garbage collected and the C heap trimmed (and with `small` the program's pages). */
  #collect(small: boolean): void {
    this.#deps.collect();
    this.#deps.release(small);
    if (small) this.#pagesOwed = false;
    this.#settled = this.#deps.heapUsed();
    this.#dueSince = undefined;
  }

  #tidy(small: boolean): void {
    this.#timer = undefined;
    this.#quietOwed = false;
    this.#collect(small);
  }
}
