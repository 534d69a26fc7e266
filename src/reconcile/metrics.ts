// The agent's Prometheus series (docs/observability.md, "HTTP"). Each instance owns its Registry so
// that tests, and anything else sharing the process, never collide in prom-client's global one.
import type { AddressFamily } from '../config/types.js';
import { nftFailureKinds, type CounterValue, type NftFailureKind } from '../nftables/types.js';
import {
  collectDefaultMetrics,
  Counter,
  Gauge,
  Histogram,
  Registry,
  type GaugeConfiguration,
  type MetricObjectWithValues,
  type MetricValue,
} from 'prom-client';
import { readConntrackHealth, type ConntrackHealth } from './conntrack-health.js';
import type { Headroom } from '../nat-figures.js';
import { DECISION_COUNTERS, podPolicyIndex } from '../nftables/objects.js';

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

// From a no-op sync to the largest write (docs/bench.md), with room either side.
const syncDurationBuckets = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

/**
 * The fast paths the agent audits (docs/writes.md, "The everyday edit"): the `path` label's values.
 */
export const FAST_PATHS = [
  'config',
  'element-write',
  'commit-notifications',
  'config-listing',
] as const;
export type FastPath = (typeof FAST_PATHS)[number];

/**
 * Why an in-place write of ours was refused with nobody else committing (docs/writes.md, "When a
 * write fails"): the `reason` label's values.
 */
export const WRITE_FALLBACK_REASONS = ['EBUSY', 'ENOENT', 'EEXIST', 'EINVAL', 'other'] as const;
export type WriteFallbackReason = (typeof WRITE_FALLBACK_REASONS)[number];

/** Each of the agent's own series, by name, with its help text. */
const helpTexts = {
  ipmasq_generation: 'Number of successful writes of the ruleset to the kernel.',
  ipmasq_syncs_total: 'Syncs of the kernel ruleset, by result.',
  ipmasq_sync_duration_seconds:
    'Time taken by one sync: read config, compare with the kernel, write if needed.',
  ipmasq_config_valid: '1 if the last config read was valid, else 0.',
  ipmasq_config_errors_total: 'Config reads that found an invalid config.',
  ipmasq_fast_path_mismatches_total:
    'Times a fast path (config read from the last one, element-only write) disagreed with the whole path, whose answer was then applied, by path.',
  ipmasq_write_fallbacks_total:
    'In-place writes of ours the kernel refused with nobody else committing (a bug of the agent), each followed by a write of our whole tables in one transaction, by errno.',
  ipmasq_drift_repairs_total:
    'Times the kernel ruleset was found changed by someone else and rewritten.',
  ipmasq_nonmasquerade_cidrs: 'Entries in the non-masquerade set in the kernel, by address family.',
  ipmasq_last_success_timestamp_seconds:
    'Unix time of the last sync that left the kernel holding the desired ruleset.',
  ipmasq_resync_interval_seconds:
    'The resyncInterval of the config in use (alerts measure staleness in it).',
  ipmasq_legacy_chain_present:
    "1 if the original ip-masq-agent's iptables chain is still in the nat table, else 0.",
  ipmasq_other_nat_rules:
    "Rules of another table's nat postrouting chain that may translate traffic this agent leaves alone, by table, chain and whether that chain runs before or after ours.",
  ipmasq_flows_total:
    'New flows our decision chain decided, by family, decision (translated, exempt: the non-masquerade set, or skipped: the egress policy) and policy (the pod policy that decided, "" for node-wide). Counted in the kernel.',
  ipmasq_pod_policy_pods:
    'Pods on this node that each pod policy decides for (the first in file-name order that selects them), by policy (its file name).',
  ipmasq_pod_policy_overlaps:
    'Pods on this node selected by more than one pod policy (the first decides).',
  ipmasq_snat_port_usage_ratio:
    'The busiest (translated address, destination, port) of the family and protocol: its translated flows divided by the source ports the translation can use. Sampled from conntrack every --nat-stats-interval.',
  ipmasq_snat_flows:
    'Source-translated flows in conntrack, by family and protocol. Sampled every --nat-stats-interval.',
  ipmasq_conntrack_entries: "Entries in the node namespace's conntrack table.",
  ipmasq_conntrack_max: 'The conntrack table size limit (nf_conntrack_max).',
  ipmasq_conntrack_events_total:
    "The kernel's conntrack statistics summed over the CPUs, by kind: insert_failed, drop, early_drop, clash_resolve.",
  ipmasq_large_set_warning:
    '1 if a set is large enough to slow down every nftables command on the node, else 0.',
  ipmasq_conflicting_writer:
    '1 while another ipmasq-agent writes our table with another config (the agent holds back), else 0.',
  ipmasq_conntrack_flushed_total:
    "Conntrack entries deleted after a config change flipped their destination's masquerade decision.",
  ipmasq_conntrack_flush_failures_total:
    'Conntrack flushes after a config change that failed (the write itself stands).',
  ipmasq_config_reads_total:
    'Reads of the config, by what was read: listing (the config directory listed), files (the files read and parsed).',
  ipmasq_kernel_reads_total:
    'Read-backs of our tables from the kernel (skipped while the nftables generation id is unchanged)',
  ipmasq_build_info: 'Always 1; the labels say which agent, libnftables and Node.js this is.',
  ipmasq_kubernetes_up: "1 while the agent's watches of the API server are live, else 0.",
  ipmasq_kubernetes_errors_total:
    'Failed calls to the API server, by operation (list, watch, event).',
  ipmasq_libnftables_failures_total:
    'Syncs that failed inside libnftables, by how: error (it refused), crash (its process died), timeout (killed after the time limit), spawn (no process could be started).',
} as const;

