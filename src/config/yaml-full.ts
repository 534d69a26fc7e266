// The `yaml` package's parse of a config (YAML 1.1), with its errors worded for the agent's log: one
// line, printable, the position as "at line L, column C". Callers bound the text first (bounds.ts).
import { isMap, isScalar, parseDocument } from 'yaml';
import { escapeUnprintable } from '../cidr/index.js';

export type ParsedText = { ok: true; value: unknown } | { ok: false; message: string };

/** A parser's message may quote the input: keep it printable and short. */
export function reasonText(message: string): string {
  return escapeUnprintable(message.length > 300 ? `${message.slice(0, 300)}…` : message);
}

/**
 * yaml's first line holds the reason and position; the rest is a source excerpt. A stack overflow's
 * position depends on how deep the stack happened to be: reported without it, so that the same file
 * gives the same error (and one log line) every time.
 */
function yamlReason(message: string): string {
  const first = (message.split('\n')[0] as string).replace(/:$/, '');
  if (/Maximum call stack size exceeded/.test(first)) return 'nested too deeply for the parser';
  return reasonText(first);
}

/** " at line L, column C" of offset `pos`, as the parser's own pretty errors say it. */
function at(text: string, pos: number | undefined): string {
  if (pos === undefined) return '';
  const before = text.lastIndexOf('\n', pos - 1);
  let line = 1;
  for (let i = text.indexOf('\n'); i >= 0 && i < pos; i = text.indexOf('\n', i + 1)) line++;
  return ` at line ${line}, column ${pos - before}`;
}

/**
 * The offset of the first top-level key given twice. The parser's own check (uniqueKeys) compares
 * every pair of keys in every mapping; this one is a set lookup per key, and only the top level
 * matters: a config's values are lists and scalars.
 */
function duplicateKeyOffset(contents: unknown): number | undefined {
  if (!isMap(contents)) return undefined;
  const seen = new Set<string>();
  for (const pair of contents.items) {
    if (!isScalar(pair.key)) continue;
    const id = `${typeof pair.key.value}:${String(pair.key.value)}`;
    if (seen.has(id)) return pair.key.range?.[0];
    seen.add(id);
  }
  return undefined;
}

export function parseYamlFull(text: string): ParsedText {
  // The parser makes an Error per problem it finds and may find one per token: without an excerpt
  // (prettyErrors) or a stack trace for each, that costs a third of the time.
  const stackTraceLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  let doc: ReturnType<typeof parseDocument>;
  try {
    doc = parseDocument(text, { version: '1.1', uniqueKeys: false, prettyErrors: false });
  } finally {
    Error.stackTraceLimit = stackTraceLimit;
  }
  const firstError = doc.errors[0];
  if (firstError !== undefined) {
    return {
      ok: false,
      message: `invalid YAML: ${yamlReason(firstError.message)}${at(text, firstError.pos[0])}`,
    };
  }
  const duplicate = duplicateKeyOffset(doc.contents);
  if (duplicate !== undefined) {
    return { ok: false, message: `invalid YAML: Map keys must be unique${at(text, duplicate)}` };
  }
  try {
    return { ok: true, value: doc.toJS({ mapAsMap: true, maxAliasCount: 100 }) };
  } catch (err) {
    return { ok: false, message: `invalid YAML: ${yamlReason((err as Error).message)}` };
  }
}
