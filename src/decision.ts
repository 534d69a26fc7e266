// The decision for a new flow in nat postrouting (docs/egress-policy.md, "Egress policy"), held
// once, as data: the steps in order, each with what it looks at, the set of ours that holds its
// list, the config key that gives the list, and what it decides. compile.ts renders them as rules;
// explain.ts, diff.ts and the conntrack flush (reconcile/conntrack.ts) evaluate them. Destinations
// local to the node never reach these steps (the base chain's `fib daddr type != local`). Pure.
import {
  type Bound,
  escapeUnprintable,
  type Family,
  familyOf,
  formatAddress,
  inRanges,
  ipv4Number,
  normalise,
  parseCidr,
  prefixRange,
  type Range,
  subtract,
} from './cidr/index.js';
import { egressOf } from './config/build.js';
import type { AddressFamily, Config, SnatRange } from './config/types.js';
import { EGRESS_INTERFACES_SET, MASQ_SET, NONMASQ_SET, SOURCES_SET } from './nftables/objects.js';

/** What a step decides for the flows it takes; the others go on to the next step. */
export type Outcome = 'skipped' | 'exempt' | 'translated';

/** What a step looks at: the interface a flow leaves through, its source, or its destination after DNAT. */
export type StepField = 'oifname' | 'saddr' | 'daddr';

/**
 * Where the flush's native judge (native/conntrack.h) takes a step: the interface or source list
 * of its policy (FlowPolicy's slot of that name, reconcile/conntrack.ts), or the destination ranges
 * (exemptRanges). It evaluates them in this order.
 */
export const JUDGED_ORDER = ['interfaces', 'sources', 'destination'] as const;
export type JudgedSlot = (typeof JUDGED_ORDER)[number];
/** The egress policy's slots: where --explain answers a policy step, and the flush's FlowPolicy. */
export type PolicySlot = Exclude<JudgedSlot, 'destination'>;

/** How --explain words a policy step (explain.ts): `list` the step's list as text. */
export interface StepWords {
  /** The flow's value as given (--via, --from), for the answer; null: not given. */
  readonly given: (flow: Flow, from?: { family: 4 | 6; addr: bigint }) => string | null;
  /** The first line when the step left the flow alone. */
  readonly leftAlone: (address: string, given: string, list: string) => string;
  /** A line under the answer: the flow passes the step (`by`: the entry that lists it). */
  readonly passes: (given: string, by: string | undefined, list: string) => string;
  /** A line under the answer: the flow did not say the field, so the step is a condition. */
  readonly condition: (list: string) => string;
}

/**
 * One row of the decision's step table (STEPS): what a step looks at, which config key gives its
 * list and which set of ours holds it, what it takes and decides, where the flush's native judge
 * takes it, and how --explain words it. compile, explain, --live, the flush and the native judge
 * read a step through its row; a new step is a new row (docs/design.md, "Adding a decision step").
 */
export interface StepRow {
  readonly field: StepField;
  /** The config key whose entries make up the list. */
  readonly key: 'egressInterfaces' | 'sourceCIDRs' | 'masqueradeCIDRs' | 'nonMasqueradeCIDRs';
  /** Our named set that holds the list in the kernel. */
  readonly set: string;
  /** Its set's place among the table's declarations (README, "Reading `nft list table ip ipmasq`"). */
  readonly declared: number;
  readonly takes: 'listed' | 'unlisted';
  readonly outcome: Outcome;
  readonly slot: JudgedSlot;
  /** For the egress policy's steps, which --explain answers in PolicyAnswer's `slot`. */
  readonly words?: StepWords;
}

/** A step with a list: it takes the flows whose field its list holds (`listed`) or does not. */
export interface ListStep extends StepRow {
  /** Interface names (a trailing `*` a prefix), or the family's canonical CIDRs, merged. */
  readonly list: readonly string[];
}

/** The last step: every flow that comes this far. */
export interface LastStep {
  readonly field?: undefined;
  readonly key?: undefined;
  readonly outcome: 'translated';
}

