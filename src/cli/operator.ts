// The operator's commands (docs/explain.md, "Explain, diff, check"): --explain (offline, or --live
// from the kernel), --diff and --check. Each loads configs with provenance through the same loader
// the agent uses, and prints text or one JSON document.
import {
  CidrError,
  escapeUnprintable,
  formatAddress,
  parseAddress,
  familyOf,
} from '../cidr/index.js';
import { compile, type CompileOptions } from '../compile.js';
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
import { podNames } from './flows.js';
import { scanNatChains } from '../reconcile/nat-chains.js';
import { verdictFor, type NatFlow, type OtherNatVerdict } from '../nat-rules.js';
import {
  findingsOf,
  readLegacyNat,
  shownRuleOf,
  type OtherNatFinding,
} from '../reconcile/other-nat.js';
import { checkPath } from '../config/check.js';
import { loadConfig } from '../config/index.js';
import { findConfigSource } from '../config/source.js';
import type { Config, LoadOptions, LoadResult, SkippedFile } from '../config/types.js';
import { diffConfigs, diffText } from '../diff.js';
import { explainer, explanationText, LOCAL_NOTE, type Explanation } from '../explain.js';
import { plan, usesApi, type AgentOptions } from '../options.js';
import { legacyChainsIn } from '../kernel/legacy-chain.js';
import type { OthersPort, TablesPort } from '../kernel/ports.js';
import { errorText } from '../errors.js';

const out = (text: string) => process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
const err = (text: string) => process.stderr.write(`${text}\n`);
const json = (value: unknown) =>
  out(JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? String(v) : v), 2));

/**
 * Whether there is anything at `path`: the agent runs on its defaults without a config, but an
 * operator who names a path that is not there has made a typo, and is told so (exit 2). Without
 * --config the default path may well be absent (a laptop): then the defaults are used, and said.
 */
async function present(path: string, given: boolean, flag: string): Promise<boolean> {
  if ((await findConfigSource(path)).kind !== 'missing') return true;
  if (given) {
    err(`${flag}: no file or directory at ${escapeUnprintable(path)}`);
    return false;
  }
  err(`note: no file at ${escapeUnprintable(path)}: the agent would use its defaults`);
  return true;
}

async function load(
  path: string,
  options: LoadOptions,
  agent: AgentOptions,
): Promise<Config | undefined> {
  const withProvenance = { ...options, provenance: true };
  let result: LoadResult;
  if (usesApi(agent)) {
    // Loaded only with --kubernetes/--kubeconfig (docs/kubernetes.md, "Kubernetes API (opt-in)").
    const { loadWithCluster } = await import('./cluster-config.js');
    try {
      result = await loadWithCluster(path, withProvenance, agent);
    } catch (e) {
      err(`cannot read the cluster from the API server: ${escapeUnprintable(errorText(e))}`);
      return undefined;
    }
  } else result = await loadConfig(path, withProvenance);
  for (const warning of result.warnings) err(`warning: ${warning}`);
  if (!result.ok) {
    err(`invalid config: ${result.error.message}`);
    return undefined;
  }
  if (result.config.keys.nonMasqueradeNodePodCIDRs === true && !result.config.nodesJoined) {
    err(
      "note: nonMasqueradeNodePodCIDRs: the Nodes' pod CIDRs are not included (give --kubeconfig or --kubernetes to read them)",
    );
  }
  return result.config;
}

/** Exit 2 when an argument is not an address; the message says which and why. */
function badAddress(addresses: readonly string[]): string | undefined {
  for (const address of addresses) {
    try {
      parseAddress(address.trim());
    } catch (e) {
      if (e instanceof CidrError) return `--explain: ${e.message}`;
      throw e;
    }
  }
  return undefined;
}

