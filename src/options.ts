// What the command line asks for, and the one mapping from it to what each stage consumes: the
// loader, the compiler and the reconciler (docs/design.md, "Data flow"). Run, --once, --render and
// --cleanup all take their stage options from plan(), so a new flag reaches every mode or none.
import type { CompileOptions, SetLayout } from './compile.js';
import type { LoadOptions } from './config/types.js';
import type { WidestPodCIDR } from './kubernetes/pod-cidrs.js';
import type { PortRange } from './decision.js';
import type { ConntrackFlushMode } from './reconcile/flush-modes.js';
import type { LegacyOptions } from './other-nat/legacy.js';

export const logLevels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof logLevels)[number];

export type Mode =
  'run' | 'once' | 'render' | 'cleanup' | 'version' | 'explain' | 'diff' | 'check' | 'flows';

export const outputs = ['text', 'json'] as const;
export type Output = (typeof outputs)[number];

export interface AgentOptions {
  readonly config: string;
  /** --config was given: the operator's commands then refuse a path with nothing at it. */
  readonly configGiven: boolean;
  readonly masqChain: string;
  readonly nomasqAllReservedRanges: boolean;
  readonly enableIPv6: boolean;
  readonly randomFully: boolean;
  /** Sorted by first port, never overlapping; empty means "any source port". */
  readonly toPorts: readonly PortRange[];
  readonly table: string;
  readonly listen: { readonly host: string; readonly port: number };
  readonly mode: Mode;
  readonly removeLegacyChain: boolean;
  readonly logLevel: LogLevel;
  readonly setLayout: SetLayout;
  readonly conntrackFlush: ConntrackFlushMode;
  /** --explain: the addresses to explain. */
  readonly explain: readonly string[];
  /** --explain --live: answer from the kernel's tables. */
  readonly live: boolean;
  /** --diff: the proposed config file or directory. */
  readonly proposed: string;
  /** --check: config files, directories and manifests to validate. */
  readonly check: readonly string[];
  /** --check: the ConfigMaps (NAME or NAMESPACE/NAME) a manifest carries the config in. */
  readonly configMaps: readonly string[];
  /** --configmap was given: a manifest without one of them is then an error. */
  readonly configMapsGiven: boolean;
  readonly output: Output;
  /** --node-name (default $NODE_NAME): this node, for config files scoped with nodeNames. */
  readonly nodeName: string;
  /**
   * --from: the source address --explain and --diff evaluate with, or the source address or CIDR
   * --flows shows ('' when not given).
   */
  readonly from: string;
  /** --to: the destination address or CIDR --flows shows ('' when not given). */
  readonly to: string;
  /** --nat-stats-interval: how often the SNAT port headroom is sampled, in ms; 0 turns it off. */
  readonly natStatsIntervalMs: number;
  /** --via: the egress interface --explain and --diff evaluate with ('' when not given). */
  readonly via: string;
  /** --node-labels: the node's labels --explain and --diff evaluate with (null when not given). */
  readonly nodeLabels: readonly (readonly [string, string])[] | null;
  /**
   * --pod-labels, --namespace-labels: the --from pod's and its namespace's labels (null when not
   * given).
   */
  readonly podLabels: readonly (readonly [string, string])[] | null;
  readonly namespaceLabels: readonly (readonly [string, string])[] | null;
  /**
   * --pod NAMESPACE/NAME: the pod --explain takes the source and labels of from the API ('' when
   * not given).
   */
  readonly pod: string;
  /** --kubernetes: read the cluster from the API server with the pod's service account. */
  readonly kubernetes: boolean;
  /** --kubeconfig: as --kubernetes with this kubeconfig ('' when not given). */
  readonly kubeconfig: string;
  /** --widest-node-pod-cidr: the shortest prefix a Node's pod CIDR may have, per family. */
  readonly widestNodePodCIDR: WidestPodCIDR;
}

/** The agent reads the API server (docs/kubernetes.md, "Kubernetes API (opt-in)"). */
export function usesApi(options: Pick<AgentOptions, 'kubernetes' | 'kubeconfig'>): boolean {
  return options.kubernetes || options.kubeconfig !== '';
}

export interface Plan {
  readonly configPath: string;
  readonly load: LoadOptions;
  readonly compile: CompileOptions;
  readonly legacy: LegacyOptions;
  /** What to do with existing flows whose decision a config change flips. */
  readonly conntrackFlush: ConntrackFlushMode;
}

const describing: readonly Mode[] = ['explain', 'diff', 'check'];

export function plan(options: AgentOptions): Plan {
  return {
    configPath: options.config,
    load: {
      enableIPv6: options.enableIPv6,
      nomasqAllReservedRanges: options.nomasqAllReservedRanges,
      nodeName: options.nodeName,
      ...(options.nodeLabels ? { nodeLabels: new Map(options.nodeLabels) } : {}),
      // The operator's commands describe a node; the agent and its one-shot modes run on one.
      scoping: describing.includes(options.mode) ? 'describe' : 'agent',
    },
    compile: {
      table: options.table,
      masqChain: options.masqChain,
      randomFully: options.randomFully,
      toPorts: options.toPorts,
      enableIPv6: options.enableIPv6,
      setLayout: options.setLayout,
    },
    legacy: {
      chains: [...new Set([options.masqChain, 'IP-MASQ'])],
      remove: options.removeLegacyChain,
    },
    conntrackFlush: options.conntrackFlush,
  };
}
