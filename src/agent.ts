// Wires the long-running agent: config watcher and signals → runner → reconciler → kernel, with the
// health/metrics server reading the reconciler's status. docs/writes.md, "When it writes" and
// "HTTP".
import { managedFamilies } from './cidr/index.js';
import type { Logger } from 'pino';
import { AUTO_LAYOUT_CROSSOVER } from './compile.js';
import { configLoader, loadAdaptive } from './config/loader.js';
import { DirectoryListings } from './config/source.js';
import { loadSourceOffThread, onFastPathMismatch, type LoadFaults } from './config/load-worker.js';
import { FAST_PATH_MISMATCH, reportMismatch } from './reconcile/fast-path.js';
import { CommitWatch } from './reconcile/commit-watch.js';
import { libnftablesVersion, openCommitMonitor } from './kernel/addon.js';
import { oursOrStandIn } from './nftables/ownership.js';
import { MemoryPolicy } from './memory-policy.js';
import { plan, usesApi, type AgentOptions } from './options.js';
import { snatPorts } from './nat-figures.js';
import { NatSampler } from './reconcile/nat-sampler.js';
import type { KubernetesSession } from './kubernetes/index.js';
import { nftKernel } from './kernel/kernel.js';
import type { Kernel } from './kernel/ports.js';
import { AgentMetrics } from './reconcile/metrics.js';
import { ReadinessCheck } from './reconcile/readiness.js';
import { Reconciler } from './reconcile/reconciler.js';
import { SyncRunner } from './reconcile/runner.js';
import { watchConfig } from './reconcile/watcher.js';
import { buildServer } from './server/index.js';
import { handleSignals } from './signals.js';
import { version } from './version.js';
import { errorText } from './errors.js';

/** The agent's metrics, labelled with what it is built from. */
export function agentMetrics(logger: Logger): AgentMetrics {
  const metrics = new AgentMetrics({ version: version(), libnftables: libnftablesVersion() });
  metrics.conntrackHealth(undefined, (problem) =>
    logger.warn({ problem }, `conntrack health: ${problem}; its series is left out`),
  );
  return metrics;
}

const SHUTDOWN_BUDGET_MS = 4_000;

/** Quiet time after the last event in the config's directory before it is read. */
const CONFIG_QUIET_MS = 10;

/**
 * What a test puts in place of the agent's own parts: a kernel port with a fault, faults for the
 * config worker, shorter Kubernetes timings (harness/agent-with-parts.js). The agent itself passes
 * none.
 */
export interface AgentParts {
  readonly kernel?: Kernel;
  readonly loadFaults?: LoadFaults;
  /** Shorter Kubernetes timings (src/kubernetes/index.ts, kubernetesTimings). */
  readonly kubernetesTimings?: Readonly<Record<string, unknown>>;
}

/** The reconciler for run and --once: every stage's options from the one plan (options.ts). */
export function makeReconciler(
  options: AgentOptions,
  logger: Logger,
  metrics: AgentMetrics,
  parts: AgentParts & {
    readonly api?: KubernetesSession | undefined;
    readonly requestSync?: (reason: string) => void;
  } = {},
): Reconciler {
  const { api, requestSync, loadFaults } = parts;
  const stages = plan(options);
  return new Reconciler({
    ...(requestSync ? { requestSync } : {}),
    ...(api ? { cluster: api.cluster, events: api.events } : {}),
    configPath: stages.configPath,
    loadOptions: stages.load,
    compileOptions: stages.compile,
    legacy: stages.legacy,
    conntrackFlush: stages.conntrackFlush,
    loadConfig: configLoader(
      (source, loadOptions, mode) =>
        loadAdaptive(
          source,
          loadOptions,
          (s, o, m) => loadSourceOffThread(s, o, undefined, m?.whole === true, loadFaults),
          mode,
        ),
      new DirectoryListings({
        listed: () => metrics.incConfigReads('listing'),
        mismatch: (details) => reportMismatch(logger, metrics, 'config-listing', details),
      }),
      () => metrics.incConfigReads('files'),
    ),
    kernel: parts.kernel ?? nftKernel,
    logger,
    metrics,
    largeSetThreshold: AUTO_LAYOUT_CROSSOVER,
  });
}

