// The config worker's audits of its fast answers, on a thread of their own (docs/writes.md, "The
// everyday edit"): an audit's whole load of 100 000 CIDRs takes the worker ~0.1–0.2 s and its
// garbage more, and the next edit arriving meanwhile waited behind it. Here the worker sends the
// bytes it answered from and its answer in a compact form (each list as one string), and carries on
// answering; this thread loads the same bytes whole and names the first difference.
import { isMainThread, parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { collectGarbage, keepYoungGeneration } from '../memory.js';
import { loadFiles } from './load.js';
import type { ConfigSource } from './source.js';
import type { Config, LoadOptions, LoadResult } from './types.js';

/** An answer as the audit compares it: each of the four lists as one string, the rest as JSON. */
export type CompactAnswer =
  | { readonly ok: false; readonly error: string; readonly warnings: string }
  | {
      readonly ok: true;
      readonly lists: ReadonlyArray<readonly [name: string, entries: string]>;
      readonly rest: string;
      readonly warnings: string;
    };

/** What the worker asks this thread: the files' bytes it answered from, and its answer. */
export interface AuditRequest {
  readonly source: ConfigSource & { kind: 'file' | 'directory' };
  readonly files: ReadonlyArray<{ readonly file: string; readonly bytes: Uint8Array }>;
  readonly options: LoadOptions;
  readonly fast: CompactAnswer;
}

/**
 * The config but its sets, their lists not read: a spliced config's are made only when read
 * (incremental.ts), and the agent's thread makes its own from the splices; the audit compares the
 * rest as JSON.
 */
export function withoutSets(config: Config): Omit<Config, 'nonMasquerade' | 'masquerade'> {
  const rest: Record<string, unknown> = {};
  for (const key of Object.keys(config)) {
    if (key !== 'nonMasquerade' && key !== 'masquerade')
      rest[key] = (config as unknown as Record<string, unknown>)[key];
  }
  return rest as Omit<Config, 'nonMasquerade' | 'masquerade'>;
}

export function compactOf(result: LoadResult): CompactAnswer {
  const warnings = result.warnings.join('\n');
  if (!result.ok) return { ok: false, error: result.error.message, warnings };
  const lists: Array<readonly [string, string]> = [];
  for (const set of ['nonMasquerade', 'masquerade'] as const)
    for (const family of ['ipv4', 'ipv6'] as const)
      lists.push([`${set} ${family}`, result.config[set][family].join('\n')]);
  return { ok: true, lists, rest: JSON.stringify(withoutSets(result.config)), warnings };
}

/** The first difference between a fast answer and a whole load's, or undefined when they agree. */
export function compactDifference(fast: CompactAnswer, whole: CompactAnswer): string | undefined {
  if (fast.ok !== whole.ok) {
    return fast.ok
      ? `the whole load finds the config invalid (${(whole as { error: string }).error})`
      : 'the whole load finds the config valid';
  }
  if (!fast.ok || !whole.ok) {
    const [a, b] = [fast, whole].map((r) => (r as { error: string }).error);
    return a === b ? undefined : `errors differ: ${a} / ${b}`;
  }
  for (const [i, [name, entries]] of fast.lists.entries()) {
    const other = whole.lists[i]?.[1] ?? '';
    if (entries === other) continue;
    const a = entries === '' ? [] : entries.split('\n');
    const b = other === '' ? [] : other.split('\n');
    let at = 0;
    while (at < a.length && a[at] === b[at]) at++;
    return (
      `${name}: entry ${at + 1} is ${a[at] ?? 'missing'} in the fast answer, ` +
      `${b[at] ?? 'missing'} in the whole load (${a.length} and ${b.length} entries)`
    );
  }
  if (fast.rest !== whole.rest)
    return `the config's other keys differ: ${fast.rest.slice(0, 300)} / ${whole.rest.slice(0, 300)}`;
  if (fast.warnings !== whole.warnings) return 'the warnings differ';
  return undefined;
}

/** This thread's side: each request loaded whole and compared; the difference sent back. */
function serveAudits(port: MessagePort): void {
  // This thread's start set V8's flags back to their defaults, for the process: the young
  // generation kept as the config worker keeps it (src/memory.ts).
  keepYoungGeneration();
  port.on('message', (request: AuditRequest) => {
    const files = request.files.map(({ file, bytes }) => ({
      file,
      bytes: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength),
    }));
    const whole = loadFiles(request.source, files, request.options);
    port.postMessage({ difference: compactDifference(request.fast, compactOf(whole)) ?? null });
    setImmediate(collectGarbage);
  });
}

/** The workerData that starts this module as the audit thread. */
export const AUDIT_THREAD = { auditThread: true } as const;

if (!isMainThread && parentPort && (workerData as { auditThread?: boolean } | null)?.auditThread)
  serveAudits(parentPort);
