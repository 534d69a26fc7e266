// What a proposed config changes (docs/explain.md, "Explain, diff, check"): every address range
// whose decision flips, as the fewest CIDRs, its direction, and the entries responsible on each
// side.
import {
  escapeUnprintable,
  formatAddress,
  formatPrefix,
  rangesToPrefixes,
  type Range,
  familyOf,
  managedFamilies,
} from './cidr/index.js';
import type { CompileOptions } from './compile.js';
import { podPolicyName } from './config/pods.js';
import { CONFIG_KEYS, type KeyName, type KeySpec } from './config/keys.js';
import { selectorText } from './config/selector.js';
import type { AddressFamily, Config, PodPolicy } from './config/types.js';
import { flippedRanges } from './decision.js';
import { explainer, type Explanation } from './explain.js';

export type Direction = 'masqueraded → not masqueraded' | 'not masqueraded → masqueraded';

export interface ChangedRange {
  readonly family: AddressFamily;
  readonly first: string;
  readonly last: string;
  readonly cidrs: readonly string[];
  readonly direction: Direction;
  /** Why its first address is decided as it is, now and with the proposed config. */
  readonly current: Explanation;
  readonly proposed: Explanation;
}

export interface DiffSummary {
  readonly family: AddressFamily;
  readonly direction: Direction;
  readonly ranges: number;
  /** A decimal string: IPv6 counts exceed a JavaScript number's exact range. */
  readonly addresses: string;
}

/**
 * A change of an egress policy key (docs/egress-policy.md, "Egress policy"): it changes what
 * happens to flows of some sources, interfaces or every translated flow, even where no destination
 * flips.
 */
export interface PolicyChange {
  readonly key: KeyName;
  /**
   * The values now and proposed; empty: the key is not given (every source, every interface,
   * masquerade).
   */
  readonly current: readonly string[];
  readonly proposed: readonly string[];
}

export interface Diff {
  readonly changes: readonly ChangedRange[];
  readonly summary: readonly DiffSummary[];
  readonly policy: readonly PolicyChange[];
  /**
   * The pod policies (docs/egress-policy.md, "Pod policies") added, removed or changed, by file.
   */
  readonly podPolicies: readonly PodPolicyChange[];
}

/** A pod policy that the proposed config adds, removes or changes (for the pods it selects). */
export interface PodPolicyChange {
  /** Its file's name (the two configs may be read from two directories). */
  readonly file: string;
  readonly change: 'added' | 'removed' | 'changed';
  /** What it selects now and proposed ('' where the policy is not there). */
  readonly selects: { readonly current: string; readonly proposed: string };
  /** Destinations whose decision flips for its pods, as CIDRs (changed policies). */
  readonly flips: ReadonlyArray<{
    readonly family: AddressFamily;
    readonly direction: Direction;
    readonly cidrs: readonly string[];
  }>;
  /** Its egress policy keys that differ (its own or inherited). */
  readonly keys: readonly PolicyChange[];
}

/** The keys --diff shows (keys.ts, `shown`: the egress policy's), with how. */
const SHOWN = (Object.keys(CONFIG_KEYS) as KeyName[]).flatMap((key) => {
  const spec = CONFIG_KEYS[key] as KeySpec<unknown, unknown>;
  return spec.shown ? [{ key, shown: spec.shown }] : [];
});

/** The egress policy keys that differ between the two configs. */
function policyChanges(
  current: Pick<Config, 'keys'>,
  proposed: Pick<Config, 'keys'>,
): PolicyChange[] {
  return SHOWN.flatMap(({ key, shown }) => {
    const side = (config: Pick<Config, 'keys'>) => {
      const merged = config.keys[key];
      return merged === undefined ? [] : [...shown.as(merged)];
    };
    const [now, next] = [side(current), side(proposed)];
    return now.join() === next.join() ? [] : [{ key, current: now, proposed: next }];
  });
}

export function diffConfigs(current: Config, proposed: Config, options: CompileOptions): Diff {
  const families = managedFamilies(options.enableIPv6).map((f) => f.name);
  const changes: Array<ChangedRange & { readonly at: bigint }> = [];
  const summary: DiffSummary[] = [];
  const explainCurrent = explainer(current, options);
  const explainProposed = explainer(proposed, options);
  for (const { family, lost, gained } of flippedRanges(current, proposed, families)) {
    const { name } = familyOf(family);
    const sides: Array<[Direction, Range[]]> = [
      ['not masqueraded → masqueraded', lost],
      ['masqueraded → not masqueraded', gained],
    ];
    for (const [direction, ranges] of sides) {
      let addresses = 0n;
      for (const range of ranges) {
        addresses += range[1] - range[0] + 1n;
        const first = formatAddress(family, range[0]);
        changes.push({
          at: range[0],
          family: name,
          first,
          last: formatAddress(family, range[1]),
          cidrs: rangesToPrefixes(family, [range]).map(formatPrefix),
          direction,
          current: explainCurrent(first),
          proposed: explainProposed(first),
        });
      }
      if (ranges.length > 0) {
        summary.push({
          family: name,
          direction,
          ranges: ranges.length,
          addresses: String(addresses),
        });
      }
    }
  }
  // By family, then by address.
  changes.sort((a, b) =>
    a.family !== b.family ? (a.family === 'ipv4' ? -1 : 1) : a.at < b.at ? -1 : a.at > b.at ? 1 : 0,
  );
  return {
    changes: changes.map(({ at: _at, ...change }) => change),
    summary,
    policy: policyChanges(current, proposed),
    podPolicies: podPolicyChanges(current, proposed, families),
  };
}

