// The opt-in Kubernetes API (docs/kubernetes.md, "Kubernetes API (opt-in)"). Imported only with
// --kubernetes or
// --kubeconfig: the file-driven agent never loads this code.
import type { Logger } from 'pino';
import { escapeUnprintable } from '../cidr/index.js';
import { record } from '../record.js';
import { ApiClient } from './client.js';
import { Cluster, labelsOf, podFactsOf, podOf, type ClusterMetrics } from './cluster.js';
import { addressHolder, type PodFacts } from '../config/pods.js';
import { errorText } from '../errors.js';
import { fromKubeconfig, inCluster, type Connection } from './connection.js';
import { podCIDRsOf, type NodePodCIDRs, type WidestPodCIDR } from './pod-cidrs.js';
import { EventRecorder, type NodeEvents } from './events.js';
import { DEFAULT_TIMINGS, Reflector, type ReflectorTimings } from './reflector.js';

export { ConnectionError, UnsupportedKubeconfig } from './connection.js';
export type { NodePodCIDRs } from './pod-cidrs.js';

export interface KubernetesOptions {
  /** '' for the pod's service account. */
  readonly kubeconfig: string;
  readonly nodeName: string;
  readonly enableIPv6: boolean;
  readonly logger: Logger;
  readonly metrics: ClusterMetrics;
  readonly onChange: () => void;
  readonly widest: WidestPodCIDR;
  /** A test's timings (kubernetesTimings); the defaults when not given. */
  readonly timings?: Readonly<Record<string, unknown>>;
}

export interface KubernetesSession {
  readonly cluster: Cluster;
  readonly events: NodeEvents;
  stop(): Promise<void>;
}

export function connection(kubeconfig: string): Promise<Connection> {
  return kubeconfig === '' ? inCluster() : fromKubeconfig(kubeconfig);
}

/** At most one Event write per reason in this long (src/kubernetes/events.ts). */
export const EVENT_INTERVAL_MS = 60_000;

export type KubernetesTimings = ReflectorTimings & { readonly eventIntervalMs: number };

/**
 * The timings: the defaults, but where `given` holds a positive number for one of them (milliseconds
 * and seconds as in ReflectorTimings, and eventIntervalMs). The tests shorten the stall detection,
 * the backoff and the wait between Event writes (AgentParts, src/agent.ts); the agent gives none.
 */
export function kubernetesTimings(
  given: Readonly<Record<string, unknown>> = {},
): KubernetesTimings {
  const defaults: KubernetesTimings = { ...DEFAULT_TIMINGS, eventIntervalMs: EVENT_INTERVAL_MS };
  const timings: Record<string, number> = { ...defaults };
  for (const key of Object.keys(defaults)) {
    const value = given[key];
    if (typeof value === 'number' && Number.isFinite(value) && value > 0) timings[key] = value;
  }
  return timings as unknown as KubernetesTimings;
}

/** Connects, starts watching this Node, and is ready to post Events. Throws ConnectionError. */
export async function startKubernetes(options: KubernetesOptions): Promise<KubernetesSession> {
  const client = new ApiClient(await connection(options.kubeconfig));
  const timings = kubernetesTimings(options.timings);
  const cluster = new Cluster({ ...options, client, timings });
  const recorder = new EventRecorder({
    client,
    intervalMs: timings.eventIntervalMs,
    nodeName: options.nodeName,
    logger: options.logger,
    onError: () => options.metrics.incError('event'),
  });
  cluster.start();
  return {
    cluster,
    events: recorder.emit,
    stop: async () => {
      await Promise.all([cluster.stop(), recorder.stop()]);
      client.close();
    },
  };
}

/**
 * For one-shot commands: what the API says now, read once (a list, no watch): the Node's labels
 * when a name is given, every Node's pod CIDRs when asked. Rejects on the first failure.
 */
