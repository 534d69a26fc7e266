// Entry point: flags → one of the modes of README, "Flags". Every mode takes its stage options from
// plan() (options.ts).
import type { Logger } from 'pino';
import type { LoadResult } from './config/types.js';
import { errorText } from './errors.js';
import type { AgentParts } from './agent.js';
import type { KubernetesSession } from './kubernetes/index.js';
import { parseArgs } from './cli/flags.js';
import { workOnce } from './memory.js';
import { plan, usesApi, type AgentOptions } from './options.js';
import { nftKernel } from './kernel/kernel.js';
import { version } from './version.js';

/** --render: needs no privileges and never loads the addon. */
async function render(options: AgentOptions, flagWarnings: readonly string[]): Promise<number> {
  for (const warning of flagWarnings) process.stderr.write(`warning: ${warning}\n`);
  const [{ compile }, { loadConfig }, { renderReplace }] = await Promise.all([
    import('./compile.js'),
    import('./config/index.js'),
    import('./nftables/render.js'),
  ]);
  const stages = plan(options);
  let result: LoadResult;
  if (usesApi(options)) {
    const { loadWithCluster } = await import('./cli/cluster-config.js');
    try {
      result = await loadWithCluster(stages.configPath, stages.load, options);
    } catch (err) {
      process.stderr.write(`cannot read the cluster from the API server: ${errorText(err)}\n`);
      return 1;
    }
  } else result = await loadConfig(stages.configPath, stages.load);
  for (const warning of result.warnings) process.stderr.write(`warning: ${warning}\n`);
  if (!result.ok) {
    process.stderr.write(`invalid config: ${result.error.message}\n`);
    return 1;
  }
  process.stdout.write(renderReplace(compile(result.config, stages.compile, 1)));
  return 0;
}

/** How long --once --kubernetes waits for the Node data its config needs. */
const ONCE_API_WAIT_MS = 30_000;

async function once(options: AgentOptions, logger: Logger, parts: AgentParts): Promise<number> {
  // The agent's modules (HTTP server, metrics, reconciler) load only where the agent runs: the
  // operator's one-shot commands stay small (--flows, docs/observability.md "What the node's NAT
  // does").
  const { agentMetrics, connectApi, makeReconciler } = await import('./agent.js');
  const metrics = agentMetrics(logger);
  let changed = () => {};
  let api: KubernetesSession | undefined;
  try {
    api = await connectApi(options, logger, metrics, () => changed(), parts.kubernetesTimings);
  } catch (err) {
    logger.fatal(`cannot reach the Kubernetes API: ${errorText(err)}`);
    return 1;
  }
  let reconciler: ReturnType<typeof makeReconciler> | undefined;
  try {
    reconciler = makeReconciler(options, logger, metrics, { ...parts, api });
    const deadline = Date.now() + ONCE_API_WAIT_MS;
    for (;;) {
      const outcome = await reconciler.sync();
      if (!outcome.ok) return 1; // the reconciler has logged why
      const status = reconciler.status(true);
      if (status.waiting === null) return status.configError === null ? 0 : 1;
      if (Date.now() > deadline) {
        logger.error(`gave up after ${ONCE_API_WAIT_MS / 1000} s: ${status.waiting}`);
        return 1;
      }
      await new Promise<void>((resolve) => {
        changed = resolve;
        setTimeout(resolve, 1_000).unref();
      });
    }
  } finally {
    // The look at other NAT runs beside the syncs: what it reports is said before the exit.
    await reconciler?.lookSettled();
    await api?.stop();
  }
}

/**
 * The command line's answer; `parts` are a test's stand-ins for the agent's own (AgentParts:
 * harness/agent-with-parts.js), for the agent and --once.
 */
export async function main(
  argv: readonly string[],
  parts: AgentParts = {},
): Promise<number | undefined> {
  const parsed = parseArgs(argv);
  if (!parsed.ok) {
    process.stderr.write(`${parsed.message}\n`);
    return parsed.exitCode;
  }
  const { options } = parsed;
  // One-shot commands finish sooner with the optimizing compiler; the agent saves its memory, and
  // so does --flows, whose memory must not grow with the conntrack table (src/cli/flows.ts).
  if (options.mode !== 'run' && options.mode !== 'flows') workOnce();
  if (options.mode === 'version') {
    process.stdout.write(`ipmasq-agent ${version()}\n`);
    return 0;
  }
  if (usesApi(options)) {
    const refused = await unsupportedKubeconfig(options.kubeconfig);
    if (refused !== undefined) {
      process.stderr.write(`${refused}\n`);
      return 2;
    }
  }
  if (options.mode === 'render') return render(options, parsed.warnings);
  if (options.mode === 'diff' || options.mode === 'check' || options.mode === 'explain') {
    // The operator's commands load their modules only when run: the agent never holds them.
    const operator = await import('./cli/operator.js');
    if (options.mode === 'diff') return operator.diffCommand(options);
    if (options.mode === 'check') return operator.checkCommand(options);
    // Offline unless --live: the addon is used only then (it needs root in the node's namespace).
    const { explainCommand } = await import('./cli/explain.js');
    return explainCommand(options, options.live ? async () => nftKernel : undefined);
  }
  if (options.mode === 'flows') {
    const { flowsCommand } = await import('./cli/flows.js');
    return flowsCommand(options, nftKernel);
  }
  // Modules load where a mode needs them (each is a few MiB of a one-shot's memory, --flows).
  const { pino } = await import('pino');
  const logger = pino({ level: options.logLevel, base: { pid: process.pid } });
  for (const warning of parsed.warnings) logger.warn(warning);
  switch (options.mode) {
    case 'once':
      return once(options, logger, parts);
    case 'cleanup': {
      const stages = plan(options);
      const { cleanup } = await import('./cli/cleanup.js');
      return cleanup({
        table: stages.compile.table,
        legacy: stages.legacy,
        kernel: nftKernel,
        logger,
      });
    }
    case 'run': {
      const { runAgent } = await import('./agent.js');
      await runAgent(options, logger, parts);
      return undefined;
    }
  }
}

/**
 * What the kubeconfig asks that the agent does not do (several files, a proxy, plugins, a TLS
 * server name): a refusal at start with exit 2, whatever the mode (docs/kubernetes.md, "Kubernetes
 * API (opt-in)"). Other failures to connect are left to the mode, which reports them as it always
 * did.
 */
async function unsupportedKubeconfig(kubeconfig: string): Promise<string | undefined> {
  const { connection, UnsupportedKubeconfig } = await import('./kubernetes/index.js');
  try {
    await connection(kubeconfig);
    return undefined;
  } catch (err) {
    return err instanceof UnsupportedKubeconfig ? err.message : undefined;
  }
}
