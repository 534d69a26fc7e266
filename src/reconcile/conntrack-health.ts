// Conntrack health of the node's namespace (README, "What the node's NAT does"): how full the table
// is and the kernel's per-CPU event counters summed, read from /proc (the namespace's own files: a
// few hundred bytes whatever the number of entries, no dump of the table). Pure but for the reads.
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
  readonly entries: number;
  readonly max: number;
  /** Summed over the CPUs; a kind this kernel does not count is absent. */
  readonly events: Partial<Record<ConntrackEventKind, number>>;
}

/**
 * /proc/net/stat/nf_conntrack: a header of column names, then one line per CPU of hexadecimal
 * counters. `entries` is the table's count on every line; the others are the CPU's own.
 */
export function parseConntrackStat(text: string): Omit<ConntrackHealth, 'max'> | undefined {
  const [header, ...lines] = text.trim().split('\n');
  if (!header) return undefined;
  const columns = header.trim().split(/\s+/);
  const cpus = lines.map((line) =>
    line
      .trim()
      .split(/\s+/)
      .map((hex) => parseInt(hex, 16)),
  );
  const column = (name: string) => columns.indexOf(name);
  const entriesAt = column('entries');
  if (entriesAt < 0 || cpus.length === 0) return undefined;
  const events: Partial<Record<ConntrackEventKind, number>> = {};
  for (const [kind, name] of Object.entries(CONNTRACK_EVENT_KINDS) as Array<
    [ConntrackEventKind, string]
  >) {
    const at = column(name);
    if (at >= 0) events[kind] = cpus.reduce((sum, cpu) => sum + (cpu[at] ?? 0), 0);
  }
  return { entries: cpus[0]![entriesAt] ?? 0, events };
}

/** The namespace's conntrack health, or undefined where conntrack is not loaded. */
export async function readConntrackHealth(
  read: (path: string) => Promise<string> = (path) => readFile(path, 'utf8'),
): Promise<ConntrackHealth | undefined> {
  try {
    const stat = parseConntrackStat(await read('/proc/net/stat/nf_conntrack'));
    if (!stat) return undefined;
    const max = Number((await read('/proc/sys/net/netfilter/nf_conntrack_max')).trim());
    return { ...stat, max: Number.isFinite(max) ? max : 0 };
  } catch {
    return undefined;
  }
}
