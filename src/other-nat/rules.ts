// Other tables' nat postrouting rules, as nft prints them (docs/observability.md, "Other NAT on the
// node"): which of them a flow may reach, and whether their own matches show that they translate
// it. The matches read are the common shapes — source and destination addresses and prefixes,
// interfaces, protocol, packet and conntrack marks, the connection's destination translated (`ct
// status dnat`) — each judged true, false or unknown for a flow;
// anything else is unknown, so a rule with it "may" translate. A mark or address set on the way is
// carried to the rules after it; a verdict map may send the flow to any chain its elements name
// (the kernel's elements, or an anonymous map's text), never for certain. Named sets are not looked
// into. Pure.
import { PROTOCOL_NUMBERS, protocolNumber } from '../protocols.js';
import {
  familyOf,
  inRanges,
  parseAddress,
  parseCidr,
  prefixRange,
  type Range,
} from '../cidr/index.js';
import { interfaceListed } from '../decision.js';
import type { ChainRules, ListedRule } from '../nftables/types.js';

export { parseRuleListing as parseListing } from '../nftables/listing.js';
export type { ChainRules, ListedRule };

/** A flow as far as it is known. A mark is known to be 0 where nothing says otherwise. */
export interface NatFlow {
  readonly family?: 4 | 6;
  readonly saddr?: bigint;
  readonly daddr?: bigint;
  readonly oifname?: string;
  /** IP protocol number. */
  readonly protocol?: number;
  /** The packet's mark: 0 for pod traffic nobody marked. */
  readonly mark?: number;
  /** The conntrack entry's mark: 0 where nobody marked it. */
  readonly ctMark?: number;
  /**
   * Whether something translated the connection's destination (a Service's DNAT): false for a flow
   * sent to its address as it is.
   */
  readonly dnat?: boolean;
}

/**
 * What a flow's packet starts a chain with when nothing is known but that nobody marked it or
 * redirected it.
 */
const UNTOUCHED = { mark: 0, ctMark: 0, dnat: false } as const;

/** The fields a rule's statement may set for the rules after it. */
type SetField = 'mark' | 'ctMark' | 'saddr' | 'daddr';

/** Whether a match holds for a flow: `undefined` when the flow or this reading cannot tell. */
type Truth = boolean | undefined;

/** A rule read into its matches (in order) and what it does. */
export interface ReadRule {
  readonly matches: ReadonlyArray<(flow: NatFlow) => Truth>;
  /** masquerade, snat (or an x_tables target printed as one). */
  readonly translates: boolean;
  /**
   * A verdict ending the chain for the flows it takes (`return`), or every chain (`accept`,
   * `drop`).
   */
  readonly verdict?: 'return' | 'accept' | 'drop';
  /** `jump`/`goto` targets. */
  readonly jump?: { readonly kind: 'jump' | 'goto'; readonly chain: string };
  /** Chains a verdict map in it may send the flow to (an anonymous map's, from its text). */
  readonly branches?: readonly string[];
  /** It looks a verdict up in a map (`vmap`). */
  readonly vmap?: boolean;
  /** Fields its statements set, with the value where it is a constant. */
  readonly sets?: ReadonlyArray<{ readonly field: SetField; readonly value?: number }>;
}

/** Splits a rule's text into words, quoted strings and `{ … }` groups. */
export function tokens(text: string): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === ' ' || c === '\t') {
      i++;
      continue;
    }
    let end = i;
    if (c === '"') {
      end = i + 1;
      while (end < text.length && text[end] !== '"') end++; // nft prints strings unescaped
      end++;
    } else if (c === '{') {
      let depth = 0;
      for (; end < text.length; end++) {
        if (text[end] === '{') depth++;
        else if (text[end] === '}' && --depth === 0) break;
      }
      end++;
    } else {
      while (end < text.length && text[end] !== ' ' && text[end] !== '\t') end++;
    }
    out.push(text.slice(i, Math.min(end, text.length)));
    i = end;
  }
  return out;
}

/** The items of a `{ a, b }` group, or the value itself. */
function items(value: string): string[] {
  if (!value.startsWith('{')) return [value];
  return value
    .slice(1, -1)
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);
}

/**
 * The address ranges a value names (an address, a prefix, a range, a group of them), or undefined.
 */
function addressRanges(value: string): Range[] | undefined {
  const ranges: Range[] = [];
  for (const item of items(value)) {
    try {
      const dash = /^([^-\s]+)-([^-\s]+)$/.exec(item);
      if (dash) {
        ranges.push([parseAddress(dash[1]!).addr, parseAddress(dash[2]!).addr]);
      } else if (item.includes('/')) {
        ranges.push(prefixRange(parseCidr(item)));
      } else {
        const { addr } = parseAddress(item);
        ranges.push([addr, addr]);
      }
    } catch {
      return undefined;
    }
  }
  return ranges;
}

