// The agent's Prometheus series (README, "HTTP"). Each instance owns its Registry so that tests, and
// anything else sharing the process, never collide in prom-client's global one.
import type { AddressFamily } from '../config/types.js';
import { nftFailureKinds, type NftFailureKind } from '../nftables/types.js';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

export type SyncResult = 'applied' | 'unchanged' | 'error';

export interface BuildInfo {
  readonly version: string;
  readonly libnftables: string;
}

const misnamedDefaults = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

/** How stale the process_* and nodejs_* series of a cached exposition may be. */
export const EXPOSITION_MAX_AGE_MS = 1_000;

const syncResults: readonly SyncResult[] = ['applied', 'unchanged', 'error'];
const families: readonly AddressFamily[] = ['ipv4', 'ipv6'];

// A no-op sync takes about a millisecond; a 100 000-element transaction takes about a second.
const syncDurationBuckets = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

export class AgentMetrics {
  readonly registry: Registry;
  private readonly generation: Gauge;
  private readonly syncs: Counter<'result'>;
  private readonly syncDuration: Histogram;
  private readonly configValid: Gauge;
  private readonly configErrors: Counter;
  private readonly driftRepairs: Counter;
  private readonly nonMasqueradeCIDRs: Gauge<'family'>;
  private readonly lastSuccess: Gauge;
  private readonly resyncInterval: Gauge;
  private readonly legacyChainPresent: Gauge;
  private readonly largeSetWarning: Gauge;
  private readonly nftFailures: Counter<'kind'>;
  private readonly kernelReads: Counter;
  private readonly conflictingWriter: Gauge;
  private readonly conntrackFlushed: Counter<'family' | 'protocol'>;
  private readonly conntrackFlushFailures: Counter;
  /** Moves on every change of the agent's own series: the cached exposition is then stale. */
  private version = 0;
  private cached: { version: number; at: number; text: Promise<string> } | undefined;

  constructor(build: BuildInfo = { version: 'unknown', libnftables: 'unknown' }) {
    const registry = new Registry();
    this.registry = registry;
    collectDefaultMetrics({ register: registry });
    // prom-client names these gauges with a _total suffix, which Prometheus reserves for counters
    // (`promtool check metrics` warns): they are left out rather than exported misnamed.
    for (const name of misnamedDefaults) registry.removeSingleMetric(name);
    const registers = [registry];

    this.generation = new Gauge({
      name: 'ipmasq_generation',
      help: 'Number of successful writes of the ruleset to the kernel.',
      registers,
    });
    this.syncs = new Counter({
      name: 'ipmasq_syncs_total',
      help: 'Syncs of the kernel ruleset, by result.',
      labelNames: ['result'],
      registers,
    });
    this.syncDuration = new Histogram({
      name: 'ipmasq_sync_duration_seconds',
      help: 'Time taken by one sync: read config, compare with the kernel, write if needed.',
      buckets: syncDurationBuckets,
      registers,
    });
    this.configValid = new Gauge({
      name: 'ipmasq_config_valid',
      help: '1 if the last config read was valid, else 0.',
      registers,
    });
    this.configErrors = new Counter({
      name: 'ipmasq_config_errors_total',
      help: 'Config reads that found an invalid config.',
      registers,
    });
    this.driftRepairs = new Counter({
      name: 'ipmasq_drift_repairs_total',
      help: 'Times the kernel ruleset was found changed by someone else and rewritten.',
      registers,
    });
    this.nonMasqueradeCIDRs = new Gauge({
      name: 'ipmasq_nonmasquerade_cidrs',
      help: 'Entries in the non-masquerade set in the kernel, by address family.',
      labelNames: ['family'],
      registers,
    });
    this.lastSuccess = new Gauge({
      name: 'ipmasq_last_success_timestamp_seconds',
      help: 'Unix time of the last sync that left the kernel holding the desired ruleset.',
      registers,
    });
    this.resyncInterval = new Gauge({
      name: 'ipmasq_resync_interval_seconds',
      help: 'The resyncInterval of the config in use (alerts measure staleness in it).',
      registers,
    });
    this.legacyChainPresent = new Gauge({
      name: 'ipmasq_legacy_chain_present',
      help: "1 if the original ip-masq-agent's iptables chain is still in the nat table, else 0.",
      registers,
    });
    this.largeSetWarning = new Gauge({
      name: 'ipmasq_large_set_warning',
      help: '1 if a set is large enough to slow down every nftables command on the node, else 0.',
      registers,
    });

    this.conflictingWriter = new Gauge({
      name: 'ipmasq_conflicting_writer',
      help: '1 while another ipmasq-agent writes our table with another config (the agent holds back), else 0.',
      registers,
    });
    this.conntrackFlushed = new Counter({
      name: 'ipmasq_conntrack_flushed_total',
      help: "Conntrack entries deleted after a config change flipped their destination's masquerade decision.",
      labelNames: ['family', 'protocol'],
      registers,
    });
    this.conntrackFlushFailures = new Counter({
      name: 'ipmasq_conntrack_flush_failures_total',
      help: 'Conntrack flushes after a config change that failed (the write itself stands).',
      registers,
    });
    this.kernelReads = new Counter({
      name: 'ipmasq_kernel_reads_total',
      help: 'Read-backs of our tables from the kernel (skipped while the nftables generation id is unchanged)',
      registers,
    });
    this.nftFailures = new Counter({
      name: 'ipmasq_libnftables_failures_total',
      help: 'Syncs that failed inside libnftables, by how: error (it refused), crash (its process died), timeout (killed after the time limit), spawn (no process could be started).',
      labelNames: ['kind'],
      registers,
    });
    new Gauge({
      name: 'ipmasq_build_info',
      help: 'Always 1; the labels say which agent, libnftables and Node.js this is.',
      labelNames: ['version', 'libnftables', 'node'],
      registers,
    }).set({ version: build.version, libnftables: build.libnftables, node: process.version }, 1);

    // Series with labels appear only once touched; start them at zero so rate() and absent() work.
    for (const result of syncResults) this.syncs.inc({ result }, 0);
    for (const kind of nftFailureKinds) this.nftFailures.inc({ kind }, 0);
    for (const family of families) this.nonMasqueradeCIDRs.set({ family }, 0);
  }