export type Step = ListStep | LastStep;

/** What a field is to the steps on it: the flow's value, and what a set on it holds. */
export const FIELDS: {
  readonly [F in StepField]: {
    readonly of: (flow: Flow) => string | bigint | undefined;
    /** Interface names (an interval set, a trailing `*` a prefix), or the family's addresses. */
    readonly elements: 'names' | 'addresses';
  };
} = {
  oifname: { of: (flow) => flow.oifname, elements: 'names' },
  saddr: { of: (flow) => flow.saddr, elements: 'addresses' },
  daddr: { of: (flow) => flow.daddr, elements: 'addresses' },
};

/**
 * The steps of docs/egress-policy.md "Egress policy", in order, each with how a decider gives its
 * list for a family (undefined: no such step in this decider): leaving through an interface not in
 * egressInterfaces, or from a source not in sourceCIDRs (each while given): skipped; to
 * masqueradeCIDRs: translated; to the non-masquerade set: exempt. Every flow that passes them all
 * is translated (the last step).
 */
export const STEPS: ReadonlyArray<
  StepRow & {
    readonly listOf: (config: Decisive, family: AddressFamily) => readonly string[] | undefined;
  }
> = [
  {
    field: 'oifname',
    key: 'egressInterfaces',
    set: EGRESS_INTERFACES_SET,
    declared: 2,
    takes: 'unlisted',
    outcome: 'skipped',
    slot: 'interfaces',
    listOf: (config) => egressOf(config.keys)?.egressInterfaces,
    words: {
      given: (flow) => flow.oifname ?? null,
      leftAlone: (address, given, list) =>
        `${address}: not touched: it leaves through ${escapeUnprintable(given)}, which egressInterfaces (${list}) does not list`,
      passes: (given, by, list) =>
        `  leaves through ${escapeUnprintable(given)}: listed, because of ${by ?? `egressInterfaces (${list})`}`,
      condition: (list) =>
        `  only traffic leaving through ${list} is considered (give --via to judge an interface)`,
    },
  },
  {
    field: 'saddr',
    key: 'sourceCIDRs',
    set: SOURCES_SET,
    declared: 3,
    takes: 'unlisted',
    outcome: 'skipped',
    slot: 'sources',
    listOf: (config, family) => egressOf(config.keys)?.sourceCIDRs?.[family],
    words: {
      given: (_flow, from) => (from ? formatAddress(from.family, from.addr) : null),
      leftAlone: (address, given, list) =>
        `${address}: not touched: its source ${given} is not in sourceCIDRs (${list || 'none of this family'})`,
      passes: (given, by, list) => `  from ${given}: in sourceCIDRs, because of ${by ?? list}`,
      condition: (list) =>
        `  only traffic from ${list || 'no source of this family'} is considered (give --from to judge a source)`,
    },
  },
  {
    field: 'daddr',
    key: 'masqueradeCIDRs',
    set: MASQ_SET,
    declared: 1,
    takes: 'listed',
    outcome: 'translated',
    slot: 'destination',
    listOf: (config, family) => config.masquerade[family],
  },
  {
    field: 'daddr',
    key: 'nonMasqueradeCIDRs',
    set: NONMASQ_SET,
    declared: 0,
    takes: 'listed',
    outcome: 'exempt',
    slot: 'destination',
    listOf: (config, family) => config.nonMasquerade[family],
  },
];

/** A range of source ports (--to-ports). */
export interface PortRange {
  readonly first: number;
  readonly last: number;
}

/** What the flags say of every translation: --random-fully, --to-ports. */
export interface TranslationFlags {
  readonly randomFully: boolean;
  readonly toPorts: readonly PortRange[];
}

/**
 * What `translated` does to a flow: masqueraded to the interface's address or translated to the
 * family's snatAddress, with which source ports. compile.ts renders it, explain.ts explains it.
 */
