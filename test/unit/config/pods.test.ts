// Pod policies as config files (docs/egress-policy.md, "Pod policies"): label selectors parsed and
// checked as the API server checks them, a policy's keys inherited from the node-wide merge where
// it leaves them out, the keys only a node-wide file may give refused naming file and key, and no
// pod policy without the API server. The node-wide config stays what the files without selectors
// say.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { egressOf } from '../../../src/config/build.js';
import fc from 'fast-check';
import t, { type Test } from 'tap';
import { type LoadOptions, loadConfig, parseConfigText } from '../../../src/config/index.js';
import { parseSelector, selects, selectorText } from '../../../src/config/selector.js';
import { diffConfigs, diffText } from '../../../src/diff.js';
import { explain, explainer, explanationText } from '../../../src/explain.js';
import { error, ok } from '../../helpers/results.js';
import { compileOptions } from '../../helpers/compile-options.js';

/** How --explain and --diff compile (the defaults but the chain's name). */
const OPTIONS = compileOptions({ masqChain: 'ip-masq', randomFully: false });
const AGENT: LoadOptions = { enableIPv6: false, nomasqAllReservedRanges: false, kubernetes: true };
const parse = (text: string, options: LoadOptions = AGENT) => parseConfigText(text, 'cfg', options);

async function directory(t: Test, files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'ipmasq-podpolicy-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  return dir;
}

t.test('selectors are checked as the API server checks a LabelSelector', async (t) => {
  const refused: Array<[string, RegExp]> = [
    ['podSelector: [app]', /^cfg: podSelector: expected a mapping with matchLabels/],
    ['podSelector: {matchLabel: {app: db}}', /^cfg: podSelector: "matchLabel" is not a field/],
    [
      'podSelector: {matchLabels: {"a b": x}}',
      /podSelector: matchLabels\["a b"\]: "a b" is not a label key/,
    ],
    [
      'podSelector: {matchLabels: {app: "-db"}}',
      /matchLabels\["app"\]: "-db" is not a label value/,
    ],
    [
      'podSelector: {matchLabels: {app: 1}}',
      /matchLabels\["app"\]: expected a string value, got number 1/,
    ],
    [
      'podSelector: {matchExpressions: [{key: app, operator: In}]}',
      /matchExpressions\[0\]\.values: must be given, not empty, when the operator is In/,
    ],
    [
      'podSelector: {matchExpressions: [{key: app, operator: NotIn, values: []}]}',
      /matchExpressions\[0\]\.values: must be given, not empty, when the operator is NotIn/,
    ],
    [
      'podSelector: {matchExpressions: [{key: app, operator: Exists, values: [a]}]}',
      /matchExpressions\[0\]\.values: must be empty when the operator is Exists/,
    ],
    [
      'podSelector: {matchExpressions: [{key: app, operator: in, values: [a]}]}',
      /matchExpressions\[0\]\.operator: "in" is not an operator \(In, NotIn, Exists, DoesNotExist\)/,
    ],
    [
      'podSelector: {matchExpressions: [{operator: Exists}]}',
      /matchExpressions\[0\]: key is required/,
    ],
    [
      'namespaceSelector: {matchExpressions: [{key: "x/", operator: Exists}]}',
      /^cfg: namespaceSelector: matchExpressions\[0\]\.key: "x\/" is not a label key/,
    ],
    [
      'podSelector: {matchExpressions: [{key: app, operator: In, values: ["a b"]}]}',
      /matchExpressions\[0\]\.values\[0\]: "a b" is not a label value/,
    ],
  ];
  for (const [text, expected] of refused) t.match(error(t, parse(text)), expected, text);

  const taken = parseSelector(
    new Map<string, unknown>([
      [
        'matchLabels',
        new Map([
          ['tier', 'db'],
          ['app', 'pg'],
        ]),
      ],
      [
        'matchExpressions',
        [
          new Map<string, unknown>([
            ['key', 'zone'],
            ['operator', 'In'],
            ['values', ['b', 'a', 'b']],
          ]),
          new Map<string, unknown>([
            ['key', 'legacy'],
            ['operator', 'DoesNotExist'],
          ]),
        ],
      ],
    ]),
  );
  t.equal(selectorText(taken), 'app=pg,tier=db,zone in (a,b),!legacy');
});

