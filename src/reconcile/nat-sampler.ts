// SNAT port headroom (docs/observability.md, "What the node's NAT does"): every
// --nat-stats-interval, one dump of each family's source-translated conntrack entries, aggregated
// on a pool thread (kernel/addon.ts, natSample), sets ipmasq_snat_flows and
// ipmasq_snat_port_usage_ratio. A sample that runs past its CPU budget stops; the series keep the
// last complete sample, and it is said once.
import { familyOf } from '../cidr/index.js';
import type { Logger } from 'pino';
import type { AddressFamily } from '../config/types.js';
import { errorText } from '../errors.js';
import { headroomOf, type Headroom } from '../nat-figures.js';
import type { ConntrackPort } from '../kernel/ports.js';

/**
 * The most CPU one family's sample may take (docs/observability.md, "What the node's NAT does").
 */
export const NAT_SAMPLE_BUDGET_S = 5;

/**
 * The share of one core the samples may take on average: where a sample costs more than this share
 * of the interval (the kernel spends ~2 µs on each translated entry it dumps: ~2 s at 1 000 000),
 * the next one waits longer, and that is said once.
 */
export const NAT_SAMPLE_CPU_SHARE = 0.02;

export interface NatSamplerDeps {
  readonly kernel: ConntrackPort;
  readonly logger: Logger;
  /** Where each complete sample's figures go. */
  readonly publish: (rows: readonly Headroom[]) => void;
  readonly intervalMs: number;
  readonly families: readonly AddressFamily[];
  /** Source ports per translated address (nat-figures.ts, snatPorts). */
  readonly ports: number;
  readonly budgetS?: number;
}

export class NatSampler {
  private readonly deps: NatSamplerDeps;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private warned: 'budget' | 'error' | undefined;
  private stretched = false;
  /** The CPU the last sample took, all families: what spaces the next one. */
  private lastCpuS = 0;

  constructor(deps: NatSamplerDeps) {
    this.deps = deps;
  }

  /** Samples now, then every interval (the timer never keeps the process alive). */
  start(): void {
    const loop = async () => {
      await this.sampleOnce();
      if (!this.stopped) this.timer = setTimeout(loop, this.nextDelayMs()).unref();
    };
    void loop();
  }

  /** The interval, or longer where the last sample's CPU would exceed its share of it. */
  nextDelayMs(): number {
    const { intervalMs, logger } = this.deps;
    const needed = (this.lastCpuS / NAT_SAMPLE_CPU_SHARE) * 1000;
    if (needed <= intervalMs) {
      if (this.stretched) logger.info('SNAT port samples are back to every --nat-stats-interval');
      this.stretched = false;
      return intervalMs;
    }
    if (!this.stretched)
      logger.info(
        { sampleCpuSeconds: this.lastCpuS, delayMs: Math.round(needed) },
        `a SNAT port sample took ${this.lastCpuS.toFixed(2)} s of CPU: the next ones wait longer than --nat-stats-interval, to keep them at ${NAT_SAMPLE_CPU_SHARE * 100} % of one core`,
      );
    this.stretched = true;
    return Math.round(needed);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }

  /** One sample of every family; published only when each ended within its budget. */
  async sampleOnce(): Promise<void> {
    const { kernel, logger, families, ports } = this.deps;
    const budget = this.deps.budgetS ?? NAT_SAMPLE_BUDGET_S;
    const rows: Headroom[] = [];
    this.lastCpuS = 0;
    try {
      for (const family of families) {
        const sample = await kernel.natSample({
          family: familyOf(family).number,
          cpuBudgetS: budget,
          bySource: false,
        });
        this.lastCpuS += sample.cpuS;
        if (!sample.complete) {
          if (this.warned !== 'budget')
            logger.warn(
              { family, entriesSeen: sample.seen, cpuSeconds: sample.cpuS },
              `the SNAT port sample took more than its ${budget} s of CPU and stopped: the headroom series keep the last complete sample`,
            );
          this.warned = 'budget';
          return;
        }
        rows.push(...headroomOf(family, sample, ports));
      }
    } catch (err) {
      if (this.warned !== 'error')
        logger.warn({ err: errorText(err) }, 'the SNAT port sample failed; trying again later');
      this.warned = 'error';
      return;
    }
    if (this.warned) logger.info('the SNAT port sample completes again');
    this.warned = undefined;
    this.deps.publish(rows);
  }
}
