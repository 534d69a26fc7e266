// The agent's one hook for memory (docs/design.md, "Memory"): at start, and around each sync, what V8,
// glibc and the kernel are asked to give back, through the addon and HeapTidier (memory.ts).
import { HeapTidier } from './memory.js';
import { mapLargeAllocations, pageOutFileMappings, releaseMemory } from './kernel/addon.js';

/**
 * Up to this many CIDRs in force, the agent's config is small for memory's sake: the program's pages
 * a large config's work ran are paged out once it is done (HeapTidier). Its own figure, not the set
 * layout's crossover, though both are 2 000 today.
 */
export const SMALL_CONFIG_CIDRS = 2_000;

/** What the agent does for memory (docs/design.md, "Memory"): once at start, and around each sync. */
export class MemoryPolicy {
  readonly #tidier: Pick<HeapTidier, 'beforeWork' | 'afterWork'>;
  readonly #release: () => void;

  constructor(
    deps: {
      release?: () => void;
      pageOut?: () => void;
      tidier?: Pick<HeapTidier, 'beforeWork' | 'afterWork'>;
    } = {},
  ) {
    this.#release = deps.release ?? releaseMemory;
    const pageOut = deps.pageOut ?? (() => void pageOutFileMappings());
    this.#tidier =
      deps.tidier ??
      new HeapTidier({
        release: (small) => {
          this.#release();
          if (small) pageOut();
        },
      });
  }

  /** As the agent starts: large blocks get mappings of their own (glibc's threshold fixed). */
  start(): void {
    mapLargeAllocations();
  }

  /** A sync starts: a tidy still due waits for it. */
  beforeSync(): void {
    this.#tidier.beforeWork();
  }

  /**
   * A sync ended with `cidrs` in force: what it parsed and rendered is garbage now. The C heap's
   * free pages go back at once; V8's garbage once the work is quiet, and the program's pages too
   * once the config is small.
   */
  afterSync(cidrs: number): void {
    this.#release();
    this.#tidier.afterWork(cidrs <= SMALL_CONFIG_CIDRS);
  }
}
