// --explain --live (docs/explain.md, "Explain, diff, check"): what our tables in the kernel decide
// for each address, the drift between them and the config, and who else on the node may translate
// it.
import { formatAddress, parseAddress, familyOf } from '../cidr/index.js';
import type { CompileOptions } from '../compile.js';
import {
  decideBy,
  FIELDS,
  STEPS,
  stepsOf,
  type Flow,
  type ListStep,
  type Outcome,
} from '../decision.js';
import type { Table } from '../nftables/types.js';
import { objectDrift } from '../nftables/listing.js';
import { oursOrStandIn, tableOwner } from '../nftables/ownership.js';
import { POD_POLICY_MAP, podPolicyChainIndex, podPolicyPrefix } from '../nftables/objects.js';
import { scanNatChains } from '../other-nat/chains.js';
import { verdictFor, type NatFlow, type OtherNatVerdict } from '../other-nat/rules.js';
import {
  findingsOf,
  readLegacyNat,
  shownRuleOf,
  type OtherNatFinding,
} from '../other-nat/watch.js';
import type { Config } from '../config/types.js';
import type { Explanation } from '../explain.js';
import { legacyChainsIn } from '../kernel/legacy-chain.js';
import type { OthersPort, TablesPort } from '../kernel/ports.js';

/**
 * The pod policy our table's verdict map sends `from` to: its index (by its chain's name), null
 * when the map does not hold it, undefined when there is no map (no table, or no pod policy in it).
 */
export async function livePodPolicy(
  kernel: TablesPort,
  table: string,
  from: string,
): Promise<number | null | undefined> {
  const { family, addr } = parseAddress(from.trim());
  const listing = await kernel.listTable({ family: familyOf(family).table, name: table });
  const block = new RegExp(
    `map ${POD_POLICY_MAP} \\{[^}]*?(?:elements = \\{([^}]*)\\})?\\s*\\}`,
  ).exec(listing ?? '');
  if (!block) return undefined;
  const wanted = formatAddress(family, addr);
  for (const element of (block[1] ?? '').split(',')) {
    const match = /^\s*([0-9a-f.:]+) : goto (\S+)\s*$/.exec(element);
    if (match?.[1] === wanted) return podPolicyChainIndex(match[2]!) ?? null;
  }
  return null;
}

export interface LiveAnswer {
  readonly masqueraded: boolean | null;
  readonly generation: number | null;
  /** The kernel decides otherwise than the config says: drift, or a config not applied yet. */
  readonly drift: boolean;
  readonly text: string;
  /**
   * For a flow we leave alone: other tables' chains that may translate it (docs/observability.md,
   * "Other NAT on the node").
   */
  otherNat?: OtherNatNote[];
}

interface OtherNatNote {
  readonly table: string;
  readonly chain: string;
  readonly position: OtherNatFinding['position'];
  readonly rule: string;
  readonly verdict: OtherNatVerdict;
}

/** The reported chains that may translate this flow, with what their rules' own matches say. */
function otherNatNotes(
  findings: readonly OtherNatFinding[],
  flow: NatFlow & { readonly family: 4 | 6 },
): OtherNatNote[] {
  const notes: OtherNatNote[] = [];
  const familyName = familyOf(flow.family).table;
  for (const f of findings) {
    const tableFamily = f.table.startsWith('iptables-legacy')
      ? 'ip'
      : f.table.startsWith('ip6tables-legacy')
        ? 'ip6'
        : f.table.split(' ')[0];
    if (tableFamily !== 'inet' && tableFamily !== familyName) continue;
    const where = { table: f.table, chain: f.chain, position: f.position };
    if (!f.chainRules) {
      notes.push({ ...where, rule: f.rules[0] ?? '', verdict: 'may translate' });
      continue;
    }
    const found = verdictFor(f.chainRules, f.chain, flow);
    if (!found) continue;
    notes.push({ ...where, rule: shownRuleOf(found.rule, f.chain), verdict: found.verdict });
  }
  return notes;
}

/** What --explain --live asks of the kernel, for every address explained. */
export interface LiveQuestion {
  readonly config: Config;
  /** The tables the agent writes for this config. */
  readonly tables: readonly Table[];
  readonly options: CompileOptions;
  readonly explanations: readonly Explanation[];
  readonly legacyNames: readonly string[];
  readonly from: string;
  readonly via: string;
  /** The pod policy the verdict map gives `from` (livePodPolicy). */
  readonly podPolicyIndex: number | null | undefined;
}