type SeriesName = keyof typeof helpTexts;

export class AgentMetrics {
  /** The agent's own series, rendered at every scrape. */
  readonly registry: Registry;
  private readonly generation: Gauge;
  private readonly syncs: Counter<'result'>;
  private readonly syncDuration: Histogram;
  private readonly configValid: Gauge;
  private readonly configErrors: Counter;
  private readonly driftRepairs: Counter;
  private readonly fastPathMismatches: Counter<'path'>;
  private readonly nonMasqueradeCIDRs: Gauge<'family'>;
  private readonly lastSuccess: Gauge;
  private readonly resyncInterval: Gauge;
  private readonly legacyChainPresent: Gauge;
  private readonly largeSetWarning: Gauge;
  private readonly otherNatRules: Gauge<'table' | 'chain' | 'position'>;
  private readonly nftFailures: Counter<'kind'>;
  private readonly kernelReads: Counter;
  private readonly configReads: Counter<'what'>;
  private readonly writeFallbacks: Counter<'reason'>;
  private readonly conflictingWriter: Gauge;
  private readonly conntrackFlushed: Counter<'family' | 'protocol'>;
  private readonly conntrackFlushFailures: Counter;
  private readonly podPolicyPods: Gauge<'policy'>;
  private readonly podPolicyOverlaps: Gauge;
  /**
   * The process and runtime series, the costly ones to collect: cached for EXPOSITION_MAX_AGE_MS.
   */
  readonly runtime: Registry;
  private cached: { at: number; text: Promise<string> } | undefined;

