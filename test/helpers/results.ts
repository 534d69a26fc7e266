// The config tests' two verdicts on a LoadResult: the config it holds (a failure when it holds an
// error), or the error's message (a failure when it holds a config).
import type { Test } from 'tap';
import type { Config, LoadResult } from '../../src/config/index.js';

export function ok(t: Test, result: LoadResult): Config {
  if (!result.ok) t.fail(`unexpected error: ${result.error.message}`);
  return (result as { config: Config }).config;
}

export function error(t: Test, result: LoadResult): string {
  t.notOk(result.ok, 'config is rejected');
  return result.ok ? '' : result.error.message;
}
