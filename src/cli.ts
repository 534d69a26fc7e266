// Entry point: flags → one of the modes of README, "Flags".
import { pino, type Logger } from 'pino';
import {
  agentMetrics,
  handleLegacyChain,
  makeReconciler,
  removingLegacyChainAfterSync,
  runAgent,
} from './agent.js';
import { parseArgs, type AgentOptions } from './cli/flags.js';
import { compile, tableOwner } from './compile.js';
import { nftKernel } from './reconcile/kernel.js';
import { loadConfig } from './config/index.js';
import { renderReplace } from './nftables/render.js';
import { version } from './version.js';

/** --render: needs no privileges and never loads the addon. */
async function render(options: AgentOptions, flagWarnings: readonly string[]): Promise<number> {
  for (const warning of flagWarnings) process.stderr.write(`warning: ${warning}\n`);
  const loadOptions = {
    enableIPv6: options.enableIPv6,
    nomasqAllReservedRanges: options.nomasqAllReservedRanges,
  };
  const result = await loadConfig(options.config, loadOptions);
  for (const warning of result.warnings) process.stderr.write(`warning: ${warning}\n`);
  if (!result.ok) {
    process.stderr.write(`invalid config: ${result.error.message}\n`);
    return 1;
  }
  process.stdout.write(renderReplace(compile(result.config, options, 1)));
  return 0;
}

async function once(options: AgentOptions, logger: Logger): Promise<number> {
  const metrics = agentMetrics();
  await handleLegacyChain(options, logger, metrics, false);
  const reconciler = makeReconciler(options, logger, metrics);
  const sync = removingLegacyChainAfterSync(
    () => reconciler.sync(),
    reconciler,
    options,
    logger,
    metrics,
  );
  const outcome = await sync();
  const status = reconciler.status(true);
  if (!outcome.ok) return 1; // the reconciler has logged why
  return status.configError === null ? 0 : 1;
}

/** --cleanup: deletes our ip/ip6 tables; a same-named table that is not ours is left, an error. */
async function cleanup(options: AgentOptions, logger: Logger): Promise<number> {
  let code = 0;
  for (const family of ['ip', 'ip6'] as const) {
    const ref = { family, name: options.table };
    try {
      const listing = await nftKernel.listTable(ref);
      if (listing === null) continue;
      if (tableOwner(listing).kind === 'foreign') {
        logger.error(
          { table: `${family} ${options.table}` },
          'not deleted: the table is not ipmasq-agent\'s (no "ipmasq-agent generation" comment)',
        );
        code = 1;
        continue;
      }
      await nftKernel.apply(`delete table ${family} ${options.table}`);
      logger.info({ table: `${family} ${options.table}` }, 'deleted');
    } catch (err) {
      logger.error({ err }, `could not delete table ${family} ${options.table}`);
      return 1;
    }
  }
  if (options.removeLegacyChain) await handleLegacyChain(options, logger, agentMetrics(), true);
  return code;
}

export async function main(argv: readonly string[]): Promise<number | undefined> {
  const parsed = parseArgs(argv);
  if (!parsed.ok) {
    process.stderr.write(`${parsed.message}\n`);
    return parsed.exitCode;
  }
  const { options } = parsed;
  if (options.mode === 'version') {
    process.stdout.write(`ipmasq-agent ${version()}\n`);
    return 0;
  }
  if (options.mode === 'render') return render(options, parsed.warnings);
  const logger = pino({ level: options.logLevel, base: { pid: process.pid } });
  for (const warning of parsed.warnings) logger.warn(warning);
  switch (options.mode) {
    case 'once':
      return once(options, logger);
    case 'cleanup':
      return cleanup(options, logger);
    case 'run':
      await runAgent(options, logger);
      return undefined;
  }
}