function number(text: string): number | undefined {
  if (/^0x[0-9a-f]+$/i.test(text) || /^\d+$/.test(text)) return Number(text);
  return undefined;
}

/** `==` or `!=` applied to whether the value holds, unknown staying unknown. */
const applying = (negated: boolean, holds: Truth): Truth =>
  holds === undefined ? undefined : negated ? !holds : holds;

const unknown = (): Truth => undefined;

/**
 * A `ct status` match of `flags` in `form` for a connection whose destination was (`dnat`) or was
 * not translated; any other flag is not known.
 */
function statusHolds(
  form: 'any' | 'none' | 'all' | undefined,
  flags: readonly string[],
  dnat: boolean | undefined,
): Truth {
  if (form === undefined || dnat === undefined || !flags.includes('dnat')) return undefined;
  const only = flags.length === 1;
  if (form === 'any') return dnat ? true : only ? false : undefined;
  if (form === 'none') return dnat ? false : only ? true : undefined;
  return dnat ? (only ? true : undefined) : false;
}

/** Words that start a statement or verdict: where a `… set VALUE` statement's value ends. */
const STATEMENT_WORDS = new Set([
  'counter',
  'comment',
  'log',
  'masquerade',
  'snat',
  'jump',
  'goto',
  'return',
  'accept',
  'drop',
  'continue',
  'xt',
]);
/** Whether a set statement's value ends before word `i`: a statement, a verdict, or another set. */
const endsValue = (words: readonly string[], i: number) =>
  STATEMENT_WORDS.has(words[i]!) || words[i + 2] === 'set';
const LOG_OPTIONS = new Set(['prefix', 'level', 'flags', 'group', 'snaplen', 'queue-threshold']);
/** x_tables targets that rewrite the source address (native/netlink.cc reads the same). */
const XT_TRANSLATING = new Set(['MASQUERADE', 'SNAT', 'NETMAP']);

/** A rule being read: its words, where the reading is, and what it has read so far. */
class RuleReading {
  i = 0;
  readonly matches: Array<(flow: NatFlow) => Truth> = [];
  readonly sets: Array<{ field: SetField; value?: number }> = [];
  readonly branches: string[] = [];
  translates = false;
  vmap = false;
  verdict: ReadRule['verdict'];
  jump: ReadRule['jump'];

  constructor(readonly words: readonly string[]) {}

  /** The word `ahead` words past the reading's place. */
  word(ahead = 0): string | undefined {
    return this.words[this.i + ahead];
  }

  /** An operator, if one comes next: `!=` negates, `==` is the default; any other is unknown. */
  operator(): 'eq' | 'ne' | 'other' {
    const op = this.word();
    if (op === '!=' || op === '==') {
      this.i++;
      return op === '!=' ? 'ne' : 'eq';
    }
    if (op === '<' || op === '>' || op === '<=' || op === '>=') {
      this.i++;
      return 'other';
    }
    return 'eq';
  }

  /** A match's value; a verdict map's `vmap` is not one (its key is matched by the elements). */
  take(): string {
    return this.word() === 'vmap' ? '' : (this.words[this.i++] ?? '');
  }

  /** Past a `… set VALUE` statement's value. */
  skipValue(): void {
    while (this.i < this.words.length && !endsValue(this.words, this.i)) this.i++;
  }
}

/**
 * One shape of match or statement: whether the words at the reading's place (`word`, `next`,
 * `after`) start it, and how it is read (the reading moved past it). `last`: nothing after it is
 * read (a translating statement's arguments are its own).
 */
interface ShapeReader {
  readonly starts: (word: string, next: string | undefined, after: string | undefined) => boolean;
  readonly read: (r: RuleReading) => void;
  readonly last?: true;
}

const isFamily = (word: string) => word === 'ip' || word === 'ip6';
const isAddress = (word: string | undefined) => word === 'saddr' || word === 'daddr';
const isMark = (word: string, next: string | undefined) =>
  (word === 'meta' || word === 'ct') && next === 'mark';

