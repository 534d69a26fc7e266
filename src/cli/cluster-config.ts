// The one-shot modes (--render, --explain, --diff) with --kubernetes or --kubeconfig: the config as
// the agent on that Node would see it now, from one read of the API server (docs/kubernetes.md,
// "Kubernetes API (opt-in)"). Loaded only when one of those flags is given.
import type { Logger } from 'pino';
import { pino } from 'pino';
import { withNodePodCIDRs } from '../config/build.js';
import { loadConfig } from '../config/index.js';
import type { LoadOptions, LoadResult } from '../config/types.js';
import { clusterSnapshot } from '../kubernetes/index.js';
import type { AgentOptions } from '../options.js';

/** Warnings of the API read on stderr, as the commands print theirs. */
function stderrLogger(): Logger {
  return pino({ level: 'warn', base: null, timestamp: false }, process.stderr);
}

/**
 * Loads the config at `path` with this Node's labels (unless --node-labels gives them) and, when a
 * file asks, every Node's pod CIDRs joined. Rejects when the API server cannot be read.
 */
export async function loadWithCluster(
  path: string,
  load: LoadOptions,
  options: Pick<AgentOptions, 'kubeconfig' | 'nodeName' | 'enableIPv6' | 'widestNodePodCIDR'>,
): Promise<LoadResult> {
  const logger = stderrLogger();
  const common = {
    kubeconfig: options.kubeconfig,
    enableIPv6: options.enableIPv6,
    logger,
    widest: options.widestNodePodCIDR,
  };
  let labels = load.nodeLabels;
  if (labels === undefined && options.nodeName !== '') {
    labels = (await clusterSnapshot({ ...common, nodeName: options.nodeName, podCIDRs: false }))
      .labels;
  }
  const withLabels: LoadOptions = {
    ...load,
    kubernetes: true,
    ...(labels ? { nodeLabels: labels } : {}),
  };
  const result = await loadConfig(path, withLabels);
  if (!result.ok || result.config.keys.nonMasqueradeNodePodCIDRs !== true) return result;
  const { nodes } = await clusterSnapshot({ ...common, nodeName: '', podCIDRs: true });
  return { ...result, config: withNodePodCIDRs(result.config, nodes ?? new Map()) };
}
