// What the agent knows of its cluster (docs/kubernetes.md, "Kubernetes API (opt-in)"): its own
// Node's labels and, when a config asks, every Node's pod CIDRs. Each from a reflector that keeps
// only those fields; the last known data stays while the API is away. Pod CIDRs are parsed in
// pod-cidrs.ts: only prefixes the agent formatted itself go further.
import type { Logger } from 'pino';
import { escapeUnprintable, formatAddress, parseAddress } from '../cidr/index.js';
import type { PodFacts } from '../config/pods.js';
import { errorText } from '../errors.js';
import { record } from '../record.js';
import type { ApiClient } from './client.js';
import { podCIDRsOf, type NodePodCIDRs, type WidestPodCIDR } from './pod-cidrs.js';
import { DEFAULT_TIMINGS, Reflector, type ReflectorTimings, type WatchOp } from './reflector.js';

export interface ClusterMetrics {
  setUp(up: boolean): void;
  incError(op: string): void;
}

export interface ClusterOptions {
  readonly client: ApiClient;
  readonly nodeName: string;
  readonly enableIPv6: boolean;
  readonly logger: Logger;
  readonly metrics: ClusterMetrics;
  /** Something the config depends on changed: labels, or the Nodes' pod CIDRs. */
  readonly onChange: () => void;
  readonly timings?: ReflectorTimings;
  readonly widest?: WidestPodCIDR;
}

const MAX_LABELS = 512;

/** metadata.labels, strings only, bounded. */
export function labelsOf(node: Record<string, unknown>): ReadonlyMap<string, string> {
  const labels = new Map<string, string>();
  for (const [key, value] of Object.entries(record(record(node.metadata).labels))) {
    if (labels.size >= MAX_LABELS) break;
    if (typeof value === 'string') labels.set(key, value);
  }
  return labels;
}

/** A pod has one address per family; more is not a pod the API server would store. */
const MAX_POD_IPS = 8;

/**
 * What the pod policies need of a pod of this node (docs/egress-policy.md, "Pod policies") while it
 * is Pending or Running and not on the host's network (podFactsOf); undefined otherwise (the pod is
 * then as gone).
 */
export function podOf(pod: Record<string, unknown>, enableIPv6: boolean): PodFacts | undefined {
  if (record(pod.spec).hostNetwork === true) return undefined;
  const phase = record(pod.status).phase;
  if (phase !== undefined && phase !== 'Pending' && phase !== 'Running') return undefined;
  return podFactsOf(pod, enableIPv6);
}

/**
 * A pod's namespace, name, labels, creation time and addresses, whatever its phase; undefined
 * without a name and namespace. Addresses are parsed strictly and formatted by the agent; IPv6 ones
 * only with --enable-ipv6.
 */
export function podFactsOf(
  pod: Record<string, unknown>,
  enableIPv6: boolean,
): PodFacts | undefined {
  const metadata = record(pod.metadata);
  const status = record(pod.status);
  const { name, namespace, creationTimestamp } = metadata;
  if (typeof name !== 'string' || typeof namespace !== 'string') return undefined;
  let texts: unknown[] = [];
  if (Array.isArray(status.podIPs)) texts = (status.podIPs as unknown[]).map((e) => record(e).ip);
  else if (typeof status.podIP === 'string') texts = [status.podIP];
  const addresses: string[] = [];
  for (const text of texts.slice(0, MAX_POD_IPS)) {
    if (typeof text !== 'string' || text.length > 64) continue;
    try {
      const { family, addr } = parseAddress(text);
      if (family === 6 && !enableIPv6) continue;
      const formatted = formatAddress(family, addr);
      if (!addresses.includes(formatted)) addresses.push(formatted);
    } catch {
      // not an address: the pod has none the agent can use
    }
  }
  return {
    namespace,
    name,
    labels: labelsOf(pod),
    addresses,
    created: typeof creationTimestamp === 'string' ? creationTimestamp.slice(0, 64) : '',
  };
}

const samePod = (a: PodFacts, b: PodFacts) =>
  a.created === b.created &&
  a.addresses.length === b.addresses.length &&
  a.addresses.every((address, i) => address === b.addresses[i]) &&
  sameLabels(a.labels, b.labels);

function sameLabels(a: ReadonlyMap<string, string> | undefined, b: ReadonlyMap<string, string>) {
  if (!a || a.size !== b.size) return false;
  for (const [key, value] of b) if (a.get(key) !== value) return false;
  return true;
}