t.test('matching is labels.Selector matching', async (t) => {
  const labels = (o: Record<string, string>) => new Map(Object.entries(o));
  const s = parseSelector({
    matchLabels: { app: 'db' },
    matchExpressions: [
      { key: 'zone', operator: 'NotIn', values: ['c'] },
      { key: 'tier', operator: 'Exists' },
    ],
  });
  t.ok(selects(s, labels({ app: 'db', tier: 'x' })), 'NotIn holds for a missing label');
  t.notOk(selects(s, labels({ app: 'db', tier: 'x', zone: 'c' })), 'NotIn');
  t.notOk(selects(s, labels({ app: 'db' })), 'Exists');
  t.notOk(selects(s, labels({ app: 'web', tier: 'x' })), 'matchLabels');
  t.ok(selects(parseSelector({}), labels({})), '{} selects everything');
  t.ok(selects(parseSelector(null), labels({ a: 'b' })), 'null selects everything');

  // Property: a selector of In/NotIn/Exists/DoesNotExist terms against the same terms evaluated
  // one by one on random label maps.
  const key = fc.constantFrom('a', 'b', 'c');
  const value = fc.constantFrom('x', 'y', 'z');
  const term = fc.oneof(
    fc.record({
      key,
      operator: fc.constantFrom('In', 'NotIn'),
      values: fc.uniqueArray(value, { minLength: 1 }),
    }),
    fc.record({ key, operator: fc.constantFrom('Exists', 'DoesNotExist') }),
  );
  fc.assert(
    fc.property(fc.array(term, { maxLength: 4 }), fc.dictionary(key, value), (terms, given) => {
      const selector = parseSelector({ matchExpressions: terms });
      const map = labels(given);
      const expected = terms.every((term) => {
        const has = Object.hasOwn(given, term.key);
        const v = given[term.key];
        switch (term.operator) {
          case 'In':
            return has && (term as { values: string[] }).values.includes(v!);
          case 'NotIn':
            return !has || !(term as { values: string[] }).values.includes(v!);
          case 'Exists':
            return has;
          default:
            return !has;
        }
      });
      return selects(selector, map) === expected;
    }),
  );
});

t.test(
  'a pod policy inherits what it leaves out and keeps the node-wide config as it was',
  async (t) => {
    const dir = await directory(t, {
      'ip-masq-agent':
        'nonMasqueradeCIDRs: [10.0.0.0/8]\negressInterfaces: [eth0]\nsourceCIDRs: [10.244.0.0/16]\n',
      'ip-masq-db': 'podSelector: {matchLabels: {app: db}}\nsnatAddress: 192.0.2.10\n',
      'ip-masq-open':
        'namespaceSelector: {matchLabels: {egress: open}}\nnonMasqueradeCIDRs: [0.0.0.0/0]\nmasqLinkLocal: true\n',
    });
    const config = ok(t, await loadConfig(dir, AGENT));
    t.same(
      config.nonMasquerade.ipv4,
      ['10.0.0.0/8', '169.254.0.0/16'],
      'node-wide: the file without selectors',
    );
    t.equal(egressOf(config.keys)?.snat, undefined, "a policy's snatAddress is not the node's");
    const [db, open] = config.podPolicies ?? [];
    t.equal(db?.file, join(dir, 'ip-masq-db'));
    t.same(db?.nonMasquerade.ipv4, ['10.0.0.0/8', '169.254.0.0/16'], 'inherited');
    t.same(egressOf(db?.keys ?? {}), {
      sourceCIDRs: { ipv4: ['10.244.0.0/16'], ipv6: [] },
      egressInterfaces: ['eth0'],
      snat: { ipv4: { first: '192.0.2.10', last: '192.0.2.10' } },
    });
    t.equal(db && selectorText(db.podSelector!), 'app=db');
    t.equal(db?.namespaceSelector, undefined);
    t.same(open?.nonMasquerade.ipv4, ['0.0.0.0/0'], 'its own list replaces the node-wide one');
    t.equal(egressOf(open?.keys ?? {})?.snat, undefined);

    const without = ok(t, await loadConfig(dir, AGENT));
    t.equal(without.hash, config.hash, 'the same files hash alike');
    await writeFile(
      join(dir, 'ip-masq-db'),
      'podSelector: {matchLabels: {app: db2}}\nsnatAddress: 192.0.2.10\n',
    );
    t.not(
      ok(t, await loadConfig(dir, AGENT)).hash,
      config.hash,
      'a selector changed: another hash',
    );
  },
);