export async function liveAnswers(
  kernel: TablesPort & OthersPort,
  question: LiveQuestion,
): Promise<{ answers: LiveAnswer[]; legacyChains: string[] }> {
  const { options, explanations, legacyNames, from, via } = question;
  const ours = options.table;
  const scan = await scanNatChains(kernel, oursOrStandIn(ours));
  const findings = findingsOf(scan, await readLegacyNat());
  const listings = new Map<string, string | null>();
  const answers: LiveAnswer[] = [];
  for (const e of explanations) {
    const family = familyOf(e.family).table;
    if (!listings.has(family)) listings.set(family, await kernel.listTable({ family, name: ours }));
    answers.push(await liveAnswer(kernel, question, e, listings.get(family) ?? null));
  }
  explanations.forEach((e, i) => {
    const answer = answers[i]!;
    const leftAlone =
      answer.masqueraded === false || (answer.masqueraded === null && !e.masqueraded);
    if (!leftAlone) return;
    const destination = parseAddress(e.address);
    let source: bigint | undefined;
    try {
      source = from ? parseAddress(from).addr : undefined;
    } catch {
      source = undefined;
    }
    answer.otherNat = otherNatNotes(findings, {
      family: destination.family,
      daddr: destination.addr,
      ...(source !== undefined ? { saddr: source } : {}),
      ...(via ? { oifname: via } : {}),
      mark: 0,
    });
  });
  const legacyChains = legacyChainsIn(scan.all, legacyNames);
  return { answers, legacyChains };
}

/** One address's answer from the kernel: our table's listing (null: none) and its sets. */
async function liveAnswer(
  kernel: TablesPort,
  question: LiveQuestion,
  e: Explanation,
  listing: string | null,
): Promise<LiveAnswer> {
  const { tables, options } = question;
  const family = familyOf(e.family).table;
  const none = (text: string, drift: boolean): LiveAnswer => ({
    masqueraded: null,
    generation: null,
    drift,
    text,
  });
  if (listing === null) {
    return none(
      `no table ${family} ${options.table} in this namespace: the agent masquerades nothing here`,
      e.reason !== 'not managed',
    );
  }
  const owner = tableOwner(listing);
  if (owner.kind === 'foreign') {
    return none(
      `table ${family} ${options.table} is not ours (no ipmasq-agent comment): not ours, left ` +
        'alone; the agent neither decides with it nor repairs it (choose another --table)',
      false,
    );
  }
  const generation = owner.kind === 'ours' ? (owner.mark?.generation ?? null) : null;
  const table = tables.find((t) => t.family === family);
  // Rules or declarations otherwise than the agent writes them: a set lookup no longer says what
  // a packet sees (a deleted `return` rule masquerades what the set still holds).
  const differ = table ? objectDrift(listing, table) : [];
  if (differ.length > 0) {
    return none(
      `generation ${generation ?? '?'} in the kernel: DRIFT: ${differ.join(', ')} differ${differ.length === 1 ? 's' : ''} ` +
        'from what the agent writes for this config, so the sets do not tell what a packet sees ' +
        '(the agent repairs it at the next sync)',
      true,
    );
  }
  // Left alone by the egress policy's first steps: the destination sets do not decide it, and the
  // rules that do are as the agent writes them (objectDrift just said so).
  if (STEPS.some((row) => row.key === e.reason && row.outcome === 'skipped')) {
    return {
      masqueraded: false,
      generation,
      drift: false,
      text: `generation ${generation} in the kernel leaves it alone: its ${e.reason} rule is as the agent writes it`,
    };
  }
  const decided = await decidedInKernel(kernel, question, e, table);
  const masqueraded = decided.outcome === 'translated';
  const drift = e.reason === 'not managed' ? false : masqueraded !== e.masqueraded;
  const set = decided.set ? `in the ${decided.set} set` : 'in neither set';
  return {
    masqueraded,
    generation,
    drift,
    text:
      `generation ${generation} in the kernel ${masqueraded ? 'masquerades' : 'does not masquerade'} it (${set})` +
      (drift ? '; DRIFT: the config says otherwise (the kernel is repaired at the next sync)' : ''),
  };
}

/**
 * The decision as the kernel's sets make it for `e`'s destination: the decision's walk (decision.ts)
 * with each step asked of its set in the kernel (the element as the agent formats it, as the set's
 * layout looks it up); `set` the set of the step that decided, absent for the last step. A pod
 * policy's steps where the kernel's verdict map sends the source to one (its sets carry its
 * prefix). The flow is its destination alone: the policy steps, whose rules objectDrift found as
 * written, were judged offline, and are passed here as conditions.
 */
async function decidedInKernel(
  kernel: TablesPort,
  question: LiveQuestion,
  e: Explanation,
  table: Table | undefined,
): Promise<{ readonly outcome: Outcome; readonly set?: string }> {
  const { config, options, podPolicyIndex } = question;
  const ref = { family: familyOf(e.family).table, name: options.table } as const;
  const parsed = parseAddress(e.address);
  const index = podPolicyIndex ?? null;
  const policy = index === null ? undefined : config.podPolicies?.[index];
  const prefix = policy ? podPolicyPrefix(index!) : '';
  const holds = async (step: ListStep, flow: Flow) => {
    const value = FIELDS[step.field].of(flow);
    if (typeof value !== 'bigint') return undefined;
    const name = `${prefix}${step.set}`;
    const probe = table?.sets.find((set) => set.name === name)?.key.probeSuffix ?? '';
    return kernel.setHas(ref, name, formatAddress(parsed.family, value) + probe);
  };
  const { outcome, step } = await decideBy(
    stepsOf(policy ?? config, e.family),
    { daddr: parsed.addr },
    holds,
  );
  return { outcome, ...(step.field ? { set: `${prefix}${step.set}` } : {}) };
}
