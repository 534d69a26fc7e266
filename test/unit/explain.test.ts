// --explain's decision order and provenance, --diff against explain, --check on manifests.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { checkPath } from '../../src/config/check.js';
import { loadConfig, parseConfigText } from '../../src/config/index.js';
import type { Config, LoadOptions } from '../../src/config/types.js';
import { diffConfigs } from '../../src/diff.js';
import { explain } from '../../src/explain.js';
import { smallConfigArb, smallConfigText } from '../fuzz/helpers/generators.js';
import { tempDir } from '../../harness/netns.js';
import { compileOptions } from '../helpers/compile-options.js';

const load = (ipv6 = true, reserved = false): LoadOptions => ({
  enableIPv6: ipv6,
  nomasqAllReservedRanges: reserved,
  provenance: true,
});
const compile = (ipv6 = true) =>
  compileOptions({
    toPorts: [
      { first: 1024, last: 2047 },
      { first: 4096, last: 7167 },
    ],
    enableIPv6: ipv6,
  });

function config(text: string, options = load()): Config {
  const result = parseConfigText(text, 'f.yaml', options);
  if (!result.ok) throw result.error;
  return result.config;
}

t.test('the decision order, each with the entries that decide', async (t) => {
  const c = config(
    'nonMasqueradeCIDRs: [10.0.0.0/8, "FD12::/16"]\nmasqueradeCIDRs: [10.9.0.0/16]\n',
  );
  const e = (address: string) => explain(c, compile(), address);
  t.match(e('10.1.2.3'), {
    masqueraded: false,
    reason: 'nonMasqueradeCIDRs',
    decidedBy: [{ text: 'f.yaml nonMasqueradeCIDRs[0] "10.0.0.0/8"' }],
  });
  t.match(e('10.9.1.1'), {
    masqueraded: true,
    reason: 'masqueradeCIDRs',
    decidedBy: [{ text: 'f.yaml masqueradeCIDRs[0] "10.9.0.0/16"' }],
    overridden: [{ text: 'f.yaml nonMasqueradeCIDRs[0] "10.0.0.0/8"' }],
    ports: {
      fullyRandom: true,
      ranges: [
        { ports: '1024-2047', share: 0.25 },
        { ports: '4096-7167', share: 0.75 },
      ],
    },
  });
  t.match(
    e('fd12::1'),
    { masqueraded: false, decidedBy: [{ text: /"FD12::\/16"/ }] },
    'as written',
  );
  t.match(e('169.254.9.9'), { masqueraded: false, reason: 'link-local default' });
  t.match(e('fe80::1'), { masqueraded: false, reason: 'link-local default' });
  t.match(e('198.19.0.4'), { masqueraded: true, reason: 'no match', decidedBy: [] });
  t.match(explain(c, compile(false), 'fd12::1'), { masqueraded: false, reason: 'not managed' });
  t.throws(() => e('10.0.0.256'), /has an octet above 255/);
  t.throws(() => e('10.0.0.0/8'), /not a valid/);
});

t.test('defaults: the built-in list, with and without the reserved ranges', async (t) => {
  const plain = config('masqLinkLocal: true\n', load(false));
  t.match(explain(plain, compile(false), '172.20.0.1'), {
    masqueraded: false,
    reason: 'default list',
    decidedBy: [{ text: 'the built-in default list: 172.16.0.0/12' }],
  });
  t.match(explain(plain, compile(false), '198.18.0.1'), { masqueraded: true, reason: 'no match' });
  t.match(explain(plain, compile(false), '169.254.1.1'), { masqueraded: true }, 'masqLinkLocal');
  const reserved = config('{}', load(false, true));
  t.match(explain(reserved, compile(false), '198.18.0.1'), {
    reason: 'default list',
    decidedBy: [{ text: /--nomasq-all-reserved-ranges\): 198\.18\.0\.0\/15/ }],
  });
});

t.test('directory mode: files named, duplicates from two files both kept', async (t) => {
  const dir = tempDir(t, 'explain');
  writeFileSync(join(dir, 'ip-masq-a'), 'nonMasqueradeCIDRs: [10.0.0.0/8]\n');
  writeFileSync(join(dir, 'ip-masq-b'), 'nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\n');
  const result = await loadConfig(dir, load());
  if (!result.ok) throw result.error;
  t.same(
    explain(result.config, compile(), '10.3.3.3').decidedBy.map((o) => o.text),
    [
      `${dir}/ip-masq-a nonMasqueradeCIDRs[0] "10.0.0.0/8"`,
      `${dir}/ip-masq-b nonMasqueradeCIDRs[0] "10.0.0.0/8"`,
    ],
  );
  t.same(
    result.config.nonMasquerade.ipv4,
    ['10.0.0.0/8', '169.254.0.0/16', '192.168.0.0/16'],
    'merged once',
  );
  const plain = await loadConfig(dir, { enableIPv6: true, nomasqAllReservedRanges: false });
  t.equal(plain.ok && plain.config.provenance, undefined, 'the agent itself keeps no provenance');
});

