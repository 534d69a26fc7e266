// `ipmasq-agent --flows` (docs/observability.md, "What the node's NAT does"): the translated flows
// now in conntrack, by source and destination, with each destination's port usage; `--from`/`--to`
// filter, `--output json`; with --kubernetes/--kubeconfig the pods of this Node are named. The dump
// is aggregated on a pool thread as it streams (native/nat-stats.h): no entry is held, only a
// compact record per group, sorted there; the output is written a piece at a time as it is read
// from them.
import {
  escapeUnprintable,
  formatAddress,
  parseAddress,
  parseCidr,
  prefixRange,
  type Range,
  familyOf,
} from '../cidr/index.js';
import { errorText } from '../errors.js';
import {
  chunked,
  flowSources,
  flowsJsonPieces,
  flowsTextLines,
  mergedSources,
  snatPortsOfShapes,
  type FlowSource,
} from '../nat-figures.js';
import { collectGarbage } from '../memory.js';
import type { OthersPort, ConntrackPort } from '../kernel/ports.js';
import { oursOrStandIn } from '../nftables/ownership.js';
import type { RuleShape } from '../nftables/types.js';
import { plan, usesApi, type AgentOptions } from '../options.js';

/**
 * The most CPU one family's dump may take here: a one-shot command may take longer than a sample.
 */
const FLOWS_BUDGET_S = 30;

/** An address or CIDR flag as a family and a range; undefined when not given. */
function rangeOf(text: string): { family: 4 | 6; range: Range } | undefined {
  if (text === '') return undefined;
  if (text.includes('/')) {
    const prefix = parseCidr(text);
    return { family: prefix.family, range: prefixRange(prefix) };
  }
  const { family, addr } = parseAddress(text);
  return { family, range: [addr, addr] };
}

/**
 * Source ports per translated address: from the port ranges of our tables' translating rules in the
 * kernel (read from their expressions, whatever family or address they translate to), else
 * 1024–65535.
 */
async function portsInKernel(
  kernel: OthersPort & ConntrackPort,
  options: AgentOptions,
): Promise<number> {
  const { table } = plan(options).compile;
  const shapes: RuleShape[] = [];
  const isOurs = oursOrStandIn(table);
  const ours = (await kernel.chains()).filter((chain) => isOurs(chain.family, chain.table));
  for (const chain of ours)
    shapes.push(...(await kernel.ruleShapes(chain.family, chain.table, chain.name)));
  return snatPortsOfShapes(shapes);
}

/** The pods of this Node by canonical address, or why they cannot be named (said once). */
export async function podNames(
  options: AgentOptions,
): Promise<{ pods?: Map<string, string>; problem?: string }> {
  if (!usesApi(options)) return {};
  if (options.nodeName === '')
    return { problem: 'pods are not named: --node-name (or NODE_NAME) is not given' };
  const { podsOnNode } = await import('../kubernetes/index.js');
  try {
    const listed = await podsOnNode({ kubeconfig: options.kubeconfig, nodeName: options.nodeName });
    const pods = new Map<string, string>();
    for (const [ip, name] of listed) {
      try {
        const { family, addr } = parseAddress(ip);
        pods.set(formatAddress(family, addr), name);
      } catch {
        // not an address: nothing to name
      }
    }
    return { pods };
  } catch (err) {
    const text = escapeUnprintable(errorText(err));
    return {
      problem: /\b403\b/.test(text)
        ? `pods are not named: the API server refuses to list pods (${text}); the ClusterRole needs list on pods (deploy/overlays/api)`
        : `pods are not named: ${text}`,
    };
  }
}

/** Writes the chunks to stdout as they come, waiting while it is full (a pipe to a slow reader). */
async function written(chunks: Iterable<Buffer>): Promise<void> {
  let writes = 0;
  for (const chunk of chunks) {
    if (!process.stdout.write(chunk))
      await new Promise<void>((resolve) => process.stdout.once('drain', resolve));
    if (++writes % WRITES_PER_COLLECTION === 0) collectGarbage();
  }
}

/** A full collection after this many writes of ~64 KiB (a few ms each: every ~512 KiB written). */
const WRITES_PER_COLLECTION = 8;

export async function flowsCommand(
  options: AgentOptions,
  kernel: OthersPort & ConntrackPort,
): Promise<number> {
  // Each piece written is garbage at once: the young generation, kept at its first size for this
  // command as for the agent (src/cli.ts, src/memory.ts), collects it, and a full collection every
  // WRITES_PER_COLLECTION writes the little it promotes. Memory does not grow with the output.
  const from = rangeOf(options.from);
  const to = rangeOf(options.to);
  if (from && to && from.family !== to.family) {
    process.stderr.write('--from and --to are of different families: no flow has both\n');
    return 2;
  }
  const only = from?.family ?? to?.family;
  const families: Array<4 | 6> = only ? [only] : [4, 6];
  const ports = await portsInKernel(kernel, options);
  const lists: Array<Iterable<FlowSource>> = [];
  let incomplete = false;
  try {
    for (const family of families) {
      const sample = await kernel.natSample({
        family,
        cpuBudgetS: FLOWS_BUDGET_S,
        bySource: true,
        ...(from ? { from: [from.range] } : {}),
        ...(to ? { to: [to.range] } : {}),
      });
      incomplete ||= !sample.complete;
      const { name } = familyOf(family);
      if (sample.records) lists.push(flowSources(sample.records, name, ports));
    }
  } catch (err) {
    process.stderr.write(
      `--flows: cannot read conntrack (run as root in the node's network namespace): ${errorText(err)}\n`,
    );
    return 1;
  }
  if (incomplete)
    process.stderr.write(
      `warning: the conntrack dump took more than ${FLOWS_BUDGET_S} s of CPU and stopped: the figures are partial\n`,
    );
  const { pods, problem } = await podNames(options);
  if (problem) process.stderr.write(`note: ${problem}\n`);
  const sources = mergedSources(lists[0] ?? [], lists[1] ?? []);
  await written(
    options.output === 'json'
      ? chunked(flowsJsonPieces(sources, ports, pods))
      : chunked(flowsTextLines(sources, ports, pods), undefined, '\n'),
  );
  return 0;
}
