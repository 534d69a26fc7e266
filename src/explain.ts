// Why traffic to an address is masqueraded or not (docs/explain.md, "Explain, diff, check"): the
// decision's steps (decision.ts) evaluated for it, with the config entries responsible. Pure; needs
// a Config loaded with provenance.
import {
  escapeUnprintable,
  type Family,
  formatPrefix,
  hostMask,
  parseAddress,
  type Prefix,
  prefixRange,
  quote,
  familyOf,
} from './cidr/index.js';
import type { CompileOptions } from './compile.js';
import { snatText } from './config/egress.js';
import { egressOf } from './config/build.js';
import { selectingPolicies } from './config/pods.js';
import { selectorText } from './config/selector.js';
import type { AddressFamily, Config, Origin, PodPolicy, PolicyOrigin } from './config/types.js';
import {
  decisionOf,
  FIELDS,
  Judge,
  STEPS,
  type Flow,
  type PolicySlot,
  type StepRow,
  type StepWords,
  type Translation,
} from './decision.js';

export type Reason =
  /**
   * The step that decided, by its key: an egress policy step (docs/egress-policy.md, "Egress
   * policy": another way out, or another source), masqueradeCIDRs, or a nonMasqueradeCIDRs entry.
   */
  | StepRow['key']
  /** IPv6 with --enable-ipv6 off: the agent has no ip6 table, so it does not touch the traffic. */
  | 'not managed'
  | 'default list'
  | 'link-local default'
  /**
   * nonMasqueradeNodePodCIDRs: a Node's pod CIDRs (docs/kubernetes.md, "Kubernetes API (opt-in)").
   */
  | 'node podCIDRs'
  | 'no match';

export interface Explanation {
  readonly address: string;
  readonly family: AddressFamily;
  readonly masqueraded: boolean;
  readonly reason: Reason;
  /** The origins that decide (several when entries overlap). */
  readonly decidedBy: readonly OriginText[];
  /** Non-masquerade origins that also match but that a masqueradeCIDRs entry overrides. */
  readonly overridden: readonly OriginText[];
  /** How the source port is chosen when masqueraded. */
  readonly ports: PortPolicy | null;
  /** The egress policy's steps, where the config has the keys. */
  readonly policy?: PolicyAnswer;
  /** Where the config has pod policies and the flow's source is given: which one decides. */
  readonly podPolicy?: PodPolicyAnswer;
}

/**
 * Which pod policy decides a flow from a pod (docs/egress-policy.md, "Pod policies"): `decides`
 * names the first, in file-name order, that selects the pod, `shadowed` those that also select it;
 * neither when none does. `judged: false` when the pod's labels were not given (the node-wide
 * config answers).
 */
export interface PodPolicyAnswer {
  readonly judged: boolean;
  readonly decides?: { readonly file: string; readonly selects: string };
  readonly shadowed: readonly string[];
  /** How the pod was found: the labels given, or (--live) the kernel's verdict map. */
  readonly by: 'labels' | 'kernel';
  /** The pod's name, where known (--live with the API). */
  readonly pod?: string;
}

/**
 * What the egress policy says of this flow: each list the config gives, what the flow was described
 * with (--via, --from; null: not given) and whether that is in the list (null: not judged).
 */
export interface PolicyAnswer extends Partial<Record<PolicySlot, PolicyStep>> {
  /** snatAddress(IPv6) of this family: translated to it rather than masqueraded. */
  readonly snat?: string;
}

export interface PolicyStep {
  readonly listed: readonly string[];
  readonly given: string | null;
  readonly matches: boolean | null;
  /** The entries that list it, as `file key[index] value` (with provenance). */
  readonly decidedBy?: readonly string[];
}

