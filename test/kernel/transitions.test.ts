// Every transition of the config, in place, on the real kernel (docs/writes.md, "When a write
// fails"): random sequences of config shapes — pod policies none, one or several, added, removed
// (first, middle, last, only), reordered by their files' names, scoped in and out by nodeNames and
// nodeSelector; node-wide keys and the egress keys coming and going; pods' labels and namespaces'
// labels moving in between — each given to the agent's own sync (Reconciler, Converger, the addon)
// in the node namespace, for both set layouts and both families. After each: the sync converged,
// the table of each family is exactly a fresh write of that config, and nothing was counted as
// drift, fallback or fast-path mismatch. Every few steps the pods send real packets and the source
// the remote sees must be what --explain says offline.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import fc from 'fast-check';
import t from 'tap';
import { loadConfig } from '../../src/config/index.js';
import { podMembership, withPodMembers, type PodFacts } from '../../src/config/pods.js';
import type { Config } from '../../src/config/types.js';
import { explain } from '../../src/explain.js';
import { inNetns, requireRoot, spawnNodeInNetns } from '../../harness/netns.js';
import { makeTopology, NODE_IPV4, probeSources } from '../../harness/topology.js';
import { compileOptions } from '../helpers/compile-options.js';
import {
  APPS,
  DESTINATIONS,
  ENVS,
  LISTS,
  PODS,
  policyKeys,
  policyText,
  SNAT,
} from '../helpers/pod-policies.js';
import type { ConvergeAnswer, ConvergeRequest } from './fixtures/converge-server.js';
import { NODE_NAME } from './fixtures/converge-server.js';

// A thousand transitions per layout under CI: minutes on a busy machine, past tap's default 120 s.
t.setTimeout(900_000);

const SEED = 20261206;
/** Transitions per set layout: thousands in all under CI. */
const STEPS = process.env.CI === 'true' ? 1_000 : 250;
/** Packets are sent after every this many transitions (and after the last). */
const PACKETS_EVERY = 40;
const LISTS_V6 = ['fd00::/8', '2001:db8:9::/48'];
const POLICY_FILES = ['ip-masq-p1', 'ip-masq-p2', 'ip-masq-p3', 'ip-masq-p4'];

const scopeArb = fc.constantFrom(
  '',
  `nodeNames: [${NODE_NAME}]`,
  'nodeNames: [node-b]',
  'nodeSelector: {zone: a}',
  'nodeSelector: {zone: b}',
);
const transitionPolicyArb = fc.record({
  ...policyKeys,
  interfaces: fc.constantFrom(undefined, '[eth0]', '[eth*, ens3]', '[bond0]'),
  scope: scopeArb,
});
const stepArb = fc.record({
  nonMasq: fc.subarray(LISTS),
  nonMasqV6: fc.subarray(LISTS_V6),
  masq: fc.option(fc.subarray(LISTS, { maxLength: 2 }), { nil: undefined }),
  masqLinkLocal: fc.boolean(),
  interfaces: fc.constantFrom(undefined, '[eth0]', '[eth*]'),
  // Most steps keep the files of the step before, as an operator's edits do; some move them all.
  policies: fc.array(fc.option(transitionPolicyArb, { nil: undefined, freq: 2 }), {
    minLength: POLICY_FILES.length,
    maxLength: POLICY_FILES.length,
  }),
  keepPolicies: fc.array(fc.boolean(), {
    minLength: POLICY_FILES.length,
    maxLength: POLICY_FILES.length,
  }),
  pods: fc.array(
    fc.record({ app: fc.constantFrom(...APPS), namespace: fc.constantFrom('a', 'b') }),
    {
      minLength: PODS.length,
      maxLength: PODS.length,
    },
  ),
  envs: fc.record({ a: fc.constantFrom(...ENVS), b: fc.constantFrom(...ENVS) }),
});
type Step = typeof stepArb extends fc.Arbitrary<infer T> ? T : never;

/** The request for one step, its files following on from the step before's where it keeps them. */
function request(step: Step, before: ReadonlyMap<string, string>): ConvergeRequest {
  const files = new Map<string, string>();
  files.set(
    'ip-masq-agent',
    [
      `nonMasqueradeCIDRs: [${[...step.nonMasq, ...step.nonMasqV6].join(', ')}]`,
      ...(step.masq ? [`masqueradeCIDRs: [${step.masq.join(', ')}]`] : []),
      `masqLinkLocal: ${step.masqLinkLocal}`,
      ...(step.interfaces ? [`egressInterfaces: ${step.interfaces}`] : []),
    ].join('\n') + '\n',
  );
  POLICY_FILES.forEach((name, i) => {
    const kept = step.keepPolicies[i] ? before.get(name) : undefined;
    const policy = step.policies[i];
    const text = step.keepPolicies[i] ? kept : policy ? policyText(policy) : undefined;
    if (text !== undefined) files.set(name, text);
  });
  return {
    files: [...files],
    pods: step.pods.map((pod, n) => ({
      namespace: pod.namespace,
      name: `pod-${n}`,
      labels: { app: pod.app },
      addresses: [PODS[n]!],
    })),
    namespaces: { a: { env: step.envs.a }, b: { env: step.envs.b } },
  };
}

