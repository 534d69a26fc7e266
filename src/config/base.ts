// What the key table and the loaded config both stand on: the families and their sets, the flags
// that change how a config is read, and the error a config that must not be applied gives. Below
// keys.ts and types.ts: types.ts names the key table's merged values, so what the table needs
// cannot live there without a circle of imports (docs/design.md, "Data flow").
import { escapeUnprintable, type AddressFamily } from '../cidr/index.js';

export type { AddressFamily } from '../cidr/index.js';

/** Canonical CIDR strings (formatted by src/cidr), merged and sorted by address, per family. */
export type CidrSets = { readonly [F in AddressFamily]: readonly string[] };

/** Flags that change how a config is read. */
export interface LoadOptions {
  readonly enableIPv6: boolean;
  readonly nomasqAllReservedRanges: boolean;
  /**
   * Keep each entry's origin (Config.provenance): the operator's commands; the agent does not pay
   * for it.
   */
  readonly provenance?: boolean;
  /** This node's name (--node-name), for files with nodeNames; undefined or empty: not known. */
  readonly nodeName?: string;
  /** This node's labels, for files with nodeSelector; undefined: not known (yet). */
  readonly nodeLabels?: ReadonlyMap<string, string>;
  /**
   * The agent reads its cluster from the API server (--kubernetes, --kubeconfig): nodeSelector and
   * nonMasqueradeNodePodCIDRs can be judged, once the data is there (until then: `pending`).
   */
  readonly kubernetes?: boolean;
  /**
   * `agent` (the default): a scoped file that cannot be judged for lack of the node's name or
   * labels makes the config invalid. `describe` (--explain, --diff, --check): it is skipped, saying
   * why.
   */
  readonly scoping?: 'agent' | 'describe';
}

/** LoadOptions as a value: every field, the labels in order (what a load's cache is keyed by). */
export function loadOptionsKey(options: LoadOptions): string {
  const labels = options.nodeLabels && [...options.nodeLabels].sort();
  return JSON.stringify({ ...options, nodeLabels: labels });
}

/**
 * Why a config cannot be applied: `invalid` is a verdict on what was read (it stays while the files
 * are unchanged), `unreadable` a failure to read (EACCES, EMFILE, …), worth trying again, `pending`
 * a config that needs data from the API server not read yet (docs/kubernetes.md, "Kubernetes API
 * (opt-in)").
 */
export type ConfigErrorKind = 'invalid' | 'unreadable' | 'pending';

/** A config that must not be applied. The message names the file, key, index and value. */
export class ConfigError extends Error {
  readonly file: string;
  readonly kind: ConfigErrorKind;
  constructor(file: string, message: string, kind: ConfigErrorKind = 'invalid') {
    super(`${escapeUnprintable(file)}: ${message}`);
    this.name = 'ConfigError';
    this.file = file;
    this.kind = kind;
  }
}
