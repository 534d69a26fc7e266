// The shape every other module sees of a loaded config. Produced only by src/config.

export type AddressFamily = 'ipv4' | 'ipv6';

/** Canonical CIDR strings (formatted by src/cidr), merged and sorted by address, per family. */
export type CidrSets = { readonly [F in AddressFamily]: readonly string[] };

export interface Config {
  /** Effective non-masquerade set: configured (or default) CIDRs, plus link-local unless masqLinkLocal(IPv6), merged. */
  readonly nonMasquerade: CidrSets;
  /** masqueradeCIDRs, merged. Always masqueraded, even inside a non-masquerade range. */
  readonly masquerade: CidrSets;
  readonly masqLinkLocal: boolean;
  readonly masqLinkLocalIPv6: boolean;
  readonly cidrLimit: number;
  /** resyncInterval in milliseconds, at least 1000. */
  readonly resyncIntervalMs: number;
  /** sha256 hex that depends on meaning only: same addresses in any order or spelling give the same hash. */
  readonly hash: string;
  /** Files that were read (empty when defaults were used because nothing was found). */
  readonly sources: readonly string[];
}

/** Flags that change how a config is read. */
export interface LoadOptions {
  readonly enableIPv6: boolean;
  readonly nomasqAllReservedRanges: boolean;
}

export type LoadResult =
  | { readonly ok: true; readonly config: Config; readonly warnings: readonly string[] }
  | { readonly ok: false; readonly error: ConfigError; readonly warnings: readonly string[] };

/** A config that must not be applied. The message names the file, key, index and value. */
export class ConfigError extends Error {
  readonly file: string;
  constructor(file: string, message: string) {
    super(`${file}: ${message}`);
    this.name = 'ConfigError';
    this.file = file;
  }
}
