// The operator's commands (docs/explain.md, "Explain, diff, check"): what --explain (explain.ts),
// --diff and --check share — a config loaded with provenance through the same loader the agent
// uses, text or one JSON document — and --diff and --check themselves.
import { escapeUnprintable } from '../cidr/index.js';
import { checkPath } from '../config/check.js';
import { loadConfig } from '../config/index.js';
import { findConfigSource } from '../config/source.js';
import type { Config, LoadOptions, LoadResult } from '../config/types.js';
import { diffConfigs, diffText } from '../diff.js';
import { plan, usesApi, type AgentOptions } from '../options.js';
import { errorText } from '../errors.js';

export const out = (text: string) => process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
export const err = (text: string) => process.stderr.write(`${text}\n`);
export const json = (value: unknown) =>
  out(JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? String(v) : v), 2));

/**
 * Whether there is anything at `path`: the agent runs on its defaults without a config, but an
 * operator who names a path that is not there has made a typo, and is told so (exit 2). Without
 * --config the default path may well be absent (a laptop): then the defaults are used, and said.
 */
export async function present(path: string, given: boolean, flag: string): Promise<boolean> {
  if ((await findConfigSource(path)).kind !== 'missing') return true;
  if (given) {
    err(`${flag}: no file or directory at ${escapeUnprintable(path)}`);
    return false;
  }
  err(`note: no file at ${escapeUnprintable(path)}: the agent would use its defaults`);
  return true;
}

export async function load(
  path: string,
  options: LoadOptions,
  agent: AgentOptions,
): Promise<Config | undefined> {
  const withProvenance = { ...options, provenance: true };
  let result: LoadResult;
  if (usesApi(agent)) {
    // Loaded only with --kubernetes/--kubeconfig (docs/kubernetes.md, "Kubernetes API (opt-in)").
    const { loadWithCluster } = await import('./cluster-config.js');
    try {
      result = await loadWithCluster(path, withProvenance, agent);
    } catch (e) {
      err(`cannot read the cluster from the API server: ${escapeUnprintable(errorText(e))}`);
      return undefined;
    }
  } else result = await loadConfig(path, withProvenance);
  for (const warning of result.warnings) err(`warning: ${warning}`);
  if (!result.ok) {
    err(`invalid config: ${result.error.message}`);
    return undefined;
  }
  if (result.config.keys.nonMasqueradeNodePodCIDRs === true && !result.config.nodesJoined) {
    err(
      "note: nonMasqueradeNodePodCIDRs: the Nodes' pod CIDRs are not included (give --kubeconfig or --kubernetes to read them)",
    );
  }
  return result.config;
}

export async function diffCommand(options: AgentOptions): Promise<number> {
  const stages = plan(options);
  if (!(await present(stages.configPath, options.configGiven, '--config'))) return 2;
  if (!(await present(options.proposed, true, '--diff'))) return 2;
  const current = await load(stages.configPath, stages.load, options);
  const proposed = await load(options.proposed, stages.load, options);
  if (!current || !proposed) return 2;
  const diff = diffConfigs(current, proposed, stages.compile);
  if (options.output === 'json') json(diff);
  else out(diffText(diff));
  return diff.changes.length === 0 && diff.policy.length === 0 && diff.podPolicies.length === 0
    ? 0
    : 1;
}

export async function checkCommand(options: AgentOptions): Promise<number> {
  const stages = plan(options);
  const outcomes = [];
  const check = { configMaps: options.configMaps, named: options.configMapsGiven };
  for (const path of options.check) {
    outcomes.push(
      await checkPath(path, stages.load, check).catch((e: unknown) => ({
        path,
        checked: [],
        errors: [`${escapeUnprintable(path)}: cannot be checked: ${escapeUnprintable(String(e))}`],
        warnings: [],
      })),
    );
  }
  if (options.output === 'json') json({ outcomes });
  else {
    for (const o of outcomes) {
      for (const warning of o.warnings) out(`warning: ${warning}`);
      for (const error of o.errors) out(`invalid config: ${error}`);
      if (o.errors.length === 0) out(`ok: ${escapeUnprintable(o.path)} (${o.checked.join(', ')})`);
    }
  }
  return outcomes.every((o) => o.errors.length === 0) ? 0 : 1;
}
