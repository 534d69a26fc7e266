// A Config for tests that build one by hand rather than from a file: every key at its default
// (no CIDR listed), with `over` on top.
import type { Config } from '../../src/config/types.js';

export function configWith(over: Partial<Config> = {}): Config {
  return {
    nonMasquerade: { ipv4: [], ipv6: [] },
    masquerade: { ipv4: [], ipv6: [] },
    masqLinkLocal: false,
    masqLinkLocalIPv6: false,
    cidrLimit: 64,
    resyncIntervalMs: 60_000,
    hash: 'ab'.repeat(32),
    sources: [],
    keys: {},
    ...over,
  };
}