export interface Translation {
  /** snatAddress(IPv6): translated to it; absent: masqueraded to the interface's address. */
  readonly snat?: SnatRange;
  /** tcp, udp and sctp take a port of one of these, each in proportion to its size; empty: any. */
  readonly ports: readonly PortRange[];
  readonly fullyRandom: boolean;
}

/** One family's steps in order. */
export interface FamilySteps {
  readonly family: AddressFamily;
  readonly steps: readonly Step[];
}

/** One family's decision: its steps in order, and what `translated` translates to. */
export interface Decision extends FamilySteps {
  readonly translation: Translation;
}

/**
 * What a decision reads of a config (or a pod policy): the steps' lists, and every key (the egress
 * policy's among them).
 */
export type Decisive = Pick<Config, 'nonMasquerade' | 'masquerade' | 'keys'>;

/** A decider's steps for a family: each row of STEPS that it gives a list for, then the last. */
export function stepsOf(config: Decisive, family: AddressFamily): FamilySteps {
  const steps: Step[] = [];
  for (const { listOf, ...row } of STEPS) {
    const list = listOf(config, family);
    if (list !== undefined) steps.push(Object.freeze({ ...row, list }));
  }
  steps.push({ outcome: 'translated' });
  return Object.freeze({ family, steps: Object.freeze(steps) });
}

/** The family's decision: its steps, and its translation as the config and the flags give it. */
export function decisionOf(
  config: Decisive,
  family: AddressFamily,
  flags: TranslationFlags,
): Decision {
  const snat = egressOf(config.keys)?.snat?.[family];
  const translation: Translation = Object.freeze({
    ...(snat ? { snat } : {}),
    ports: flags.toPorts,
    fullyRandom: flags.randomFully,
  });
  return Object.freeze({ ...stepsOf(config, family), translation });
}

/** Whether an interface name is in an interface list: a name, or a prefix ending in `*`. */
export function interfaceListed(list: readonly string[], name: string): boolean {
  return list.some((entry) =>
    entry.endsWith('*') ? name.startsWith(entry.slice(0, -1)) : name === entry,
  );
}

/** A flow as far as it is known: the destination always, the source and interface when given. */
export interface Flow {
  readonly daddr: bigint;
  readonly saddr?: bigint;
  readonly oifname?: string;
}

/**
 * Where a flow ends: the outcome, the step that decided it, and the steps it could not be judged
 * by.
 */
export interface Verdict {
  readonly outcome: Outcome;
  readonly step: Step;
  /** Steps whose field the flow did not say (no --via or --from): passed, as a condition. */
  readonly unjudged: readonly ListStep[];
}

/**
 * A decision that judges flows one after another: each address step's list is worked out as ranges
 * the first time a flow needs it and kept here, however many flows follow (a --diff judges 200
 * 000).
 */
export class Judge {
  private readonly ranges: Array<Range[] | undefined>;

  constructor(readonly decision: FamilySteps) {
    this.ranges = decision.steps.map(() => undefined);
  }

  /** Whether a step's list holds the flow's field; undefined when the flow does not say it. */
  holds(step: ListStep, flow: Flow): boolean | undefined {
    const value = FIELDS[step.field].of(flow);
    if (value === undefined) return undefined;
    return typeof value === 'string'
      ? interfaceListed(step.list, value)
      : inRanges(this.rangesOf(step), value);
  }

  /** Whether one entry of a step's list (canonical, as the list has it) holds the flow's field. */
  entryHolds(step: ListStep, entry: string, flow: Flow): boolean {
    const value = FIELDS[step.field].of(flow);
    if (value === undefined) return false;
    return typeof value === 'string'
      ? interfaceListed([entry], value)
      : inRanges(setRanges([entry], this.decision.family), value);
  }

  /** The decision for a flow, step by step; a step whose field is not known is passed and noted. */
  decide(flow: Flow): Verdict {
    return walkSteps(this.decision, (step) => this.holds(step, flow));
  }

