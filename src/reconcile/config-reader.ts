// Reads the config at each sync and keeps the last good one: an invalid config is reported, never
// applied (README, "Configuration"). Each distinct error and set of warnings is logged once.
import type { Logger } from 'pino';
import { escapeUnprintable } from '../cidr/index.js';
import { withNodePodCIDRs, type NodePrefixes } from '../config/build.js';
import type { Loader, ReadMode } from '../config/loader.js';
import { keyValue } from '../config/keys.js';
import {
  podMembership,
  podPolicyName,
  withPodMembers,
  type PodFacts,
  type PodMembership,
} from '../config/pods.js';
import type { Config, LoadOptions } from '../config/types.js';
import type { NodeEvents } from '../kubernetes/events.js';
import type { AgentMetrics } from './metrics.js';

/** What the config takes from the API server (src/kubernetes/cluster.ts), when the agent reads it. */
export interface ClusterData {
  /** This Node's labels; undefined until read. */
  readonly labels: ReadonlyMap<string, string> | undefined;
  /** Every Node's pod CIDRs; undefined until wanted and first listed. */
  podCIDRs(): ReadonlyMap<string, NodePrefixes> | undefined;
  /** Whether the valid config asks for them: they are listed and watched only while it does. */
  wantPodCIDRs(want: boolean): void;
  /** Moves whenever podCIDRs() may answer differently. */
  readonly podCIDRsVersion: number;
  /** This node's pods; undefined until wanted and first listed. */
  pods(): ReadonlyMap<string, PodFacts> | undefined;
  /** Every namespace's labels; undefined until wanted and first listed. */
  namespaces(): ReadonlyMap<string, ReadonlyMap<string, string>> | undefined;
  /** Whether the valid config has pod policies, and whether one selects by namespace. */
  wantPods(want: { readonly pods: boolean; readonly namespaces: boolean }): void;
  /** Moves whenever pods() or namespaces() may answer differently. */
  readonly podsVersion: number;
}

export interface ConfigReaderDeps {
  readonly configPath: string;
  readonly loadOptions: LoadOptions;
  readonly load: Loader;
  readonly logger: Logger;
  readonly metrics: AgentMetrics;
  readonly cluster?: ClusterData;
  readonly events?: NodeEvents;
}

export class ConfigReader {
  private readonly deps: ConfigReaderDeps;
  /** The last valid config read, kept while later reads are invalid. */
  good: Config | undefined;
  /**
   * The files' part of `good` (before the cluster's data is joined): while later reads are
   * invalid, the pods as they are now are joined to it again (docs/egress-policy.md, "Pod
   * policies").
   */
  private goodFiles: Config | undefined;
  /** Why the last read was invalid; null when it was valid. */
  error: string | null = null;
  /** What the last read waits for from the API server; null when nothing. */
  waiting: string | null = null;
  /** The options loaded with while these labels stay (the loader's cache keys on the object). */
  private options:
    { labels: ReadonlyMap<string, string> | undefined; load: LoadOptions } | undefined;
  private joined: { from: Config; version: number; config: Config } | undefined;
  private members:
    { from: Config; version: number; config: Config; membership: PodMembership } | undefined;
  /** Pods selected by more than one policy, warned of once while they are. */
  private overlapping = new Set<string>();
  private lastLoggedError: string | undefined;
  /** The warnings of the last read: only new ones are logged. */
  private lastWarnings: ReadonlySet<string> = new Set();

  constructor(deps: ConfigReaderDeps) {
    this.deps = deps;
  }

  /** The load options with this Node's labels as now known: the same object while they stay. */
  private loadOptions(): LoadOptions {
    const { cluster } = this.deps;
    if (!cluster) return this.deps.loadOptions;
    const labels = cluster.labels;
    if (this.options === undefined || this.options.labels !== labels) {
      this.options = {
        labels,
        load: {
          ...this.deps.loadOptions,
          kubernetes: true,
          ...(labels ? { nodeLabels: labels } : {}),
        },
      };
    }
    return this.options.load;
  }

  /**
   * The files' config with the Nodes' pod CIDRs and the pod policies' members joined, or why it
   * must wait for them.
   */
  private withCluster(files: Config): Config | string {
    const { cluster } = this.deps;
    const policies = files.podPolicies ?? [];
    cluster?.wantPodCIDRs(files.keys.nonMasqueradeNodePodCIDRs === true);
    cluster?.wantPods({
      pods: policies.length > 0,
      namespaces: policies.some((policy) => policy.namespaceSelector !== undefined),
    });
    let config = files;
    if (config.keys.nonMasqueradeNodePodCIDRs === true && cluster) {
      const nodes = cluster.podCIDRs();
      if (!nodes)
        return 'nonMasqueradeNodePodCIDRs: waiting for the first list of Nodes from the API server';
      const version = cluster.podCIDRsVersion;
      if (this.joined?.from !== config || this.joined.version !== version)
        this.joined = { from: config, version, config: withNodePodCIDRs(config, nodes) };
      config = this.joined.config;
    }
    if (policies.length === 0 || !cluster) {
      this.publishMembership(undefined);
      return config;
    }
    const pods = cluster.pods();
    if (!pods)
      return "pod policies: waiting for the first list of this node's pods from the API server";
    const namespaces = cluster.namespaces();
    if (policies.some((policy) => policy.namespaceSelector !== undefined) && !namespaces)
      return 'pod policies: waiting for the first list of namespaces from the API server';
    const version = cluster.podsVersion;
    if (this.members?.from !== config || this.members.version !== version) {
      const membership = podMembership(config.podPolicies ?? [], pods.values(), namespaces);
      this.members = {
        from: config,
        version,
        config: withPodMembers(config, membership),
        membership,
      };
      this.publishMembership(this.members);
    }
    return this.members.config;
  }

