// --check (README, "Explain, diff, check"): validates config files, config directories and
// Kubernetes manifests before they reach a node. A manifest is a YAML stream (what `kubectl apply -f`
// or `kustomize build` sends) whose ConfigMaps carry the agent's config under data key `config`
// (the DaemonSet's) or `ip-masq*` keys (directory mode); each is checked as the agent would load it.
import { stat } from 'node:fs/promises';
import { parseAllDocuments } from 'yaml';
import { buildConfig } from './build.js';
import { parseFragment, type ConfigFragment } from './fragment.js';
import { parseConfigText } from './index.js';
import { loadConfig, readBounded } from './load.js';
import { errnoText } from './source.js';
import { ConfigError, type LoadOptions, type LoadResult } from './types.js';

export interface CheckOutcome {
  readonly path: string;
  /** What was checked: `a config file`, `a config directory`, `ConfigMap kube-system/ip-masq-agent`, … */
  readonly checked: readonly string[];
  readonly errors: readonly string[];
  readonly warnings: readonly string[];
}

const isConfigKey = (key: string) => key === 'config' || key.startsWith('ip-masq');

/** Objects of a manifest, List items unwrapped. */
function objects(value: unknown): Array<Record<string, unknown>> {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return [];
  const object = value as Record<string, unknown>;
  if (object.kind === 'List' && Array.isArray(object.items)) return object.items.flatMap(objects);
  return [object];
}

function looksLikeManifest(documents: readonly unknown[]): boolean {
  return documents.some((d) => objects(d).some((o) => 'apiVersion' in o && 'kind' in o));
}

function checkConfigMap(
  path: string,
  object: Record<string, unknown>,
  options: LoadOptions,
): { name: string; errors: string[]; warnings: string[] } | undefined {
  const metadata = (object.metadata ?? {}) as Record<string, unknown>;
  const name = `ConfigMap ${String(metadata.namespace ?? 'default')}/${String(metadata.name ?? '(no name)')}`;
  const data = object.data;
  const keys = data && typeof data === 'object' ? Object.keys(data).filter(isConfigKey).sort() : [];
  if (keys.length === 0) return undefined;
  const errors: string[] = [];
  const warnings: string[] = [];
  const fragments: ConfigFragment[] = [];
  for (const key of keys) {
    const file = `${path}: ${name} key ${key}`;
    const value = (data as Record<string, unknown>)[key];
    if (typeof value !== 'string') {
      errors.push(new ConfigError(file, 'expected the config text as a string').message);
      continue;
    }
    const parsed = parseFragment(value, file, options);
    warnings.push(...parsed.warnings);
    if (parsed.ok) fragments.push(parsed.fragment);
    else errors.push(parsed.error.message);
  }
  if (errors.length === 0) {
    const built = buildConfig(fragments, options, `${path}: ${name}`);
    if (!built.ok) errors.push(built.error.message);
  }
  return { name, errors, warnings };
}

export async function checkPath(path: string, options: LoadOptions): Promise<CheckOutcome> {
  const info = await stat(path).catch((err: unknown) => err as NodeJS.ErrnoException);
  if (info instanceof Error) {
    return {
      path,
      checked: [],
      errors: [new ConfigError(path, errnoText(info)).message],
      warnings: [],
    };
  }
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
    const message = err instanceof Error && !('code' in err) ? err.message : errnoText(err);
    return { path, checked: [], errors: [new ConfigError(path, message).message], warnings: [] };
  }
  // Only what names an apiVersion can be a manifest: a plain config (100 000 CIDRs, say) is not put
  // through the full YAML parser, only through the agent's own, from the text already read.
  const documents = /\bapiVersion\b/.test(text)
    ? parseAllDocuments(text, { uniqueKeys: false })
    : [];
  const list = Array.isArray(documents) ? documents : [documents];
  const values = list.some((d) => d.errors.length > 0) ? [] : list.map((d) => d.toJS() as unknown);
  if (!looksLikeManifest(values)) {
    return outcome('a config file', parseConfigText(text, path, options));
  }
  const checked: string[] = [];
  const errors: string[] = [];
  const warnings: string[] = [];
  for (const object of values.flatMap(objects)) {
    if (object.kind !== 'ConfigMap') continue;
    const outcome = checkConfigMap(path, object, options);
    if (!outcome) continue;
    checked.push(outcome.name);
    errors.push(...outcome.errors);
    warnings.push(...outcome.warnings);
  }
  if (checked.length === 0) {
    errors.push(
      new ConfigError(
        path,
        'no ConfigMap in it carries the agent\'s config (a data key "config" or "ip-masq*")',
      ).message,
    );
  }
  return { path, checked, errors, warnings };
}
