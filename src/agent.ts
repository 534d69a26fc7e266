// Wires the long-running agent: config watcher and signals → runner → reconciler → kernel, with the
// health/metrics server reading the reconciler's status. README, "When it writes" and "HTTP".
import type { Logger } from 'pino';
import { AUTO_LAYOUT_CROSSOVER } from './compile.js';
import { configLoader } from './config/loader.js';
import { libnftablesVersion, releaseMemory } from './nftables/addon.js';
import { plan, type AgentOptions } from './options.js';
import { nftKernel, type Kernel } from './nftables/kernel.js';
import { AgentMetrics } from './reconcile/metrics.js';
import { Reconciler } from './reconcile/reconciler.js';
import { SyncRunner } from './reconcile/runner.js';
import { watchConfig } from './reconcile/watcher.js';
import { buildServer } from './server/index.js';
import { handleSignals } from './signals.js';
import { version } from './version.js';

/** The agent's metrics, labelled with what it is built from. */
export function agentMetrics(): AgentMetrics {
  return new AgentMetrics({ version: version(), libnftables: libnftablesVersion() });
}

const SHUTDOWN_BUDGET_MS = 4_000;

/** Quiet time after the last event in the config's directory before it is read. */
const CONFIG_QUIET_MS = 10;

/** The reconciler for run and --once: every stage's options from the one plan (options.ts). */
export function makeReconciler(
  options: AgentOptions,
  logger: Logger,
  metrics: AgentMetrics,
  kernel: Kernel = nftKernel,
): Reconciler {
  const stages = plan(options);
  return new Reconciler({
    configPath: stages.configPath,
    loadOptions: stages.load,
    compileOptions: stages.compile,
    legacy: stages.legacy,
    conntrackFlush: stages.conntrackFlush,
    loadConfig: configLoader(),
    kernel,
    logger,
    metrics,
    largeSetThreshold: AUTO_LAYOUT_CROSSOVER,
  });
}

/** Runs until SIGTERM/SIGINT; then exits 0 within 5 s, leaving the tables in place. */
export async function runAgent(options: AgentOptions, logger: Logger): Promise<void> {
  const metrics = agentMetrics();
  const reconciler = makeReconciler(options, logger, metrics);
  const runner = new SyncRunner({
    sync: async () => {
      const outcome = await reconciler.sync();
      // Whatever the sync parsed and rendered is garbage now: give the C heap's share back.
      releaseMemory();
      return outcome;
    },
    intervalMs: () => reconciler.resyncIntervalMs,
    // The reconciler logs each distinct failure once; every retry is still here at debug.
    onError: (err) => logger.debug({ err }, 'sync failed; retrying with backoff'),
  });

  // Signals before any I/O (src/signals.ts): a SIGTERM during the start ends it with exit 0 like
  // any other, a SIGHUP before the runner starts is absorbed (its first sync reads the config).
  let started = false;
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
    else if (started) runner.trigger('SIGHUP');
  });

  const server = await buildServer({
    status: () => reconciler.status(runner.alive),
    metrics,
    logger,
  });
  stop = () => Promise.allSettled([runner.stop(), server.close()]);
  await server.listen({ host: options.listen.host, port: options.listen.port });
  if (stopping) return;
  logger.info(
    { listen: options.listen, config: options.config, table: options.table },
    'ipmasq-agent started',
  );

  // A ConfigMap swap or a rename-write is a burst of events well under a millisecond apart: 10 ms
  // of quiet coalesces it into one read (docs/bench.md measures the latency this leaves).
  const watcher = watchConfig(plan(options).configPath, () => runner.trigger('config changed'), {
    debounceMs: CONFIG_QUIET_MS,
  });
  stop = () => {
    watcher.close();
    return Promise.allSettled([runner.stop(), server.close()]);
  };
  started = true;
  runner.start();
}
