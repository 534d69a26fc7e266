// Wires the long-running agent: config watcher and signals → runner → reconciler → kernel, with the
// health/metrics server reading the reconciler's status. CONTRACT §6–§8.
import type { Logger } from 'pino';
import { loadConfig } from './config/index.js';
import type { AgentOptions } from './cli/flags.js';
import { cachingLoader } from './reconcile/config-cache.js';
import { nftKernel, type Kernel } from './reconcile/kernel.js';
import { findLegacyChains, legacyChainNames, removeLegacyChain } from './reconcile/legacy.js';
import { Reconciler } from './reconcile/reconciler.js';
import { SyncRunner } from './reconcile/runner.js';
import { watchConfig } from './reconcile/watcher.js';
import { buildServer } from './server/index.js';
import { AgentMetrics } from './server/metrics.js';

/** Effective set size past which a kube-proxy-like transaction takes > 100 ms here (docs/bench.md). */
export const LARGE_SET_THRESHOLD = 10_000;
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
    },
    loadConfig: cachingLoader(loadConfig),
    kernel,
    logger,
    metrics,
    largeSetThreshold: LARGE_SET_THRESHOLD,
  });
}

/** Looks for the original agent's chain in `ip nat`; removes it when asked. Never fatal. */
export async function handleLegacyChain(
  options: AgentOptions,
  logger: Logger,
  metrics: AgentMetrics,
): Promise<void> {
  try {
    const found = await findLegacyChains(legacyChainNames(options.masqChain));
    for (const chain of found) {
      if (options.removeLegacyChain) {
        const rules = await removeLegacyChain(chain);
        logger.warn(
          { chain, jumpRulesDeleted: rules },
          "removed the original agent's chain from table ip nat",
        );
      } else {
        logger.warn(
          { chain },
          "the original ip-masq-agent's chain is still in table ip nat: traffic we exempt may still be masqueraded there; " +
            'run with --remove-legacy-chain to delete it',
        );
      }
    }
    metrics.setLegacyChainPresent(found.length > 0 && !options.removeLegacyChain);
  } catch (err) {
    logger.error({ err }, "could not check table ip nat for the original agent's chain");
  }
}

/** Runs until SIGTERM/SIGINT; then exits 0 within 5 s, leaving the tables in place. */
export async function runAgent(options: AgentOptions, logger: Logger): Promise<void> {
  const metrics = new AgentMetrics();
  const reconciler = makeReconciler(options, logger, metrics);
  const runner = new SyncRunner({
    sync: () => reconciler.sync(),
    intervalMs: () => reconciler.resyncIntervalMs,
    onError: (err) => logger.error({ err }, 'kernel write failed; retrying with backoff'),
  });
  const server = await buildServer({
    status: () => reconciler.status(runner.alive),
    metrics,
    logger,
  });
  await server.listen({ host: options.listen.host, port: options.listen.port });
  logger.info(
    { listen: options.listen, config: options.config, table: options.table },
    'ipmasq-agent started',
  );

  await handleLegacyChain(options, logger, metrics);
  const watcher = watchConfig(options.config, () => runner.trigger('config changed'));
  process.on('SIGHUP', () => runner.trigger('SIGHUP'));
  runner.start();

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down; tables stay in place');
    setTimeout(() => process.exit(0), SHUTDOWN_BUDGET_MS).unref();
    watcher.close();
    void Promise.allSettled([runner.stop(), server.close()]).then(() => process.exit(0));
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}