export async function explainCommand(
  options: AgentOptions,
  kernel?: () => Promise<TablesPort & OthersPort>,
): Promise<number> {
  const problem = badAddress(options.explain);
  if (problem) {
    err(problem);
    return 2;
  }
  const stages = plan(options);
  if (!(await present(stages.configPath, options.configGiven, '--config'))) return 2;
  const config = await load(stages.configPath, stages.load, options);
  if (!config) return 1;
  // --pod: the source, its labels and its namespace's, from the API server.
  const named = options.pod ? await podFromApi(options) : undefined;
  if (named === null) return 1;
  const from = named?.from ?? options.from;
  let podPolicyIndex: number | null | undefined;
  let pod = named ? options.pod : undefined;
  if (options.live && kernel && from && config.podPolicies) {
    // Which pod policy the kernel's verdict map gives the source (docs/egress-policy.md, "Pod
    // policies").
    try {
      podPolicyIndex = await livePodPolicy(await kernel(), stages.compile.table, from);
    } catch (e) {
      err(`--live: cannot read the kernel's tables: ${errorText(e)}`);
      return 1;
    }
    if (!pod) {
      const names = await podNames(options);
      if (names.problem) err(`note: ${names.problem}`);
      const source = parseAddress(from.trim());
      pod = names.pods?.get(formatAddress(source.family, source.addr));
    }
  }
  const podLabels = named?.labels ?? options.podLabels;
  const namespaceLabels = named?.namespaceLabels ?? options.namespaceLabels;
  const flow = {
    ...(from ? { from } : {}),
    ...(options.via ? { via: options.via } : {}),
    ...(podLabels ? { podLabels: new Map(podLabels) } : {}),
    ...(namespaceLabels ? { namespaceLabels: new Map(namespaceLabels) } : {}),
    ...(podPolicyIndex !== undefined ? { podPolicyIndex } : {}),
  };
  const explainOne = explainer(config, stages.compile);
  const explanations = options.explain.map((address) => {
    const e = explainOne(address, flow);
    return pod && e.podPolicy ? { ...e, podPolicy: { ...e.podPolicy, pod } } : e;
  });
  const skipped = config.skipped ?? [];
  let live: Awaited<ReturnType<typeof liveAnswers>> | undefined;
  if (options.live && kernel) {
    try {
      live = await liveAnswers(await kernel(), {
        config,
        tables: compile(config, stages.compile, 1),
        options: stages.compile,
        explanations,
        legacyNames: stages.legacy.chains,
        from: options.from,
        via: options.via,
        podPolicyIndex,
      });
    } catch (e) {
      err(
        `--live: cannot read the kernel's tables (run as root in the node's network namespace): ` +
          errorText(e),
      );
      return 1;
    }
  }
  if (options.output === 'json') {
    json({ note: LOCAL_NOTE, skipped, explanations, ...(live ? { live } : {}) });
    return 0;
  }
  printExplanations(skipped, explanations, live);
  return 0;
}

/** --explain's text: the note, the files skipped on this node, each address with its live answer. */
function printExplanations(
  skipped: readonly SkippedFile[],
  explanations: readonly Explanation[],
  live: Awaited<ReturnType<typeof liveAnswers>> | undefined,
): void {
  out(LOCAL_NOTE);
  for (const file of skipped) {
    out(`skipped on this node: ${escapeUnprintable(file.file)} (${file.reason})`);
  }
  explanations.forEach((e, i) => {
    out(explanationText(e));
    const answer = live?.answers[i];
    if (answer) out(`  live: ${answer.text}`);
    for (const other of answer?.otherNat ?? []) {
      const where = other.chain
        ? `chain ${other.chain} of table ${other.table}`
        : `table ${other.table}`;
      const order =
        other.position === 'same'
          ? ' (same priority as ours)'
          : other.position === 'unknown'
            ? ''
            : ` (runs ${other.position} ours)`;
      out(
        `  other NAT: ${where}${order} ${other.verdict === 'translates' ? 'would translate' : 'may translate'} it: ${other.rule}`,
      );
    }
  });
  if (live?.legacyChains.length) {
    out(
      `warning: the original agent's chain ${live.legacyChains.join(', ')} is still in table ip nat: it may masquerade ` +
        'traffic before our table decides (run with --remove-legacy-chain)',
    );
  }
}

/**
 * `--pod NAMESPACE/NAME`: its first address as the source, its labels and its namespace's, read
 * from the API server; null (said why) where it cannot be.
 */