/** The shapes readRule knows, tried in order; any other word is a match it cannot judge. */
const SHAPES: readonly ShapeReader[] = [
  {
    // An address rewritten for the rules after this one: not known any more.
    starts: (word, next, after) => isFamily(word) && isAddress(next) && after === 'set',
    read: (r) => {
      r.sets.push({ field: r.word(1) as SetField });
      r.i += 3;
      r.skipValue();
    },
  },
  {
    starts: (word, next) => isFamily(word) && isAddress(next),
    read: (r) => {
      const family = familyOf(r.word() as 'ip' | 'ip6').number;
      const field = r.word(1) as 'saddr' | 'daddr';
      r.i += 2;
      const op = r.operator();
      const value = r.take();
      const ranges = op === 'other' ? undefined : addressRanges(value);
      r.matches.push((flow) => {
        if (flow.family !== undefined && flow.family !== family) return false;
        const address = flow[field];
        if (!ranges || address === undefined || flow.family === undefined) return undefined;
        return applying(op === 'ne', inRanges(ranges, address));
      });
    },
  },
  {
    // Read as the bare keyword below.
    starts: (word, next) =>
      word === 'meta' && (next === 'oifname' || next === 'iifname' || next === 'l4proto'),
    read: (r) => r.i++,
  },
  {
    starts: (word) => word === 'oifname',
    read: (r) => {
      r.i++;
      const op = r.operator();
      const names = items(r.take()).map((name) => name.replace(/^"|"$/g, ''));
      r.matches.push((flow) =>
        op === 'other' || flow.oifname === undefined
          ? undefined
          : applying(
              op === 'ne',
              names.some((name) => interfaceListed([name], flow.oifname!)),
            ),
      );
    },
  },
  {
    starts: (word, next) => word === 'l4proto' || (word === 'ip' && next === 'protocol'),
    read: (r) => {
      r.i += r.word() === 'ip' ? 2 : 1;
      const op = r.operator();
      const wanted = items(r.take()).map(protocolNumber);
      const known = op !== 'other' && wanted.every((p) => p !== undefined);
      r.matches.push((flow) =>
        !known || flow.protocol === undefined
          ? undefined
          : applying(op === 'ne', wanted.includes(flow.protocol)),
      );
    },
  },
  {
    // The port is not known; the protocol is.
    starts: (word, next) =>
      (word === 'tcp' || word === 'udp' || word === 'sctp') &&
      (next === 'dport' || next === 'sport'),
    read: (r) => {
      const protocol = PROTOCOL_NUMBERS[r.word()!]!;
      r.i += 2;
      r.operator();
      r.take();
      r.matches.push((flow) =>
        flow.protocol !== undefined && flow.protocol !== protocol ? false : undefined,
      );
    },
  },
  {
    starts: (word, next, after) => isMark(word, next) && after !== 'set',
    read: (r) => {
      const field = r.word() === 'ct' ? 'ctMark' : 'mark';
      r.i += 2;
      let mask = 0xffffffff;
      if (r.word() === '&') {
        const m = number(r.word(1) ?? '');
        r.i += 2;
        if (m === undefined) {
          r.matches.push(unknown);
          return;
        }
        mask = m;
      }
      const op = r.operator();
      const value = number(r.take());
      r.matches.push((flow) => {
        const mark = flow[field];
        return op === 'other' || value === undefined || mark === undefined
          ? undefined
          : applying(op === 'ne', (mark & mask) >>> 0 === value);
      });
    },
  },
  {
    // `ct status FLAGS` (any of them), `ct status ! FLAGS` (none), `ct status & FLAGS == FLAGS`
    // (all), as nft prints them; of the flags only `dnat` is known (where the flow says).
    starts: (word, next) => word === 'ct' && next === 'status',
    read: (r) => {
      r.i += 2;
      let form: 'any' | 'none' | 'all' | undefined = 'any';
      if (r.word() === '!') {
        form = 'none';
        r.i++;
      } else if (r.word() === '&' && r.word(2) === '==' && r.word(1) === r.word(3)) {
        form = 'all';
        r.i += 3;
      } else if (r.word() === '&' || r.word() === '==' || r.word() === '!=') {
        form = undefined;
        r.i += r.word() === '&' ? 2 : 1;
        r.operator();
      }
      const flags = r.take().split(',');
      r.matches.push((flow) => statusHolds(form, flags, flow.dnat));
    },
  },
  {
    starts: (word, next) => word === 'meta' && next === 'nfproto',
    read: (r) => {
      r.i += 2;
      const op = r.operator();
      const value = r.take();
      const family = value === 'ipv4' ? 4 : value === 'ipv6' ? 6 : undefined;
      r.matches.push((flow) =>
        op === 'other' || family === undefined || flow.family === undefined
          ? undefined
          : applying(op === 'ne', flow.family === family),
      );
    },
  },
  {
    // A mark set for the rules after this one: its value where a constant, else unknown.
    starts: (word, next, after) => isMark(word, next) && after === 'set',
    read: (r) => {
      const field = r.word() === 'ct' ? 'ctMark' : 'mark';
      r.i += 3;
      const start = r.i;
      r.skipValue();
      const value = r.i === start + 1 ? number(r.words[start]!) : undefined;
      r.sets.push({ field, ...(value !== undefined ? { value } : {}) });
    },
  },
  {
    // `KEY vmap { ELEMENT : VERDICT, … }` or `KEY vmap @NAME`: the key was left unjudged before.
    starts: (word) => word === 'vmap',
    read: (r) => {
      const map = r.word(1) ?? '';
      r.i += 2;
      r.vmap = true;
      for (const item of map.startsWith('{') ? items(map) : []) {
        const target = /:\s*(?:jump|goto)\s+("[^"]*"|\S+)$/.exec(item);
        if (target) r.branches.push(target[1]!.replace(/^"|"$/g, ''));
      }
    },
  },
  {
    starts: (word) => word === 'log',
    read: (r) => {
      r.i++;
      while (LOG_OPTIONS.has(r.word() ?? '')) r.i += 2;
    },
  },
  { starts: (word) => word === 'continue', read: (r) => r.i++ },
  {
    // An x_tables target nft could not print as its own syntax (iptables-nft) that translates.
    starts: (word, next, after) =>
      word === 'xt' && next === 'target' && XT_TRANSLATING.has(unquoted(after)),
    read: (r) => {
      r.translates = true;
      r.i += 3;
    },
    last: true,
  },
  {
    // Any other x_tables extension; a comment judges nothing.
    starts: (word, next) => word === 'xt' && (next === 'match' || next === 'target'),
    read: (r) => {
      if (r.word(1) === 'match' && unquoted(r.word(2)) !== 'comment') r.matches.push(unknown);
      r.i += 3;
    },
  },
  {
    starts: (word) => word === 'counter',
    read: (r) => {
      r.i++;
      if (r.word() === 'name') r.i += 2;
      else if (r.word() === 'packets') r.i += 4;
    },
  },
  { starts: (word) => word === 'comment', read: (r) => (r.i += 2) },
  {
    starts: (word) => word === 'masquerade' || word === 'snat',
    read: (r) => {
      r.translates = true;
      r.i++;
    },
    last: true,
  },
  {
    starts: (word) => word === 'return' || word === 'accept' || word === 'drop',
    read: (r) => {
      r.verdict = r.word() as 'return' | 'accept' | 'drop';
      r.i++;
    },
  },
  {
    starts: (word, next) => (word === 'jump' || word === 'goto') && next !== undefined,
    read: (r) => {
      r.jump = { kind: r.word() as 'jump' | 'goto', chain: unquoted(r.word(1)) };
      r.i += 2;
    },
  },
];