/** How failures and recoveries name each watch. */
const WHOSE = {
  own: "this Node's",
  nodes: "the Nodes'",
  pods: "this node's pods'",
  namespaces: "the namespaces'",
} as const;
const WATCHED = {
  own: 'this Node',
  nodes: 'the Nodes',
  pods: "this node's pods",
  namespaces: 'the namespaces',
} as const;

export class Cluster {
  private readonly own: Reflector<ReadonlyMap<string, string>>;
  /** Every Node's pod CIDRs: listed and watched only while a config asks (wantPodCIDRs). */
  private nodes: Reflector<NodePodCIDRs> | undefined;
  private labelsNow: ReadonlyMap<string, string> | undefined;
  /** Moves whenever the pod CIDRs may have changed: callers cache on it. */
  podCIDRsVersion = 0;
  private readonly warned = new Map<string, string>();
  private readonly lastError = new Map<string, string>();
  private readonly up = { own: false, nodes: false, pods: false, namespaces: false };
  /** This node's pods, and every namespace's labels: watched only while a pod policy asks. */
  private podWatch: Reflector<PodFacts> | undefined;
  private namespaceWatch: Reflector<ReadonlyMap<string, string>> | undefined;
  /** Moves whenever pods() or namespaces() may answer differently. */
  podsVersion = 0;

  constructor(private readonly options: ClusterOptions) {
    const timings = options.timings ?? DEFAULT_TIMINGS;
    const common = { client: options.client, path: '/api/v1/nodes', timings };
    this.own = new Reflector({
      ...common,
      fieldSelector: `metadata.name=${options.nodeName}`,
      extract: labelsOf,
      onChange: () => {
        const labels = this.own.items.get(options.nodeName) ?? new Map<string, string>();
        if (sameLabels(this.labelsNow, labels)) return;
        this.labelsNow = labels;
        options.onChange();
      },
      onError: (op, err) => this.failed(`this Node's ${op}`, op, err),
      onUp: (up) => this.setUp('own', up),
    });
  }

  private watchNodes(): Reflector<NodePodCIDRs> {
    const { options } = this;
    const nodes: Reflector<NodePodCIDRs> = new Reflector({
      client: options.client,
      path: '/api/v1/nodes',
      timings: options.timings ?? DEFAULT_TIMINGS,
      extract: (node) => this.parseNode(node),
      // Most Node updates are status (heartbeats, conditions): they change nothing kept here.
      same: (a, b) =>
        a.prefixes.length === b.prefixes.length &&
        a.prefixes.every((p, i) => p.addr === b.prefixes[i]!.addr && p.len === b.prefixes[i]!.len),
      onChange: () => {
        if (this.nodes !== nodes) return;
        this.podCIDRsVersion += 1;
        options.onChange();
      },
      onError: (op, err) => this.failed(`the Nodes' ${op}`, op, err),
      onUp: (up) => {
        if (this.nodes === nodes) this.setUp('nodes', up);
      },
    });
    nodes.start();
    return nodes;
  }

  /** Watches this Node; every Node too once a config asks for their pod CIDRs. */
  start(): void {
    this.own.start();
  }

  async stop(): Promise<void> {
    await Promise.all([
      this.own.stop(),
      this.nodes?.stop(),
      this.podWatch?.stop(),
      this.namespaceWatch?.stop(),
    ]);
  }

