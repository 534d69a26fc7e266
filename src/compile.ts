// Config + flags → the agent's desired tables (pure). README, "What it does".
import { familyOf, managedFamilies } from './cidr/index.js';
import { snatText } from './config/egress.js';
import {
  decisionOf,
  FIELDS,
  type ListStep,
  type StepField,
  type Step,
  type Translation,
  type TranslationFlags,
} from './decision.js';
import { podPolicyName } from './config/pods.js';
import type { Config, PodPolicy } from './config/types.js';
import { markText, TABLE_COMMENT, type WriteMark } from './nftables/ownership.js';
import {
  BASE_CHAIN,
  countIn,
  DECISION_COUNTERS,
  LATE_REPLIES_CHAIN,
  lateRepliesChain,
  lateRepliesSet,
  POD_POLICY_MAP,
  podPolicyChain,
  podPolicyPrefix,
} from './nftables/objects.js';
import { safeComment } from './nftables/render.js';
import {
  frozenElements,
  type Chain,
  type NamedSet,
  type TableFamily,
  type SetKey,
  type Table,
} from './nftables/types.js';

/**
 * `interval`: sets of addresses (README, "What it does"). `concat`: address . protocol ranges,
 * which other tools' element commands do not download. `auto`: interval up to
 * AUTO_LAYOUT_CROSSOVER elements, concat above (docs/performance.md, "Performance").
 */
export const setLayouts = ['auto', 'interval', 'concat'] as const;
export type SetLayout = (typeof setLayouts)[number];

export interface CompileOptions extends TranslationFlags {
  readonly table: string;
  readonly masqChain: string;
  readonly enableIPv6: boolean;
  /** `auto` (the default) when left out. */
  readonly setLayout?: SetLayout;
}

function integer(n: number, what: string): string {
  if (!Number.isSafeInteger(n) || n < 0)
    throw new Error(`${what} is not a non-negative integer: ${n}`);
  return String(n);
}

/**
 * The translating statements in order: `masquerade`, or `snat to` the family's snatAddress
 * (docs/egress-policy.md, "Egress policy"). With --to-ports, tcp/udp/sctp go to one of the ranges,
 * each chosen in proportion to its size: rule i takes size_i out of what the ranges from i on hold,
 * so the chained draws give every range its share; other protocols fall through to a plain
 * statement.
 */
export function masqueradeRules(
  translation: Translation,
  family: TableFamily,
  count = '',
): string[] {
  const { ports: toPorts, snat: to } = translation;
  const snat = to ? { family, to } : undefined;
  const flags = translation.fullyRandom ? ' fully-random' : '';
  // The counting statement, where given, right before the translating one: a flow is counted by the
  // rule that translates it, once.
  const counted = count ? `${count} ` : '';
  const sizes = toPorts.map((r) => r.last - r.first + 1);
  // An IPv6 address before a port is bracketed; nft lists `snat to` as written here.
  const bracket = (address: string) => (snat?.family === 'ip6' ? `[${address}]` : address);
  const withPorts = (ports: string) => {
    if (!snat) return `masquerade to :${ports}`;
    const { first, last } = snat.to;
    const range = first === last ? bracket(first) : `${bracket(first)}-${bracket(last)}`;
    return `snat to ${range}:${ports}`;
  };
  const rules = toPorts.map((range, i) => {
    const ports =
      range.first === range.last
        ? integer(range.first, 'port')
        : `${integer(range.first, 'port')}-${integer(range.last, 'port')}`;
    const remaining = sizes.slice(i).reduce((a, b) => a + b, 0);
    const draw =
      i < toPorts.length - 1
        ? ` numgen random mod ${remaining} < ${integer(sizes[i] ?? 0, 'size')}`
        : '';
    return `meta l4proto { tcp, udp, sctp }${draw} ${counted}${withPorts(ports)}${flags}`;
  });
  rules.push(counted + (snat ? `snat to ${snatText(snat.to)}${flags}` : `masquerade${flags}`));
  return rules;
}

/**
 * Up to this many elements `auto` keeps interval sets; above it, concatenated ones. nft downloads
 * every interval set for its overlap checks, so large ones slow other tools' transactions; a
 * concatenated set is not downloaded. Where the cost crosses 10 ms: docs/design.md, "Figures".
 */