t.test(
  'keys only a node-wide file may give, and no pod policy without the API server',
  async (t) => {
    for (const key of [
      'sourceCIDRs: [10.0.0.0/8]',
      'resyncInterval: 10s',
      'nonMasqueradeNodePodCIDRs: true',
    ]) {
      const name = key.split(':')[0]!;
      t.match(
        error(t, parse(`podSelector: {}\n${key}\n`)),
        new RegExp(`^cfg: ${name}: a pod policy .* may not give it`),
        key,
      );
      // Checked whatever node the file is for, and by --check alike.
      t.match(
        error(
          t,
          parse(`nodeNames: [elsewhere]\nnamespaceSelector: {}\n${key}\n`, {
            ...AGENT,
            nodeName: 'n1',
            scoping: 'describe',
          }),
        ),
        new RegExp(`${name}: a pod policy`),
      );
    }
    t.match(
      error(t, parse('podSelector: {matchLabels: {app: db}}\n', { ...AGENT, kubernetes: false })),
      /^cfg: podSelector: a pod policy selects pods by their labels, .*--kubernetes/,
    );
    const described = ok(
      t,
      parse('podSelector: {matchLabels: {app: db}}\n', {
        ...AGENT,
        kubernetes: false,
        scoping: 'describe',
      }),
    );
    t.equal(
      described.podPolicies?.length,
      1,
      '--explain, --check and --diff read it without the API',
    );
    const scopedOut = ok(
      t,
      parse('nodeNames: [n2]\npodSelector: {}\n', { ...AGENT, kubernetes: false, nodeName: 'n1' }),
    );
    t.equal(scopedOut.podPolicies, undefined, 'a policy for another node asks for nothing here');
  },
);

t.test("cidrLimit counts the pod policies' entries too", async (t) => {
  const dir = await directory(t, {
    'ip-masq-agent': 'cidrLimit: 3\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\n',
    'ip-masq-db': 'podSelector: {}\nnonMasqueradeCIDRs: [192.168.0.0/16, 198.18.0.0/15]\n',
  });
  t.match(
    error(t, await loadConfig(dir, AGENT)),
    /cidrLimit: 3 is less than the 4 entries .* across 2 files/,
  );
  // The largest cidrLimit of the files that apply bounds them all, a pod policy's among them.
  const raised = await directory(t, {
    'ip-masq-agent': 'cidrLimit: 3\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\n',
    'ip-masq-db':
      'podSelector: {}\ncidrLimit: 4\nnonMasqueradeCIDRs: [192.168.0.0/16, 198.18.0.0/15]\n',
  });
  t.ok((await loadConfig(raised, AGENT)).ok, "the policy's cidrLimit: 4 takes the 4 entries");
});