const unquoted = (word: string | undefined) => (word ?? '').replace(/^"|"$/g, '');

/**
 * Reads a rule as nft prints it, shape by shape (SHAPES). Words it does not know become matches it
 * cannot judge, so the rule's result for any flow is at best unknown: never a guess.
 */
export function readRule(text: string): ReadRule {
  const r = new RuleReading(tokens(text));
  while (r.i < r.words.length) {
    const shape = SHAPES.find((s) => s.starts(r.word()!, r.word(1), r.word(2)));
    if (!shape) {
      r.matches.push(unknown);
      r.i++;
      continue;
    }
    shape.read(r);
    if (shape.last) break;
  }
  const { matches, translates, verdict, jump, vmap, branches, sets } = r;
  return {
    matches,
    translates,
    ...(verdict ? { verdict } : {}),
    ...(jump ? { jump } : {}),
    ...(vmap ? { vmap, branches } : {}),
    ...(sets.length > 0 ? { sets } : {}),
  };
}

/**
 * All of a rule's matches for a flow: false if one is false, unknown if one is unknown, else true.
 */
export function ruleHolds(rule: ReadRule, flow: NatFlow): Truth {
  let result: Truth = true;
  for (const match of rule.matches) {
    const holds = match(flow);
    if (holds === false) return false;
    if (holds === undefined) result = undefined;
  }
  return result;
}

/** A translating rule a flow may reach: `certain` when every match on its way is known to hold. */
export interface Reached {
  readonly rule: ListedRule;
  readonly certain: boolean;
}

