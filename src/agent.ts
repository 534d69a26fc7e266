// Wires the long-running agent: config watcher and signals → runner → reconciler → kernel, with the
// health/metrics server reading the reconciler's status. README, "When it writes" and "HTTP".
import type { Logger } from 'pino';
import { AUTO_LAYOUT_CROSSOVER } from './compile.js';
import { loadConfigAdaptive } from './config/load-worker.js';
import { libnftablesVersion } from './nftables/addon.js';
import { handleSignals } from './signals.js';
import { version } from './version.js';
import type { AgentOptions } from './cli/flags.js';
import { cachingLoader } from './reconcile/config-cache.js';
import { nftKernel, type Kernel } from './reconcile/kernel.js';
import { findLegacyChains, legacyChainNames, removeLegacyChain } from './reconcile/legacy.js';
import { Reconciler } from './reconcile/reconciler.js';
import { SyncRunner, type SyncOutcome } from './reconcile/runner.js';
import { watchConfig } from './reconcile/watcher.js';
import { buildServer } from './server/index.js';
import { AgentMetrics } from './server/metrics.js';

/** The agent's metrics, labelled with what it is built from. */
export function agentMetrics(): AgentMetrics {
  return new AgentMetrics({ version: version(), libnftables: libnftablesVersion() });
}

const SHUTDOWN_BUDGET_MS = 4_000;

export function makeReconciler(
  options: AgentOptions,
  logger: Logger,
  metrics: AgentMetrics,
  kernel: Kernel = nftKernel,
): Reconciler {
  return new Reconciler({
    configPath: options.config,
    loadOptions: {
      enableIPv6: options.enableIPv6,
      nomasqAllReservedRanges: options.nomasqAllReservedRanges,
    },
    compileOptions: {
      table: options.table,
      masqChain: options.masqChain,
      randomFully: options.randomFully,
      toPorts: options.toPorts,
      enableIPv6: options.enableIPv6,
      setLayout: options.setLayout,
    },
    loadConfig: cachingLoader(loadConfigAdaptive),
    kernel,
    logger,
    metrics,
    largeSetThreshold: AUTO_LAYOUT_CROSSOVER,
  });
}

/**
 * Looks for the original agent's chain in `ip nat` and warns; with `remove`, deletes it. Never fatal.
 * Removal waits until our own table is in the kernel, so no flow goes out unmasqueraded meanwhile.
 */
export async function handleLegacyChain(
  options: AgentOptions,
  logger: Logger,
  metrics: AgentMetrics,
  remove: boolean,
): Promise<void> {
  let remaining: string[] = [];
  try {
    remaining = await findLegacyChains(legacyChainNames(options.masqChain));
    for (const chain of [...remaining]) {
      if (!remove) {
        logger.warn(
          { chain },
          "the original ip-masq-agent's chain is still in table ip nat: traffic we exempt may still be masqueraded there; " +
            (options.removeLegacyChain
              ? 'it is removed once our table is in the kernel'
              : 'run with --remove-legacy-chain to delete it'),
        );
        continue;
      }
      const rules = await removeLegacyChain(chain);
      remaining = remaining.filter((name) => name !== chain);
      logger.warn(
        { chain, jumpRulesDeleted: rules },
        "removed the original agent's chain from table ip nat",
      );
    }
  } catch (err) {
    logger.error({ err }, "could not check or remove the original agent's chain in table ip nat");
  }
  metrics.setLegacyChainPresent(remaining.length > 0);
}

/** Wraps a sync so that the legacy chain is removed after the first sync that leaves our table in place. */
export function removingLegacyChainAfterSync(
  sync: () => Promise<SyncOutcome>,
  reconciler: Reconciler,
  options: AgentOptions,
  logger: Logger,
  metrics: AgentMetrics,
): () => Promise<SyncOutcome> {
  let pending = options.removeLegacyChain;
  return async () => {
    const outcome = await sync();
    if (pending && outcome.ok && reconciler.status(true).generation > 0) {
      pending = false;
      await handleLegacyChain(options, logger, metrics, true);
    }
    return outcome;
  };
}

/** Runs until SIGTERM/SIGINT; then exits 0 within 5 s, leaving the tables in place. */
export async function runAgent(options: AgentOptions, logger: Logger): Promise<void> {
  const metrics = agentMetrics();
  const reconciler = makeReconciler(options, logger, metrics);
  const runner = new SyncRunner({
    sync: removingLegacyChainAfterSync(
      () => reconciler.sync(),
      reconciler,
      options,
      logger,
      metrics,
    ),
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

  await handleLegacyChain(options, logger, metrics, false);
  if (stopping) return;
  // A ConfigMap swap or a rename-write is a burst of events within a few ms: 25 ms coalesces it.
  const watcher = watchConfig(options.config, () => runner.trigger('config changed'), {
    debounceMs: 25,
  });
  stop = () => {
    watcher.close();
    return Promise.allSettled([runner.stop(), server.close()]);
  };
  started = true;
  runner.start();
}
