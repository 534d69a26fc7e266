// Conntrack health of the node's namespace (docs/observability.md, "What the node's NAT does"): how
// full the table is and the kernel's per-CPU event counters summed, read from /proc (the
// namespace's own files: a few hundred bytes whatever the number of entries, no dump of the table).
// Pure but for the reads.
import { readFile } from 'node:fs/promises';

/** The per-CPU statistics exported, by the name the series uses (and /proc's column name). */
export const CONNTRACK_EVENT_KINDS = {
  insert_failed: 'insert_failed',
  drop: 'drop',
  early_drop: 'early_drop',
  clash_resolve: 'clashres',
} as const;
export type ConntrackEventKind = keyof typeof CONNTRACK_EVENT_KINDS;

export interface ConntrackHealth {
  /** Absent where /proc's value makes no sense (`problems` says why). */
  readonly entries?: number;
  readonly max?: number;
  /**
   * Summed over the CPUs; a kind this kernel does not count, or whose values make no sense, is
   * absent.
   */
  readonly events: Partial<Record<ConntrackEventKind, number>>;
  /** What could not be read as /proc defines it: each leaves its series absent. */
  readonly problems: readonly string[];
}

/** A /proc counter: 1–16 hexadecimal digits, within what a double holds exactly. */
function hexCount(text: string): number | undefined {
  if (!/^[0-9a-f]{1,16}$/i.test(text)) return undefined;
  const value = parseInt(text, 16);
  return Number.isSafeInteger(value) ? value : undefined;
}

/**
 * /proc/net/stat/nf_conntrack: a header of column names, then one line per CPU of hexadecimal
 * counters. `entries` is the table's count on every line; the others are the CPU's own. Strict: a
 * line of another width, or a field that is not a hexadecimal count, leaves the column absent.
 */
export function parseConntrackStat(text: string): Omit<ConntrackHealth, 'max'> | undefined {
  const [header, ...lines] = text.trim().split('\n');
  if (!header) return undefined;
  const columns = header.trim().split(/\s+/);
  const problems: string[] = [];
  const rows = lines.map((line) => line.trim().split(/\s+/));
  if (rows.some((row) => row.length !== columns.length)) {
    return {
      events: {},
      problems: [
        `/proc/net/stat/nf_conntrack: a line with another number of fields than its header's ${columns.length}`,
      ],
    };
  }
  const column = (name: string): number | undefined => {
    const at = columns.indexOf(name);
    if (at < 0) return undefined;
    const values = rows.map((row) => hexCount(row[at]!));
    if (values.some((value) => value === undefined)) {
      problems.push(`/proc/net/stat/nf_conntrack: column ${name} is not hexadecimal counts`);
      return undefined;
    }
    return (values as number[]).reduce((sum, value) => sum + value, 0);
  };
  if (!columns.includes('entries') || rows.length === 0) return undefined;
  const events: Partial<Record<ConntrackEventKind, number>> = {};
  for (const [kind, name] of Object.entries(CONNTRACK_EVENT_KINDS) as Array<
    [ConntrackEventKind, string]
  >) {
    const sum = column(name);
    if (sum !== undefined && Number.isSafeInteger(sum)) events[kind] = sum;
  }
  const at = columns.indexOf('entries');
  const entries = hexCount(rows[0]![at]!);
  if (entries === undefined)
    problems.push('/proc/net/stat/nf_conntrack: column entries is not a hexadecimal count');
  return { ...(entries !== undefined ? { entries } : {}), events, problems };
}

/** nf_conntrack_max: a decimal integer the kernel can hold (an int), else undefined. */
export function parseConntrackMax(text: string): number | undefined {
  const trimmed = text.replace(/\n$/, '');
  if (!/^\d{1,10}$/.test(trimmed)) return undefined;
  const value = Number(trimmed);
  return value <= 2 ** 31 - 1 ? value : undefined;
}

/** The namespace's conntrack health, or undefined where conntrack is not loaded. */
export async function readConntrackHealth(
  read: (path: string) => Promise<string> = (path) => readFile(path, 'utf8'),
): Promise<ConntrackHealth | undefined> {
  let stat: Omit<ConntrackHealth, 'max'> | undefined;
  try {
    stat = parseConntrackStat(await read('/proc/net/stat/nf_conntrack'));
  } catch {
    return undefined; // conntrack not loaded here
  }
  if (!stat) return undefined;
  const file = '/proc/sys/net/netfilter/nf_conntrack_max';
  const text = await read(file).catch((err: unknown) => err as Error);
  const max = typeof text === 'string' ? parseConntrackMax(text) : undefined;
  if (max !== undefined) return { ...stat, max };
  const why =
    typeof text === 'string'
      ? `${file} holds ${JSON.stringify(text.slice(0, 40))}, not a count`
      : `${file} cannot be read (${text.message})`;
  return { ...stat, problems: [...stat.problems, why] };
}
