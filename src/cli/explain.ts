// --explain (docs/explain.md, "Explain, diff, check"): each address decided by the config as this
// node's agent would decide it, offline, or beside what the kernel's tables decide with --live
// (live.ts); the source and labels of a --pod read from the API.
import { CidrError, escapeUnprintable, formatAddress, parseAddress } from '../cidr/index.js';
import { compile } from '../compile.js';
import { podNames } from './flows.js';
import type { SkippedFile } from '../config/types.js';
import { explainer, explanationText, LOCAL_NOTE, type Explanation } from '../explain.js';
import { plan, type AgentOptions } from '../options.js';
import type { OthersPort, TablesPort } from '../kernel/ports.js';
import { errorText } from '../errors.js';
import { err, json, load, out, present } from './operator.js';
import { liveAnswers, livePodPolicy } from './live.js';

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
