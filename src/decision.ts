// The decision for a new flow in nat postrouting (docs/egress-policy.md, "Egress policy"), held
// once, as data: the steps in order, each with what it looks at, the set of ours that holds its
// list, the config key that gives the list, and what it decides. compile.ts renders them as rules;
// explain.ts, diff.ts and the conntrack flush (reconcile/conntrack.ts) evaluate them. Destinations
// local to the node never reach these steps (the base chain's `fib daddr type != local`). Pure.
import {
  type Bound,
  type Family,
  familyOf,
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

/** A step with a list: it takes the flows whose field its list holds (`listed`) or does not. */
export interface ListStep {
  /** The interface a flow leaves through, its source, or its destination after DNAT. */
  readonly field: 'oifname' | 'saddr' | 'daddr';
  /** The config key whose entries make up the list. */
  readonly key: 'egressInterfaces' | 'sourceCIDRs' | 'masqueradeCIDRs' | 'nonMasqueradeCIDRs';
  /** Our named set that holds the list in the kernel. */
  readonly set: string;
  readonly takes: 'listed' | 'unlisted';
  /** Interface names (a trailing `*` a prefix), or the family's canonical CIDRs, merged. */
  readonly list: readonly string[];
  readonly outcome: Outcome;
}

/** The last step: every flow that comes this far. */
export interface LastStep {
  readonly field?: undefined;
  readonly key?: undefined;
  readonly outcome: 'translated';
}

export type Step = ListStep | LastStep;

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

/**
 * The steps of docs/egress-policy.md "Egress policy": leaving through an interface not in
 * egressInterfaces, or from a source not in sourceCIDRs (each while given): skipped; to
 * masqueradeCIDRs: translated; to the non-masquerade set: exempt; otherwise translated.
 */
export function stepsOf(config: Decisive, family: AddressFamily): FamilySteps {
  const egress = egressOf(config.keys);
  const steps: Step[] = [];
  if (egress?.egressInterfaces) {
    const list = egress.egressInterfaces;
    steps.push({
      field: 'oifname',
      key: 'egressInterfaces',
      set: EGRESS_INTERFACES_SET,
      list,
      takes: 'unlisted',
      outcome: 'skipped',
    });
  }
  if (egress?.sourceCIDRs) {
    const list = egress.sourceCIDRs[family];
    steps.push({
      field: 'saddr',
      key: 'sourceCIDRs',
      set: SOURCES_SET,
      list,
      takes: 'unlisted',
      outcome: 'skipped',
    });
  }
  steps.push(
    {
      field: 'daddr',
      key: 'masqueradeCIDRs',
      set: MASQ_SET,
      list: config.masquerade[family],
      takes: 'listed',
      outcome: 'translated',
    },
    {
      field: 'daddr',
      key: 'nonMasqueradeCIDRs',
      set: NONMASQ_SET,
      list: config.nonMasquerade[family],
      takes: 'listed',
      outcome: 'exempt',
    },
    { outcome: 'translated' },
  );
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
    if (step.field === 'oifname') {
      return flow.oifname === undefined ? undefined : interfaceListed(step.list, flow.oifname);
    }
    const address = step.field === 'saddr' ? flow.saddr : flow.daddr;
    return address === undefined ? undefined : inRanges(this.rangesOf(step), address);
  }

  /** The decision for a flow, step by step; a step whose field is not known is passed and noted. */
  decide(flow: Flow): Verdict {
    const unjudged: ListStep[] = [];
    for (const step of this.decision.steps) {
      if (step.field === undefined) return { outcome: step.outcome, step, unjudged };
      const holds = this.holds(step, flow);
      if (holds === undefined) {
        unjudged.push(step);
        continue;
      }
      if (holds === (step.takes === 'listed')) return { outcome: step.outcome, step, unjudged };
    }
    throw new Error('a decision ends with a step that takes every flow');
  }

  private rangesOf(step: ListStep): Range[] {
    const at = this.decision.steps.indexOf(step);
    if (at < 0) throw new Error(`the ${step.key} step is not one of this decision's`);
    return (this.ranges[at] ??= setRanges(step.list, this.decision.family));
  }
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
