// Entry point: flags → one of the modes of README, "Flags". Every mode takes its stage options from
// plan() (options.ts).
import { pino, type Logger } from 'pino';
import { agentMetrics, makeReconciler, runAgent } from './agent.js';
import { parseArgs } from './cli/flags.js';
import { compile } from './compile.js';
import { loadConfig } from './config/index.js';
import { needOptimizer } from './memory.js';
import { renderReplace } from './nftables/render.js';
import { plan, type AgentOptions } from './options.js';
import { cleanup } from './cli/cleanup.js';
import { nftKernel } from './nftables/kernel.js';
import { version } from './version.js';

/** --render: needs no privileges and never loads the addon. */
async function render(options: AgentOptions, flagWarnings: readonly string[]): Promise<number> {
  for (const warning of flagWarnings) process.stderr.write(`warning: ${warning}\n`);
  const stages = plan(options);
  const result = await loadConfig(stages.configPath, stages.load);
  for (const warning of result.warnings) process.stderr.write(`warning: ${warning}\n`);
  if (!result.ok) {
    process.stderr.write(`invalid config: ${result.error.message}\n`);
    return 1;
  }
  process.stdout.write(renderReplace(compile(result.config, stages.compile, 1)));
  return 0;
}

async function once(options: AgentOptions, logger: Logger): Promise<number> {
  const reconciler = makeReconciler(options, logger, agentMetrics());
  const outcome = await reconciler.sync();
  if (!outcome.ok) return 1; // the reconciler has logged why
  return reconciler.status(true).configError === null ? 0 : 1;
}

export async function main(argv: readonly string[]): Promise<number | undefined> {
  const parsed = parseArgs(argv);
  if (!parsed.ok) {
    process.stderr.write(`${parsed.message}\n`);
    return parsed.exitCode;
  }
  const { options } = parsed;
  // One-shot commands finish sooner with the optimizing compiler; only the agent saves its memory.
  if (options.mode !== 'run') needOptimizer();
  if (options.mode === 'version') {
    process.stdout.write(`ipmasq-agent ${version()}\n`);
    return 0;
  }
  if (options.mode === 'render') return render(options, parsed.warnings);
  if (options.mode === 'diff' || options.mode === 'check' || options.mode === 'explain') {
    // The operator's commands load their modules only when run: the agent never holds them.
    const operator = await import('./cli/operator.js');
    if (options.mode === 'diff') return operator.diffCommand(options);
    if (options.mode === 'check') return operator.checkCommand(options);
    // Offline unless --live: the addon is used only then (it needs root in the node's namespace).
    return operator.explainCommand(options, options.live ? async () => nftKernel : undefined);
  }
  const logger = pino({ level: options.logLevel, base: { pid: process.pid } });
  for (const warning of parsed.warnings) logger.warn(warning);
  switch (options.mode) {
    case 'once':
      return once(options, logger);
    case 'cleanup': {
      const stages = plan(options);
      return cleanup({
        table: stages.compile.table,
        legacy: stages.legacy,
        kernel: nftKernel,
        logger,
      });
    }
    case 'run':
      await runAgent(options, logger);
      return undefined;
  }
}