export const AUTO_LAYOUT_CROSSOVER = 2_000;

/** The layout `auto` (or an explicit choice) gives for this config: one for all our sets. */
export function chooseLayout(config: Config, options: CompileOptions): 'interval' | 'concat' {
  const layout = options.setLayout ?? 'auto';
  if (layout !== 'auto') return layout;
  const elements = managedFamilies(options.enableIPv6).reduce(
    (sum, { name }) => sum + config.nonMasquerade[name].length + config.masquerade[name].length,
    0,
  );
  return elements > AUTO_LAYOUT_CROSSOVER ? 'concat' : 'interval';
}

/**
 * The set layout as data: `interval` keys by the address field (a step's on addresses, the
 * destination by default); `concat` by address . protocol, each prefix paired with every protocol
 * (0-255), so the decision is the same while other tools' element commands skip downloading the
 * set (docs/bench.md).
 */
export function setKey(
  family: TableFamily,
  layout: 'interval' | 'concat',
  address: StepField = 'daddr',
): SetKey {
  return layout === 'concat'
    ? {
        expression: `${family} ${address} . meta l4proto`,
        elementSuffix: ' . 0-255',
        probeSuffix: ' . udp',
      }
    : { expression: `${family} ${address}`, elementSuffix: '' };
}

/** egressInterfaces' set: interface names, interval so that a trailing `*` matches as a prefix. */
const interfaceKey: SetKey = { expression: 'oifname', elementSuffix: '', elements: 'names' };

/**
 * The set a step's list lives in: interface names (interval, so that a trailing `*` matches as a
 * prefix), or addresses keyed as the layout keys them, on the step's field.
 */
function stepSet(step: ListStep, family: TableFamily, layout: 'interval' | 'concat'): NamedSet {
  const key =
    FIELDS[step.field].elements === 'names' ? interfaceKey : setKey(family, layout, step.field);
  return { name: step.set, key, flags: ['interval'], elements: frozenElements(step.list) };
}

/**
 * A step as rules of the decision chain: the flows it takes (in its set, or not in it) leave the
 * chain untouched (`return`: skipped or exempt) or are translated (one rule per translating
 * statement); the last step translates every flow that comes to it.
 */
function stepRules(
  step: Step,
  family: TableFamily,
  layout: 'interval' | 'concat',
  translate: readonly string[],
  prefix = '',
): string[] {
  if (step.field === undefined) return [...translate];
  const match = `${stepSet(step, family, layout).key.expression} ${step.takes === 'listed' ? '' : '!= '}@${step.set}`;
  return step.outcome === 'translated'
    ? translate.map((statement) => `${match} ${statement}`)
    : [`${match} ${countIn(step.outcome, prefix)} return`];
}

/** The family's key of the verdict map: a pod's source address. */
const podPolicyKey = (family: TableFamily): SetKey => ({
  expression: `${family} saddr`,
  elementSuffix: '',
});

/**
 * The verdict map's elements: each selected address, as a full-length prefix, to the chain of the
 * policy that decides it. Each address once (the membership gives each to one policy), sorted.
 */
function podPolicyElements(config: Config, family: 'ipv4' | 'ipv6'): readonly string[] {
  const elements: string[] = [];
  for (const [index, policy] of (config.podPolicies ?? []).entries()) {
    for (const address of policy.members?.[family] ?? [])
      elements.push(`${address} : goto ${podPolicyChain(index)}`);
  }
  return elements.sort();
}

/**
 * A pod policy's objects: its chain (its decision's rules, each step over a set of its own, its
 * own counters) and its sets, each commented with the policy's file name.
 */
function podPolicyObjects(
  policy: PodPolicy,
  index: number,
  family: TableFamily,
  options: CompileOptions,
  layout: 'interval' | 'concat',
): { chain: Chain; sets: NamedSet[]; counters: string[] } {
  const prefix = podPolicyPrefix(index);
  const decision = decisionOf(policy, familyOf(family).name, options);
  const steps = decision.steps.map((step) =>
    step.field === undefined ? step : { ...step, set: `${prefix}${step.set}` },
  );
  const translate = masqueradeRules(decision.translation, family, countIn('translated', prefix));
  const comment = safeComment(podPolicyName(policy));
  const sets = steps
    .filter((step): step is ListStep => step.field !== undefined)
    .map((step) => ({ ...stepSet(step, family, layout), comment }))
    .sort((a, b) => a.name.localeCompare(b.name));
  return {
    chain: {
      name: podPolicyChain(index),
      comment,
      rules: steps.flatMap((step) => stepRules(step, family, layout, translate, prefix)),
    },
    sets,
    counters: DECISION_COUNTERS.map((counter) => `${prefix}${counter}`),
  };
}

