// Data types of the nftables objects the agent writes, and of what the kernel's nftables rooms
// (kernel/ports.ts) take and answer. Behaviour (rendering) lives in render.ts; conntrack's records
// are kernel/conntrack.ts.
import type { TableFamily } from '../cidr/index.js';

export type { TableFamily } from '../cidr/index.js';

/**
 * What a set's elements are keyed by. Sets are declared `typeof EXPRESSION`, never `type
 * ipv4_addr`: libnftables up to 1.1.1 crashes on `type` sets written by 1.1.2 and later, while
 * `typeof` sets read back in every version (docs/operations.md, "nftables versions").
 */
export interface SetKey {
  /** Declared with `typeof` and matched in rules: `ip daddr`, or `ip daddr . meta l4proto`. */
  readonly expression: string;
  /** Written after every prefix: the concatenated layout pairs each with all protocols. */
  readonly elementSuffix: '' | ' . 0-255';
  /**
   * Written after an address looked up in the set (`nft get element`): one protocol of the range.
   */
  readonly probeSuffix?: ' . udp';
  /**
   * `names`: the elements are interface names (checked again and quoted when written), not
   * prefixes.
   */
  readonly elements?: 'names';
}

declare const frozenList: unique symbol;

/**
 * A set's elements: a frozen list, so that what is worked out from it (its rendering ahead of a
 * write, a diff against another) stays true while it is held. Made by frozenElements; a copy made
 * elsewhere is not one.
 */
export type Elements = readonly string[] & { readonly [frozenList]: true };

/** The list as Elements: itself when already frozen (the config's sets are), else a frozen copy. */
export function frozenElements(list: readonly string[]): Elements {
  return (Object.isFrozen(list) ? list : Object.freeze([...list])) as Elements;
}

export const NO_ELEMENTS = frozenElements([]);

export interface NamedSet {
  readonly name: string;
  readonly key: SetKey;
  readonly flags: readonly 'interval'[];
  /** At most this many elements (`size`). */
  readonly size?: number;
  /** Each element's life unless it says otherwise (`timeout`, which implies the timeout flag). */
  readonly timeoutS?: number;
  /**
   * Canonical prefixes formatted by src/cidr, or (a `names` key) interface names the config
   * checked: never text taken from a config file unchecked.
   */
  readonly elements: Elements;
  /**
   * Elements the agent adds for a moment (with a timeout) apart from the config: never written
   * with the table's content, changed by a write or compared with a read-back.
   */
  readonly transient?: true;
  /**
   * A verdict map (`map NAME { typeof KEY : verdict }`): each element is a prefix, ` : goto `, and
   * a chain of the table (`10.244.1.5/32 : goto pod-policy-0`). Written by libnftables only.
   */
  readonly map?: 'verdict';
  /** Written as the object's comment: text the agent made safe (objects.ts, safeComment). */
  readonly comment?: string;
  /**
   * Elements of this set rendered ahead of a write a slice at a time (render.ts,
   * prerenderElements): the whole set, or a change's additions. Taken wherever exactly those
   * elements are rendered for that family; a write's own copy of the table carries it, never the
   * compiled table.
   */
  readonly rendered?: RenderedElements;
}

/** `elements` as nft text for `family` and `suffix`: what the renderer would make of them. */
export interface RenderedElements {
  readonly family: TableFamily;
  readonly suffix: SetKey['elementSuffix'];
  readonly elements: Elements;
  readonly text: string;
}

export interface BaseChainHook {
  readonly type: 'nat' | 'filter';
  readonly hook: 'postrouting' | 'prerouting';
  readonly priority: 'srcnat' | 'raw';
  readonly policy: 'accept';
}

export interface Chain {
  readonly name: string;
  readonly base?: BaseChainHook;
  /** Rules as nft prints them; built only from typed values by the compiler. */
  readonly rules: readonly string[];
  /**
   * Not part of the decision (the late replies' chain): an in-place write makes it anew, with the
   * transient sets, wherever the kernel's differs from it (an older release's).
   */
  readonly transient?: true;
  /** Written as the chain's comment (not a base chain's). */
  readonly comment?: string;
}

export interface Table {
  readonly family: TableFamily;
  readonly name: string;
  readonly comment: string;
  /** Named counter objects, declared before the sets (as nft lists them). */
  readonly counters?: readonly string[];
  readonly sets: readonly NamedSet[];
  readonly chains: readonly Chain[];
}

/**
 * A change of our tables that only adds and deletes elements of address sets, or refills a plain
 * interval set, and moves the mark (docs/writes.md, "The everyday edit"): written as one netlink
 * transaction, without libnftables (nftables/change.ts, elementEdit; the addon's editElements).
 */
export interface ElementEdit {
  readonly tables: readonly TableElementEdit[];
  /** The namespace's generation id the change was worked out at: the kernel takes it only there. */
  readonly generation?: number;
}

