// The inputs the benchmarks write: agent configs, the agent's own rendered script, the original
// agent's linear iptables chain, a concatenated-range variant of our table, and a kube-proxy-like
// transaction of another tool.
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { agentBin, agentEnv } from '../test/helpers/agent.js';
import { packageRoot } from '../test/helpers/netns.js';

/**
 * `count` distinct /24s, every other one so nothing merges (variant 0 and 1 interleave, so
 * switching between them replaces every element). All lie in 10.0.0.0–13.x, never the bench's destination 198.19.0.4.
 */
export function cidrs(count: number, variant: 0 | 1 = 0): string[] {
  const list: string[] = [];
  for (let i = 0; i < count; i++) {
    const block = i * 2 + variant;
    list.push(`${10 + (block >> 16)}.${(block >> 8) & 255}.${block & 255}.0/24`);
  }
  return list;
}

/** An agent config holding `count` CIDRs; resync rare so only our triggers cause syncs. */
export function configText(count: number, variant: 0 | 1 = 0, resyncInterval = '3600s'): string {
  const lines = [
    `cidrLimit: ${count + 16}`,
    `resyncInterval: ${resyncInterval}`,
    'nonMasqueradeCIDRs:',
  ];
  for (const cidr of cidrs(count, variant)) lines.push(`  - ${cidr}`);
  return `${lines.join('\n')}\n`;
}

/** The exact script the agent applies for this config with the interval layout: `--render`. */
export async function renderScript(
  dir: string,
  count: number,
  variant: 0 | 1 = 0,
): Promise<string> {
  const config = join(dir, `render-${count}-${variant}.yaml`);
  await writeFile(config, configText(count, variant));
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      // The plain layout explicitly: the concatenated variants are derived from it (concatScript).
      [agentBin, '--render', '--set-layout', 'interval', '--config', config],
      { cwd: packageRoot, env: agentEnv(), maxBuffer: 256 * 1024 * 1024, timeout: 60_000 },
      (err, stdout, stderr) =>
        err ? reject(new Error(`--render: ${stderr || err.message}`)) : resolve(stdout),
    );
  });
}

/** The original ip-masq-agent's ruleset for iptables-nft-restore: one RETURN rule per CIDR. */
export function linearChainScript(count: number, variant: 0 | 1 = 0): string {
  const lines = [
    '*nat',
    ':POSTROUTING ACCEPT [0:0]',
    ':IP-MASQ-AGENT - [0:0]',
    '-A POSTROUTING -m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT',
  ];
  for (const cidr of [...cidrs(count, variant), '169.254.0.0/16']) {
    lines.push(`-A IP-MASQ-AGENT -d ${cidr} -j RETURN`);
  }
  lines.push('-A IP-MASQ-AGENT -j MASQUERADE --random-fully', 'COMMIT');
  return `${lines.join('\n')}\n`;
}

export interface ConcatLayout {
  /** Short name used in tables and the chart. */
  name: string;
  /** The set's `typeof` expression. */
  typeofExpression: string;
  /** The second field's full range: every packet matches it. */
  anyValue: string;
  /** The packet expression concatenated after `ip daddr`. */
  key: string;
}

export const CONCAT_LAYOUTS: readonly ConcatLayout[] = [
  {
    name: 'addr . l4proto',
    typeofExpression: 'ip daddr . meta l4proto',
    anyValue: '0-255',
    key: 'meta l4proto',
  },
  {
    name: 'addr . mark',
    typeofExpression: 'ip daddr . meta mark',
    anyValue: '0x00000000-0xffffffff',
    key: 'meta mark',
  },
];

/**
 * Our rendered script rewritten to a concatenated-range layout: each set gets a second field that
 * always matches, and each lookup concatenates it. Everything else stays as the agent renders it.
 */
export function concatScript(rendered: string, layout: ConcatLayout): string {
  return rendered
    .replace(/typeof ip daddr\n/g, `typeof ${layout.typeofExpression}\n`)
    .replace(/elements = \{ ([^}]*) \}/g, (_all, list: string) => {
      const items = list.split(', ').map((item) => `${item} . ${layout.anyValue}`);
      return `elements = { ${items.join(', ')} }`;
    })
    .replace(/ip daddr @(\w+)/g, `ip daddr . ${layout.key} @$1`);
}

/**
 * A kube-proxy-like transaction on its own table: a chain, a verdict map, a rule, and one flat
 * `add element` — the command that makes nft fetch every interval set in the namespace.
 */
export const NEIGHBOUR_SCRIPT = [
  'add table ip kp',
  'delete table ip kp',
  'add table ip kp',
  'add chain ip kp services',
  'add chain ip kp svc-web',
  'add map ip kp service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }',
  'add rule ip kp services ip daddr . meta l4proto . th dport vmap @service-ips',
  'add element ip kp service-ips { 172.30.0.10 . tcp . 443 : goto svc-web }',
  '',
].join('\n');

/** Drops the bench's UDP flows on arrival at the remote, so no reply or ICMP error comes back. */
export const SINK_SCRIPT = [
  'table ip benchsink {',
  '\tchain prerouting {',
  '\t\ttype filter hook prerouting priority raw; policy accept;',
  '\t\tudp dport 10000-60000 drop',
  '\t}',
  '}',
  '',
].join('\n');