/**
 * --kubernetes / --kubeconfig: connects and starts watching this Node (src/kubernetes, loaded only
 * then). `onChange` is called whenever the labels or the Nodes' pod CIDRs change.
 */
export async function connectApi(
  options: AgentOptions,
  logger: Logger,
  metrics: AgentMetrics,
  onChange: () => void,
  timings?: AgentParts['kubernetesTimings'],
): Promise<KubernetesSession | undefined> {
  if (!usesApi(options)) return undefined;
  const { startKubernetes } = await import('./kubernetes/index.js');
  return startKubernetes({
    kubeconfig: options.kubeconfig,
    nodeName: options.nodeName,
    enableIPv6: options.enableIPv6,
    logger,
    metrics: metrics.kubernetes(),
    onChange,
    widest: options.widestNodePodCIDR,
    ...(timings ? { timings } : {}),
  });
}

/** Runs until SIGTERM/SIGINT; then exits 0 within 5 s, leaving the tables in place. */
export async function runAgent(
  options: AgentOptions,
  logger: Logger,
  parts: AgentParts = {},
): Promise<void> {
  const kernel = parts.kernel ?? nftKernel;
  // Signals before any I/O (src/signals.ts): a SIGTERM during the start ends it with exit 0 like
  // any other, a SIGHUP before the runner starts is absorbed (its first sync reads the config).
  /** Asks for a sync once the runner has started; before that its first sync reads everything. */
  let trigger: (why: string) => void = () => {};
  let stop: () => Promise<unknown> = async () => undefined;
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down; tables stay in place');
    setTimeout(() => process.exit(0), SHUTDOWN_BUDGET_MS).unref();
    void stop().then(() => process.exit(0));
  };
  handleSignals((signal) => {
    if (signal !== 'SIGHUP') shutdown(signal);
    else trigger('SIGHUP');
  });

  const metrics = agentMetrics(logger);
  let api: KubernetesSession | undefined;
  try {
    api = await connectApi(
      options,
      logger,
      metrics,
      () => trigger('cluster changed'),
      parts.kubernetesTimings,
    );
  } catch (err) {
    logger.fatal(`cannot reach the Kubernetes API: ${errorText(err)}`);
    process.exitCode = 1;
    return;
  }
  stop = async () => api?.stop();
  if (stopping) return;
  const reconciler = makeReconciler(options, logger, metrics, {
    ...parts,
    api,
    requestSync: (why) => trigger(why),
  });
  publishKernelFigures(options, logger, metrics, kernel, reconciler);
  const syncs = syncRunner(reconciler, logger);
  const commits = commitWatch(options, logger, reconciler, (why) => trigger(why));
  const readiness = readinessOf(reconciler, syncs, commits);
  const server = await buildServer({
    status: () => reconciler.status(syncs.alive),
    fresh: () => readiness.fresh(),
    metrics,
    logger,
  });
  stop = () => Promise.allSettled([syncs.stop(), server.close(), api?.stop()]);
  await server.listen({ host: options.listen.host, port: options.listen.port });
  if (stopping) return;
  const { configPath, compile } = plan(options);
  logger.info(
    { listen: options.listen, config: configPath, table: compile.table },
    'ipmasq-agent started',
  );

  // A ConfigMap swap or a rename-write is a burst of events well under a millisecond apart: 10 ms
  // of quiet coalesces it into one read (docs/bench.md measures the latency this leaves).
  const watcher = watchConfig(configPath, () => syncs.trigger('config changed'), {
    debounceMs: CONFIG_QUIET_MS,
  });
  stop = () => {
    watcher.close();
    commits.stop();
    return Promise.allSettled([syncs.stop(), server.close(), api?.stop()]);
  };
  trigger = (why) => syncs.trigger(why);
  applyWholeOnMismatch(options, logger, metrics, reconciler, trigger);
  commits.start();
  syncs.start();
}

/**
 * The figures read from the kernel beside the syncs: the SNAT headroom's sample (when asked for)
 * and the decision counters' series.
 */