  /**
   * The text exposition. A scrape flood must not starve the probes of CPU: the text is rendered
   * again only when one of the agent's series changed, or after EXPOSITION_MAX_AGE_MS for the
   * process and runtime series, which only ever lag by that much.
   */
  exposition(now = Date.now()): Promise<string> {
    const cached = this.cached;
    if (cached && cached.version === this.version && now - cached.at < EXPOSITION_MAX_AGE_MS)
      return cached.text;
    const text = this.registry.metrics();
    this.cached = { version: this.version, at: now, text };
    text.catch(() => {
      if (this.cached?.text === text) this.cached = undefined;
    });
    return text;
  }

  /**
   * The Kubernetes API's series (README, "Kubernetes API (opt-in)"), registered only when the agent
   * reads the API: a file-driven agent does not export a gauge saying "down".
   */
  kubernetes(): { setUp(up: boolean): void; incError(op: string): void } {
    const registers = [this.registry];
    const up = new Gauge({
      name: 'ipmasq_kubernetes_up',
      help: "1 while the agent's watches of the API server are live, else 0.",
      registers,
    });
    const errors = new Counter({
      name: 'ipmasq_kubernetes_errors_total',
      help: 'Failed calls to the API server, by operation (list, watch, event).',
      labelNames: ['op'],
      registers,
    });
    for (const op of ['list', 'watch', 'event']) errors.inc({ op }, 0);
    return {
      setUp: (on) => {
        this.version++;
        up.set(on ? 1 : 0);
      },
      incError: (op) => {
        this.version++;
        errors.inc({ op });
      },
    };
  }

  setConflictingWriter(on: boolean): void {
    this.version++;
    this.conflictingWriter.set(on ? 1 : 0);
  }

  addConntrackFlushed(family: AddressFamily, protocol: string, n: number): void {
    this.version++;
    this.conntrackFlushed.inc({ family, protocol }, n);
  }

  incConntrackFlushFailures(): void {
    this.version++;
    this.conntrackFlushFailures.inc();
  }

  incKernelReads(): void {
    this.version++;
    this.kernelReads.inc();
  }

  setGeneration(n: number): void {
    this.version++;
    this.generation.set(n);
  }

  recordSync(result: SyncResult, seconds: number): void {
    this.version++;
    this.syncs.inc({ result });
    this.syncDuration.observe(seconds);
  }

  setConfigValid(valid: boolean): void {
    this.version++;
    this.configValid.set(valid ? 1 : 0);
  }

  incConfigErrors(): void {
    this.version++;
    this.configErrors.inc();
  }

  incDriftRepairs(): void {
    this.version++;
    this.driftRepairs.inc();
  }

  setNonMasqueradeCount(family: AddressFamily, n: number): void {
    this.version++;
    this.nonMasqueradeCIDRs.set({ family }, n);
  }

  setResyncInterval(ms: number): void {
    this.version++;
    this.resyncInterval.set(ms / 1000);
  }

  setLastSuccess(date: Date): void {
    this.version++;
    this.lastSuccess.set(date.getTime() / 1000);
  }

  setLegacyChainPresent(present: boolean): void {
    this.version++;
    this.legacyChainPresent.set(present ? 1 : 0);
  }

  incNftFailure(kind: NftFailureKind): void {
    this.version++;
    this.nftFailures.inc({ kind });
  }

  setLargeSetWarning(on: boolean): void {
    this.version++;
    this.largeSetWarning.set(on ? 1 : 0);
  }
}