/** The flow besides its destination: --from and --via of --explain. */
export interface FlowContext {
  readonly from?: string;
  readonly via?: string;
  /**
   * The labels of the pod that holds `from`, and of its namespace (--pod-labels,
   * --namespace-labels).
   */
  readonly podLabels?: ReadonlyMap<string, string>;
  readonly namespaceLabels?: ReadonlyMap<string, string>;
  /** The pod policy the kernel's verdict map gives `from` (--live): its index, or null for none. */
  readonly podPolicyIndex?: number | null;
}

/** What decides a flow: the node-wide config, or a pod policy (with what explain says of it). */
function deciderOf(
  config: Config,
  context: FlowContext,
): { decider: Config | PodPolicy; answer?: PodPolicyAnswer } {
  const policies = config.podPolicies ?? [];
  if (policies.length === 0 || context.from === undefined) return { decider: config };
  const describe = (policy: PodPolicy) => {
    const parts = [
      ...(policy.podSelector ? [`podSelector ${selectorText(policy.podSelector)}`] : []),
      ...(policy.namespaceSelector
        ? [`namespaceSelector ${selectorText(policy.namespaceSelector)}`]
        : []),
    ];
    return { file: policy.file, selects: parts.join(', ') || 'every pod' };
  };
  if (context.podPolicyIndex !== undefined) {
    const policy = context.podPolicyIndex === null ? undefined : policies[context.podPolicyIndex];
    return {
      decider: policy ?? config,
      answer: {
        judged: true,
        by: 'kernel',
        shadowed: [],
        ...(policy ? { decides: describe(policy) } : {}),
      },
    };
  }
  if (context.podLabels === undefined)
    return { decider: config, answer: { judged: false, by: 'labels', shadowed: [] } };
  const selecting = selectingPolicies(
    policies,
    { labels: context.podLabels },
    context.namespaceLabels ?? new Map(),
  );
  const first = selecting[0] === undefined ? undefined : policies[selecting[0]];
  return {
    decider: first ?? config,
    answer: {
      judged: true,
      by: 'labels',
      shadowed: selecting.slice(1).map((i) => policies[i]!.file),
      ...(first ? { decides: describe(first) } : {}),
    },
  };
}

/** What the decision's policy steps say of this flow, with the entries that list it. */
function policyAnswer(
  config: Pick<Config, 'keys' | 'provenance'>,
  judge: Judge,
  translation: Translation,
  flow: Flow,
  from: ReturnType<typeof parseAddress> | undefined,
): PolicyAnswer | undefined {
  if (!egressOf(config.keys)) return undefined;
  const answer: { -readonly [K in keyof PolicyAnswer]: PolicyAnswer[K] } = {};
  for (const step of judge.decision.steps) {
    if (step.field === undefined || step.slot === 'destination' || !step.words) continue;
    const recorded = config.provenance?.policy;
    const origins: readonly PolicyOrigin<string | Prefix>[] =
      recorded && step.key in recorded ? recorded[step.key as keyof typeof recorded] : [];
    // Only a flow that says the field is listed by an entry: the entries are not read otherwise
    // (--diff explains every address it finds flipped, without --via or --from).
    const by =
      FIELDS[step.field].of(flow) === undefined
        ? []
        : origins.flatMap((o) => {
            const value = typeof o.value === 'string' ? o.value : formatPrefix(o.value);
            return judge.entryHolds(step, value, flow)
              ? [`${escapeUnprintable(o.file)} ${step.key}[${o.index}] ${quote(value)}`]
              : [];
          });
    answer[step.slot] = {
      listed: step.list,
      given: step.words.given(flow, from),
      matches: judge.holds(step, flow) ?? null,
      ...(by.length > 0 ? { decidedBy: by } : {}),
    };
  }
  if (translation.snat) answer.snat = snatText(translation.snat);
  return answer;
}

export interface OriginText {
  /** `file nonMasqueradeCIDRs[2] "10.0.0.0/8"`, `built-in default list 10.0.0.0/8`, … */
  readonly text: string;
  readonly origin: Origin;
}