function publishKernelFigures(
  options: AgentOptions,
  logger: Logger,
  metrics: AgentMetrics,
  kernel: Kernel,
  reconciler: Reconciler,
): void {
  const { table, enableIPv6, toPorts } = plan(options).compile;
  if (options.natStatsIntervalMs > 0) {
    const sampler = new NatSampler({
      kernel,
      logger,
      publish: metrics.snatHeadroom(),
      intervalMs: options.natStatsIntervalMs,
      families: managedFamilies(enableIPv6).map((f) => f.name),
      ports: snatPorts(toPorts),
    });
    sampler.start();
  }
  metrics.decisions(
    async () =>
      Promise.all(
        managedFamilies(enableIPv6).map(async (family) => ({
          family: family.name,
          counters: await kernel.counters({ family: family.table, name: table }),
        })),
      ),
    () => reconciler.podPolicyNames(),
  );
}

/** The runner of the syncs, with the memory policy around each (src/memory-policy.ts). */
function syncRunner(reconciler: Reconciler, logger: Logger): SyncRunner {
  const memory = new MemoryPolicy();
  memory.start();
  const syncs: SyncRunner = new SyncRunner({
    sync: async (reason) => {
      memory.beforeSync();
      const outcome = await reconciler.sync(reason);
      const { ipv4, ipv6 } = reconciler.status(syncs.alive).nonMasqueradeCIDRs;
      memory.afterSync(ipv4 + ipv6);
      return outcome;
    },
    intervalMs: () => reconciler.resyncIntervalMs,
    // The reconciler logs each distinct failure once; every retry is still here at debug.
    onError: (err) => logger.debug({ err }, 'sync failed; retrying with backoff'),
  });
  return syncs;
}

/**
 * The commit monitor's reader: another tool's commit to our tables read back and repaired within
 * the second it came in; one that named none of them noted as such.
 */
function commitWatch(
  options: AgentOptions,
  logger: Logger,
  reconciler: Reconciler,
  trigger: (why: string) => void,
): CommitWatch {
  const { table, enableIPv6 } = plan(options).compile;
  const ours = oursOrStandIn(
    table,
    managedFamilies(enableIPv6).map((f) => f.table),
  );
  const commits = new CommitWatch({
    open: openCommitMonitor,
    ours: (name) => ours(name.slice(0, name.indexOf(' ')), name.slice(name.indexOf(' ') + 1)),
    unchanged: () => reconciler.kernelUnchanged(),
    requestSync: trigger,
    elsewhere: (genId) => reconciler.heard.elsewhere(genId),
    touched: (genId) => reconciler.heard.ours(genId),
    unavailable: (err) =>
      logger.warn(
        { err: errorText(err) },
        'cannot hear nftables notifications: commits by others to our tables are found at the next resync or readiness probe',
      ),
  });
  reconciler.heard.hearBy(() => commits.hearNow());
  return commits;
}

/** /readyz's check: what the notifications heard so far say first, a look at the kernel after. */
function readinessOf(
  reconciler: Reconciler,
  syncs: SyncRunner,
  commits: CommitWatch,
): ReadinessCheck {
  return new ReadinessCheck({
    // Another tool's commit elsewhere needs no look.
    unchanged: async () => {
      await commits.poll();
      return reconciler.kernelUnchangedForProbe();
    },
    requestSync: (reason) => syncs.trigger(reason),
    afterNextSync: () => syncs.afterNextSync(),
    verified: () => reconciler.kernelVerified,
  });
}

/** A config answer of the worker's fast path that its audit found wrong: the whole one applied. */
function applyWholeOnMismatch(
  options: AgentOptions,
  logger: Logger,
  metrics: AgentMetrics,
  reconciler: Reconciler,
  trigger: (why: string) => void,
): void {
  onFastPathMismatch((mismatch) => {
    reportMismatch(logger, metrics, 'config', { config: plan(options).configPath, ...mismatch });
    // Sticky: a trigger for another reason before the sync starts must not hide it.
    reconciler.readWholeNext();
    trigger(FAST_PATH_MISMATCH);
  });
}