export interface TableElementEdit {
  readonly family: TableFamily;
  readonly table: string;
  readonly sets: ReadonlyArray<{
    readonly set: NamedSet;
    readonly removed: Elements;
    readonly added: Elements;
    /**
     * The set flushed first, then `added` (all its elements) written, in the same transaction: a
     * plain interval set's whole change (`removed` is then empty).
     */
    readonly refill?: true;
  }>;
  /** The base chain whose one rule carries the mark, that rule before and after, and the marks. */
  readonly chain: string;
  readonly wasRule: string;
  readonly rule: string;
  readonly wasMark: string;
  readonly mark: string;
}

/**
 * Sets of ours that no rule refers to yet, filled with all their elements in one transaction over
 * netlink: the large sets of a change made on new sets (nftables/change.ts, renderKeyChangeApart),
 * whose elements libnftables would parse at about the kernel's own cost of inserting them
 * (docs/design.md, "Writes on the wire"). Moves no mark.
 */
export interface SetFill {
  readonly tables: ReadonlyArray<{
    readonly family: TableFamily;
    readonly table: string;
    readonly sets: readonly NamedSet[];
  }>;
}

/**
 * One set as the kernel holds it, compared with what an element-only write meant (the audit of
 * that write, docs/writes.md "The everyday edit"): element counts, and the first few differing
 * elements as address ranges ("first-last").
 */
export interface SetAudit {
  readonly held: number;
  readonly meant: number;
  readonly missingCount: number;
  readonly extraCount: number;
  readonly missing: readonly string[];
  readonly extra: readonly string[];
}

export interface TableRef {
  readonly family: TableFamily;
  readonly name: string;
}

/**
 * The namespace's nftables generation id read right before and right after one commit of ours, with
 * no other call of ours between (undefined where it could not be read). `after === before + 1` says
 * that no other commit came in that time; anything else, that another tool's did.
 */
export interface CommitStep {
  readonly before: number | undefined;
  readonly after: number | undefined;
}

/** How one commit of ours is made. */
export interface WriteOptions {
  /**
   * Made while this process's commit monitors are out of nftables' group (a large write: the
   * kernel makes no notification of each element while nobody listens). Another tool's commit
   * meanwhile goes unheard, and so counts as one that may have changed our tables.
   */
  readonly unheard?: boolean;
}

/**
 * How a libnftables call can fail (kernel/addon.ts), each counted by kind (reconcile/metrics.ts).
 */
export const nftFailureKinds = ['error', 'crash', 'timeout', 'spawn'] as const;
export type NftFailureKind = (typeof nftFailureKinds)[number];

/** A chain of any table, from the kernel's chain dump; `hook` only for a base chain. */
export interface ChainInfo {
  readonly family: string;
  readonly table: string;
  readonly name: string;
  readonly hook?: {
    /** `prerouting`, `input`, `forward`, `output`, `postrouting`, or `ingress`/`egress`. */
    readonly name: string;
    readonly priority: number;
    /** `filter`, `nat` or `route`. */
    readonly type: string;
  };
}

/** What a rule's expressions show, read from the kernel without libnftables. */
export interface RuleShape {
  readonly handle: number;
  /**
   * It masquerades or source-translates (`masq`, `nat` snat, an x_tables MASQUERADE/SNAT/NETMAP).
   */
  readonly translates: boolean;
  /** Chains it jumps or goes to with a verdict of its own. */
  readonly jumps: readonly string[];
  /** The verdict maps it looks up (`vmap`, anonymous ones too). */
  readonly maps?: readonly string[];
  /** The chains those maps' elements jump or go to: where the rule may send a packet. */
  readonly mapJumps?: readonly string[];
  /** The source ports its translation takes (`… to :A-B`), where it names them. */
  readonly ports?: { readonly first: number; readonly last: number };
  /** Its expressions' names, in order (`payload`, `cmp`, `masq`, …). */
  readonly expressions: readonly string[];
}

/** One rule as listed: its chain, handle and text (`nft -a -s`: counters without their values). */
export interface ListedRule {
  readonly chain: string;
  readonly handle: number;
  readonly text: string;
  /**
   * What the kernel's own expressions say (native/netlink.h): a rule they show translating is read
   * as translating even where its text is not understood, with a match that cannot be judged.
   */
  readonly translates?: boolean;
  /** The chains its verdict maps may send a packet to, as the kernel's elements say. */
  readonly branches?: readonly string[];
}

/** A base chain's rules and those of the chains it jumps to, by chain name, in order. */
export type ChainRules = ReadonlyMap<string, readonly ListedRule[]>;

/** A named counter's values, as the kernel holds them. */
export interface CounterValue {
  readonly name: string;
  readonly packets: number;
  readonly bytes: number;
}
