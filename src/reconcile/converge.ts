// Makes the kernel hold the config's tables, writing only when they differ (README, "When it
// writes"): trusts the namespace's generation id to skip a read-back only when our own commit
// provably moved it, reads our tables back otherwise, and writes both tables whole in one transaction.
import type { Logger } from 'pino';
import { compile, type CompileOptions } from '../compile.js';
import type { Config } from '../config/types.js';
import { renderReplace } from '../nftables/render.js';
import type { TableFamily } from '../nftables/types.js';
import type { Kernel } from './kernel.js';
import type { AgentMetrics } from './metrics.js';
import { OtherAgentWatch } from './other-agent.js';
import { holds, readTables } from './read-back.js';

export interface ConvergeDeps {
  readonly kernel: Kernel;
  readonly compileOptions: CompileOptions;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  readonly otherAgent: OtherAgentWatch;
}

/** What a sync did: wrote, found the kernel holding the config, or held back from another agent. */
export type Converged = 'wrote' | 'in-place' | 'held-back';

/** Runs one phase of a sync and records how long it took, for the log line of a write. */
export type Timed = <T>(phase: string, work: () => Promise<T>) => Promise<T>;

export class Converger {
  private readonly deps: ConvergeDeps;
  /** Generation of our last write, or of the table adopted at start; 0 before either. */
  generation = 0;
  /** Content key of what we last wrote or found right in the kernel. */
  private kernelKey: string | undefined;
  /** Generation id of the namespace when the kernel was last known to hold kernelKey. */
  private kernelGenId: number | undefined;
  /** Families whose table this process has written: ours even if its comment was changed. */
  private readonly written = new Set<TableFamily>();

  constructor(deps: ConvergeDeps) {
    this.deps = deps;
  }

  /**
   * Identifies the desired content without rendering it: the tables are a pure function of the
   * config's hash (which covers exactly what compile reads) and the compile options.
   */
  private contentKey(config: Config): string {
    return `${config.hash} ${JSON.stringify(this.deps.compileOptions)}`;
  }

  /** A restart continues the count from the generation our table carries. */
  private adoptGeneration(found: number | undefined): void {
    if (found !== undefined && found > this.generation) this.generation = found;
  }

  /** Rejects when the kernel cannot be read or written. */
  async converge(config: Config, timed: Timed): Promise<Converged> {
    const { kernel, compileOptions, logger, metrics, otherAgent } = this.deps;
    const key = this.contentKey(config);
    const genId = await kernel.generationId().catch(() => undefined);
    const kernelUnmoved = genId !== undefined && genId === this.kernelGenId;
    if (kernelUnmoved && this.kernelKey === key) return 'in-place';

    let drift = false;
    let stale: readonly { family: TableFamily; name: string }[] = [];
    if (!kernelUnmoved) {
      const found = await timed('readMs', () =>
        readTables(kernel, compileOptions, this.written, () => metrics.incKernelReads()),
      );
      stale = found.stale;
      const writer = found.ip?.kind === 'ours' ? found.ip : undefined;
      this.adoptGeneration(writer?.generation);
      const inPlace = holds(found, compile(config, compileOptions, this.generation));
      // Not what we would write, and written by another agent: hold back for a while rather than
      // fight (other-agent.ts). The kernel is read again at every resync meanwhile.
      if (!inPlace && writer && otherAgent.holdBack(writer)) {
        this.kernelGenId = undefined;
        return 'held-back';
      }
      if (inPlace) {
        if (writer) otherAgent.inPlace(writer);
        this.kernelKey = key;
        // The listings are at least as new as genId: if another commit came between, the id has
        // moved past it and the next sync reads again. While a conflict is open, always read.
        this.kernelGenId = otherAgent.active ? undefined : genId;
        metrics.setGeneration(this.generation);
        return 'in-place';
      }
      drift = this.kernelKey === key;
    }
    const generation = this.generation + 1;
    const tables = compile(config, compileOptions, generation);
    if (drift)
      logger.warn({ generation }, 'our tables in the kernel drifted from the config; repairing');
    await timed('applyMs', () => kernel.apply(renderReplace(tables, stale)));
    if (drift) metrics.incDriftRepairs();
    for (const table of tables) this.written.add(table.family);
    otherAgent.wrote({ generation, hash: config.hash });
    this.generation = generation;
    this.kernelKey = key;
    // "The kernel holds what we wrote at id G" only when G is provably our commit's: our one
    // transaction moves the id by exactly one, so any other step means another commit came before
    // or after ours, and the next sync reads the tables back instead of trusting them. While
    // another agent writes our table, read back at every resync: that our write stayed is how the
    // conflict ends.
    const after = await kernel.generationId().catch(() => undefined);
    this.kernelGenId =
      !otherAgent.active &&
      genId !== undefined &&
      after !== undefined &&
      after === (genId + 1) >>> 0
        ? after
        : undefined;
    metrics.setGeneration(generation);
    return 'wrote';
  }
}