async function podFromApi(options: AgentOptions): Promise<{
  from: string;
  labels?: ReadonlyArray<readonly [string, string]>;
  namespaceLabels?: ReadonlyArray<readonly [string, string]>;
} | null> {
  const [namespace = '', name = ''] = options.pod.split('/');
  const { podNamed } = await import('../kubernetes/index.js');
  let found: Awaited<ReturnType<typeof podNamed>>;
  try {
    found = await podNamed({
      kubeconfig: options.kubeconfig,
      namespace,
      name,
      enableIPv6: options.enableIPv6,
    });
  } catch (e) {
    err(`--pod: cannot read pod ${options.pod}: ${escapeUnprintable(errorText(e))}`);
    return null;
  }
  const from = found.pod.addresses[0];
  if (from === undefined) {
    err(`--pod: pod ${options.pod} has no address yet (status.podIPs is empty)`);
    return null;
  }
  if (found.hostNetwork)
    err(`note: pod ${options.pod} is on the host's network: no pod policy selects it`);
  if (options.nodeName !== '' && found.node !== options.nodeName)
    err(
      `note: pod ${options.pod} runs on node ${escapeUnprintable(found.node || '(none yet)')}, not ${escapeUnprintable(options.nodeName)}: explained as that node's agent would decide, were it here`,
    );
  if (found.namespaceProblem)
    err(
      `note: namespace ${escapeUnprintable(namespace)}'s labels cannot be read (${found.namespaceProblem}): taken to have none`,
    );
  // A pod on the host's network: its address is the node's, which no pod policy decides for.
  if (found.hostNetwork) return { from };
  // As the agent judges (docs/egress-policy.md, "Pod policies"): a completed pod is no member, and
  // an address a newer pod holds too is that pod's.
  if (found.phase !== '' && found.phase !== 'Pending' && found.phase !== 'Running') {
    err(
      `note: pod ${options.pod} is ${escapeUnprintable(found.phase)}: no pod policy selects it any more (its address is decided node-wide)`,
    );
    return { from };
  }
  if (found.holder) {
    const newer = `${escapeUnprintable(found.holder.pod.namespace)}/${escapeUnprintable(found.holder.pod.name)}`;
    err(
      `note: ${from} is held by the newer pod ${newer} too: the agent decides it by ${newer}'s labels`,
    );
    return {
      from,
      labels: [...found.holder.pod.labels],
      namespaceLabels: [...(found.holder.namespaceLabels ?? new Map<string, string>())],
    };
  }
  return {
    from,
    labels: [...found.pod.labels],
    namespaceLabels: [...(found.namespaceLabels ?? new Map<string, string>())],
  };
}

/**
 * The pod policy our table's verdict map sends `from` to: its index (by its chain's name), null
 * when the map does not hold it, undefined when there is no map (no table, or no pod policy in it).
 */
async function livePodPolicy(
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

interface LiveAnswer {
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
interface LiveQuestion {
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

async function liveAnswers(
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

export async function diffCommand(options: AgentOptions): Promise<number> {
  const stages = plan(options);
  if (!(await present(stages.configPath, options.configGiven, '--config'))) return 2;
  if (!(await present(options.proposed, true, '--diff'))) return 2;
  const current = await load(stages.configPath, stages.load, options);
  const proposed = await load(options.proposed, stages.load, options);
  if (!current || !proposed) return 2;
  const diff = diffConfigs(current, proposed, stages.compile);
  if (options.output === 'json') json(diff);
  else out(diffText(diff));
  return diff.changes.length === 0 && diff.policy.length === 0 && diff.podPolicies.length === 0
    ? 0
    : 1;
}

export async function checkCommand(options: AgentOptions): Promise<number> {
  const stages = plan(options);
  const outcomes = [];
  const check = { configMaps: options.configMaps, named: options.configMapsGiven };
  for (const path of options.check) {
    outcomes.push(
      await checkPath(path, stages.load, check).catch((e: unknown) => ({
        path,
        checked: [],
        errors: [`${escapeUnprintable(path)}: cannot be checked: ${escapeUnprintable(String(e))}`],
        warnings: [],
      })),
    );
  }
  if (options.output === 'json') json({ outcomes });
  else {
    for (const o of outcomes) {
      for (const warning of o.warnings) out(`warning: ${warning}`);
      for (const error of o.errors) out(`invalid config: ${error}`);
      if (o.errors.length === 0) out(`ok: ${escapeUnprintable(o.path)} (${o.checked.join(', ')})`);
    }
  }
  return outcomes.every((o) => o.errors.length === 0) ? 0 : 1;
}
