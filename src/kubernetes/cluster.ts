// What the agent knows of its cluster (README, "Kubernetes API (opt-in)"): its own Node's labels and,
// when a config asks, every Node's pod CIDRs. Each from a reflector that keeps only those fields; the
// last known data stays while the API is away. Pod CIDRs are parsed here: only prefixes the agent
// formatted itself go further.
import type { Logger } from 'pino';
import { escapeUnprintable, formatPrefix, parseCidr, type Prefix } from '../cidr/index.js';
import { DEFAULT_WIDEST_NODE_POD_CIDR, type WidestPodCIDR } from '../options.js';
import { errorText } from '../errors.js';
import { record } from '../record.js';
import type { ApiClient } from './client.js';
import { DEFAULT_TIMINGS, Reflector, type ReflectorTimings, type WatchOp } from './reflector.js';

/** One Node's pod CIDRs, parsed; the ones left out are named in `rejected`. */
export interface NodePodCIDRs {
  readonly prefixes: readonly Prefix[];
  readonly rejected: readonly string[];
}

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

/** A Node's spec.podCIDRs has one per family; more is not a Node the API server would store. */
const MAX_POD_CIDRS = 8;
const MAX_LABELS = 512;

/**
 * spec.podCIDRs (or the older spec.podCIDR), parsed strictly; IPv6 only with --enable-ipv6; one
 * wider than `widest` allows (a Node's slice of the cluster's range is never /0) left out.
 */
export function podCIDRsOf(
  node: Record<string, unknown>,
  enableIPv6: boolean,
  widest: WidestPodCIDR = DEFAULT_WIDEST_NODE_POD_CIDR,
): NodePodCIDRs {
  const spec = record(node.spec);
  let texts: unknown[] = [];
  if (Array.isArray(spec.podCIDRs)) texts = spec.podCIDRs as unknown[];
  else if (typeof spec.podCIDR === 'string') texts = [spec.podCIDR];
  const prefixes: Prefix[] = [];
  const rejected: string[] = [];
  for (const text of texts.slice(0, MAX_POD_CIDRS)) {
    if (typeof text !== 'string') {
      rejected.push(`${typeof text} is not a CIDR`);
      continue;
    }
    try {
      const prefix = parseCidr(text.slice(0, 64));
      if (text.length > 64) throw new Error(`${escapeUnprintable(text.slice(0, 64))}… is too long`);
      // A single-stack IPv4 agent leaves the IPv6 half of a dual-stack Node out, as it would a file's.
      if (prefix.family === 6 && !enableIPv6) continue;
      const shortest = prefix.family === 4 ? widest.ipv4 : widest.ipv6;
      if (prefix.len < shortest) {
        rejected.push(
          `${formatPrefix(prefix)} is wider than a Node's pod range may be (/${shortest} at most: --widest-node-pod-cidr)`,
        );
        continue;
      }
      prefixes.push(prefix);
    } catch (err) {
      rejected.push(errorText(err));
    }
  }
  if (texts.length > MAX_POD_CIDRS) rejected.push(`${texts.length - MAX_POD_CIDRS} more left out`);
  return { prefixes, rejected };
}

/** metadata.labels, strings only, bounded. */
export function labelsOf(node: Record<string, unknown>): ReadonlyMap<string, string> {
  const labels = new Map<string, string>();
  for (const [key, value] of Object.entries(record(record(node.metadata).labels))) {
    if (labels.size >= MAX_LABELS) break;
    if (typeof value === 'string') labels.set(key, value);
  }
  return labels;
}

function sameLabels(a: ReadonlyMap<string, string> | undefined, b: ReadonlyMap<string, string>) {
  if (!a || a.size !== b.size) return false;
  for (const [key, value] of b) if (a.get(key) !== value) return false;
  return true;
}

export class Cluster {
  private readonly own: Reflector<ReadonlyMap<string, string>>;
  /** Every Node's pod CIDRs: listed and watched only while a config asks (wantPodCIDRs). */
  private nodes: Reflector<NodePodCIDRs> | undefined;
  private labelsNow: ReadonlyMap<string, string> | undefined;
  /** Moves whenever the pod CIDRs may have changed: callers cache on it. */
  podCIDRsVersion = 0;
  private readonly warned = new Map<string, string>();
  private readonly lastError = new Map<string, string>();
  private readonly up = { own: false, nodes: false };

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
    await Promise.all([this.own.stop(), this.nodes?.stop()]);
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

  private setUp(which: 'own' | 'nodes', up: boolean): void {
    this.up[which] = up;
    const whose = which === 'own' ? "this Node's" : "the Nodes'";
    if (up && [...this.lastError.keys()].some((what) => what.startsWith(whose))) {
      for (const op of ['list', 'watch']) this.lastError.delete(`${whose} ${op}`);
      this.options.logger.info(
        `Kubernetes API: watching ${which === 'own' ? 'this Node' : 'the Nodes'} again`,
      );
    }
    const live = this.up.own && (!this.nodes || this.up.nodes);
    this.options.metrics.setUp(live);
  }
}
