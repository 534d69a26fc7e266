// A Config for tests that build one by hand rather than from a file: every key at its default
// (no CIDR listed, no key given), with `over` on top; and the defaulted keys as a config decides by
// them.
import { keyValue } from '../../src/config/keys.js';
import type { Config } from '../../src/config/types.js';

export function configWith(over: Partial<Config> = {}): Config {
  return {
    nonMasquerade: { ipv4: [], ipv6: [] },
    masquerade: { ipv4: [], ipv6: [] },
    hash: 'ab'.repeat(32),
    sources: [],
    keys: {},
    ...over,
  };
}

/** The keys with a default, each given or else its default (config/keys.ts, keyValue). */
export function scalars(config: Config) {
  return {
    masqLinkLocal: keyValue(config.keys, 'masqLinkLocal'),
    masqLinkLocalIPv6: keyValue(config.keys, 'masqLinkLocalIPv6'),
    cidrLimit: keyValue(config.keys, 'cidrLimit'),
    resyncIntervalMs: keyValue(config.keys, 'resyncInterval'),
  };
}
