// The everyday edit of a large config (docs/writes.md, "The everyday edit"): a few lines of a CIDR
// list added or removed. The last load's bytes, where its lists lie and its sets' merge are kept,
// so that a load whose files differ from the last only in lines of one list each reads just those
// lines, merges again just near the entries they change, and splices the sets' lists; anything else
// is loaded whole (load.ts). Either way the result is what a whole load of the files gives
// (test/unit/config/incremental.test.ts holds the two side by side over random edits).
import { Buffer } from 'node:buffer';
import {
  MergedSetV4,
  mergeToLines,
  parseCidr,
  splicedList,
  type Prefix,
  type Splice,
} from '../cidr/index.js';
import { defaultNonMasqueradeCIDRs, hashOf, linkLocalPrefixes } from './build.js';
import type { ConfigFragment } from './fragment.js';
import { KEY_BY_NAME, keyValue } from './keys.js';
import { loadFiles, type FileBytes, type TextFacts } from './load.js';
import type { ConfigSource } from './source.js';
import { loadOptionsKey } from './base.js';
import type { Config, CidrSets, LoadOptions, LoadResult } from './types.js';
import { listLine, type ListRegion } from './yaml-fast.js';

type ListKey = 'nonMasqueradeCIDRs' | 'masqueradeCIDRs';
type SetName = 'nonMasquerade' | 'masquerade';
const SET_OF: Record<ListKey, SetName> = {
  nonMasqueradeCIDRs: 'nonMasquerade',
  masqueradeCIDRs: 'masquerade',
};

/** A list region with the key it belongs to. */
interface Region extends ListRegion {
  readonly name: ListKey;
}

interface FileState {
  readonly file: string;
  readonly bytes: Buffer;
  /** Undefined: the fast path did not read this file (or it is not ASCII): never spliced. */
  readonly regions: readonly Region[] | undefined;
}

/**
 * One set's entries: IPv4 sorted and merged, IPv6 as given (few, merged whole when they change).
 */
interface SetEntries {
  readonly v4: MergedSetV4;
  readonly v6: readonly Prefix[];
}

interface State {
  readonly options: string;
  readonly source: string;
  readonly files: readonly FileState[];
  readonly result: LoadResult & { ok: true };
  /** Entries of both lists over the files, for cidrLimit. */
  readonly entries: number;
  /** The sets' entries, worked out after the load (prepare) or at the first edit. */
  sets?: Record<SetName, SetEntries>;
  /** The fragments, until the sets are worked out from them. */
  fragments?: TextFacts['fragments'];
  /** Edits since the result's lists were last made (lazySets). */
  readonly pending: number;
}

/** How each of the four lists of a Config changed from the last result. */
export type SetsSplices = Record<SetName, { readonly ipv4: Splice; readonly ipv6: Splice }>;

/**
 * The sets' lists as splices of the last result's, each made when first read: the config worker,
 * which sends only the splices (load-worker.ts), makes them every LAZY_MAX edits rather than at
 * each.
 */
function lazySets(old: CidrSets, splices: { ipv4: Splice; ipv6: Splice }): CidrSets {
  let ipv4: readonly string[] | undefined;
  let ipv6: readonly string[] | undefined;
  let base: CidrSets | undefined = old;
  const made = () => {
    if (ipv4 && ipv6) base = undefined; // the chain of splices behind ends here
  };
  return Object.freeze({
    get ipv4(): readonly string[] {
      ipv4 ??= splicedList((base as CidrSets).ipv4, splices.ipv4);
      made();
      return ipv4;
    },
    get ipv6(): readonly string[] {
      ipv6 ??= splicedList((base as CidrSets).ipv6, splices.ipv6);
      made();
      return ipv6;
    },
  });
}

/** Edits after which the lists are made, so that the chain of splices behind them stays short. */
const LAZY_MAX = 32;

/**
 * Each side's IPv6 lists beyond this many entries are not merged again on an edit: loaded whole.
 */
const V6_ENTRIES_MAX = 10_000;
/** Changed lines beyond this many in one file, or bytes beyond these: loaded whole. */
const CHANGED_LINES_MAX = 4_096;
const CHANGED_BYTES_MAX = 256 * 1024;

/**
 * The first index at which a and b differ (their common length when one is a prefix of the other).
 */
