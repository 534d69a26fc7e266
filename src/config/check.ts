// --check (docs/explain.md, "Explain, diff, check"): validates config files, config directories and
// Kubernetes manifests before they reach a node. A manifest is a YAML stream (what `kubectl apply
// -f` or `kustomize build` sends); the agent's ConfigMaps in it are chosen by name (--configmap)
// and judged as the agent would see them mounted (mount.ts): through a workload of the same
// manifest that mounts them, or else through the shipped DaemonSet's mount of key `config`.
import { stat } from 'node:fs/promises';
import { parseAllDocuments } from 'yaml';
import { escapeUnprintable } from '../cidr/index.js';
import { buildConfig } from './build.js';
import { parseFragment, type ConfigFragment } from './fragment.js';
import { parseConfigText } from './index.js';
import { loadConfig, readBounded } from './load.js';
import { mountsOf, objects, type Manifest, type Mounted } from './mount.js';
import { errnoText } from './source.js';
import { ConfigError, type LoadOptions, type LoadResult } from './types.js';
import { manifestProblem } from './bounds.js';
import { errorText } from '../errors.js';

export interface CheckOutcome {
  readonly path: string;
  /**
   * What was checked: `a config file`, `a config directory`, `ConfigMap kube-system/ip-masq-agent`,
   * …
   */
  readonly checked: readonly string[];
  readonly errors: readonly string[];
  readonly warnings: readonly string[];
}

export interface CheckOptions {
  /** NAME or NAMESPACE/NAME of the ConfigMaps that carry the agent's config. */
  readonly configMaps: readonly string[];
  /** The names were given (--configmap): a manifest without any of them is an error. */
  readonly named: boolean;
}

/** A mounted ConfigMap's files, each parsed as the agent parses a file, then merged. */
function checkMounted(path: string, mounted: Mounted, options: LoadOptions) {
  const errors = mounted.errors.map((e) => new ConfigError(path, e).message);
  const warnings = mounted.warnings.map((w) => `${escapeUnprintable(path)}: ${w}`);
  const fragments: ConfigFragment[] = [];
  for (const file of mounted.files) {
    const where = `${path}: ${mounted.name} key ${escapeUnprintable(file.key)}`;
    if (typeof file.text !== 'string') {
      errors.push(new ConfigError(where, 'expected the config text as a string').message);
      continue;
    }
    const parsed = parseFragment(file.text, where, options);
    warnings.push(...parsed.warnings);
    if (parsed.ok) fragments.push(parsed.fragment);
    else errors.push(parsed.error.message);
  }
  if (errors.length === 0) {
    const built = buildConfig(fragments, options, `${path}: ${mounted.name}`);
    if (!built.ok) errors.push(built.error.message);
  }
  return { errors, warnings };
}

function failed(path: string, message: string): CheckOutcome {
  return { path, checked: [], errors: [new ConfigError(path, message).message], warnings: [] };
}

function checkManifest(
  path: string,
  manifest: Manifest,
  options: LoadOptions,
  check: CheckOptions,
): CheckOutcome {
  const checked: string[] = [];
  const errors: string[] = [];
  const warnings: string[] = [];
  for (const mounted of mountsOf(manifest, check.configMaps)) {
    checked.push(mounted.shown);
    const outcome = checkMounted(path, mounted, options);
    errors.push(...outcome.errors);
    warnings.push(...outcome.warnings);
  }
  const wanted = check.configMaps.join(', ');
  if (checked.length === 0 && check.named) {
    errors.push(new ConfigError(path, `no ConfigMap ${wanted} in it`).message);
  }
  if (checked.length === 0 && !check.named) {
    checked.push(`no ConfigMap ${wanted} in it: nothing to check (name others with --configmap)`);
  }
  return { path, checked, errors, warnings };
}

export async function checkPath(
  path: string,
  options: LoadOptions,
  check: CheckOptions,
): Promise<CheckOutcome> {
  const info = await stat(path).catch((err: unknown) => err as NodeJS.ErrnoException);
  if (info instanceof Error) return failed(path, errnoText(info));
  const outcome = (checked: string, result: LoadResult): CheckOutcome => ({
    path,
    checked: [checked],
    errors: result.ok ? [] : [result.error.message],
    warnings: [...result.warnings],
  });
  if (info.isDirectory()) return outcome('a config directory', await loadConfig(path, options));
  let text: string;
  try {
    text = await readBounded(path);
  } catch (err) {
    return failed(path, err instanceof Error && !('code' in err) ? err.message : errnoText(err));
  }
  // Only what names an apiVersion can be a manifest: a plain config (100 000 CIDRs, say) is not put
  // through the full YAML parser, only through the agent's own, from the text already read.
  if (!/\bapiVersion\b/.test(text))
    return outcome('a config file', parseConfigText(text, path, options));
  // Bounded before parsing, as every config is (yaml.ts): a manifest is parsed by the full parser.
  const problem = manifestProblem(text);
  if (problem) return failed(path, `invalid YAML: ${problem}`);
  const documents = parseAllDocuments(text, { uniqueKeys: false });
  const list = Array.isArray(documents) ? documents : [documents];
  const values: unknown[] = [];
  for (const [index, document] of list.entries()) {
    try {
      if (document.errors.length > 0) break;
      values.push(document.toJS({ maxAliasCount: 100 }));
    } catch (err) {
      // Aliases beyond the limit throw from toJS: a verdict on this path, not the end of the run.
      const reason = errorText(err);
      return failed(path, `invalid YAML: document ${index + 1}: ${escapeUnprintable(reason)}`);
    }
  }
  const manifest = values.flatMap(objects);
  if (values.length < list.length || !manifest.some((o) => 'apiVersion' in o && 'kind' in o)) {
    return outcome('a config file', parseConfigText(text, path, options));
  }
  return checkManifest(path, manifest, options, check);
}