  constructor(build: BuildInfo = { version: 'unknown', libnftables: 'unknown' }) {
    const registry = new Registry();
    this.registry = registry;
    this.runtime = new Registry();
    collectDefaultMetrics({ register: this.runtime });
    // prom-client names these gauges with a _total suffix, which Prometheus reserves for counters
    // (`promtool check metrics` warns): they are left out rather than exported misnamed.
    for (const name of misnamedDefaults) this.runtime.removeSingleMetric(name);

    this.generation = new Gauge(this.series('ipmasq_generation'));
    this.syncs = new Counter({ ...this.series('ipmasq_syncs_total'), labelNames: ['result'] });
    this.syncDuration = new Histogram({
      ...this.series('ipmasq_sync_duration_seconds'),
      buckets: syncDurationBuckets,
    });
    this.configValid = new Gauge(this.series('ipmasq_config_valid'));
    this.configErrors = new Counter(this.series('ipmasq_config_errors_total'));
    this.driftRepairs = new Counter(this.series('ipmasq_drift_repairs_total'));
    this.fastPathMismatches = new Counter({
      ...this.series('ipmasq_fast_path_mismatches_total'),
      labelNames: ['path'],
    });
    for (const path of FAST_PATHS) this.fastPathMismatches.inc({ path }, 0);
    this.nonMasqueradeCIDRs = new Gauge({
      ...this.series('ipmasq_nonmasquerade_cidrs'),
      labelNames: ['family'],
    });
    this.lastSuccess = new Gauge(this.series('ipmasq_last_success_timestamp_seconds'));
    this.resyncInterval = new Gauge(this.series('ipmasq_resync_interval_seconds'));
    this.legacyChainPresent = new Gauge(this.series('ipmasq_legacy_chain_present'));
    this.largeSetWarning = new Gauge(this.series('ipmasq_large_set_warning'));
    this.otherNatRules = new Gauge({
      ...this.series('ipmasq_other_nat_rules'),
      labelNames: ['table', 'chain', 'position'],
    });
    this.conflictingWriter = new Gauge(this.series('ipmasq_conflicting_writer'));
    this.conntrackFlushed = new Counter({
      ...this.series('ipmasq_conntrack_flushed_total'),
      labelNames: ['family', 'protocol'],
    });
    this.conntrackFlushFailures = new Counter(this.series('ipmasq_conntrack_flush_failures_total'));
    this.kernelReads = new Counter(this.series('ipmasq_kernel_reads_total'));
    this.configReads = new Counter({
      ...this.series('ipmasq_config_reads_total'),
      labelNames: ['what'],
    });
    for (const what of ['listing', 'files'] as const) this.configReads.inc({ what }, 0);
    this.writeFallbacks = new Counter({
      ...this.series('ipmasq_write_fallbacks_total'),
      labelNames: ['reason'],
    });
    for (const reason of WRITE_FALLBACK_REASONS) this.writeFallbacks.inc({ reason }, 0);
    this.podPolicyPods = new Gauge({
      ...this.series('ipmasq_pod_policy_pods'),
      labelNames: ['policy'],
    });
    this.podPolicyOverlaps = new Gauge(this.series('ipmasq_pod_policy_overlaps'));
    this.nftFailures = new Counter({
      ...this.series('ipmasq_libnftables_failures_total'),
      labelNames: ['kind'],
    });
    new Gauge({
      ...this.series('ipmasq_build_info'),
      labelNames: ['version', 'libnftables', 'node'],
    }).set({ version: build.version, libnftables: build.libnftables, node: process.version }, 1);

    // Series with labels appear only once touched; start them at zero so rate() and absent() work.
    for (const result of syncResults) this.syncs.inc({ result }, 0);
    for (const kind of nftFailureKinds) this.nftFailures.inc({ kind }, 0);
    for (const family of families) this.nonMasqueradeCIDRs.set({ family }, 0);
  }

  /** A series' name, help text and registry: the rest of its options are its own. */
  private series(name: SeriesName): { name: string; help: string; registers: Registry[] } {
    return { name, help: helpTexts[name], registers: [this.registry] };
  }

  /**
   * The text exposition. A scrape flood must not starve the probes of CPU: the agent's own series
   * are rendered on every scrape (a few dozen samples), the process and runtime series at most once
   * per EXPOSITION_MAX_AGE_MS, so they only ever lag by that much.
   */
  async exposition(now = Date.now()): Promise<string> {
    let cached = this.cached;
    if (!cached || now - cached.at >= EXPOSITION_MAX_AGE_MS) {
      const text = this.runtime.metrics();
      cached = this.cached = { at: now, text };
      text.catch(() => {
        if (this.cached?.text === text) this.cached = undefined;
      });
    }
    const [own, runtime] = await Promise.all([this.registry.metrics(), cached.text]);
    return own + runtime;
  }

  /**
   * The decisions the kernel counted (docs/observability.md, "What the node's NAT does"): our
   * tables' named counters, read when scraped, at most once a second, over plain netlink (no set's
   * elements: the same cost at any number of CIDRs). A family whose table is not there has no
   * series.
   */
  decisions(
    read: () => Promise<
      ReadonlyArray<{ family: AddressFamily; counters: readonly CounterValue[] }>
    >,
    /** The pod policies' names, by their index (nftables/objects.ts, podPolicyPrefix). */
    policyNames: () => readonly string[] = () => [],
  ): void {
    let last: { at: number; value: ReturnType<typeof read> } | undefined;
    const published = new MonotonicCounts();
    const decisions = new Set<string>(DECISION_COUNTERS);
    new Counter({
      ...this.series('ipmasq_flows_total'),
      labelNames: ['family', 'decision', 'policy'],
      async collect() {
        const now = Date.now();
        if (!last || now - last.at >= 1_000) last = { at: now, value: read().catch(() => []) };
        const tables = await last.value;
        const names = policyNames();
        this.reset();
        for (const { family, counters } of tables) {
          for (const { name, packets } of counters) {
            const own = podPolicyIndex(name);
            const decision = own ? own.rest : name;
            // Only our decisions' counters: another object in our table is drift, never a series.
            if (!decisions.has(decision)) continue;
            // A pod policy's counters the config no longer names (a write on its way) are left out.
            const policy = own ? names[own.index] : '';
            if (policy === undefined) continue;
            const labels = { family, decision, policy };
            this.inc(labels, published.of(JSON.stringify(labels), packets));
          }
        }
      },
    });
  }

