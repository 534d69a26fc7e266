// Which tables are ours, and what our writes record in them (README, "When it writes"). The table's
// comment says it is ours; nftables cannot change a table's comment once the table exists (the
// kernel keeps the first one: measured, docs/design.md "Writes on the wire"), so the state of the
// latest write — generation, config hash, writer — rides on the base chain's jump rule, whose
// comment is replaced in the same transaction as every change.

/** What one write records: the count of writes, the config's hash, and which process wrote. */
export interface WriteMark {
  readonly generation: number;
  readonly hash: string;
  /** `START.RANDOM` of the writing process (see newWriterId); absent in tables of older releases. */
  readonly writer?: string;
}

const MARK =
  'ipmasq-agent generation ([1-9][0-9]{0,14}) config sha256:([0-9a-f]{64})((?: [a-z]+:[A-Za-z0-9._-]{1,64}){0,8})';
const TABLE_COMMENT = new RegExp(`^\\s*comment "${MARK}"$`, 'm');
const RULE_COMMENT = new RegExp(` jump [A-Za-z0-9_.-]+ comment "${MARK}"$`, 'm');
const WRITER_FIELD = / by:([0-9a-z]{1,12}\.[0-9a-z]{1,6})(?: |$)/;
/** nftables' limit on a comment's length. */
const COMMENT_MAX = 128;

/**
 * The comment text of a mark: the table's at creation, the jump rule's at every write. The writer
 * is a `by:` field; it fits nftables' 128 characters up to a generation of 9 digits and is left
 * out above (a table written that often is no longer told apart from another agent's by it).
 */
export function markText(mark: WriteMark): string {
  const text = `ipmasq-agent generation ${mark.generation} config sha256:${mark.hash}`;
  const withWriter = mark.writer ? `${text} by:${mark.writer}` : text;
  return withWriter.length <= COMMENT_MAX ? withWriter : text;
}

/**
 * Whose a listed table is: `ours` when its comment reads as markText writes it, with the latest
 * write's mark (the jump rule's, or the table's own in a table of an older release); `corrupt` when
 * the comment starts like ours but does not parse (a planted "generation 1e21"): ours to replace,
 * counting from 1 again; `foreign` when it has no comment of ours at all: never touched (README,
 * "Choices where the contract is silent").
 */
export type TableOwner =
  | ({ readonly kind: 'ours' } & WriteMark)
  | { readonly kind: 'corrupt' }
  | { readonly kind: 'foreign' };

function parseMark(match: RegExpExecArray): WriteMark {
  const writer = WRITER_FIELD.exec(match[3] ?? '')?.[1];
  return { generation: Number(match[1]), hash: match[2] ?? '', ...(writer ? { writer } : {}) };
}

export function tableOwner(listing: string): TableOwner {
  const table = TABLE_COMMENT.exec(listing);
  if (!table) {
    return /^\s*comment "ipmasq-agent/m.test(listing) ? { kind: 'corrupt' } : { kind: 'foreign' };
  }
  const rule = RULE_COMMENT.exec(listing);
  return { kind: 'ours', ...parseMark(rule ?? table) };
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
