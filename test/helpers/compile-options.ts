// The compile options of an agent started without flags (the flag table's defaults, mapped by
// plan() as every mode maps them), with `over` on top: the tests' one fixture for them.
import { parseArgs } from '../../src/cli/flags.js';
import type { CompileOptions } from '../../src/compile.js';
import { plan } from '../../src/options.js';

function defaults(): CompileOptions {
  const parsed = parseArgs([], {});
  if (!parsed.ok) throw new Error(parsed.message);
  return plan(parsed.options).compile;
}

const DEFAULTS = defaults();

export function compileOptions(over: Partial<CompileOptions> = {}): CompileOptions {
  return { ...DEFAULTS, ...over };
}
