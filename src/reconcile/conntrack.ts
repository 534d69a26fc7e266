// Existing flows follow a config change (README, "When it writes"): after a write that flips the
// decision for some destinations, the conntrack entries of flows to them are deleted, so each
// flow's next packet is decided by the new rules. Never fatal to the write.
import type { Logger } from 'pino';
import type { Config } from '../config/types.js';
import { changedRangesOffThread } from './changed-ranges.js';
import type { Kernel } from './kernel.js';
import type { AgentMetrics } from './metrics.js';

export const conntrackFlushModes = ['udp', 'all', 'none'] as const;
/** `udp`: UDP and UDP-Lite entries only; `all`: every protocol (resets TCP); `none`: keep them. */
export type ConntrackFlushMode = (typeof conntrackFlushModes)[number];

const UDP = 17;
const UDPLITE = 136;
const protocolNames = new Map([
  [1, 'icmp'],
  [6, 'tcp'],
  [UDP, 'udp'],
  [58, 'icmpv6'],
  [132, 'sctp'],
  [UDPLITE, 'udplite'],
]);

export function protocolName(protocol: number): string {
  return protocolNames.get(protocol) ?? String(protocol);
}

export interface ConntrackDeps {
  readonly kernel: Kernel;
  readonly mode: ConntrackFlushMode;
  readonly enableIPv6: boolean;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  /** Between the rounds that look for entries late replies made (default REVERSE_INTERVAL_MS). */
  readonly reverseIntervalMs?: number;
}

/**
 * After a flush, a reply still on its way (a slow peer) reaches the node with its flow's entry gone
 * and starts an entry the other way round, without NAT, that the pod's next packets then match as
 * replies: the flow would keep its old decision. Such entries are looked for again this often, up to
 * REVERSE_ROUNDS times, until a round finds none (docs/design.md, "Existing flows").
 */
export const REVERSE_INTERVAL_MS = 250;
export const REVERSE_ROUNDS = 8;

type Changes = Awaited<ReturnType<typeof changedRangesOffThread>>;

export class ConntrackFlush {
  private readonly deps: ConntrackDeps;

  /** Flushes run one after another, beside the syncs: a sync never waits for one. */
  private queue: Promise<void> = Promise.resolve();
  /** The rounds after each flush, beside the queue: a later flush never waits for them. */
  private readonly rounds = new Set<Promise<void>>();

  constructor(deps: ConntrackDeps) {
    this.deps = deps;
  }

  /**
   * Called once `after` is committed. `before` is what the kernel held until then, undefined when
   * not known (the first write of this process): then nothing is deleted. Returns at once; the
   * flush follows the ones queued before it. Deleting an entry is safe whatever was committed since:
   * its flow's next packet is decided by the rules in place then.
   */
  afterWrite(before: Config | undefined, after: Config, generation: number): void {
    if (this.deps.mode === 'none' || before === undefined) return;
    this.queue = this.queue.then(() => this.flush(before, after, generation));
  }

  /** Resolves when every flush asked for so far has ended, with its rounds. */
  async settled(): Promise<void> {
    await this.queue;
    await Promise.all([...this.rounds]);
  }

  private async flush(before: Config, after: Config, generation: number): Promise<void> {
    const { kernel, mode, logger, metrics } = this.deps;
    const started = performance.now();
    const families = this.deps.enableIPv6 ? (['ipv4', 'ipv6'] as const) : (['ipv4'] as const);
    const changes = await changedRangesOffThread(before, after, families).catch((err: unknown) => {
      metrics.incConntrackFlushFailures();
      logger.error(
        { err, generation },
        'could not work out which destinations changed; no conntrack entry deleted',
      );
      return [];
    });
    if (changes.length === 0) return;
    const protocols = mode === 'udp' ? [UDP, UDPLITE] : [];
    const deleted: Record<string, Record<string, number>> = {};
    for (const { family, ranges } of changes) {
      const label = family === 4 ? ('ipv4' as const) : ('ipv6' as const);
      try {
        const result = await kernel.flushConntrack(family, protocols, ranges, 'both');
        deleted[label] = {};
        for (const [protocol, count] of result.deleted) {
          deleted[label][protocolName(protocol)] = count;
          metrics.addConntrackFlushed(label, protocolName(protocol), count);
        }
        if (result.error !== undefined) throw new Error(result.error);
      } catch (err) {
        metrics.incConntrackFlushFailures();
        logger.error(
          { err, family: label, generation },
          'could not delete the conntrack entries of flows whose decision changed; they keep the old one until they end',
        );
      }
    }
    logger.info(
      { generation, deleted, durationMs: Math.round(performance.now() - started) },
      'deleted the conntrack entries of flows whose masquerade decision changed',
    );
    const rounds = this.reverseRounds(changes, protocols, generation);
    this.rounds.add(rounds);
    void rounds.finally(() => this.rounds.delete(rounds));
  }

  /** Deletes the entries late replies started the other way round, until a round finds none. */
  private async reverseRounds(changes: Changes, protocols: number[], generation: number) {
    const { kernel, logger, metrics } = this.deps;
    const intervalMs = this.deps.reverseIntervalMs ?? REVERSE_INTERVAL_MS;
    for (let round = 1; round <= REVERSE_ROUNDS; round++) {
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
      let found = 0;
      const deleted: Record<string, Record<string, number>> = {};
      for (const { family, ranges } of changes) {
        const label = family === 4 ? ('ipv4' as const) : ('ipv6' as const);
        const result = await kernel
          .flushConntrack(family, protocols, ranges, 'reverse')
          .catch((err: unknown) => ({
            seen: 0,
            deleted: new Map<number, number>(),
            error: String(err),
          }));
        for (const [protocol, count] of result.deleted) {
          found += count;
          (deleted[label] ??= {})[protocolName(protocol)] = count;
          metrics.addConntrackFlushed(label, protocolName(protocol), count);
        }
        // The first flush reported its failure; a round that fails only ends the rounds.
        if (result.error !== undefined) return;
      }
      if (found === 0) return;
      logger.info(
        { generation, round, deleted },
        'deleted conntrack entries that late replies had started the other way round',
      );
    }
  }
}