const configArb = smallConfigArb().map(smallConfigText);

t.test(
  'property: --diff holds exactly the addresses whose explained decision differs',
  async (t) => {
    const inside = (cidrs: readonly string[], host: number) =>
      cidrs.some((cidr) => {
        const [base = '', len = ''] = cidr.split('/');
        const first = Number(base.split('.')[3]);
        return (
          base.startsWith('10.0.0.') && host >= first && host < first + 2 ** (32 - Number(len))
        );
      });
    t.doesNotThrow(() =>
      fc.assert(
        fc.property(
          configArb,
          configArb,
          fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 20 }),
          (a, b, hosts) => {
            const [before, after] = [config(a, load(false)), config(b, load(false))];
            const diff = diffConfigs(before, after, compile(false));
            return hosts.every((host) => {
              const address = `10.0.0.${host}`;
              const flipped =
                explain(before, compile(false), address).masqueraded !==
                explain(after, compile(false), address).masqueraded;
              const listed = diff.changes.filter((c) => inside(c.cidrs, host));
              return flipped
                ? listed.length === 1 &&
                    listed[0]!.current.masqueraded !== listed[0]!.proposed.masqueraded
                : listed.length === 0;
            });
          },
        ),
        { numRuns: 300 },
      ),
    );
  },
);

t.test('--check: manifests, multi-document streams, plain files and directories', async (t) => {
  const dir = tempDir(t, 'check');
  const configMap = (name: string, data: Record<string, string>) =>
    `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${name}\n  namespace: kube-system\ndata:\n` +
    Object.entries(data)
      .map(
        ([k, v]) =>
          `  ${k}: |\n${v
            .split('\n')
            .filter(Boolean)
            .map((l) => `    ${l}`)
            .join('\n')}\n`,
      )
      .join('');
  const good = configMap('ip-masq-agent', { config: 'nonMasqueradeCIDRs: [10.0.0.0/8]\n' });
  const bad = configMap('second', { config: 'nonMasqueradeCIDRs: [10.0.0.0/8, 10.0.0.1/8]\n' });
  const deployment = 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec: {}\n';
  const unrelated = configMap('unrelated', { 'app.properties': 'a=1\n' });
  const files: Record<string, string> = {
    'good.yaml': [deployment, good, unrelated].join('---\n'),
    'three.yaml': [good, bad, configMap('third', { 'ip-masq-x': 'masqLinkLocal: true\n' })].join(
      '---\n',
    ),
    'none.yaml': [deployment, unrelated].join('---\n'),
    'plain.yaml': 'nonMasqueradeCIDRs: [10.0.0.0/33]\n',
  };
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  const check = (name: string) =>
    checkPath(join(dir, name), load(false), {
      configMaps: ['kube-system/ip-masq-agent'],
      named: false,
    });
  t.match(
    await check('good.yaml'),
    {
      checked: [
        'ConfigMap kube-system/ip-masq-agent key config (as the shipped DaemonSet mounts it)',
      ],
      errors: [],
    },
    'others ignored',
  );
  const three = await check('three.yaml');
  t.same(
    three.checked,
    ['ConfigMap kube-system/ip-masq-agent key config (as the shipped DaemonSet mounts it)'],
    "only the agent's ConfigMap is judged",
  );
  t.same(three.errors, []);
  const named = await checkPath(join(dir, 'three.yaml'), load(false), {
    configMaps: ['kube-system/second', 'third'],
    named: true,
  });
  t.same(named.errors, [
    `${join(dir, 'three.yaml')}: ConfigMap kube-system/second key config: nonMasqueradeCIDRs[1]: "10.0.0.1/8" is not aligned to its prefix (did you mean 10.0.0.0/8?)`,
    `${join(dir, 'three.yaml')}: ConfigMap kube-system/third: it has no key config, which the shipped DaemonSet mounts as /etc/config/ip-masq-agent`,
  ]);
  t.match(await check('none.yaml'), {
    errors: [],
    checked: [/no ConfigMap kube-system\/ip-masq-agent in it: nothing to check/],
  });
  t.match(
    (
      await checkPath(join(dir, 'none.yaml'), load(false), {
        configMaps: ['kube-system/ip-masq-agent'],
        named: true,
      })
    ).errors,
    [/none.yaml: no ConfigMap kube-system\/ip-masq-agent in it$/],
  );
  t.match(await check('plain.yaml'), {
    checked: ['a config file'],
    errors: [/nonMasqueradeCIDRs\[0\]: .*33/],
  });
  mkdirSync(join(dir, 'cfg'));
  writeFileSync(
    join(dir, 'cfg', 'ip-masq-agent'),
    'cidrLimit: 1\nnonMasqueradeCIDRs: [10.0.0.0/8, 11.0.0.0/8]\n',
  );
  t.match(await check('cfg'), {
    checked: ['a config directory'],
    errors: [/cidrLimit: 1 is less than the 2 entries/],
  });
  t.match((await check('missing')).errors, [/cannot be read: ENOENT/]);
});