  /** Each policy's pods in the metrics; a warning once per pod more than one policy selects. */
  private publishMembership(
    joined: { config: Config; membership: PodMembership } | undefined,
  ): void {
    const { logger, metrics } = this.deps;
    if (!joined) {
      if (this.overlapping.size > 0 || this.members) metrics.setPodPolicies([], 0);
      this.members = undefined;
      this.overlapping.clear();
      return;
    }
    const { config, membership } = joined;
    const policies = config.podPolicies ?? [];
    metrics.setPodPolicies(
      policies.map((policy, i) => ({
        policy: podPolicyName(policy),
        pods: membership.pods[i] ?? 0,
      })),
      membership.overlaps.length,
    );
    const now = new Set<string>();
    for (const { pod, decides, others } of membership.overlaps) {
      const key = `${pod}\u0000${decides}\u0000${others.join('\u0000')}`;
      now.add(key);
      if (this.overlapping.has(key)) continue;
      logger.warn(
        { pod: escapeUnprintable(pod), policy: decides, alsoSelectedBy: others },
        `pod ${escapeUnprintable(pod)} is selected by more than one pod policy: ${decides} decides (the first in file-name order), not ${others.join(', ')}`,
      );
    }
    this.overlapping = now;
  }

  /**
   * Whether the config just read is valid. Rejects only when the loader itself failed. `whole`: read
   * from the bytes, not from the last load (a resync).
   */
  async read(mode: ReadMode = {}): Promise<boolean> {
    const { configPath, logger, metrics } = this.deps;
    const result = await this.deps.load(configPath, this.loadOptions(), mode);
    this.logWarnings(result.warnings);
    const pending = !result.ok && result.error.kind === 'pending';
    metrics.setConfigValid(result.ok || pending);
    if (!result.ok && !pending) {
      const message = result.error.message;
      this.error = message;
      this.waiting = null;
      if (message !== this.lastLoggedError) {
        logger.error({ config: configPath }, `invalid config, not applied: ${message}`);
        metrics.incConfigErrors();
        this.deps.events?.('ConfigInvalid', `invalid config, not applied: ${message}`);
        this.lastLoggedError = message;
      }
      // The last good config keeps applying to the pods as they are now: membership follows the
      // API whatever a file's typo (a reused address never keeps a deleted pod's policy).
      if (this.goodFiles) {
        const joined = this.withCluster(this.goodFiles);
        if (typeof joined !== 'string') this.good = joined;
      }
      return false;
    }
    const config = result.ok ? this.withCluster(result.config) : result.error.message;
    if (typeof config === 'string') {
      if (config !== this.waiting) logger.info({ config: configPath }, config);
      this.waiting = config;
      this.error = null;
      return false;
    }
    this.waiting = null;
    if (this.lastLoggedError !== undefined) {
      logger.info('config valid again');
      this.deps.events?.('ConfigRecovered', 'the config is valid again and applied');
    }
    this.lastLoggedError = undefined;
    this.error = null;
    const skipped = config.skipped ?? [];
    // Once per config read anew (the loader answers from its cache while no file changed).
    if (skipped.length > 0 && config !== this.good)
      logger.debug({ config: configPath, skipped }, 'config files that do not apply on this node');
    this.good = config;
    if (result.ok) this.goodFiles = result.config;
    metrics.setResyncInterval(keyValue(config.keys, 'resyncInterval'));
    return true;
  }

  /**
   * Each warning once while it lasts: a directory filling up file by file is read again and again,
   * each time with the warnings of every file so far. A burst of new ones is cut to a few lines.
   */
  private logWarnings(warnings: readonly string[]): void {
    const { configPath, logger } = this.deps;
    const fresh = warnings.filter((w) => !this.lastWarnings.has(w));
    for (const warning of fresh.slice(0, WARNINGS_PER_READ)) {
      logger.warn({ config: configPath }, warning);
    }
    if (fresh.length > WARNINGS_PER_READ) {
      logger.warn(
        { config: configPath },
        `and ${fresh.length - WARNINGS_PER_READ} more config warnings (--check PATH lists them all)`,
      );
    }
    this.lastWarnings = new Set(warnings);
  }
}

/** New warnings logged from one read; the rest are counted in one line. */
const WARNINGS_PER_READ = 10;