/** The same config as the agent's, loaded here with provenance for --explain. */
async function offline(req: ConvergeRequest): Promise<Config> {
  const dir = mkdtempSync(join(tmpdir(), 'ipmasq-transition-offline-'));
  try {
    for (const [name, text] of req.files) writeFileSync(join(dir, name), text);
    const loaded = await loadConfig(dir, {
      enableIPv6: true,
      nomasqAllReservedRanges: false,
      kubernetes: true,
      provenance: true,
      nodeName: NODE_NAME,
      nodeLabels: new Map([['zone', 'a']]),
    });
    if (!loaded.ok) throw loaded.error;
    const pods: PodFacts[] = req.pods.map((pod) => ({
      ...pod,
      labels: new Map(Object.entries(pod.labels)),
      created: '2026-01-01T00:00:00Z',
    }));
    const namespaces = new Map(
      Object.entries(req.namespaces).map(([ns, l]) => [ns, new Map(Object.entries(l))]),
    );
    return withPodMembers(
      loaded.config,
      podMembership(loaded.config.podPolicies ?? [], pods, namespaces),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (requireRoot(t)) {
  const topo = await makeTopology(t, { ipv6: false });
  await inNetns(topo.pod, 'ip', ['-batch', '-'], {
    input: PODS.map((a) => `address add ${a}/24 dev eth0\n`).join(''),
  });
  await inNetns(topo.node, 'ip', ['-batch', '-'], {
    input: SNAT.map((a) => `address add ${a}/24 dev eth0\n`).join(''),
  });
  const OPTIONS = compileOptions({ masqChain: 'ip-masq', randomFully: false });

  for (const layout of ['interval', 'concat'] as const) {
    t.test(`${STEPS} transitions, ${layout} layout (seed ${SEED})`, async (t) => {
      // A fresh agent process for each layout: the tables of the last one are deleted first.
      await inNetns(topo.node, 'nft', ['-f', '-'], {
        input:
          'table ip ipmasq\ndelete table ip ipmasq\ntable ip6 ipmasq\ndelete table ip6 ipmasq\n',
      });
      const server = spawnNodeInNetns(
        topo.node,
        join(import.meta.dirname, 'fixtures', 'converge-server.ts'),
        [layout],
      );
      t.teardown(() => server.kill('SIGKILL'));
      let stderr = '';
      server.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const answers = createInterface({ input: server.stdout })[Symbol.asyncIterator]();
      const converge = async (req: ConvergeRequest): Promise<ConvergeAnswer> => {
        server.stdin.write(JSON.stringify(req) + '\n');
        const next = await answers.next();
        if (next.done) throw new Error(`the converge server ended: ${stderr}`);
        return JSON.parse(next.value) as ConvergeAnswer;
      };
      const steps = fc.sample(stepArb, {
        numRuns: STEPS,
        seed: SEED + (layout === 'concat' ? 1 : 0),
      });
      let files = new Map<string, string>();
      let judged = 0;
      const kinds = new Map<string, number>();
      const policiesSeen = new Set<number>();
      for (const [i, step] of steps.entries()) {
        const req = request(step, files);
        const count = req.files.length - 1;
        policiesSeen.add(count);
        const before = [...files.keys()].filter((f) => f !== 'ip-masq-agent');
        const after = req.files.map(([f]) => f).filter((f) => f !== 'ip-masq-agent');
        const kind =
          before.length === after.length
            ? 'same files'
            : after.length === 0
              ? 'last removed'
              : before.length === 0
                ? 'first added'
                : after.length < before.length
                  ? 'some removed'
                  : 'some added';
        kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
        const answer = await converge(req);
        files = new Map(req.files);
        const where = `step ${i} (${kind}, ${count} policy files)`;
        if (
          !answer.ok ||
          !answer.holds ||
          answer.drift + answer.fallbacks + answer.mismatches > 0
        ) {
          t.fail(`${where}: ${JSON.stringify(answer)}\nfiles: ${JSON.stringify(req.files)}`);
          return;
        }
        if (i % PACKETS_EVERY !== PACKETS_EVERY - 1 && i !== steps.length - 1) continue;
        const config = await offline(req);
        await inNetns(topo.node, 'conntrack', ['-F']).catch(() => undefined);
        for (const [n, pod] of req.pods.entries()) {
          const from = pod.addresses[0]!;
          const seen = await probeSources(topo, DESTINATIONS, 'udp', { from });
          for (const [d, destination] of DESTINATIONS.entries()) {
            const e = explain(config, OPTIONS, destination, {
              from,
              via: 'eth0',
              podLabels: new Map(Object.entries(pod.labels)),
              namespaceLabels: new Map(Object.entries(req.namespaces[pod.namespace]!)),
            });
            const expected = !e.masqueraded ? from : (e.policy?.snat ?? NODE_IPV4);
            if (seen[d]!.address !== expected) {
              t.equal(seen[d]!.address, expected, `${where}: pod ${n} to ${destination}`);
              return;
            }
            judged++;
          }
        }
      }
      t.pass(`${steps.length} transitions converged in place, each the table a fresh write makes`);
      t.comment(JSON.stringify(Object.fromEntries(kinds)));
      t.ok(judged > 0, `${judged} flows on real packets as --explain says`);
      // The sample reaches every kind of transition: a test that never removed the last is none.
      for (const kind of [
        'last removed',
        'first added',
        'some removed',
        'some added',
        'same files',
      ])
        t.ok((kinds.get(kind) ?? 0) > 0, `some steps: ${kind}`);
      t.ok(
        policiesSeen.size >= 4,
        `configs of ${[...policiesSeen].sort().join(', ')} policy files`,
      );
    });
  }
}
