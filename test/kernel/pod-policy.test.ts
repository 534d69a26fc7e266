// Pod policies on real packets (docs/egress-policy.md, "Pod policies"), without an API server:
// random policies (selectors, their own lists and SNAT addresses, overlapping on purpose) and
// random pods (labels, namespaces' labels, each an address of the pod namespace) go through the
// agent's own membership, compiler and addon into the node namespace; every pod then sends to
// destinations inside and outside each list, and the source the remote sees must be what --explain
// says offline from the pod's labels (the policy that decides, its snatAddress, or the node-wide
// config). Each write after the first changes only the membership and is an in-place write of the
// verdict map's elements.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { compile } from '../../src/compile.js';
import { loadConfig } from '../../src/config/index.js';
import { podMembership, withPodMembers, type PodFacts } from '../../src/config/pods.js';
import type { Config } from '../../src/config/types.js';
import { explain } from '../../src/explain.js';
import { renderInPlace, renderKeyChange } from '../../src/nftables/change.js';
import { listedSetNames, listingIs } from '../../src/nftables/listing.js';
import { renderTable } from '../../src/nftables/render.js';
import { inNetns, requireRoot } from '../../harness/netns.js';
import { makeTopology, NODE_IPV4, probeSources } from '../../harness/topology.js';
import { startAddon } from './fixtures/addon-client.js';
import { compileOptions } from '../helpers/compile-options.js';
import {
  APPS,
  DESTINATIONS,
  ENVS,
  PODS,
  policyArb,
  policyText,
  SNAT,
} from '../helpers/pod-policies.js';

const SEED = 20261206;
const RUNS = 6;
const OPTIONS = compileOptions({ masqChain: 'ip-masq', randomFully: false });

const podArb = fc.record({ app: fc.constantFrom(...APPS), namespace: fc.constantFrom('a', 'b') });
const caseArb = fc.record({
  policies: fc.array(policyArb, { minLength: 1, maxLength: 3 }),
  pods: fc.array(podArb, { minLength: PODS.length, maxLength: PODS.length }),
  later: fc.array(podArb, { minLength: PODS.length, maxLength: PODS.length }),
  envs: fc.record({ a: fc.constantFrom(...ENVS), b: fc.constantFrom(...ENVS) }),
});

if (requireRoot(t)) {
  const topo = await makeTopology(t, { ipv6: false });
  await inNetns(topo.pod, 'ip', ['-batch', '-'], {
    input: PODS.map((a) => `address add ${a}/24 dev eth0\n`).join(''),
  });
  await inNetns(topo.node, 'ip', ['-batch', '-'], {
    input: SNAT.map((a) => `address add ${a}/24 dev eth0\n`).join(''),
  });
  const addon = await startAddon(t, topo.node);
  const run = (script: string) => addon.value<string>({ op: 'run', script });
  const listing = async () =>
    (await inNetns(topo.node, 'nft', ['list', 'table', 'ip', 'ipmasq'])).stdout;

  t.test(`${RUNS} random sets of pod policies and pods (seed ${SEED})`, async (t) => {
    let judged = 0;
    const outcomes = new Map<string, number>();
    for (const [i, c] of fc.sample(caseArb, { numRuns: RUNS, seed: SEED }).entries()) {
      const dir = mkdtempSync(join(tmpdir(), 'ipmasq-pod-policy-kernel-'));
      t.teardown(() => rmSync(dir, { recursive: true, force: true }));
      writeFileSync(join(dir, 'ip-masq-agent'), 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
      c.policies.forEach((p, n) => writeFileSync(join(dir, `ip-masq-p${n}`), policyText(p)));
      const loaded = await loadConfig(dir, {
        enableIPv6: false,
        nomasqAllReservedRanges: false,
        kubernetes: true,
        provenance: true,
      });
      if (!loaded.ok) throw loaded.error;
      const namespaces = new Map(
        Object.entries(c.envs).map(([ns, env]) => [ns, new Map([['env', env]])]),
      );
      const podsOf = (list: typeof c.pods): PodFacts[] =>
        list.map((pod, n) => ({
          namespace: pod.namespace,
          name: `pod-${n}`,
          labels: new Map([['app', pod.app]]),
          addresses: [PODS[n]!],
          created: '2026-01-01T00:00:00Z',
        }));
      const joined = (list: typeof c.pods): Config => {
        const policies = loaded.config.podPolicies ?? [];
        return withPodMembers(loaded.config, podMembership(policies, podsOf(list), namespaces));
      };
      const first = joined(c.pods);
      const [table] = compile(first, OPTIONS, 1);
      await run('add table ip ipmasq\ndelete table ip ipmasq\n' + renderTable(table!));
      // The membership moves: an in-place write, as the agent makes one for a pod event; every
      // other case together with the sets' layout (the key change's steps, the map kept through
      // them).
      const second = joined(c.later);
      const layoutChange = i % 2 === 1;
      const [next] = compile(
        second,
        layoutChange ? { ...OPTIONS, setLayout: 'concat' } : OPTIONS,
        2,
      );
      const steps = layoutChange
        ? renderKeyChange(next!, listedSetNames(await listing()))
        : renderInPlace(next!, table);
      for (const script of steps) await run(script);
      t.ok(listingIs(await listing(), next!), `case ${i}: the kernel holds the new membership`);
      await inNetns(topo.node, 'conntrack', ['-F']).catch(() => undefined);
      const pods = podsOf(c.later);
      for (const [n, pod] of pods.entries()) {
        const seen = await probeSources(topo, DESTINATIONS, 'udp', { from: pod.addresses[0]! });
        for (const [d, destination] of DESTINATIONS.entries()) {
          const e = explain(second, OPTIONS, destination, {
            from: pod.addresses[0]!,
            podLabels: pod.labels,
            namespaceLabels: namespaces.get(pod.namespace)!,
          });
          const expected = !e.masqueraded ? pod.addresses[0] : (e.policy?.snat ?? NODE_IPV4);
          const decider = e.podPolicy?.decides?.file.split('/').pop() ?? 'node-wide';
          t.equal(
            seen[d]!.address,
            expected,
            `case ${i}, pod ${n} (${c.later[n]!.namespace}/${c.later[n]!.app}) to ${destination}: ${decider}`,
          );
          judged += 1;
          const outcome = `${e.podPolicy?.decides ? 'policy' : 'node-wide'} ${expected === NODE_IPV4 ? 'masquerade' : expected === pod.addresses[0] ? 'exempt' : 'snat'}`;
          outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
        }
      }
    }
    t.comment(`${judged} flows judged by --explain and the kernel alike`);
    t.comment(JSON.stringify(Object.fromEntries(outcomes)));
    // The seed's cases reach every kind of answer: a test of policies that never decided is none.
    for (const kind of [
      'policy snat',
      'policy exempt',
      'policy masquerade',
      'node-wide masquerade',
    ])
      t.ok((outcomes.get(kind) ?? 0) > 0, `some flows: ${kind}`);
  });
}