export interface PortPolicy {
  readonly fullyRandom: boolean;
  /** tcp, udp and sctp: each range with its share of new flows; empty means any port. */
  readonly ranges: ReadonlyArray<{ readonly ports: string; readonly share: number }>;
}

export const LOCAL_NOTE =
  'Destinations local to the node are never masqueraded, whatever the config (the base chain skips ' +
  '`fib daddr type local`): which those are depends on the node, so it is not part of this answer.';

export function describeOrigin(origin: Origin): string {
  const prefix = formatPrefix(origin.prefix);
  if (origin.kind === 'entry') {
    return `${escapeUnprintable(origin.file)} ${origin.key}[${origin.index}] ${quote(origin.written)}`;
  }
  if (origin.kind === 'default') {
    const list = origin.list === 'reserved' ? ' (--nomasq-all-reserved-ranges)' : '';
    return `the built-in default list${list}: ${prefix}`;
  }
  if (origin.kind === 'node') return `Node ${escapeUnprintable(origin.node)}'s podCIDRs ${prefix}`;
  return `the link-local default ${prefix} (masqLinkLocal${origin.prefix.family === 6 ? 'IPv6' : ''} is false)`;
}

/**
 * Each config's origins by family, prefix length and network: the origins covering an address are
 * then one lookup per length in use, not a scan of every origin (a --diff of 100 000 ranges
 * explains 200 000 addresses).
 */
interface OriginIndex {
  /** Prefix lengths in use, each with its origins by network, each list in file and entry order. */
  readonly byLength: Map<number, Map<bigint, Array<{ order: number; origin: Origin }>>>;
}
function originIndex(config: Pick<Config, 'provenance'>, family: Family): OriginIndex {
  const index: OriginIndex = { byLength: new Map() };
  for (const [order, origin] of (config.provenance?.origins ?? []).entries()) {
    if (origin.prefix.family !== family) continue;
    let networks = index.byLength.get(origin.prefix.len);
    if (!networks) index.byLength.set(origin.prefix.len, (networks = new Map()));
    const network = prefixRange(origin.prefix)[0];
    let list = networks.get(network);
    if (!list) networks.set(network, (list = []));
    list.push({ order, origin });
  }
  return index;
}

function matching(index: OriginIndex, family: Family, addr: bigint): Origin[] {
  const found: Array<{ order: number; origin: Origin }> = [];
  for (const [len, networks] of index.byLength) {
    const network = addr & ~hostMask(family, len);
    const list = networks.get(network);
    if (list) found.push(...list);
  }
  return found.sort((a, b) => a.order - b.order).map((entry) => entry.origin);
}

export function portPolicy(translation: Translation): PortPolicy {
  const total = translation.ports.reduce((sum, r) => sum + r.last - r.first + 1, 0);
  return {
    fullyRandom: translation.fullyRandom,
    ranges: translation.ports.map((r) => ({
      ports: r.first === r.last ? String(r.first) : `${r.first}-${r.last}`,
      share: (r.last - r.first + 1) / total,
    })),
  };
}

/** One address explained; throws a CidrError for text that is not an address (it or --from). */
export function explain(
  config: Config,
  options: CompileOptions,
  address: string,
  context: FlowContext = {},
): Explanation {
  return explainer(config, options)(address, context);
}

/**
 * What one decider (the node-wide config or a pod policy) needs to explain a family's addresses.
 */
interface Prepared {
  readonly judge: Judge;
  readonly translation: Translation;
  /** Built the first time an address's set step needs its origins. */
  origins(): OriginIndex;
}

/**
 * Explains address after address against one config: each decider's decision and the index of its
 * origins are worked out the first time an address needs them and kept by the function returned
 * (a --diff explains 200 000 addresses). Throws a CidrError as explain() does.
 */