/** Where two ways into the same rule differ, the field is not known. */
function merged(a: NatFlow, b: NatFlow): NatFlow {
  const out: { -readonly [K in keyof NatFlow]: NatFlow[K] } = { ...a };
  for (const field of ['mark', 'ctMark', 'saddr', 'daddr'] as const)
    if (a[field] !== b[field]) delete out[field];
  return out;
}

/** The flow after a rule's set statements: their value where it surely ran, else not known. */
function afterSets(read: ReadRule, flow: NatFlow, sure: boolean): NatFlow {
  if (!read.sets) return flow;
  const out: { -readonly [K in keyof NatFlow]: NatFlow[K] } = { ...flow };
  for (const { field, value } of read.sets) {
    if (field === 'saddr' || field === 'daddr' || value === undefined || !sure) delete out[field];
    else out[field] = value;
  }
  return sure ? out : merged(flow, out);
}

/**
 * The translating rules a flow may reach from a base chain, jumps, gotos and verdict maps followed:
 * evaluation stops at a rule known to translate it, or at a verdict known to end it; a rule that
 * may or may not take the flow is passed, noted as uncertain. A mark or address a rule sets is what
 * the rules after it see (not known where the rule may not have run).
 */
export function reachedRules(chains: ChainRules, base: string, flow: NatFlow): Reached[] {
  const found: Reached[] = [];
  const read = new Map<string, ReadRule>();
  const readOf = (rule: ListedRule) => {
    const key = `${rule.chain}\u0000${rule.handle}`;
    let value = read.get(key);
    if (!value) {
      value = readRule(rule.text);
      if (rule.translates && !value.translates)
        value = { ...value, translates: true, matches: [...value.matches, unknown] };
      if (rule.branches?.length)
        value = { ...value, branches: [...new Set([...(value.branches ?? []), ...rule.branches])] };
      read.set(key, value);
    }
    return value;
  };
  // How evaluation goes on after the chain — 'ended' when a verdict or translation is known to have
  // taken the flow, 'returned' when it comes back to the caller — and the flow as it comes back.
  type After = { readonly end: 'ended' | 'returned'; readonly flow: NatFlow };
  const walk = (chain: string, certain: boolean, path: Set<string>, entered: NatFlow): After => {
    if (path.has(chain)) return { end: 'returned', flow: entered }; // the kernel refuses loops
    const inner = new Set(path).add(chain);
    let flow = entered;
    for (const rule of chains.get(chain) ?? []) {
      const read = readOf(rule);
      const holds = ruleHolds(read, flow);
      if (holds === false) continue;
      const sure = certain && holds === true;
      flow = afterSets(read, flow, holds === true);
      if (read.translates) {
        found.push({ rule, certain: sure });
        if (sure) return { end: 'ended', flow };
        continue;
      }
      for (const branch of read.branches ?? []) {
        // A map's element may or may not match: never a sure way.
        const after = walk(branch, false, inner, flow);
        flow = merged(flow, after.flow);
      }
      if (read.vmap) continue; // the map's verdict, when an element matched, is its own
      if (read.jump) {
        const after = walk(read.jump.chain, sure, inner, flow);
        if (sure && (after.end === 'ended' || read.jump.kind === 'goto'))
          return { end: 'ended', flow: after.flow };
        flow = holds === true && after.end === 'returned' ? after.flow : merged(flow, after.flow);
        continue;
      }
      if (read.verdict && sure)
        return read.verdict === 'return' ? { end: 'returned', flow } : { end: 'ended', flow };
    }
    return { end: 'returned', flow };
  };
  walk(base, true, new Set(), flow);
  return found;
}

/**
 * The translating rules that unmarked traffic may reach: those to report. A rule only marked
 * packets reach — a mark match in it or on its way, or an earlier rule returning every unmarked
 * packet (kube-proxy's shape) — is how other components translate what they marked themselves.
 */
export function unmarkedTranslations(chains: ChainRules, base: string): ListedRule[] {
  return reachedRules(chains, base, UNTOUCHED).map((reached) => reached.rule);
}

/** What a reported chain does to one flow we leave alone. */
export type OtherNatVerdict = 'translates' | 'may translate';

/** Whether any of the chain's reported rules translates the flow, may, or (undefined) cannot. */
export function verdictFor(
  chains: ChainRules,
  base: string,
  flow: NatFlow,
): { verdict: OtherNatVerdict; rule: ListedRule } | undefined {
  const reached = reachedRules(chains, base, { ...UNTOUCHED, ...flow });
  const sure = reached.find((r) => r.certain);
  if (sure) return { verdict: 'translates', rule: sure.rule };
  return reached[0] ? { verdict: 'may translate', rule: reached[0].rule } : undefined;
}
