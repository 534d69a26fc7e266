// Which tables are ours, and what our writes record in them (README, "Reading `nft list table ip
// ipmasq`"). The kernel keeps a table's comment as created (measured, docs/design.md "Writes on the
// wire"), so the table's comment only says whose it is and where the mark is; the mark of the
// latest write — generation, config hash, writer — rides on the base chain's jump rule, whose
// comment is replaced in the same transaction as every change. Tables of older releases carry a
// mark in the table comment: still ours, made anew once (reconcile/converge.ts, plan `upgrade`).

/** What one write records: the count of writes, the config's hash, and which process wrote. */
export interface WriteMark {
  readonly generation: number;
  readonly hash: string;
  /** `START.RANDOM` of the writing process (see newWriterId); absent in tables of older releases. */
  readonly writer?: string;
}

/** The table comment of this release: whose the table is, and where its current mark is. */
export const TABLE_COMMENT =
  'ipmasq-agent table: the current mark is on the jump rule of chain postrouting';
/** The comment of the stand-in that decides alone while an older release's table is made anew. */
export const STAND_IN_COMMENT = 'ipmasq-agent stand-in: deleted once the table is made anew';
/** The stand-in's name: the table's with `_upgrade` after it. */
export const standInName = (table: string) => `${table}_upgrade`;

/**
 * Whether the table `family name` is ours: `table` or its stand-in, in family ip or ip6 (or in one
 * of `families`, the ones managed).
 */
export const oursOrStandIn =
  (table: string, families: readonly string[] = ['ip', 'ip6']) =>
  (family: string, name: string): boolean =>
    families.includes(family) && (name === table || name === standInName(table));

/**
 * The largest generation a mark carries (15 digits: exact as a JavaScript number, and the mark
 * with a `by:` field fits nftables' 128 characters up to 9). The write after it counts from 1 again,
 * with a warning; a mark found past it is read as one (README, "Choices where the contract is silent").
 */
export const MAX_GENERATION = 999_999_999_999_999;

const MARK =
  'ipmasq-agent generation ([0-9]+) config sha256:([0-9a-f]{64})((?: [a-z]+:[A-Za-z0-9._-]{1,64}){0,8})';
const TABLE_MARK = new RegExp(`^\\s*comment "${MARK}"$`, 'm');
const TABLE_OURS = new RegExp(`^\\s*comment "${TABLE_COMMENT}"$`, 'm');
const TABLE_STARTS_OURS = /^\s*comment "ipmasq-agent/m;
const RULE_MARK = new RegExp(` jump [A-Za-z0-9_.-]+ comment "${MARK}"$`, 'm');
const RULE_STARTS_OURS = / jump [A-Za-z0-9_.-]+ comment "ipmasq-agent/m;
const WRITER_FIELD = / by:([0-9a-z]{1,12}\.[0-9a-z]{1,6})(?: |$)/;
const GENERATION = /^[1-9][0-9]{0,14}$/;
/** nftables' limit on a comment's length. */
const COMMENT_MAX = 128;

/**
 * The comment text of a mark, on the jump rule at every write. The writer is a `by:` field; it fits
 * nftables' 128 characters up to a generation of 9 digits and is left out above (a table written
 * that often is no longer told apart from another agent's by it).
 */
export function markText(mark: WriteMark): string {
  const text = `ipmasq-agent generation ${mark.generation} config sha256:${mark.hash}`;
  const withWriter = mark.writer ? `${text} by:${mark.writer}` : text;
  return withWriter.length <= COMMENT_MAX ? withWriter : text;
}

/** Whether a listed table is a stand-in of ours (named by standInName, with our comment). */
export function isStandIn(listing: string): boolean {
  return listing.includes(`\tcomment "${STAND_IN_COMMENT}"\n`);
}

/** The generation after `generation`: past MAX_GENERATION, 1 again. */
export function nextGeneration(generation: number): number {
  return generation >= MAX_GENERATION ? 1 : generation + 1;
}

/**
 * Whose a listed table is. `ours` when its comment is this release's or an older release's mark
 * (`olderRelease`: made anew once, so that the listing shows one mark), with the latest write's
 * mark — the jump rule's, or in an older release's table without one, the table's — or none;
 * `unreadableMark` when the mark found starts like ours but does not parse (a planted generation of
 * 16 digits, the count past its bound): counting restarts at 1, with a warning. `corrupt` when the
 * table's comment starts like ours but is neither (a planted "generation 1e21"): ours to replace,
 * counting from 1 again; `foreign` when it has no comment of ours at all: never touched (README,
 * "Choices where the contract is silent").
 */
export type TableOwner =
  | {
      readonly kind: 'ours';
      readonly mark: WriteMark | undefined;
      readonly olderRelease: boolean;
      readonly unreadableMark: boolean;
    }
  | { readonly kind: 'corrupt' }
  | { readonly kind: 'foreign' };

/** The mark of a match, or undefined when its generation is not 1 to MAX_GENERATION. */
function parseMark(match: RegExpExecArray): WriteMark | undefined {
  const digits = match[1] ?? '';
  if (!GENERATION.test(digits)) return undefined;
  const writer = WRITER_FIELD.exec(match[3] ?? '')?.[1];
  return { generation: Number(digits), hash: match[2] ?? '', ...(writer ? { writer } : {}) };
}

export function tableOwner(listing: string): TableOwner {
  const current = TABLE_OURS.test(listing);
  const older = current ? null : TABLE_MARK.exec(listing);
  if (!current && !older) {
    return TABLE_STARTS_OURS.test(listing) ? { kind: 'corrupt' } : { kind: 'foreign' };
  }
  const rule = RULE_MARK.exec(listing);
  // The latest mark: the jump rule's; in an older release's table without one, the table's.
  const found = rule ?? (RULE_STARTS_OURS.test(listing) ? null : older);
  const mark = found ? parseMark(found) : undefined;
  const unreadableMark = mark === undefined && (found !== null || RULE_STARTS_OURS.test(listing));
  return { kind: 'ours', mark, olderRelease: older !== null, unreadableMark };
}

/**
 * A writer id for this process: its start time in ms and a random part, both in base 36 to fit the
 * comment (`mil1j2k0.x7q`). Later starts are newer.
 */
export function newWriterId(now = Date.now(), random = Math.random): string {
  const part = Math.floor(random() * 36 ** 3)
    .toString(36)
    .padStart(3, '0');
  return `${Math.floor(now).toString(36)}.${part}`;
}

/** Whether writer a started after writer b (a table without a writer is of an older release). */
export function isNewerWriter(a: string | undefined, b: string | undefined): boolean {
  if (a === undefined) return false;
  if (b === undefined) return true;
  const [aStart = '', aRandom = ''] = a.split('.');
  const [bStart = '', bRandom = ''] = b.split('.');
  if (aStart !== bStart) return parseInt(aStart, 36) > parseInt(bStart, 36);
  return aRandom > bRandom;
}