/** What a pod policy selects, in words. */
function selectsText(policy: PodPolicy | undefined): string {
  if (!policy) return '';
  const parts = [
    ...(policy.podSelector ? [`podSelector ${selectorText(policy.podSelector)}`] : []),
    ...(policy.namespaceSelector
      ? [`namespaceSelector ${selectorText(policy.namespaceSelector)}`]
      : []),
  ];
  return parts.join(', ') || 'every pod';
}

/** A pod policy's keys as --diff compares them: its own over the node-wide ones it inherits. */
const effectiveKeys = (policy: PodPolicy | undefined): Pick<Config, 'keys'> => ({
  keys: policy ? policy.keys : {},
});

/** The pod policies by file, each side's compared: added, removed, or what changed in it. */
function podPolicyChanges(
  current: Config,
  proposed: Config,
  families: readonly AddressFamily[],
): PodPolicyChange[] {
  const byFile = (config: Config) =>
    new Map((config.podPolicies ?? []).map((policy) => [podPolicyName(policy), policy]));
  const now = byFile(current);
  const next = byFile(proposed);
  const files = [...new Set([...now.keys(), ...next.keys()])].sort();
  return files.flatMap((file): PodPolicyChange[] => {
    const a = now.get(file);
    const b = next.get(file);
    const selects = { current: selectsText(a), proposed: selectsText(b) };
    if (!a || !b) {
      return [{ file, change: a ? 'removed' : 'added', selects, flips: [], keys: [] }];
    }
    const flips = flippedRanges(a, b, families).flatMap(({ family, lost, gained }) => {
      const { name } = familyOf(family);
      return [
        ['not masqueraded → masqueraded', lost] as const,
        ['masqueraded → not masqueraded', gained] as const,
      ].flatMap(([direction, ranges]) =>
        ranges.length === 0
          ? []
          : [
              {
                family: name,
                direction,
                cidrs: rangesToPrefixes(family, ranges).map(formatPrefix),
              },
            ],
      );
    });
    const keys = policyChanges(effectiveKeys(a), effectiveKeys(b));
    if (selects.current === selects.proposed && flips.length === 0 && keys.length === 0) return [];
    return [{ file, change: 'changed', selects, flips, keys }];
  });
}

function podPolicyText(change: PodPolicyChange): string[] {
  const name = `pod policy ${escapeUnprintable(change.file)}`;
  if (change.change === 'added') return [`${name}: added (selects ${change.selects.proposed})`];
  if (change.change === 'removed')
    return [`${name}: removed (its pods go back to the node-wide config)`];
  const lines = [`${name}: changed, for the pods it selects`];
  if (change.selects.current !== change.selects.proposed)
    lines.push(`  selects: ${change.selects.current} → ${change.selects.proposed}`);
  for (const key of change.keys) lines.push(`  ${policyText(key)}`);
  for (const flip of change.flips) lines.push(`  ${flip.cidrs.join(' ')}: ${flip.direction}`);
  return lines;
}

function policyText(change: PolicyChange): string {
  const side = (values: readonly string[]) =>
    values.length === 0
      ? `(not given: ${SHOWN.find((s) => s.key === change.key)?.shown.absent ?? ''})`
      : values.join(', ');
  return `egress policy ${change.key}: ${side(change.current)} → ${side(change.proposed)}`;
}

export function diffText(diff: Diff): string {
  const policy = [...diff.policy.map(policyText), ...diff.podPolicies.flatMap(podPolicyText)];
  if (diff.changes.length === 0)
    return [...policy, 'no destination changes its decision'].join('\n') + '\n';
  const lines: string[] = [...policy];
  for (const change of diff.changes) {
    lines.push(`${change.cidrs.join(' ')}: ${change.direction}`);
    const why = (e: Explanation) =>
      e.reason === 'no match' ? 'no entry exempts it' : (e.decidedBy[0]?.text ?? e.reason);
    lines.push(`  now: ${why(change.current)}`);
    lines.push(`  proposed: ${why(change.proposed)}`);
  }
  const parts = diff.summary.map(
    (s) =>
      `${s.family} ${s.direction}: ${s.ranges} range${s.ranges === 1 ? '' : 's'}, ${s.addresses} addresses`,
  );
  lines.push(parts.join('; '));
  return `${lines.join('\n')}\n`;
}