export function explainer(
  config: Config,
  options: CompileOptions,
): (address: string, context?: FlowContext) => Explanation {
  // Slot 0: the node-wide config; slot 1 + i: pod policy i.
  const prepared: Array<Partial<Record<Family, Prepared>>> = [];
  const policies = config.podPolicies ?? [];
  const prepare = (decider: Config | PodPolicy, family: Family): Prepared => {
    const slot = decider === config ? 0 : 1 + policies.indexOf(decider as PodPolicy);
    const byFamily = (prepared[slot] ??= {});
    const known = byFamily[family];
    if (known) return known;
    let origins: OriginIndex | undefined;
    const decision = decisionOf(decider, familyOf(family).name, options);
    return (byFamily[family] = {
      judge: new Judge(decision),
      translation: decision.translation,
      origins: () => (origins ??= originIndex(decider, family)),
    });
  };
  return (address, context = {}) => explainOne(config, options, address, context, prepare);
}

function explainOne(
  config: Config,
  options: CompileOptions,
  address: string,
  context: FlowContext,
  prepare: (decider: Config | PodPolicy, family: Family) => Prepared,
): Explanation {
  const { family, addr } = parseAddress(address.trim());
  // A flow from a pod a pod policy selects is that policy's to decide (docs/egress-policy.md, "Pod
  // policies").
  const { decider, answer: podPolicy } = deciderOf(config, context);
  const { judge, translation, origins: indexed } = prepare(decider, family);
  const from = context.from === undefined ? undefined : parseAddress(context.from.trim());
  // A source of the other family is no flow to this destination: not judged.
  const flow: Flow = {
    daddr: addr,
    ...(from !== undefined && from.family === family ? { saddr: from.addr } : {}),
    ...(context.via !== undefined ? { oifname: context.via } : {}),
  };
  const policy = policyAnswer(decider, judge, translation, flow, from);
  const base = {
    address: address.trim(),
    family: familyOf(family).name,
    ...(policy ? { policy } : {}),
    ...(podPolicy ? { podPolicy } : {}),
  };
  const alone = { masqueraded: false, decidedBy: [], overridden: [], ports: null };
  if (family === 6 && !options.enableIPv6) return { ...base, ...alone, reason: 'not managed' };
  const { step } = judge.decide(flow);
  const text = (origin: Origin): OriginText => ({ text: describeOrigin(origin), origin });
  if (step.outcome === 'skipped' && step.key) return { ...base, ...alone, reason: step.key };
  switch (step.key) {
    case 'masqueradeCIDRs': {
      const origins = matching(indexed(), family, addr);
      const isMasq = (o: Origin) => o.kind === 'entry' && o.key === 'masqueradeCIDRs';
      return {
        ...base,
        masqueraded: true,
        reason: 'masqueradeCIDRs',
        decidedBy: origins.filter(isMasq).map(text),
        overridden: origins.filter((o) => !isMasq(o)).map(text),
        ports: portPolicy(translation),
      };
    }
    case 'nonMasqueradeCIDRs': {
      const by = matching(indexed(), family, addr).filter(
        (o) => o.kind !== 'entry' || o.key === 'nonMasqueradeCIDRs',
      );
      const first = by[0];
      const reason: Reason =
        first?.kind === 'default'
          ? 'default list'
          : first?.kind === 'link-local'
            ? 'link-local default'
            : first?.kind === 'node'
              ? 'node podCIDRs'
              : 'nonMasqueradeCIDRs';
      return { ...base, ...alone, reason, decidedBy: by.map(text) };
    }
    case undefined:
      return {
        ...base,
        masqueraded: true,
        reason: 'no match',
        decidedBy: [],
        overridden: [],
        ports: portPolicy(translation),
      };
    default:
      throw new Error(`--explain has no words for the ${step.key} step`);
  }
}