export async function clusterSnapshot(options: {
  kubeconfig: string;
  nodeName: string;
  enableIPv6: boolean;
  podCIDRs: boolean;
  logger: Logger;
  widest: WidestPodCIDR;
}): Promise<{
  labels: ReadonlyMap<string, string> | undefined;
  nodes: ReadonlyMap<string, NodePodCIDRs> | undefined;
}> {
  const client = new ApiClient(await connection(options.kubeconfig));
  try {
    const once = async <T>(
      fieldSelector: string | undefined,
      extract: (o: Record<string, unknown>) => T,
    ) => {
      const reflector = new Reflector<T>({
        client,
        path: '/api/v1/nodes',
        ...(fieldSelector ? { fieldSelector } : {}),
        extract,
        onChange: () => undefined,
        onError: () => undefined,
        onUp: () => undefined,
        timings: DEFAULT_TIMINGS,
      });
      await reflector.listOnce();
      return reflector.items;
    };
    const labels = options.nodeName
      ? ((await once(`metadata.name=${options.nodeName}`, labelsOf)).get(options.nodeName) ??
        new Map<string, string>())
      : undefined;
    const nodes = options.podCIDRs
      ? await once(undefined, (node) => {
          const parsed = podCIDRsOf(node, options.enableIPv6, options.widest);
          if (parsed.rejected.length > 0) {
            const name = escapeUnprintable(String(record(node.metadata).name));
            options.logger.warn(
              `Node ${name}'s podCIDRs: left out: ${escapeUnprintable(parsed.rejected.join('; '))}`,
            );
          }
          return parsed;
        })
      : undefined;
    return { labels, nodes };
  } finally {
    client.close();
  }
}

/**
 * `--flows`: the pods of this Node by address (`namespace/name`), from one paged list of
 * `/api/v1/pods?fieldSelector=spec.nodeName=NODE`; pods on the host's network are left out (their
 * address is the node's). Rejects with the API's error (a 403 where `list pods` is not granted).
 */
export async function podsOnNode(options: {
  kubeconfig: string;
  nodeName: string;
}): Promise<Map<string, string>> {
  const client = new ApiClient(await connection(options.kubeconfig));
  const pods = new Map<string, string>();
  try {
    let next = '';
    do {
      const query = new URLSearchParams({
        fieldSelector: `spec.nodeName=${options.nodeName}`,
        limit: '500',
        ...(next ? { continue: next } : {}),
      });
      const page = record(await client.json('GET', `/api/v1/pods?${query}`));
      for (const item of Array.isArray(page.items) ? (page.items as unknown[]) : []) {
        const pod = record(item);
        const meta = record(pod.metadata);
        if (record(pod.spec).hostNetwork === true) continue;
        const name = `${escapeUnprintable(String(meta.namespace))}/${escapeUnprintable(String(meta.name))}`;
        const status = record(pod.status);
        const ips = Array.isArray(status.podIPs)
          ? (status.podIPs as unknown[]).map((entry) => record(entry).ip)
          : [status.podIP];
        for (const ip of ips) if (typeof ip === 'string' && ip !== '') pods.set(ip, name);
      }
      const cont = record(page.metadata).continue;
      next = typeof cont === 'string' ? cont : '';
    } while (next !== '');
  } finally {
    client.close();
  }
  return pods;
}

/**
 * The pod of `node` the agent gives `pod`'s first address to, when it is another (a newer pod
 * holding it too): listed as the agent lists this node's pods, selectable ones only.
 */
