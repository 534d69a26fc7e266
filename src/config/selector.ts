// Kubernetes label selectors, as a pod policy's podSelector and namespaceSelector give them
// (docs/egress-policy.md, "Pod policies"): parsed and checked as the API server checks a
// LabelSelector (label keys and values, the four operators, `values` given exactly where an
// operator takes them), matched as apimachinery's labels.Selector matches, and written back in the
// agent's own spelling. Pure.
import { quote } from '../cidr/index.js';
import { parseLabel, ValueError } from './egress.js';

export const selectorOperators = ['In', 'NotIn', 'Exists', 'DoesNotExist'] as const;
export type SelectorOperator = (typeof selectorOperators)[number];

export interface LabelRequirement {
  readonly key: string;
  readonly operator: SelectorOperator;
  /** Sorted, each once; empty for Exists and DoesNotExist. */
  readonly values: readonly string[];
}

/**
 * A selector: every label given and every requirement must hold. Both empty: selects everything.
 */
export interface LabelSelector {
  /** Sorted by key. */
  readonly matchLabels: ReadonlyArray<readonly [string, string]>;
  readonly matchExpressions: readonly LabelRequirement[];
}

export const EVERYTHING: LabelSelector = Object.freeze({
  matchLabels: Object.freeze([]),
  matchExpressions: Object.freeze([]),
});

/**
 * A value that is not a selector: the message names where, below the key (`matchLabels["app"]`).
 */
export class SelectorError extends Error {}

/** More than any selector an operator writes; the API server's own bound is the object's size. */
const MAX_TERMS = 256;

function entriesOf(value: unknown): Array<[string, unknown]> | undefined {
  if (value instanceof Map)
    return [...(value as Map<unknown, unknown>)].map(([k, v]) => [String(k), v]);
  if (value !== null && typeof value === 'object' && !Array.isArray(value))
    return Object.entries(value as Record<string, unknown>);
  return undefined;
}

function what(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return `a string (${quote(value)})`;
  return `${typeof value} ${String(value)}`;
}

function checked(key: string, value: string, where: string): void {
  try {
    parseLabel(key, value);
  } catch (err) {
    if (err instanceof ValueError) throw new SelectorError(`${where}: ${err.message}`);
    throw err;
  }
}

/**
 * Parses a selector as written (YAML gives Maps, JSON objects). null (the key written with nothing
 * after it) selects everything, as `{}` does. Unknown fields are refused: a misspelt `matchLabel`
 * would otherwise select every pod.
 */