  /** Each pod policy's pods on this node, and the pods more than one selects. */
  setPodPolicies(rows: ReadonlyArray<{ policy: string; pods: number }>, overlaps: number): void {
    this.podPolicyPods.reset();
    for (const { policy, pods } of rows) this.podPolicyPods.set({ policy }, pods);
    this.podPolicyOverlaps.set(overlaps);
  }

  /**
   * The SNAT port headroom's series (docs/observability.md, "What the node's NAT does"), registered
   * only while sampling is on (--nat-stats-interval other than 0): returns where each complete
   * sample goes.
   */
  snatHeadroom(): (rows: readonly Headroom[]) => void {
    const usage = new Gauge({
      ...this.series('ipmasq_snat_port_usage_ratio'),
      labelNames: ['family', 'protocol'],
    });
    const flows = new Gauge({
      ...this.series('ipmasq_snat_flows'),
      labelNames: ['family', 'protocol'],
    });
    return (rows) => {
      for (const row of rows) {
        usage.set({ family: row.family, protocol: row.protocol }, row.usage);
        flows.set({ family: row.family, protocol: row.protocol }, row.flows);
      }
    };
  }

  /**
   * Conntrack health (docs/observability.md, "What the node's NAT does"): read when scraped, at
   * most once a second (cheap: /proc, no dump); absent where conntrack is not loaded.
   */
  conntrackHealth(
    read: () => Promise<ConntrackHealth | undefined> = readConntrackHealth,
    /** Told each distinct problem once (a value /proc should not hold: its series is absent). */
    warn: (problem: string) => void = () => {},
  ): void {
    let last: { at: number; value: Promise<ConntrackHealth | undefined> } | undefined;
    const told = new Set<string>();
    const current = () => {
      const now = Date.now();
      if (!last || now - last.at >= 1_000) {
        const value = read();
        last = { at: now, value };
        void value.then((health) => {
          for (const problem of health?.problems ?? []) {
            if (told.has(problem)) continue;
            told.add(problem);
            warn(problem);
          }
        });
      }
      return last.value;
    };
    for (const [name, field] of [
      ['ipmasq_conntrack_entries', 'entries'],
      ['ipmasq_conntrack_max', 'max'],
    ] as const) {
      new OptionalGauge({
        ...this.series(name),
        async read() {
          return (await current())?.[field];
        },
      });
    }
    new Counter({
      ...this.series('ipmasq_conntrack_events_total'),
      labelNames: ['kind'],
      async collect() {
        const health = await current();
        this.reset();
        for (const [kind, value] of Object.entries(health?.events ?? {})) this.inc({ kind }, value);
      },
    });
  }

  /**
   * The Kubernetes API's series (docs/kubernetes.md, "Kubernetes API (opt-in)"), registered only
   * when the agent reads the API: a file-driven agent does not export a gauge saying "down".
   */
  kubernetes(): { setUp(up: boolean): void; incError(op: string): void } {
    const up = new Gauge(this.series('ipmasq_kubernetes_up'));
    const errors = new Counter({
      ...this.series('ipmasq_kubernetes_errors_total'),
      labelNames: ['op'],
    });
    for (const op of ['list', 'watch', 'event']) errors.inc({ op }, 0);
    return {
      setUp: (on) => {
        up.set(on ? 1 : 0);
      },
      incError: (op) => {
        errors.inc({ op });
      },
    };
  }

  setConflictingWriter(on: boolean): void {
    this.conflictingWriter.set(on ? 1 : 0);
  }

  addConntrackFlushed(family: AddressFamily, protocol: string, n: number): void {
    this.conntrackFlushed.inc({ family, protocol }, n);
  }

  incConntrackFlushFailures(): void {
    this.conntrackFlushFailures.inc();
  }