t.test('--explain names the pod policy that decides, and the one file order shadows', async (t) => {
  const dir = await directory(t, {
    'ip-masq-agent': 'nonMasqueradeCIDRs: [10.0.0.0/8]\n',
    'ip-masq-db':
      'podSelector: {matchLabels: {app: db}}\nsnatAddress: 192.0.2.10\nmasqueradeCIDRs: [10.9.0.0/16]\n',
    'ip-masq-open':
      'namespaceSelector: {matchLabels: {egress: open}}\nnonMasqueradeCIDRs: [0.0.0.0/0]\n',
  });
  const config = ok(
    t,
    await loadConfig(dir, { ...AGENT, kubernetes: false, scoping: 'describe', provenance: true }),
  );
  const labels = (o: Record<string, string>) => new Map(Object.entries(o));
  const db = explain(config, OPTIONS, '198.51.100.1', {
    from: '10.244.1.5',
    podLabels: labels({ app: 'db' }),
  });
  t.equal(db.masqueraded, true);
  t.equal(db.podPolicy?.decides?.file, join(dir, 'ip-masq-db'));
  t.same(db.podPolicy?.shadowed, []);
  const text = explanationText(db);
  t.match(text, /decided by pod policy .*ip-masq-db \(podSelector app=db\)/);
  t.match(text, /translated to 192\.0\.2\.10 \(snatAddress\)/);
  const masq = explain(config, OPTIONS, '10.9.1.1', {
    from: '10.244.1.5',
    podLabels: labels({ app: 'db' }),
  });
  t.equal(masq.reason, 'masqueradeCIDRs');
  t.match(
    masq.decidedBy[0]?.text,
    /ip-masq-db masqueradeCIDRs\[0\] "10\.9\.0\.0\/16"/,
    "the policy's own entry",
  );
  const inherited = explain(config, OPTIONS, '10.1.1.1', {
    from: '10.244.1.5',
    podLabels: labels({ app: 'db' }),
  });
  t.equal(inherited.masqueraded, false);
  t.match(
    inherited.decidedBy[0]?.text,
    /ip-masq-agent nonMasqueradeCIDRs\[0\]/,
    'inherited from the node-wide file',
  );

  const both = explain(config, OPTIONS, '198.51.100.1', {
    from: '10.244.1.5',
    podLabels: labels({ app: 'db' }),
    namespaceLabels: labels({ egress: 'open' }),
  });
  t.equal(both.podPolicy?.decides?.file, join(dir, 'ip-masq-db'), 'the first in file order');
  t.same(both.podPolicy?.shadowed, [join(dir, 'ip-masq-open')]);
  t.match(
    explanationText(both),
    /ip-masq-open also selects the pod, but comes later in file-name order/,
  );
  const open = explain(config, OPTIONS, '198.51.100.1', {
    from: '10.244.1.5',
    podLabels: labels({ app: 'web' }),
    namespaceLabels: labels({ egress: 'open' }),
  });
  t.equal(open.masqueraded, false, "the open namespace's policy exempts everything");
  const none = explain(config, OPTIONS, '198.51.100.1', {
    from: '10.244.1.5',
    podLabels: labels({}),
  });
  t.equal(none.podPolicy?.decides, undefined);
  t.match(explanationText(none), /no pod policy selects the pod: the node-wide config answered/);
  const unjudged = explain(config, OPTIONS, '198.51.100.1', { from: '10.244.1.5' });
  t.equal(unjudged.podPolicy?.judged, false);
  t.match(explanationText(unjudged), /pod policies not judged: give the pod's labels/);
  const noFrom = explain(config, OPTIONS, '198.51.100.1');
  t.equal(noFrom.podPolicy, undefined, 'no source, no pod');
});

t.test('--diff says which pod policies a proposed config adds, removes or changes', async (t) => {
  const load = async (files: Record<string, string>) =>
    ok(
      t,
      await loadConfig(await directory(t, files), {
        ...AGENT,
        kubernetes: false,
        scoping: 'describe',
        provenance: true,
      }),
    );
  const base = 'nonMasqueradeCIDRs: [10.0.0.0/8]\n';
  const current = await load({
    'ip-masq-agent': base,
    'ip-masq-db': 'podSelector: {matchLabels: {app: db}}\nsnatAddress: 192.0.2.10\n',
    'ip-masq-old': 'podSelector: {matchLabels: {app: old}}\n',
  });
  const proposed = await load({
    'ip-masq-agent': base,
    'ip-masq-db':
      'podSelector: {matchLabels: {app: pg}}\nsnatAddress: 192.0.2.11\nnonMasqueradeCIDRs: [10.0.0.0/8, 198.51.100.0/24]\n',
    'ip-masq-new': 'namespaceSelector: {}\n',
  });
  const diff = diffConfigs(current, proposed, OPTIONS);
  t.same(diff.changes, [], 'the node-wide config is the same');
  const byName = (name: string) => diff.podPolicies.find((p) => p.file.endsWith(name));
  t.equal(byName('ip-masq-old')?.change, 'removed');
  t.equal(byName('ip-masq-new')?.change, 'added');
  const db = byName('ip-masq-db');
  t.equal(db?.change, 'changed');
  t.same(db?.selects, { current: 'podSelector app=db', proposed: 'podSelector app=pg' });
  t.same(db?.flips, [
    { family: 'ipv4', direction: 'masqueraded → not masqueraded', cidrs: ['198.51.100.0/24'] },
  ]);
  t.same(
    db?.keys.map((k) => [k.key, k.current, k.proposed]),
    [['snatAddress', ['192.0.2.10'], ['192.0.2.11']]],
  );
  const text = diffText(diff);
  t.match(
    text,
    /pod policy .*ip-masq-db: changed, for the pods it selects\n {2}selects: podSelector app=db → podSelector app=pg/,
  );
  t.match(text, /pod policy .*ip-masq-new: added \(selects namespaceSelector everything\)/);
  t.match(text, /pod policy .*ip-masq-old: removed/);
  t.same(diffConfigs(current, current, OPTIONS).podPolicies, [], 'the same config: nothing');
});

t.test('an explainer kept over many addresses answers as a fresh explain of each', async (t) => {
  // The explainer keeps each decider's decision, ranges and origin index (src/explain.ts): a cache,
  // so it is checked against the whole path, a fresh explain per address, in random orders.
  // Prefixes inside 10.0.0.0/22, so that they nest and the addresses below hit their edges.
  const cidr = fc
    .tuple(fc.integer({ min: 0, max: 1023 }), fc.integer({ min: 22, max: 32 }))
    .map(([host, len]) => {
      const n = host & ~((1 << (32 - len)) - 1) & 1023;
      return `10.0.${n >> 8}.${n & 255}/${len}`;
    });
  const fileArb = fc.record({
    nonMasq: fc.array(cidr, { maxLength: 4 }),
    masq: fc.array(cidr, { maxLength: 2 }),
    sources: fc.option(fc.array(cidr, { maxLength: 2 }), { nil: undefined }),
    interfaces: fc.option(fc.subarray(['eth0', 'eth1', 'vx*']), { nil: undefined }),
  });
  const text = (f: {
    nonMasq: string[];
    masq: string[];
    sources?: string[] | undefined;
    interfaces?: string[] | undefined;
  }) =>
    [
      `nonMasqueradeCIDRs: ${JSON.stringify(f.nonMasq)}`,
      `masqueradeCIDRs: ${JSON.stringify(f.masq)}`,
      ...(f.sources ? [`sourceCIDRs: ${JSON.stringify(f.sources)}`] : []),
      ...(f.interfaces ? [`egressInterfaces: ${JSON.stringify(f.interfaces)}`] : []),
      'masqLinkLocal: true',
      '',
    ].join('\n');
  const address = fc
    .tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 255 }))
    .map(([c, d]) => `10.0.${c}.${d}`);
  const query = fc.record({
    address,
    from: fc.option(address, { nil: undefined }),
    via: fc.option(fc.constantFrom('eth0', 'eth1', 'vxlan0'), { nil: undefined }),
    app: fc.option(fc.constantFrom('db', 'web', 'other'), { nil: undefined }),
  });
  await fc.assert(
    fc.asyncProperty(
      fileArb,
      fc.array(fc.tuple(fc.constantFrom('db', 'web'), fileArb), { maxLength: 2 }),
      fc.array(query, { minLength: 1, maxLength: 12 }),
      async (node, policies, queries) => {
        const files: Record<string, string> = { 'ip-masq-agent': text(node) };
        policies.forEach(([app, f], i) => {
          // sourceCIDRs is the node's alone (docs/egress-policy.md, "Pod policies").
          const own = { ...f, sources: undefined };
          files[`ip-masq-p${i}`] = `podSelector: {matchLabels: {app: ${app}}}\n${text(own)}`;
        });
        const dir = await directory(t, files);
        const loaded = await loadConfig(dir, {
          ...AGENT,
          kubernetes: false,
          scoping: 'describe',
          provenance: true,
        });
        if (!loaded.ok) throw loaded.error;
        const kept = explainer(loaded.config, OPTIONS);
        for (const q of queries) {
          const context = {
            ...(q.from ? { from: q.from } : {}),
            ...(q.via ? { via: q.via } : {}),
            ...(q.app ? { podLabels: new Map([['app', q.app]]) } : {}),
          };
          const fresh = explain(loaded.config, OPTIONS, q.address, context);
          if (JSON.stringify(kept(q.address, context)) !== JSON.stringify(fresh)) {
            throw new Error(`${q.address} ${JSON.stringify(q)}: the kept explainer differs`);
          }
        }
      },
    ),
    { numRuns: 150 },
  );
  t.pass('150 configs, the kept explainer equal to a fresh explain every time');
});
