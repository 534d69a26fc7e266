// The inputs the benchmarks write: agent configs, the agent's own rendered script, the original
// agent's linear iptables chain, and a kube-proxy-like
// transaction of another tool.
import { parseArgs } from '../src/cli/flags.js';
import { chooseLayout, compile } from '../src/compile.js';
import { parseConfigText } from '../src/config/index.js';
import { needsNewSets, renderInPlace, renderKeyChange } from '../src/nftables/change.js';
import { renderReplace, renderTable } from '../src/nftables/render.js';
import { plan } from '../src/options.js';

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

/**
 * An agent config holding `count` CIDRs; resync rare so only our triggers cause syncs. `extra`
 * CIDRs are added after them (the one-CIDR edit: 14.255.255.0/24 lies outside every variant).
 */
export function configText(
  count: number,
  variant: 0 | 1 = 0,
  resyncInterval = '3600s',
  extra: readonly string[] = [],
): string {
  const lines = [
    `cidrLimit: ${count + 16}`,
    `resyncInterval: ${resyncInterval}`,
    'nonMasqueradeCIDRs:',
  ];
  for (const cidr of [...cidrs(count, variant), ...extra]) lines.push(`  - ${cidr}`);
  return `${lines.join('\n')}\n`;
}

export const ONE_CIDR_EDIT = '14.255.255.0/24';

/** The bench's config of `count` CIDRs as the agent with its default flags loads it. */
function withDefaults(count: number, variant: 0 | 1) {
  const parsed = parseArgs([]);
  if (!parsed.ok) throw new Error(parsed.message);
  const stages = plan(parsed.options);
  const result = parseConfigText(configText(count, variant), 'bench config', stages.load);
  if (!result.ok) throw result.error;
  return { config: result.config, options: stages.compile };
}

/** The tables the agent writes for this config with its default flags (the `auto` layout). */
function agentTables(count: number, variant: 0 | 1) {
  const { config, options } = withDefaults(count, variant);
  return compile(config, options, 1);
}

/** The layout the agent's defaults (`--set-layout auto`) give for `count` of the bench's CIDRs. */
export function autoLayoutOf(count: number): 'interval' | 'concat' {
  const { config, options } = withDefaults(count, 0);
  return chooseLayout(config, options);
}

/**
 * The table the agent creates for variant `from`, and the transactions of its change to variant
 * `to`: in place, or on new sets where that is cheaper (src/nftables/change.ts, setChange).
 */
export function inPlaceScripts(count: number, from: 0 | 1, to: 0 | 1): [string, string[]] {
  const [before] = agentTables(count, from);
  const [after] = agentTables(count, to);
  if (!before || !after) throw new Error('no ip table');
  const change = needsNewSets(after, before)
    ? renderKeyChange(after)
    : renderInPlace(after, before);
  return [renderTable(before), change];
}

/**
 * The exact script the agent applies for this config, from the agent's own flags → plan → compile →
 * render path (what `--render --set-layout LAYOUT` prints).
 */
export function renderScript(
  count: number,
  variant: 0 | 1 = 0,
  layout: 'interval' | 'concat' | 'auto' = 'interval',
  policy = '',
): string {
  const parsed = parseArgs(['--set-layout', layout]);
  if (!parsed.ok) throw new Error(parsed.message);
  const stages = plan(parsed.options);
  const text = configText(count, variant) + policy;
  const result = parseConfigText(text, 'bench config', stages.load);
  if (!result.ok) throw result.error;
  return renderReplace(compile(result.config, stages.compile, 1));
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
}

/** The concatenated layout the agent writes (`--set-layout concat`, and `auto` above the crossover). */
export const CONCAT_LAYOUTS: readonly ConcatLayout[] = [{ name: 'addr . l4proto' }];

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