  /** An in-place write refused with nobody else committing: the next write replaces whole. */
  incWriteFallback(reason: WriteFallbackReason): void {
    this.writeFallbacks.inc({ reason });
  }

  /** The config directory listed, or the config's files read (config/loader.ts). */
  incConfigReads(what: 'listing' | 'files'): void {
    this.configReads.inc({ what });
  }

  incKernelReads(): void {
    this.kernelReads.inc();
  }

  setGeneration(n: number): void {
    this.generation.set(n);
  }

  recordSync(result: SyncResult, seconds: number): void {
    this.syncs.inc({ result });
    this.syncDuration.observe(seconds);
  }

  setConfigValid(valid: boolean): void {
    this.configValid.set(valid ? 1 : 0);
  }

  incConfigErrors(): void {
    this.configErrors.inc();
  }

  incDriftRepairs(): void {
    this.driftRepairs.inc();
  }

  incFastPathMismatch(path: FastPath): void {
    this.fastPathMismatches.inc({ path });
  }

  setNonMasqueradeCount(family: AddressFamily, n: number): void {
    this.nonMasqueradeCIDRs.set({ family }, n);
  }

  setResyncInterval(ms: number): void {
    this.resyncInterval.set(ms / 1000);
  }

  setLastSuccess(date: Date): void {
    this.lastSuccess.set(date.getTime() / 1000);
  }

  setLegacyChainPresent(present: boolean): void {
    this.legacyChainPresent.set(present ? 1 : 0);
  }

  /** The findings of the last look at other NAT: each one's series; those gone are removed. */
  setOtherNatRules(
    findings: ReadonlyArray<{ table: string; chain: string; position: string; count: number }>,
  ): void {
    this.otherNatRules.reset();
    // At most OTHER_NAT_SERIES_MAX series: the rest summed in one, table="(more)".
    const named =
      findings.length > OTHER_NAT_SERIES_MAX ? OTHER_NAT_SERIES_MAX - 1 : findings.length;
    for (const { table, chain, position, count } of findings.slice(0, named))
      this.otherNatRules.inc({ table, chain, position }, count);
    const rest = findings.slice(named).reduce((sum, finding) => sum + finding.count, 0);
    if (named < findings.length)
      this.otherNatRules.set({ table: '(more)', chain: '', position: '' }, rest);
  }

  incNftFailure(kind: NftFailureKind): void {
    this.nftFailures.inc({ kind });
  }

  setLargeSetWarning(on: boolean): void {
    this.largeSetWarning.set(on ? 1 : 0);
  }
}

/**
 * A gauge without labels whose value may not be there (conntrack not loaded, /proc not as
 * expected): then the series has no sample, rather than the 0 prom-client's reset() would put back.
 * Read at each scrape by `read`; only the public get() is overridden.
 */
class OptionalGauge extends Gauge {
  private readonly read: () => Promise<number | undefined>;

  constructor(
    configuration: Omit<GaugeConfiguration<string>, 'collect' | 'labelNames'> & {
      read: () => Promise<number | undefined>;
    },
  ) {
    const { read, ...rest } = configuration;
    super(rest);
    this.read = read;
  }

  override async get(): Promise<MetricObjectWithValues<MetricValue<string>>> {
    const value = await this.read();
    this.reset();
    if (value !== undefined) this.set(value);
    const metric = await super.get();
    return value === undefined ? { ...metric, values: [] } : metric;
  }
}

/**
 * At most this many ipmasq_other_nat_rules series (docs/observability.md, "Other NAT on the node").
 */
export const OTHER_NAT_SERIES_MAX = 100;

/**
 * Counter values that never go back (docs/observability.md, "What the node's NAT does"): where the
 * kernel's count falls (`nft reset counters`, counts lost between a whole write's read and its
 * commit), the fall is added to the series' offset from then on. Nothing is invented: a reset hides
 * what was counted between the last read and the reset.
 */
export class MonotonicCounts {
  private readonly last = new Map<string, { raw: number; offset: number }>();

  /** The value to publish for `key` whose kernel count is now `raw`. */
  of(key: string, raw: number): number {
    const seen = this.last.get(key);
    const offset = (seen?.offset ?? 0) + (seen && raw < seen.raw ? seen.raw - raw : 0);
    this.last.set(key, { raw, offset });
    return raw + offset;
  }
}
