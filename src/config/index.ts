// Config loading: file or directory -> validated, merged, frozen Config (README, "Configuration").
import { buildConfig } from './build.js';
import { parseFragment } from './fragment.js';
import type { Config, LoadOptions, LoadResult } from './types.js';

export { ConfigError } from './types.js';
export type { CidrSets, Config, LoadOptions, LoadResult } from './types.js';
export { loadConfig, MAX_CONFIG_BYTES } from './load.js';
export { defaultNonMasqueradeCIDRs } from './build.js';
export { DEFAULT_CIDR_LIMIT, DEFAULT_RESYNC_INTERVAL_MS, keyValue } from './keys.js';

/** Parses one file's text as if it were the whole config. Never throws for bad input. */
export function parseConfigText(text: string, file: string, options: LoadOptions): LoadResult {
  const parsed = parseFragment(text, file, options);
  if (!parsed.ok) {
    return Object.freeze({
      ok: false,
      error: parsed.error,
      warnings: Object.freeze(parsed.warnings),
    });
  }
  return buildConfig([parsed.fragment], options, file, parsed.warnings);
}

/** The config used when no config file exists. */
export function defaultConfig(options: LoadOptions): Config {
  const result = buildConfig([], options, '(defaults)');
  if (!result.ok) throw result.error; // unreachable: the defaults fit the default cidrLimit
  return result.config;
}