function portText(ports: PortPolicy): string {
  const random = ports.fullyRandom ? 'fully-random' : 'not fully-random';
  if (ports.ranges.length === 0) return `source port: any (${random})`;
  const shares = ports.ranges.map((r) => `${r.ports} (${Math.round(r.share * 1000) / 10} %)`);
  return `source port for tcp/udp/sctp: ${shares.join(', ')}; other protocols: any (${random})`;
}

/** The egress policy's steps as --explain words them (decision.ts, STEPS), in order. */
const POLICY_ROWS = STEPS.filter(
  (row): row is (typeof STEPS)[number] & { slot: PolicySlot; words: StepWords } =>
    row.slot !== 'destination' && row.words !== undefined,
);

/** The policy's lines under an explanation: what was judged, what is only a condition. */
function policyLines(e: Explanation): string[] {
  const lines: string[] = [];
  for (const { slot, words } of POLICY_ROWS) {
    const step = e.policy?.[slot];
    if (!step || step.matches === false) continue;
    const list = step.listed.join(', ');
    lines.push(
      step.matches === null
        ? words.condition(list)
        : words.passes(step.given ?? '', step.decidedBy?.[0], list),
    );
  }
  if (e.policy?.snat && e.masqueraded)
    lines.push(`  translated to ${e.policy.snat} (snatAddress), not the interface's address`);
  return lines;
}

/** The explanation as the lines --explain prints. */
export function explanationText(e: Explanation): string {
  const lines: string[] = [];
  const skippedBy = POLICY_ROWS.find((row) => row.key === e.reason);
  const skipped = skippedBy && e.policy?.[skippedBy.slot];
  if (skippedBy && skipped) {
    lines.push(
      skippedBy.words.leftAlone(e.address, skipped.given ?? '', skipped.listed.join(', ')),
    );
  } else if (e.reason === 'not managed') {
    lines.push(
      `${e.address}: not touched: IPv6 is off (--enable-ipv6), the agent has no ip6 table`,
    );
  } else if (!e.masqueraded) {
    lines.push(
      `${e.address}: not masqueraded, because of ${e.decidedBy[0]?.text ?? 'the non-masquerade set'}`,
    );
    for (const also of e.decidedBy.slice(1)) lines.push(`  also: ${also.text}`);
  } else {
    lines.push(
      e.reason === 'no match'
        ? `${e.address}: masqueraded: no entry exempts it`
        : `${e.address}: masqueraded, because of ${e.decidedBy[0]?.text ?? 'masqueradeCIDRs'} (masqueradeCIDRs come first)`,
    );
    for (const also of e.decidedBy.slice(1)) lines.push(`  also: ${also.text}`);
    for (const over of e.overridden) lines.push(`  overrides: ${over.text}`);
    if (e.ports) lines.push(`  ${portText(e.ports)}`);
  }
  if (e.reason !== 'not managed') lines.push(...policyLines(e));
  lines.push(...podPolicyLines(e));
  return lines.join('\n');
}

/** Which pod policy decides, and which would have but for file order. */
function podPolicyLines(e: Explanation): string[] {
  const answer = e.podPolicy;
  if (!answer) return [];
  if (!answer.judged)
    return [
      "  pod policies not judged: give the pod's labels (--pod-labels, and --namespace-labels) or --live; the node-wide config answered",
    ];
  const pod = answer.pod ? `pod ${escapeUnprintable(answer.pod)}` : 'the pod';
  if (!answer.decides)
    return [
      answer.by === 'kernel'
        ? `  no pod policy decides for ${pod} in the kernel: the node-wide config answered`
        : `  no pod policy selects ${pod}: the node-wide config answered`,
    ];
  const lines = [
    `  decided by pod policy ${escapeUnprintable(answer.decides.file)} (${answer.decides.selects})${answer.by === 'kernel' ? ', as the kernel holds it' : ''}`,
  ];
  for (const file of answer.shadowed)
    lines.push(
      `  ${escapeUnprintable(file)} also selects ${pod}, but comes later in file-name order`,
    );
  return lines;
}