  /**
   * Whether the config has pod policies (`pods`), and whether one selects by namespace labels
   * (`namespaces`): each list and watch runs only while asked for, and what it kept is forgotten
   * when no longer.
   */
  wantPods(want: { readonly pods: boolean; readonly namespaces: boolean }): void {
    const { options } = this;
    const timings = options.timings ?? DEFAULT_TIMINGS;
    if (want.pods && !this.podWatch) {
      const pods: Reflector<PodFacts> = new Reflector({
        client: options.client,
        path: '/api/v1/pods',
        fieldSelector: `spec.nodeName=${options.nodeName}`,
        timings,
        extract: (pod) => podOf(pod, options.enableIPv6),
        // Most pod updates are status (conditions, containers): they change nothing kept here.
        same: samePod,
        onChange: () => {
          if (this.podWatch !== pods) return;
          this.podsVersion += 1;
          options.onChange();
        },
        onError: (op, err) => this.failed(`this node's pods' ${op}`, op, err),
        onUp: (up) => {
          if (this.podWatch === pods) this.setUp('pods', up);
        },
      });
      this.podWatch = pods;
      pods.start();
    } else if (!want.pods && this.podWatch) {
      void this.podWatch.stop();
      this.podWatch = undefined;
      this.podsVersion += 1;
      this.setUp('pods', false);
    }
    const namespaces = want.pods && want.namespaces;
    if (namespaces && !this.namespaceWatch) {
      const watch: Reflector<ReadonlyMap<string, string>> = new Reflector({
        client: options.client,
        path: '/api/v1/namespaces',
        timings,
        extract: labelsOf,
        same: (a, b) => sameLabels(a, b),
        onChange: () => {
          if (this.namespaceWatch !== watch) return;
          this.podsVersion += 1;
          options.onChange();
        },
        onError: (op, err) => this.failed(`the namespaces' ${op}`, op, err),
        onUp: (up) => {
          if (this.namespaceWatch === watch) this.setUp('namespaces', up);
        },
      });
      this.namespaceWatch = watch;
      watch.start();
    } else if (!namespaces && this.namespaceWatch) {
      void this.namespaceWatch.stop();
      this.namespaceWatch = undefined;
      this.podsVersion += 1;
      this.setUp('namespaces', false);
    }
  }

  /**
   * This node's pods (by `namespace/name`); undefined until asked for (wantPods) and first listed.
   */
  pods(): ReadonlyMap<string, PodFacts> | undefined {
    return this.podWatch?.listed ? this.podWatch.items : undefined;
  }

  /** Every namespace's labels; undefined until asked for and first listed. */
  namespaces(): ReadonlyMap<string, ReadonlyMap<string, string>> | undefined {
    return this.namespaceWatch?.listed ? this.namespaceWatch.items : undefined;
  }

  /**
   * Whether a config asks for every Node's pod CIDRs: the list and watch of all Nodes run only
   * while one does, and what they kept is forgotten when none does any more.
   */
  wantPodCIDRs(want: boolean): void {
    if (want && !this.nodes) {
      this.nodes = this.watchNodes();
    } else if (!want && this.nodes) {
      const nodes = this.nodes;
      this.nodes = undefined;
      this.warned.clear();
      void nodes.stop();
      this.podCIDRsVersion += 1;
      this.setUp('nodes', false);
    }
  }

  /** This Node's labels; undefined until it was first read. A Node not found has none. */
  get labels(): ReadonlyMap<string, string> | undefined {
    return this.labelsNow;
  }

  /** Every Node's pod CIDRs; undefined until asked for (wantPodCIDRs) and first listed. */
  podCIDRs(): ReadonlyMap<string, NodePodCIDRs> | undefined {
    return this.nodes?.listed ? this.nodes.items : undefined;
  }

  private parseNode(node: Record<string, unknown>): NodePodCIDRs {
    const parsed = podCIDRsOf(node, this.options.enableIPv6, this.options.widest);
    const name = String(record(node.metadata).name);
    const said = parsed.rejected.join('; ');
    if (said === '') this.warned.delete(name);
    else if (this.warned.get(name) !== said) {
      this.warned.set(name, said);
      this.options.logger.warn(
        { node: escapeUnprintable(name) },
        `Node ${escapeUnprintable(name)}'s podCIDRs: left out: ${escapeUnprintable(said)}`,
      );
    }
    return parsed;
  }

  /** One line per distinct cause while it lasts; every failure counted. */
  private failed(what: string, op: WatchOp, err: unknown): void {
    this.options.metrics.incError(op);
    const text = escapeUnprintable(errorText(err));
    if (this.lastError.get(what) === text) return;
    this.lastError.set(what, text);
    this.options.logger.warn(
      { op },
      `Kubernetes API: ${what} failed: ${text}; the last known data stays, retrying with backoff`,
    );
  }

  private setUp(which: keyof Cluster['up'], up: boolean): void {
    this.up[which] = up;
    const whose = WHOSE[which];
    if (up && [...this.lastError.keys()].some((what) => what.startsWith(whose))) {
      for (const op of ['list', 'watch']) this.lastError.delete(`${whose} ${op}`);
      this.options.logger.info(`Kubernetes API: watching ${WATCHED[which]} again`);
    }
    const live =
      this.up.own &&
      (!this.nodes || this.up.nodes) &&
      (!this.podWatch || this.up.pods) &&
      (!this.namespaceWatch || this.up.namespaces);
    this.options.metrics.setUp(live);
  }
}
