// A Config for tests that build one by hand rather than from a file: every key at its default
// (no CIDR listed, no key given), with `over` on top; and the defaulted keys as a config decides by
// them.
import { keyValue } from '../../src/config/keys.js';
import type { MergedKeys } from '../../src/config/keys.js';
import type { Config, EgressPolicy } from '../../src/config/types.js';

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

/** The keys that give `policy` (the egress policy is a view of them: config/build.ts, egressOf). */
export function egressKeys(policy: EgressPolicy | undefined): MergedKeys {
  if (!policy) return {};
  return {
    ...(policy.sourceCIDRs ? { sourceCIDRs: policy.sourceCIDRs } : {}),
    ...(policy.egressInterfaces ? { egressInterfaces: [...policy.egressInterfaces] } : {}),
    ...(policy.snat?.ipv4 ? { snatAddress: policy.snat.ipv4 } : {}),
    ...(policy.snat?.ipv6 ? { snatAddressIPv6: policy.snat.ipv6 } : {}),
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