  private rangesOf(step: ListStep): Range[] {
    const at = this.decision.steps.indexOf(step);
    if (at < 0) throw new Error(`the ${step.key} step is not one of this decision's`);
    return (this.ranges[at] ??= setRanges(step.list, this.decision.family));
  }
}

/**
 * The walk of a decision's steps for one flow, the same for every judge: `holds` says whether a
 * step's list holds the flow's field (undefined: the flow does not say it, so the step is passed as
 * a condition and noted). Judge answers from the lists, decideBy from what it is given.
 */
function walkSteps(decision: FamilySteps, holds: (step: ListStep) => boolean | undefined): Verdict {
  const unjudged: ListStep[] = [];
  for (const step of decision.steps) {
    if (step.field === undefined) return { outcome: step.outcome, step, unjudged };
    const held = holds(step);
    if (held === undefined) unjudged.push(step);
    else if (held === (step.takes === 'listed')) return { outcome: step.outcome, step, unjudged };
  }
  throw new Error('a decision ends with a step that takes every flow');
}

/**
 * The decision for a flow with each step's list asked by `holds` (--live: the kernel's sets), every
 * list step asked in order before the walk.
 */
export async function decideBy(
  decision: FamilySteps,
  flow: Flow,
  holds: (step: ListStep, flow: Flow) => Promise<boolean | undefined>,
): Promise<Verdict> {
  const answers = new Map<Step, boolean | undefined>();
  for (const step of decision.steps)
    if (step.field !== undefined) answers.set(step, await holds(step, flow));
  return walkSteps(decision, (step) => answers.get(step));
}

/** An IPv4 CIDR as a number range: no bigint for the largest lists a config has. */
function v4Range(cidr: string): Range<number> {
  const prefix = parseCidr(cidr);
  const first = ipv4Number(prefix);
  return [first, first + 2 ** (32 - prefix.len) - 1];
}

const v6Range = (cidr: string): Range => prefixRange(parseCidr(cidr));
const toBig = (r: readonly Range<number>[]): Range[] => r.map(([a, b]) => [BigInt(a), BigInt(b)]);

/** A list of canonical CIDRs as ranges in normal form. */
export function setRanges(cidrs: readonly string[], family: AddressFamily): Range[] {
  return family === 'ipv4' ? toBig(normalise(cidrs.map(v4Range))) : normalise(cidrs.map(v6Range));
}

/**
 * The destinations the decision's destination steps leave alone, for a flow its other steps let
 * through: each step takes what it lists of what the steps before it did not take (masqueradeCIDRs
 * before the non-masquerade set). IPv4 as numbers: exact, and fast at 100 000 CIDRs.
 */
export function exemptRanges(decision: FamilySteps): Range[] {
  const walk = <T extends Bound>(parse: (cidr: string) => Range<T>): Range<T>[] => {
    let taken: Range<T>[] = [];
    let exempt: Range<T>[] = [];
    for (const step of decision.steps) {
      if (step.field !== 'daddr') continue;
      const listed = normalise(step.list.map(parse));
      const takes = taken.length === 0 ? listed : subtract(listed, taken);
      if (step.outcome === 'exempt')
        exempt = exempt.length === 0 ? takes : normalise([...exempt, ...takes]);
      taken = taken.length === 0 ? listed : normalise([...taken, ...listed]);
    }
    return exempt;
  };
  return decision.family === 'ipv4' ? toBig(walk(v4Range)) : walk(v6Range);
}

/**
 * Per family: destinations exempt before and translated after (`lost`), and the reverse (`gained`).
 */
export function flippedRanges(
  before: Decisive,
  after: Decisive,
  which: readonly AddressFamily[],
): Array<{ family: Family; lost: Range[]; gained: Range[] }> {
  return which.map((family) => {
    const was = exemptRanges(stepsOf(before, family));
    const will = exemptRanges(stepsOf(after, family));
    return {
      family: familyOf(family).number,
      lost: subtract(was, will),
      gained: subtract(will, was),
    };
  });
}
