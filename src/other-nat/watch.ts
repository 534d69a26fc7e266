// Who else translates (docs/observability.md, "Other NAT on the node"): at start and at each
// resync, the other tables' nat postrouting chains whose rules may translate traffic we leave
// alone, and a kernel's legacy x_tables nat table, reported — one warning and one Event per
// distinct finding while it lasts (at most WARNINGS_PER_LOOK a look, one more summing up the rest),
// the gauge ipmasq_other_nat_rules while it is there (at most OTHER_NAT_SERIES_MAX series). Every
// name and rule text from another table is escaped, every message bounded. The original agent's
// leftover chain is found by the same look (legacy.ts keeps its own warning, metric and removal).
// Never fatal.
import { readFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import { escapeUnprintable } from '../cidr/index.js';
import { errorText } from '../errors.js';
import type { NodeEvents } from '../kubernetes/events.js';
import { unmarkedTranslations } from './rules.js';
import type { OthersPort, TablesPort } from '../kernel/ports.js';
import { libnftablesVersion } from '../kernel/addon.js';
import {
  LOOK_CHAINS_MAX,
  LOOK_RULES_MAX,
  LOOK_TIME_MS,
  positionOf,
  scanNatChains,
  type ListingCache,
  type NatChain,
  type NatPosition,
  type NatScan,
} from './chains.js';
import type { ChainRules, ListedRule } from '../nftables/types.js';

/** One chain that may translate what we leave alone, as reported. */
export interface OtherNatFinding {
  /** `FAMILY NAME` (`ip nat`, `inet mesh`), or `iptables-legacy nat` / `ip6tables-legacy nat`. */
  readonly table: string;
  /** The base chain ('' for the legacy x_tables table). */
  readonly chain: string;
  readonly position: NatPosition | 'unknown';
  /**
   * How many of its rules may translate (for an unreadable chain: what the kernel's expressions
   * show).
   */
  readonly count: number;
  /**
   * Those rules as nft prints them, `CHAIN: rule` where reached through a jump; escaped, bounded.
   */
  readonly rules: readonly string[];
  /** Why its rules could not be printed. */
  readonly unreadable?: string;
  /**
   * The chain's rules, to judge one flow by (--explain --live); absent when unreadable or legacy.
   */
  readonly chainRules?: ChainRules;
}

/** How long one rule's text may be in a log line, metric-free message or Event. */
export const RULE_TEXT_MAX = 240;
/** How many rules one warning names; the count says how many more. */
const RULES_SHOWN = 8;
/** How long a warning's or Event's message, or a warning's `rules` together, may be. */
export const MESSAGE_MAX = 512;
/** How many findings a look warns about one by one; one more warning sums up the rest. */
export const WARNINGS_PER_LOOK = 10;

/** A message cut at MESSAGE_MAX (its parts already escaped). */
export function bounded(text: string): string {
  return text.length <= MESSAGE_MAX ? text : `${text.slice(0, MESSAGE_MAX - 1)}…`;
}

/** The first rules whose texts together fit in MESSAGE_MAX (at least one), at most RULES_SHOWN. */
function rulesShown(rules: readonly string[]): string[] {
  const shown: string[] = [];
  let length = 0;
  for (const rule of rules.slice(0, RULES_SHOWN)) {
    if (shown.length > 0 && length + rule.length > MESSAGE_MAX) break;
    shown.push(rule);
    length += rule.length;
  }
  return shown;
}

/** A foreign text made safe to log: control characters escaped, cut at RULE_TEXT_MAX. */
export function shownRule(text: string): string {
  const escaped = escapeUnprintable(text);
  return escaped.length <= RULE_TEXT_MAX
    ? escaped
    : `${escaped.slice(0, RULE_TEXT_MAX)}… (${escaped.length} characters)`;
}

/** A reported rule as shown: `CHAIN: rule` where it is reached through a jump from `base`. */
export function shownRuleOf(rule: ListedRule, base: string): string {
  return shownRule(rule.chain === base ? rule.text : `${rule.chain}: ${rule.text}`);
}

/**
 * The x_tables families whose nat table the kernel has loaded (their rules nftables cannot show).
 */
export type LegacyNatReader = () => Promise<Array<'ip' | 'ip6'>>;

export const readLegacyNat: LegacyNatReader = async () => {
  const found: Array<'ip' | 'ip6'> = [];
  for (const [family, file] of [
    ['ip', '/proc/net/ip_tables_names'],
    ['ip6', '/proc/net/ip6_tables_names'],
  ] as const) {
    const names = await readFile(file, 'utf8').catch(() => '');
    if (names.split('\n').includes('nat')) found.push(family);
  }
  return found;
};

/**
 * What a look at the kernel found, as findings (pure but for the libnftables version in a text).
 */
export function findingsOf(
  scan: NatScan,
  legacyNat: ReadonlyArray<'ip' | 'ip6'>,
): OtherNatFinding[] {
  const findings: OtherNatFinding[] = [];
  for (const chain of scan.chains) {
    const finding = findingOf(chain);
    if (finding) findings.push(finding);
  }
  for (const family of legacyNat) {
    findings.push({
      table: `${family === 'ip' ? 'iptables' : 'ip6tables'}-legacy nat`,
      chain: '',
      position: 'unknown',
      count: 1,
      rules: ['(x_tables rules: nftables cannot show them; `iptables-legacy -t nat -S` does)'],
    });
  }
  return findings;
}

function findingOf(chain: NatChain): OtherNatFinding | undefined {
  // Names as the kernel holds them may carry anything but '\0': escaped for every display. A name
  // with something to escape is never printed by libnftables (chains.ts), so has no chainRules.
  const table = escapeUnprintable(`${chain.family} ${chain.table}`);
  const where = {
    table,
    chain: escapeUnprintable(chain.chain),
    position: positionOf(chain.priority),
  };
  if (!chain.rules) {
    if (chain.translating === 0) return undefined;
    return {
      ...where,
      count: chain.translating,
      rules: [
        `(unreadable by libnftables ${libnftablesVersion()}: ${shownRule(chain.unreadable ?? '')})`,
      ],
      ...(chain.unreadable !== undefined ? { unreadable: chain.unreadable } : {}),
    };
  }
  const reported = unmarkedTranslations(chain.rules, chain.chain);
  if (reported.length === 0) return undefined;
  return {
    ...where,
    count: reported.length,
    rules: reported.map((rule) => shownRuleOf(rule, chain.chain)),
    chainRules: chain.rules,
  };
}

/** Where another table's chain runs beside ours, in a warning's words. */
const ORDER_WORDS: Record<OtherNatFinding['position'], string> = {
  before: 'it runs before ours: flows it translates never reach our chain',
  after: 'it runs after ours: it can translate flows we leave alone',
  same: 'it has our priority: the kernel does not define which runs first',
  unknown: 'nftables cannot show its rules',
};

const whereOf = (f: OtherNatFinding) =>
  f.chain ? `chain ${f.chain} of table ${f.table}` : `table ${f.table}`;

const keyOf = (f: OtherNatFinding) =>
  JSON.stringify([f.table, f.chain, f.position, f.count, f.rules]);

export interface OtherNatDeps {
  readonly kernel: OthersPort & Pick<TablesPort, 'generationId'>;
  readonly logger: Logger;
  /** Where `ipmasq_other_nat_rules` is set (reconcile/metrics.ts). */
  readonly metrics?: { setOtherNatRules(findings: readonly OtherNatFinding[]): void };
  readonly events?: NodeEvents;
  /** Our own tables (and their stand-ins), which are not looked at. */
  readonly ours: (family: string, table: string) => boolean;
  /** Told, at each look, which chains of the namespace exist (the original agent's, legacy.ts). */
  readonly chainsSeen?: (scan: NatScan) => void;
  readonly readLegacyNat?: LegacyNatReader;
  /** How long a look stays good: the resync interval. */
  readonly intervalMs: () => number;
  /** Awaited before each print with libnftables: our writes go first. */
  readonly beforePrint?: () => Promise<void>;
  readonly now?: () => number;
}

export class OtherNatWatch {
  private readonly deps: OtherNatDeps;
  private readonly cache: ListingCache = new Map();
  /** The last look's scan, reused while the namespace's generation id has not moved. */
  private lastScan: NatScan | undefined;
  private reported = new Map<string, OtherNatFinding>();
  private lastLook: number | undefined;
  private lastError: string | undefined;
  /** The last look stopped at its budget (warned once until a look ends within it). */
  private truncated = false;

  constructor(deps: OtherNatDeps) {
    this.deps = deps;
  }

  /** The findings of the last look. */
  get findings(): OtherNatFinding[] {
    return [...this.reported.values()];
  }

  /**
   * Looks when it never did, when `now` (a resync: periodic or SIGHUP), or about a resync interval
   * after the last look (nine tenths of one: the periodic resync comes an interval after the
   * previous sync, not exactly after its look).
   */
  async lookIfDue(now = false): Promise<void> {
    const at = (this.deps.now ?? Date.now)();
    const due = this.lastLook === undefined || at - this.lastLook >= 0.9 * this.deps.intervalMs();
    if (!due && !now) return;
    this.lastLook = at;
    await this.look();
  }

  /** One look: reports what appeared, clears what went away. */
  async look(): Promise<void> {
    const findings = await this.scan();
    if (findings === undefined) return;
    const next = new Map(findings.map((finding) => [keyOf(finding), finding]));
    this.reportAppeared([...next].filter(([key]) => !this.reported.has(key)).map(([, f]) => f));
    this.reportGone(
      [...this.reported]
        .filter(([key]) => !next.has(key))
        .map(([, finding]) => finding)
        .filter((f) => ![...next.values()].some((n) => n.table === f.table && n.chain === f.chain)),
    );
    this.reported = next;
    this.deps.metrics?.setOtherNatRules(findings);
  }

  /** The findings of a scan of the namespace's nat chains; undefined when it failed. */
  private async scan(): Promise<OtherNatFinding[] | undefined> {
    const { kernel, logger } = this.deps;
    try {
      const scan = await scanNatChains(kernel, this.deps.ours, this.cache, {
        ...(this.deps.beforePrint ? { beforePrint: this.deps.beforePrint } : {}),
        ...(this.lastScan ? { last: this.lastScan } : {}),
      });
      this.lastScan = scan;
      this.deps.chainsSeen?.(scan);
      if (scan.truncated && !this.truncated)
        logger.warn(
          { chainsMax: LOOK_CHAINS_MAX, rulesMax: LOOK_RULES_MAX, timeMs: LOOK_TIME_MS },
          `other tables' nat chains reach more than a look reads (${LOOK_CHAINS_MAX} chains, ${LOOK_RULES_MAX} rules or ${LOOK_TIME_MS / 1000} s): it reports what it found within that`,
        );
      this.truncated = scan.truncated;
      const findings = findingsOf(scan, await (this.deps.readLegacyNat ?? readLegacyNat)());
      if (this.lastError !== undefined) logger.info('other tables’ nat chains can be read again');
      this.lastError = undefined;
      return findings;
    } catch (err) {
      // Never fatal: the last findings stand.
      const message = errorText(err);
      if (message !== this.lastError)
        logger.warn({ err: message }, 'could not look at other tables’ nat chains');
      this.lastError = message;
      return undefined;
    }
  }

  /** A warning for each finding that appeared (the first few, then one for the rest), one Event. */
  private reportAppeared(appeared: readonly OtherNatFinding[]): void {
    const { logger, events } = this.deps;
    for (const finding of appeared.slice(0, WARNINGS_PER_LOOK)) {
      const { table, chain, position, count, rules } = finding;
      const shown = rulesShown(rules);
      const more = rules.length > shown.length ? ` and ${rules.length - shown.length} more` : '';
      logger.warn(
        { table, chain, position, rules: shown, translatingRules: count },
        bounded(
          `${whereOf(finding)} may translate traffic this agent leaves alone (${ORDER_WORDS[position]}): ${shown.join('; ')}${more}`,
        ),
      );
    }
    const unsaid = appeared.slice(WARNINGS_PER_LOOK);
    if (unsaid.length > 0) {
      const rules = unsaid.reduce((sum, f) => sum + f.count, 0);
      logger.warn(
        { table: '(more)', chains: unsaid.length, translatingRules: rules },
        bounded(
          `${unsaid.length} more chains of other tables may translate traffic this agent leaves alone (${rules} rules; ipmasq_other_nat_rules and --explain --live name them): ${unsaid.map(whereOf).join('; ')}`,
        ),
      );
    }
    // One Event per look for what appeared in it (Events are written at most once a minute per
    // reason).
    if (appeared.length > 0) {
      events?.(
        'OtherNATPresent',
        bounded(
          'may translate traffic this agent leaves alone: ' +
            appeared
              .map((f) => `${whereOf(f)} (${f.position}), ${f.count} rule(s): ${f.rules[0] ?? ''}`)
              .join('; '),
        ),
      );
    }
  }

  /** A line for each chain that no longer translates (the first few, then one for the rest). */
  private reportGone(gone: readonly OtherNatFinding[]): void {
    const { logger } = this.deps;
    for (const finding of gone.slice(0, WARNINGS_PER_LOOK))
      logger.info(
        { table: finding.table, chain: finding.chain },
        bounded(`${whereOf(finding)} no longer translates`),
      );
    if (gone.length > WARNINGS_PER_LOOK)
      logger.info(
        { table: '(more)', chains: gone.length - WARNINGS_PER_LOOK },
        `${gone.length - WARNINGS_PER_LOOK} more chains of other tables no longer translate`,
      );
  }
}
