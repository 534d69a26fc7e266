// YAML 1.1 / JSON text -> top-level mapping. The `yaml` package needs ~1.5 s for 100 000 list items,
// so plain block lists of CIDR-looking items are cut out and parsed by hand when the whole document
// is made of single-line constructs only; anything else goes to the full parser unchanged.
import { parseDocument } from 'yaml';
import { escapeUnprintable } from '../cidr/index.js';

/** A parser's message may quote the input: keep it printable and short. */
function reasonText(message: string): string {
  return escapeUnprintable(message.length > 300 ? `${message.slice(0, 300)}…` : message);
}

/** yaml's first line holds the reason and position; the rest is a source excerpt. */
function yamlReason(message: string): string {
  return reasonText((message.split('\n')[0] as string).replace(/:$/, ''));
}

export type ParsedText = { ok: true; value: unknown } | { ok: false; message: string };

// A column-0 key whose value is a single-line plain scalar or nothing, then an optional comment.
const KEY_LINE = /^([A-Za-z][A-Za-z0-9_-]*):(?:[ ]+([^\s"'[\]{}|>&*!%@`#][^#]*?))?[ ]*(?:[ ]#.*)?$/;
// A list item that YAML 1.1 can only read as this exact string: CIDR characters including a "/".
const ITEM_LINE =
  /^( *)- +(?:([0-9A-Fa-f.:]*\/[0-9A-Fa-f.:/]*)|"([0-9A-Fa-f.:/]*)"|'([0-9A-Fa-f.:/]*)')[ ]*(?:[ ]#.*)?$/;
const BLANK_OR_COMMENT = /^[ ]*(?:#.*)?$/;
const LIST_KEYS = new Set(['nonmasqueradecidrs', 'masqueradecidrs']);

export function parseYamlFull(text: string): ParsedText {
  const doc = parseDocument(text, { version: '1.1', uniqueKeys: true });
  const firstError = doc.errors[0];
  if (firstError !== undefined) {
    return { ok: false, message: `invalid YAML: ${yamlReason(firstError.message)}` };
  }
  try {
    return { ok: true, value: doc.toJS({ mapAsMap: true, maxAliasCount: 100 }) };
  } catch (err) {
    return { ok: false, message: `invalid YAML: ${yamlReason((err as Error).message)}` };
  }
}

/** Returns undefined when the document is not in the simple shape the fast path handles exactly. */
export function parseYamlFast(text: string): ParsedText | undefined {
  if (text.includes('\r') || text.includes('\t')) return undefined;
  const lines = text.split('\n');
  const kept: string[] = [];
  const lists = new Map<string, string[]>();
  for (let i = 0; i < lines.length;) {
    const line = lines[i] as string;
    const key = KEY_LINE.exec(line);
    if (key === null) {
      if (!BLANK_OR_COMMENT.test(line)) return undefined;
      kept.push(line);
      i++;
      continue;
    }
    i++;
    const items: string[] = [];
    let indent = -1;
    for (; i < lines.length; i++) {
      const next = lines[i] as string;
      const item = ITEM_LINE.exec(next);
      if (item === null) {
        if (BLANK_OR_COMMENT.test(next)) continue;
        break;
      }
      if (key[2] !== undefined) return undefined; // items under "key: value" would be a multi-line scalar
      const itemIndent = (item[1] as string).length;
      if (indent >= 0 && itemIndent !== indent) return undefined;
      indent = itemIndent;
      const value = (item[2] ?? item[3] ?? item[4]) as string;
      if (item[2] !== undefined && value.endsWith(':')) return undefined;
      items.push(value);
    }
    if (items.length === 0) {
      kept.push(line);
    } else if (!LIST_KEYS.has((key[1] as string).toLowerCase())) {
      return undefined; // other keys may resolve to non-strings (YAML 1.1 "yes:"), leave them to the parser
    } else {
      kept.push(`${key[1] as string}: []`);
      lists.set(key[1] as string, items);
    }
  }
  if (lists.size === 0) return undefined;
  // Errors are reported by the full parser so that line numbers match the file.
  const rest = parseYamlFull(kept.join('\n'));
  if (!rest.ok || !(rest.value instanceof Map)) return undefined;
  for (const [key, items] of lists) rest.value.set(key, items);
  return rest;
}

export function parseYaml(text: string): ParsedText {
  return parseYamlFast(text) ?? parseYamlFull(text);
}

/** JSON when the first non-blank character is "{", as upstream; otherwise YAML 1.1. */
export function parseConfigDocument(text: string): ParsedText {
  if (/^\s*\{/.test(text)) {
    try {
      const value: unknown = JSON.parse(text);
      const map = value !== null && typeof value === 'object' && !Array.isArray(value);
      return { ok: true, value: map ? new Map(Object.entries(value)) : value };
    } catch (err) {
      return { ok: false, message: `invalid JSON: ${reasonText((err as Error).message)}` };
    }
  }
  return parseYaml(text);
}