export function parseSelector(value: unknown): LabelSelector {
  if (value === null || value === undefined) return EVERYTHING;
  const fields = entriesOf(value);
  if (!fields)
    throw new SelectorError(
      `expected a mapping with matchLabels and/or matchExpressions, got ${what(value)}`,
    );
  let matchLabels: Array<[string, string]> = [];
  let matchExpressions: LabelRequirement[] = [];
  for (const [field, given] of fields) {
    if (field === 'matchLabels') matchLabels = parseMatchLabels(given);
    else if (field === 'matchExpressions') matchExpressions = parseExpressions(given);
    else
      throw new SelectorError(
        `${quote(field)} is not a field of a label selector (matchLabels, matchExpressions)`,
      );
  }
  if (matchLabels.length + matchExpressions.length > MAX_TERMS)
    throw new SelectorError(`more than ${MAX_TERMS} labels and expressions`);
  return Object.freeze({
    matchLabels: Object.freeze(matchLabels.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
    matchExpressions: Object.freeze(matchExpressions),
  });
}

function parseMatchLabels(value: unknown): Array<[string, string]> {
  if (value === null || value === undefined) return [];
  const entries = entriesOf(value);
  if (!entries)
    throw new SelectorError(
      `matchLabels: expected a mapping of labels to values, got ${what(value)}`,
    );
  return entries.map(([key, wanted]) => {
    const where = `matchLabels[${quote(key)}]`;
    if (typeof wanted !== 'string')
      throw new SelectorError(`${where}: expected a string value, got ${what(wanted)}`);
    checked(key, wanted, where);
    return [key, wanted];
  });
}

function parseExpressions(value: unknown): LabelRequirement[] {
  if (value === null || value === undefined) return [];
  if (!Array.isArray(value))
    throw new SelectorError(`matchExpressions: expected a list, got ${what(value)}`);
  return value.map((entry: unknown, i) => {
    const where = `matchExpressions[${i}]`;
    const fields = entriesOf(entry);
    if (!fields)
      throw new SelectorError(
        `${where}: expected a mapping with key, operator and values, got ${what(entry)}`,
      );
    let key: string | undefined;
    let operator: SelectorOperator | undefined;
    let values: string[] | undefined;
    for (const [field, given] of fields) {
      if (field === 'key') {
        if (typeof given !== 'string')
          throw new SelectorError(`${where}.key: expected a label key, got ${what(given)}`);
        key = given;
      } else if (field === 'operator') {
        if (typeof given !== 'string' || !(selectorOperators as readonly string[]).includes(given))
          throw new SelectorError(
            `${where}.operator: ${typeof given === 'string' ? quote(given) : what(given)} is not an operator (In, NotIn, Exists, DoesNotExist)`,
          );
        operator = given as SelectorOperator;
      } else if (field === 'values') {
        if (given === null || given === undefined) values = [];
        else if (!Array.isArray(given))
          throw new SelectorError(
            `${where}.values: expected a list of label values, got ${what(given)}`,
          );
        else
          values = given.map((v: unknown, j) => {
            if (typeof v !== 'string')
              throw new SelectorError(`${where}.values[${j}]: expected a string, got ${what(v)}`);
            return v;
          });
      } else {
        throw new SelectorError(`${where}: ${quote(field)} is not a field (key, operator, values)`);
      }
    }
    if (key === undefined) throw new SelectorError(`${where}: key is required`);
    if (operator === undefined) throw new SelectorError(`${where}: operator is required`);
    checked(key, '', `${where}.key`);
    const given = values ?? [];
    const takesValues = operator === 'In' || operator === 'NotIn';
    if (takesValues && given.length === 0)
      throw new SelectorError(
        `${where}.values: must be given, not empty, when the operator is ${operator}`,
      );
    if (!takesValues && given.length > 0)
      throw new SelectorError(`${where}.values: must be empty when the operator is ${operator}`);
    given.forEach((v, j) => checked(key as string, v, `${where}.values[${j}]`));
    return Object.freeze({ key, operator, values: Object.freeze([...new Set(given)].sort()) });
  });
}

/** Whether a selector selects an object with these labels. */
export function selects(selector: LabelSelector, labels: ReadonlyMap<string, string>): boolean {
  for (const [key, value] of selector.matchLabels) if (labels.get(key) !== value) return false;
  for (const { key, operator, values } of selector.matchExpressions) {
    const value = labels.get(key);
    const holds =
      operator === 'In'
        ? value !== undefined && values.includes(value)
        : operator === 'NotIn'
          ? value === undefined || !values.includes(value)
          : operator === 'Exists'
            ? value !== undefined
            : value === undefined;
    if (!holds) return false;
  }
  return true;
}

/** The selector as kubectl writes one (`app=db,tier in (a,b),!legacy`); `everything` when empty. */
export function selectorText(selector: LabelSelector): string {
  const terms = [
    ...selector.matchLabels.map(([key, value]) => `${key}=${value}`),
    ...selector.matchExpressions.map(({ key, operator, values }) =>
      operator === 'Exists'
        ? key
        : operator === 'DoesNotExist'
          ? `!${key}`
          : `${key} ${operator === 'In' ? 'in' : 'notin'} (${values.join(',')})`,
    ),
  ];
  return terms.length === 0 ? 'everything' : terms.join(',');
}