async function holderOf(
  client: ApiClient,
  pod: PodFacts,
  node: string,
  enableIPv6: boolean,
): Promise<PodFacts | undefined> {
  const address = pod.addresses[0];
  if (node === '' || address === undefined) return undefined;
  const pods: PodFacts[] = [];
  let next = '';
  do {
    const query = new URLSearchParams({
      fieldSelector: `spec.nodeName=${node}`,
      limit: '500',
      ...(next ? { continue: next } : {}),
    });
    const page = record(await client.json('GET', `/api/v1/pods?${query}`));
    for (const item of Array.isArray(page.items) ? (page.items as unknown[]) : []) {
      const facts = podOf(record(item), enableIPv6);
      if (facts?.addresses.includes(address)) pods.push(facts);
    }
    const cont = record(page.metadata).continue;
    next = typeof cont === 'string' ? cont : '';
  } while (next !== '');
  const holder = addressHolder(pods, address);
  return holder && (holder.namespace !== pod.namespace || holder.name !== pod.name)
    ? holder
    : undefined;
}

/**
 * `--explain --pod NAMESPACE/NAME`: the pod's addresses, labels and node, and its namespace's
 * labels (undefined where the API refuses them: the caller says so). Rejects with the API's error
 * for the pod itself, or saying there is no such pod.
 */
export async function podNamed(options: {
  kubeconfig: string;
  namespace: string;
  name: string;
  enableIPv6: boolean;
}): Promise<{
  pod: PodFacts;
  node: string;
  hostNetwork: boolean;
  /** status.phase ('' when not given). */
  phase: string;
  /**
   * Another pod of the same node that the agent gives this pod's first address to (created later),
   * with its namespace's labels; undefined when none, or when the node's pods cannot be listed.
   */
  holder?: { pod: PodFacts; namespaceLabels: ReadonlyMap<string, string> | undefined };
  namespaceLabels: ReadonlyMap<string, string> | undefined;
  namespaceProblem?: string;
}> {
  const client = new ApiClient(await connection(options.kubeconfig));
  try {
    // Lists by name, not gets: the API overlay's RBAC grants the agent list and watch alone.
    const ns = encodeURIComponent(options.namespace);
    const only = (name: string) =>
      new URLSearchParams({ fieldSelector: `metadata.name=${name}` }).toString();
    const first = (answer: unknown) => {
      const items = record(answer).items;
      return Array.isArray(items) && items.length > 0 ? record(items[0]) : undefined;
    };
    const object = first(
      await client.json('GET', `/api/v1/namespaces/${ns}/pods?${only(options.name)}`),
    );
    if (!object) throw new Error(`no such pod (404)`);
    // Whatever its phase: --explain says what would decide for it.
    const pod = podFactsOf(object, options.enableIPv6);
    if (!pod)
      throw new Error(`${options.namespace}/${options.name}: not a pod the API server would store`);
    const spec = record(object.spec);
    let namespaceLabels: ReadonlyMap<string, string> | undefined;
    let namespaceProblem: string | undefined;
    try {
      const namespace = first(
        await client.json('GET', `/api/v1/namespaces?${only(options.namespace)}`),
      );
      namespaceLabels = namespace ? labelsOf(namespace) : new Map();
    } catch (err) {
      namespaceProblem = escapeUnprintable(errorText(err));
    }
    const node = typeof spec.nodeName === 'string' ? spec.nodeName : '';
    const phase = record(object.status).phase;
    const holder = await holderOf(client, pod, node, options.enableIPv6).catch(() => undefined);
    let holderNamespace: ReadonlyMap<string, string> | undefined;
    if (holder && holder.namespace !== pod.namespace)
      holderNamespace = await client
        .json('GET', `/api/v1/namespaces?${only(holder.namespace)}`)
        .then((answer) => {
          const found = first(answer);
          return found ? labelsOf(found) : new Map<string, string>();
        })
        .catch(() => undefined);
    else holderNamespace = namespaceLabels;
    return {
      pod,
      node,
      hostNetwork: spec.hostNetwork === true,
      phase: typeof phase === 'string' ? phase.slice(0, 32) : '',
      ...(holder ? { holder: { pod: holder, namespaceLabels: holderNamespace } } : {}),
      namespaceLabels,
      ...(namespaceProblem ? { namespaceProblem } : {}),
    };
  } finally {
    client.close();
  }
}
