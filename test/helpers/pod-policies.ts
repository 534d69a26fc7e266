// Random pod policies for the kernel tests (test/kernel/pod-policy.test.ts, transitions.test.ts):
// pods of the pod namespace, SNAT addresses of the node, destinations the remote answers on, and
// policies drawn over them, written as a config file would hold them.
import fc from 'fast-check';
import { REMOTE_TARGETS_IPV4 } from '../../harness/topology.js';

export const PODS = ['10.244.1.10', '10.244.1.11', '10.244.1.12', '10.244.1.13', '10.244.1.14'];
export const SNAT = ['192.0.2.10', '192.0.2.11', '192.0.2.12'];
/** Destinations the remote answers on (harness/topology.ts): in and out of LISTS. */
export const DESTINATIONS = [
  REMOTE_TARGETS_IPV4.private10,
  REMOTE_TARGETS_IPV4.private10Other,
  REMOTE_TARGETS_IPV4.outsideDefaultsA,
  REMOTE_TARGETS_IPV4.testNet2,
];
export const LISTS = [
  '10.9.0.0/16',
  '10.0.0.0/8',
  '10.200.0.0/16',
  '198.19.0.0/16',
  '198.51.100.0/24',
];
export const APPS = ['db', 'web', 'batch'];
export const ENVS = ['prod', 'dev'];

/** The keys a drawn policy gives; `interfaces` and `scope` (nodeNames, nodeSelector) as written. */
export interface PolicyCase {
  readonly app?: string | undefined;
  readonly notApp?: string | undefined;
  readonly env?: string | undefined;
  readonly nonMasq?: string[] | undefined;
  readonly masq?: string[] | undefined;
  readonly snat?: string | undefined;
  readonly interfaces?: string | undefined;
  readonly scope?: string | undefined;
}

/** What a policy of selectors, lists and an SNAT address is drawn from, key by key. */
export const policyKeys = {
  app: fc.option(fc.constantFrom(...APPS), { nil: undefined }),
  notApp: fc.option(fc.constantFrom(...APPS), { nil: undefined }),
  env: fc.option(fc.constantFrom(...ENVS), { nil: undefined }),
  nonMasq: fc.option(fc.subarray(LISTS), { nil: undefined }),
  masq: fc.option(fc.subarray(LISTS, { maxLength: 1 }), { nil: undefined }),
  snat: fc.constantFrom(undefined, ...SNAT),
};

/** A policy of selectors, lists and an SNAT address (no egress interfaces, no scope). */
export const policyArb: fc.Arbitrary<PolicyCase> = fc.record(policyKeys);

/** The policy as a config file holds it. */
export function policyText(p: PolicyCase): string {
  const selector: string[] = [];
  if (p.app || p.notApp) {
    const labels = p.app ? `matchLabels: {app: ${p.app}}` : '';
    const expressions = p.notApp
      ? `matchExpressions: [{key: app, operator: NotIn, values: [${p.notApp}]}]`
      : '';
    selector.push(`podSelector: {${[labels, expressions].filter(Boolean).join(', ')}}`);
  }
  if (p.env) selector.push(`namespaceSelector: {matchLabels: {env: ${p.env}}}`);
  if (selector.length === 0) selector.push('podSelector: {}');
  return [
    ...selector,
    ...(p.nonMasq ? [`nonMasqueradeCIDRs: [${p.nonMasq.join(', ')}]`] : []),
    ...(p.masq ? [`masqueradeCIDRs: [${p.masq.join(', ')}]`] : []),
    ...(p.snat ? [`snatAddress: ${p.snat}`] : []),
    ...(p.interfaces ? [`egressInterfaces: ${p.interfaces}`] : []),
    ...(p.scope ? [p.scope] : []),
  ].join('\n');
}