function compileFamily(
  family: TableFamily,
  config: Config,
  options: CompileOptions,
  mark: WriteMark,
  layout: 'interval' | 'concat',
): Table {
  const decision = decisionOf(config, familyOf(family).name, options);
  const translate = masqueradeRules(decision.translation, family, countIn('translated'));
  const listed = decision.steps.filter((step): step is ListStep => step.field !== undefined);
  const sets = [...listed]
    .sort((a, b) => a.declared - b.declared)
    .map((step) => stepSet(step, family, layout));
  const policies = (config.podPolicies ?? []).map((policy, index) =>
    podPolicyObjects(policy, index, family, options, layout),
  );
  // With pod policies, a flow from a selected address goes to its policy's chain first
  // (docs/egress-policy.md, "Pod policies"): one lookup, whatever their number.
  const dispatch = policies.length > 0 ? [`${family} saddr vmap @${POD_POLICY_MAP}`] : [];
  const chain: Chain = {
    name: options.masqChain,
    rules: [
      ...dispatch,
      ...decision.steps.flatMap((step) => stepRules(step, family, layout, translate)),
    ],
  };
  const podMap: NamedSet[] =
    policies.length > 0
      ? [
          {
            name: POD_POLICY_MAP,
            key: podPolicyKey(family),
            map: 'verdict',
            flags: ['interval'],
            elements: frozenElements(podPolicyElements(config, familyOf(family).name)),
          },
        ]
      : [];
  return {
    family,
    name: options.table,
    // What the table carries for good: whose it is; the jump rule carries every write's mark.
    comment: TABLE_COMMENT,
    counters: [...DECISION_COUNTERS, ...policies.flatMap((p) => p.counters)],
    sets: [...sets, ...policies.flatMap((p) => p.sets), ...podMap, lateRepliesSet(family)],
    chains: [
      {
        name: BASE_CHAIN,
        base: { type: 'nat', hook: 'postrouting', priority: 'srcnat', policy: 'accept' },
        rules: [jumpRule(options, mark)],
      },
      chain,
      ...policies.map((p) => p.chain),
      lateRepliesChain(family),
    ],
  };
}

/** The base chain's one rule: it carries the mark of every write (nftables/ownership.ts). */
function jumpRule(options: CompileOptions, mark: WriteMark): string {
  return `fib daddr type != local jump ${options.masqChain} comment "${markText(mark)}"`;
}

/**
 * The desired tables: `ip`, and `ip6` with --enable-ipv6; `writer` names this process in the mark.
 */
export function compile(
  config: Config,
  options: CompileOptions,
  generation: number,
  writer?: string,
): Table[] {
  if (options.masqChain === BASE_CHAIN || options.masqChain === LATE_REPLIES_CHAIN) {
    throw new Error(`--masq-chain may not be ${options.masqChain}: a base chain has that name`);
  }
  const layout = chooseLayout(config, options);
  const mark: WriteMark = { generation, hash: config.hash, ...(writer ? { writer } : {}) };
  return managedFamilies(options.enableIPv6).map((family) =>
    compileFamily(family.table, config, options, mark, layout),
  );
}

/**
 * The same tables with another write's mark: what compile gives for another generation and writer,
 * without compiling again (a sync compares the kernel with the tables it holds, then writes them).
 */
export function remark(
  tables: readonly Table[],
  options: CompileOptions,
  generation: number,
  hash: string,
  writer?: string,
): Table[] {
  const mark: WriteMark = { generation, hash, ...(writer ? { writer } : {}) };
  return tables.map((table) => ({
    ...table,
    chains: table.chains.map((chain) =>
      chain.name === BASE_CHAIN ? { ...chain, rules: [jumpRule(options, mark)] } : chain,
    ),
  }));
}