function commonPrefix(a: Buffer, b: Buffer): number {
  const length = Math.min(a.length, b.length);
  let lo = 0;
  let hi = length;
  // The longest n with a[0, n) equal to b[0, n), found by halving with memcmp.
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    if (a.compare(b, lo, mid, lo, mid) === 0) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** The length of the common tail of a and b past `head` in both. */
function commonSuffix(a: Buffer, b: Buffer, head: number): number {
  let lo = 0;
  let hi = Math.min(a.length, b.length) - head;
  // Tails of length lo are equal; the next stretch [length - mid, length - lo) is compared.
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    const same = a.compare(b, b.length - mid, b.length - lo, a.length - mid, a.length - lo) === 0;
    if (same) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * The complete lines in which two texts differ: [start, oldEnd) of the old, [start, newEnd) of the
 * new. Both ends lie at a line start of their own text (or its end): the common tail may begin at
 * a line start of one text but mid-line in the other (a `#` put before a line, two lines joined),
 * and then the line it begins in is part of the change.
 */
export function changedLines(before: Buffer, after: Buffer) {
  const head = commonPrefix(before, after);
  const tail = commonSuffix(before, after, head);
  const start = head === 0 ? 0 : before.lastIndexOf(10, head - 1) + 1;
  const oldTail = before.length - tail;
  const newTail = after.length - tail;
  const lineStart = (text: Buffer, at: number) => at === 0 || text[at - 1] === 10;
  let oldEnd: number;
  if (oldTail >= before.length || (lineStart(before, oldTail) && lineStart(after, newTail))) {
    oldEnd = oldTail;
  } else {
    // Past the tail's start the two texts are the same bytes: the next newline ends a line in both.
    const newline = before.indexOf(10, oldTail);
    oldEnd = newline < 0 ? before.length : newline + 1;
  }
  const newEnd = oldEnd - before.length + after.length;
  return { start, oldEnd, newEnd };
}

/** Lines of [start, end), which ends at a line start or at the text's end. */
function linesOf(text: string): { text: string; start: number; end: number }[] {
  const lines: { text: string; start: number; end: number }[] = [];
  let start = 0;
  while (start < text.length) {
    const newline = text.indexOf('\n', start);
    const end = newline < 0 ? text.length : newline;
    lines.push({ text, start, end });
    start = end + 1;
  }
  // A text ending without a newline after an empty last line: "" is that line.
  return lines;
}

/** Whether every byte is 7-bit and none is a carriage return or tab (the fast path's own rule). */
function plainAscii(bytes: Buffer): boolean {
  for (const byte of bytes) if (byte >= 0x80 || byte === 13 || byte === 9) return false;
  return true;
}

/**
 * The items of complete lines read under a list of this indent; undefined: not only items and
 * blanks.
 */
function itemsOf(text: string, indent: number | undefined): string[] | undefined {
  const items: string[] = [];
  for (const line of linesOf(text)) {
    const read = listLine(line.text, line.start, line.end);
    if (read === 'blank') continue;
    if (read === 'end' || read === 'unsupported') return undefined;
    if (indent !== undefined && read.indent !== indent) return undefined;
    items.push(read.value);
  }
  return items;
}

/** One file's edit of one list: its items removed and added, its count after, the bytes' shift. */
type Edit = {
  region: number;
  removed: string[];
  added: string[];
  count: number;
  delta: number;
  /** The changed lines in the new bytes: [start, end). */
  start: number;
  end: number;
};

/** A file's change as an edit of one of its lists, or undefined when it is not one. */
function listEdit(state: FileState, after: Buffer): Edit | undefined {
  if (state.regions === undefined) return undefined;
  const { start, oldEnd, newEnd } = changedLines(state.bytes, after);
  const region = state.regions.findIndex((r) => r.start <= start && oldEnd <= r.end);
  if (region < 0) return undefined;
  const was = state.bytes.subarray(start, oldEnd);
  const is = after.subarray(start, newEnd);
  if (!plainAscii(is)) return undefined;
  const text = (bytes: Buffer) => bytes.toString('latin1');
  // A trailing newline closes the last line; without one the range ends at the text's end.
  const body = (bytes: Buffer) =>
    bytes.length > 0 && bytes[bytes.length - 1] === 10 ? text(bytes.subarray(0, -1)) : text(bytes);
  if (was.length + is.length > CHANGED_BYTES_MAX) return undefined;
  const oldText = body(was);
  const newText = body(is);
  // "" from an empty range is no line at all; an empty line is "" too, and reads as blank alike.
  const removed = was.length === 0 ? [] : itemsOf(oldText, undefined);
  const added = is.length === 0 ? [] : itemsOf(newText, (state.regions[region] as Region).indent);
  if (removed === undefined || added === undefined) return undefined;
  if (removed.length + added.length > CHANGED_LINES_MAX) return undefined;
  const count = (state.regions[region] as Region).count - removed.length + added.length;
  return { region, removed, added, count, delta: is.length - was.length, start, end: newEnd };
}

/** An entry as the key's parse reads it, or undefined where that would be an error. */
function entryOf(value: string, options: LoadOptions): Prefix | undefined {
  try {
    const prefix = parseCidr(value);
    return prefix.family === 6 && !options.enableIPv6 ? undefined : prefix;
  } catch {
    return undefined;
  }
}

/**
 * Removes one occurrence of each of `gone` (by address and length); undefined if one is missing.
 */
function withoutV6(entries: readonly Prefix[], gone: readonly Prefix[]): Prefix[] | undefined {
  const left = [...entries];
  for (const prefix of gone) {
    const at = left.findIndex((p) => p.addr === prefix.addr && p.len === prefix.len);
    if (at < 0) return undefined;
    left.splice(at, 1);
  }
  return left;
}

function linesList(text: string): readonly string[] {
  return text === '' ? [] : text.split('\n');
}

/**
 * Both lists' entries over the files, as buildConfig counts them against cidrLimit: without
 * nonMasqueradeCIDRs in any file, the built-in list (which no edit of a list changes).
 */
function listsOf(fragments: readonly ConfigFragment[], options: LoadOptions) {
  const given = fragments.some((f) => f.nonMasqueradeCIDRs !== undefined);
  return {
    nonMasq: given
      ? fragments.flatMap((f) => f.nonMasqueradeCIDRs ?? [])
      : defaultNonMasqueradeCIDRs(options),
    masq: fragments.flatMap((f) => f.masqueradeCIDRs ?? []),
  };
}

/**
 * Where an answer worked out from the last one changed a file: its bytes after, the changed range.
 */
export interface EditedRange {
  readonly file: string;
  readonly bytes: Buffer;
  readonly start: number;
  readonly end: number;
}

/** "lines 12-14" of a range of a file's bytes, counted by the newlines before it (1 first). */
export function linesText(range: EditedRange): string {
  const { bytes, start, end } = range;
  let line = 1;
  for (let i = bytes.indexOf(10); i >= 0 && i < start; i = bytes.indexOf(10, i + 1)) line++;
  let last = line;
  for (let i = bytes.indexOf(10, start); i >= 0 && i < end - 1; i = bytes.indexOf(10, i + 1))
    last++;
  return last > line ? `lines ${line}-${last}` : `line ${line}`;
}

/**
 * Each file's change from the last load as an edit of one of its lists (undefined: unchanged), and
 * where each changed; undefined when the files are others or one changed otherwise.
 */
function fileEdits(
  was: readonly FileState[],
  files: readonly FileBytes[],
): { edits: (Edit | undefined)[]; ranges: EditedRange[] } | undefined {
  if (files.length !== was.length) return undefined;
  const edits: (Edit | undefined)[] = [];
  const ranges: EditedRange[] = [];
  for (const [i, read] of files.entries()) {
    const state = was[i] as FileState;
    if (!('bytes' in read) || read.file !== state.file) return undefined;
    if (read.bytes.equals(state.bytes)) {
      edits.push(undefined);
      continue;
    }
    const edit = listEdit(state, read.bytes);
    if (!edit) return undefined;
    edits.push(edit);
    ranges.push({ file: read.file, bytes: read.bytes, start: edit.start, end: edit.end });
  }
  return { edits, ranges };
}

type EntryChanges = Record<SetName, { removed: Prefix[]; added: Prefix[] }>;

/**
 * Each list's entries removed and added over the files, parsed as the key's parse does, and the
 * count of entries after; undefined where the whole load must answer (an invalid entry, a list
 * left empty).
 */
function entryChanges(
  state: State,
  edits: readonly (Edit | undefined)[],
  options: LoadOptions,
): { changes: EntryChanges; entries: number } | undefined {
  const changes: EntryChanges = {
    nonMasquerade: { removed: [], added: [] },
    masquerade: { removed: [], added: [] },
  };
  let entries = state.entries;
  for (const [i, edit] of edits.entries()) {
    if (!edit) continue;
    const region = (state.files[i] as FileState).regions?.[edit.region] as Region;
    const change = changes[SET_OF[region.name]];
    for (const value of edit.removed) {
      const prefix = entryOf(value, options);
      if (!prefix) return undefined;
      change.removed.push(prefix);
    }
    for (const value of edit.added) {
      const prefix = entryOf(value, options);
      if (!prefix) return undefined; // an invalid entry: the whole load words the error
      change.added.push(prefix);
    }
    // A list left empty reads as the key given as null: loaded whole.
    if (edit.count === 0) return undefined;
    entries += edit.added.length - edit.removed.length;
  }
  return { changes, entries };
}

/**
 * The sets' entries with the changes made (the IPv4 merge changed in place), how each list of
 * `config` is spliced by them, and the lists so spliced; undefined where that cannot be done.
 */
function splicedSets(
  sets: Record<SetName, SetEntries>,
  config: Config,
  changes: EntryChanges,
):
  | {
      sets: Record<SetName, SetEntries>;
      splices: Record<SetName, { ipv4: Splice; ipv6: Splice }>;
      lists: Record<SetName, CidrSets>;
    }
  | undefined {
  const next = { ...sets };
  const splices = {} as Record<SetName, { ipv4: Splice; ipv6: Splice }>;
  const lists = {} as Record<SetName, CidrSets>;
  for (const name of ['nonMasquerade', 'masquerade'] as const) {
    const { removed, added } = changes[name];
    const before = sets[name];
    const old = config[name];
    const v4 = before.v4.change(
      removed.filter((p) => p.family === 4),
      added.filter((p) => p.family === 4),
    );
    if (!v4) return undefined;
    let ipv6: Splice = { at: 0, deleteCount: 0, inserted: [] };
    let v6 = before.v6;
    const gone6 = removed.filter((p) => p.family === 6);
    const put6 = added.filter((p) => p.family === 6);
    if (gone6.length + put6.length > 0) {
      const left = withoutV6(v6, gone6);
      if (!left || left.length + put6.length > V6_ENTRIES_MAX) return undefined;
      v6 = left.concat(put6);
      ipv6 = { at: 0, deleteCount: old.ipv6.length, inserted: linesList(mergeToLines(v6)) };
    }
    next[name] = { v4: before.v4, v6 };
    splices[name] = { ipv4: v4, ipv6 };
    lists[name] = lazySets(old, splices[name]);
  }
  return { sets: next, splices, lists };
}

/** The files' state after the edits: the new bytes, the regions past each edit shifted by it. */
function movedOn(
  was: readonly FileState[],
  edits: readonly (Edit | undefined)[],
  files: readonly FileBytes[],
): FileState[] {
  return was.map((state, i): FileState => {
    const edit = edits[i];
    const read = files[i] as FileBytes & { bytes: Buffer };
    if (!edit) return state;
    const regions = (state.regions as Region[]).map((region, r) => {
      if (r < edit.region) return region;
      return r === edit.region
        ? { ...region, end: region.end + edit.delta, count: edit.count }
        : { ...region, start: region.start + edit.delta, end: region.end + edit.delta };
    });
    return { file: state.file, bytes: read.bytes, regions };
  });
}

export interface ConfigCacheOptions {
  /**
   * Runs each whole load (the config worker gives it the young generation's growth: src/memory.ts).
   */
  readonly aroundWholeLoad?: <T>(load: () => T) => T;
  /**
   * A fault put in on purpose by the audit's tests (docs/writes.md, "The everyday edit"): the
   * first edit that adds an entry to nonMasqueradeCIDRs leaves it out, as a bug of this file
   * would. The agent never passes it (harness/agent-with-parts.js does).
   */
  readonly dropFirstAddition?: boolean;
}

/**
 * Loads of one config source, each from the last where it can be: give it the files' bytes as read
 * (readSourceFiles) and it answers what loadFiles would, with how the sets' lists changed from its
 * last answer when it worked that out from the last load (undefined: a whole load).
 */
export class ConfigCache {
  private state: State | undefined;
  private readonly aroundWholeLoad: <T>(load: () => T) => T;
  /** The test fault (ConfigCacheOptions.dropFirstAddition) while it has not struck. */
  private faultLeft: boolean;

  constructor(options: ConfigCacheOptions = {}) {
    this.aroundWholeLoad = options.aroundWholeLoad ?? ((load) => load());
    this.faultLeft = options.dropFirstAddition === true;
  }

  /**
   * Where the last answer worked out from the one before changed the files (empty: a whole load).
   */
  lastEdits: readonly EditedRange[] = [];

  load(
    source: ConfigSource & { kind: 'file' | 'directory' },
    files: readonly FileBytes[],
    options: LoadOptions,
  ): { result: LoadResult; splices?: SetsSplices } {
    const key = loadOptionsKey(options);
    const edit = this.state && this.edit(this.state, source, files, options, key);
    if (edit) return edit;
    this.state = undefined;
    this.lastEdits = [];
    const facts: TextFacts = { regions: [], fragments: [] };
    const result = this.aroundWholeLoad(() => loadFiles(source, files, options, undefined, facts));
    // Only the node-wide lists are edited in place: a config with pod policies loads whole.
    if (
      result.ok &&
      !options.provenance &&
      result.config.skipped === undefined &&
      result.config.podPolicies === undefined
    ) {
      const states: FileState[] = [];
      files.forEach((read, i) => {
        if (!('bytes' in read)) return;
        const regions = facts.regions[i]?.flatMap((region): Region[] => {
          const name = KEY_BY_NAME.get(region.key.toLowerCase());
          return name === 'nonMasqueradeCIDRs' || name === 'masqueradeCIDRs'
            ? [{ ...region, name }]
            : [];
        });
        states.push({ file: read.file, bytes: read.bytes, regions });
      });
      const { nonMasq, masq } = listsOf(facts.fragments, options);
      const entries = nonMasq.length + masq.length;
      this.state = {
        options: key,
        source: `${source.kind}|${source.path}|${source.warnings.join('\n')}`,
        files: states,
        result: result as State['result'],
        entries,
        fragments: facts.fragments,
        pending: 0,
      };
    }
    return { result };
  }

  /** Keeps nothing: the next load is whole. */
  forget(): void {
    this.state = undefined;
  }

  /** Works out the sets' entries from the last whole load, ahead of the next edit. */
  prepare(options: LoadOptions): void {
    const state = this.state;
    if (!state || state.sets) return;
    const { config } = state.result;
    const { nonMasq, masq } = listsOf(state.fragments ?? [], options);
    const effective = nonMasq.concat(linkLocalPrefixes(config.keys, options));
    const entries = (prefixes: readonly Prefix[]): SetEntries => ({
      v4: new MergedSetV4(prefixes.filter((p) => p.family === 4)),
      v6: prefixes.filter((p) => p.family === 6),
    });
    state.sets = { nonMasquerade: entries(effective), masquerade: entries(masq) };
    delete state.fragments;
  }

  private edit(
    state: State,
    source: ConfigSource & { kind: 'file' | 'directory' },
    files: readonly FileBytes[],
    options: LoadOptions,
    key: string,
  ): { result: LoadResult; splices: SetsSplices } | undefined {
    if (state.options !== key) return undefined;
    if (state.source !== `${source.kind}|${source.path}|${source.warnings.join('\n')}`)
      return undefined;
    const edited = fileEdits(state.files, files);
    const changed = edited && entryChanges(state, edited.edits, options);
    if (!changed) return undefined;
    const { config } = state.result;
    // A config with pod policies loads whole: the bound is the node-wide files'.
    if (changed.entries > keyValue(config.keys, 'cidrLimit')) return undefined; // the whole load words the error
    const { changes } = changed;
    if (this.faultLeft && changes.nonMasquerade.added.length > 0) {
      this.faultLeft = false;
      changes.nonMasquerade.added.pop();
    }
    this.prepare(options);
    // In place: from here on, a failure leaves the state unusable (load() drops it).
    const spliced = splicedSets(state.sets as Record<SetName, SetEntries>, config, changes);
    if (!spliced) return undefined;
    const { sets, splices, lists } = spliced;
    const pending = state.pending + 1;
    if (pending >= LAZY_MAX)
      for (const name of ['nonMasquerade', 'masquerade'] as const) void lists[name].ipv4;
    const meaning = { ...config, nonMasquerade: lists.nonMasquerade, masquerade: lists.masquerade };
    const v4Json = {
      nonMasquerade: sets.nonMasquerade.v4.json(),
      masquerade: sets.masquerade.v4.json(),
    };
    const next: Config = Object.freeze({ ...meaning, hash: hashOf(meaning, v4Json) });
    const result = Object.freeze({
      ok: true as const,
      config: next,
      warnings: state.result.warnings,
    });
    this.state = {
      ...state,
      files: movedOn(state.files, edited.edits, files),
      result,
      entries: changed.entries,
      sets,
      pending: pending >= LAZY_MAX ? 0 : pending,
    };
    this.lastEdits = edited.ranges;
    return { result, splices };
  }
}
