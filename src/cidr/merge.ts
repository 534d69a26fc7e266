// Union of prefixes as the smallest list of aligned prefixes: sort ranges, sweep, split back.
// IPv4 runs on plain numbers (exact below 2^53): bigint arithmetic is far slower (docs/design.md, "Figures").
import { Buffer } from 'node:buffer';
import { ADDRESS_BITS, CidrError, type Family } from './address.js';
import { formatPrefix, ipv4Number, type Prefix, prefixRange } from './prefix.js';

function bitLength(x: bigint): number {
  let n = 0;
  while (x > 0xffffffffn) {
    x >>= 32n;
    n += 32;
  }
  return n + 32 - Math.clz32(Number(x));
}

function splitRange(family: Family, first: bigint, last: bigint, out: Prefix[]): void {
  const bits = ADDRESS_BITS[family];
  let start = first;
  while (start <= last) {
    // The block is limited by the alignment of `start` and by the room left up to `last`.
    const alignBits = start === 0n ? bits : bitLength(start & -start) - 1;
    const roomBits = bitLength(last - start + 1n) - 1;
    const hostBits = Math.min(alignBits, roomBits);
    out.push({ family, addr: start, len: bits - hostBits });
    start += 1n << BigInt(hostBits);
  }
}

/** 2 ** n for n in 0…32: a table read, where `**` is a call to pow in optimized code. */
const POW2: Float64Array = Float64Array.from({ length: 33 }, (_, n) => 2 ** n);

/**
 * IPv4 blocks as (start, len) pairs in one typed array that doubles as it fills: the loops below run
 * once per entry of the largest lists, where pushes to a number[] and `**` (a call to pow) cost
 * several times more.
 */
interface Blocks {
  data: Float64Array;
  size: number;
}

/** The most blocks one IPv4 range splits into ([1, 2^32 - 2]: 31 growing, 31 shrinking), as numbers. */
const MOST_PER_RANGE = 2 * 62;

/** Room for one more range's blocks. */
function reserve(blocks: Blocks): void {
  if (blocks.data.length - blocks.size >= MOST_PER_RANGE) return;
  const grown = new Float64Array(blocks.data.length * 2 + MOST_PER_RANGE);
  grown.set(blocks.data.subarray(0, blocks.size));
  blocks.data = grown;
}

/** Appends (start, len) for each of the fewest aligned IPv4 prefixes covering [first, last], in order. */
function splitRangeV4(first: number, last: number, blocks: Blocks): void {
  reserve(blocks);
  const data = blocks.data;
  let size = blocks.size;
  let start = first;
  while (start <= last) {
    // 32-bit operators see the same bit pattern for start < 2^32, so these give the trailing zeros
    // of `start` and the floor(log2) of the room left.
    const alignBits = start === 0 ? 32 : 31 - Math.clz32(start & -start);
    const room = last - start + 1;
    const roomBits = room >= 4294967296 ? 32 : 31 - Math.clz32(room);
    const hostBits = alignBits < roomBits ? alignBits : roomBits;
    data[size++] = start;
    data[size++] = 32 - hostBits;
    start += POW2[hostBits] as number;
  }
  blocks.size = size;
}

function v4Prefixes({ data, size }: Blocks): Prefix[] {
  const out: Prefix[] = [];
  for (let i = 0; i < size; i += 2) {
    out.push({ family: 4, addr: BigInt(data[i] as number), len: data[i + 1] as number });
  }
  return out;
}

/** The fewest aligned prefixes that cover exactly [first, last], in address order. */
export function rangeToPrefixes(family: Family, first: bigint, last: bigint): Prefix[] {
  const top = (1n << BigInt(ADDRESS_BITS[family])) - 1n;
  if (first < 0n || last > top || first > last) {
    throw new CidrError(`invalid IPv${family} range ${first}-${last}`);
  }
  if (family === 4) {
    const blocks: Blocks = { data: new Float64Array(MOST_PER_RANGE), size: 0 };
    splitRangeV4(Number(first), Number(last), blocks);
    return v4Prefixes(blocks);
  }
  const out: Prefix[] = [];
  splitRange(family, first, last, out);
  return out;
}

/** Each IPv4 prefix packed as addr * 64 + len (< 2^38, exact in a double), sorted: a typed-array sort orders them. */
function sortedV4(prefixes: readonly Prefix[]): Float64Array {
  const packed = new Float64Array(prefixes.length);
  for (let i = 0; i < prefixes.length; i++) {
    const p = prefixes[i] as Prefix;
    packed[i] = packV4(p);
  }
  return packed.sort();
}

function packV4(p: Prefix): number {
  return ipv4Number(p) * 64 + p.len;
}

/** Appends the union of packed[from, to) (sorted) to `blocks` as the fewest aligned blocks. */
function sweepV4(packed: Float64Array, from: number, to: number, blocks: Blocks): void {
  let start = -1;
  let end = -2;
  for (let i = from; i < to; i++) {
    const value = packed[i] as number;
    const nextStart = Math.floor(value / 64);
    const nextEnd = nextStart + (POW2[32 - (value - nextStart * 64)] as number) - 1;
    if (nextStart <= end + 1) {
      if (nextEnd > end) end = nextEnd;
      continue;
    }
    if (start >= 0) splitRangeV4(start, end, blocks);
    start = nextStart;
    end = nextEnd;
  }
  if (start >= 0) splitRangeV4(start, end, blocks);
}

/** The union of IPv4 prefixes as the fewest aligned blocks, in address order. */
function mergedBlocksV4(prefixes: readonly Prefix[]): Blocks {
  const packed = sortedV4(prefixes);
  // The union of n prefixes needs at most n blocks (the prefixes themselves cover it).
  const blocks: Blocks = { data: new Float64Array(2 * prefixes.length + MOST_PER_RANGE), size: 0 };
  sweepV4(packed, 0, packed.length, blocks);
  return blocks;
}

function mergeBig(family: Family, prefixes: readonly Prefix[]): Prefix[] {
  const ranges = prefixes.map(prefixRange);
  ranges.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const out: Prefix[] = [];
  let [start, end] = ranges[0] as [bigint, bigint];
  for (let i = 1; i < ranges.length; i++) {
    const [nextStart, nextEnd] = ranges[i] as [bigint, bigint];
    if (nextStart <= end + 1n) {
      if (nextEnd > end) end = nextEnd;
      continue;
    }
    splitRange(family, start, end, out);
    start = nextStart;
    end = nextEnd;
  }
  splitRange(family, start, end, out);
  return out;
}

/**
 * Smallest list of prefixes covering exactly the addresses of the input (duplicates, overlaps and
 * adjacent blocks merged), sorted by address. All inputs must be of one family.
 */
export function mergePrefixes(prefixes: readonly Prefix[]): Prefix[] {
  const family = familyOf(prefixes);
  if (family === undefined) return [];
  return family === 4 ? v4Prefixes(mergedBlocksV4(prefixes)) : mergeBig(family, prefixes);
}

/** The one family of all the prefixes (undefined when there are none); mixed ones are an error. */
function familyOf(prefixes: readonly Prefix[]): Family | undefined {
  const family = prefixes[0]?.family;
  for (const p of prefixes) {
    if (p.family !== family) throw new CidrError('mergePrefixes: mixed IPv4 and IPv6 prefixes');
  }
  return family;
}

/**
 * The digits of 0…255 as bytes, four per number: the count, then up to three ASCII digits. A merged
 * list is printed into one buffer from these, faster than a string per prefix, and leaves one
 * string to collect rather than one per entry.
 */
const DECIMAL: Uint8Array = (() => {
  const table = new Uint8Array(256 * 4);
  for (let n = 0; n < 256; n++) {
    const digits = String(n);
    table[n * 4] = digits.length;
    for (let i = 0; i < digits.length; i++) table[n * 4 + 1 + i] = digits.charCodeAt(i);
  }
  return table;
})();

/** Writes the decimal digits of n (0…255) at `at`; returns the offset after them. */
function writeDecimal(out: Uint8Array, at: number, n: number): number {
  const base = n * 4;
  const count = DECIMAL[base] as number;
  for (let i = 1; i <= count; i++) out[at++] = DECIMAL[base + i] as number;
  return at;
}

/** Block i of `data` (start, len pairs) as `a.b.c.d/len` at `at`; returns the offset after it. */
function writeBlock(out: Buffer, at: number, data: Float64Array, i: number): number {
  const addr = data[2 * i] as number;
  at = writeDecimal(out, at, addr >>> 24);
  out[at++] = 46; // .
  at = writeDecimal(out, at, (addr >>> 16) & 255);
  out[at++] = 46;
  at = writeDecimal(out, at, (addr >>> 8) & 255);
  out[at++] = 46;
  at = writeDecimal(out, at, addr & 255);
  out[at++] = 47; // /
  return writeDecimal(out, at, data[2 * i + 1] as number);
}

/** The blocks printed as `a.b.c.d/len`, one per line (no newline after the last). */
function printBlocksV4({ data, size }: Blocks): string {
  const longest = '255.255.255.255/32\n'.length;
  const out = Buffer.allocUnsafe((size / 2) * longest);
  let at = 0;
  for (let i = 0; i < size / 2; i++) {
    if (i > 0) out[at++] = 10; // \n
    at = writeBlock(out, at, data, i);
  }
  return out.toString('latin1', 0, at);
}

/**
 * mergePrefixes, printed (`formatPrefix` of each) one prefix per line: IPv4 goes from numbers to
 * text directly, without a Prefix, a bigint or a string per block — 100 000 CIDRs are a config's
 * largest list. Empty for no prefixes.
 */
export function mergeToLines(prefixes: readonly Prefix[]): string {
  if (familyOf(prefixes) !== 4) return mergePrefixes(prefixes).map(formatPrefix).join('\n');
  return printBlocksV4(mergedBlocksV4(prefixes));
}

/** The first index in sorted[from, to) whose value is at least `value`. */
function lowerBound(sorted: Float64Array, value: number, from: number, to: number): number {
  let lo = from;
  let hi = to;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((sorted[mid] as number) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A typed array of at least `size` elements holding `from`'s first `keep`: `from` itself if roomy. */
function roomy(from: Float64Array, keep: number, size: number): Float64Array {
  if (from.length >= size) return from;
  const grown = new Float64Array(Math.ceil(size * 1.25) + 64);
  grown.set(from.subarray(0, keep));
  return grown;
}

/**
 * An IPv4 set's entries (sorted, packed as addr * 64 + len, repeats kept), their union as blocks
 * (start, len pairs), and the blocks' printed list as JSON (`["a.b.c.d/n",…]`, what a Config's hash
 * reads): kept so that a change of a few entries is worked out near them (change), in place, without
 * sorting, merging or printing the rest again, and without allocating anew what a large set holds.
 */
export class MergedSetV4 {
  #sorted: Float64Array;
  #entries: number;
  #blocks: Float64Array;
  #blockCount = 0;
  #json: Buffer;
  #jsonLength = 0;
  /** Where each block's item starts in the JSON (its opening quote). */
  #offsets: Uint32Array;

  constructor(prefixes: readonly Prefix[]) {
    this.#sorted = sortedV4(prefixes);
    this.#entries = this.#sorted.length;
    const blocks: Blocks = { data: new Float64Array(2 * this.#entries + MOST_PER_RANGE), size: 0 };
    sweepV4(this.#sorted, 0, this.#entries, blocks);
    this.#blocks = blocks.data;
    this.#blockCount = blocks.size / 2;
    this.#offsets = new Uint32Array(this.#blockCount + 64);
    this.#json = Buffer.allocUnsafe(this.#blockCount * LONGEST_ITEM + 64);
    this.#json[0] = 91; // [
    this.#jsonLength = 1;
    const item = Buffer.allocUnsafe(LONGEST_ITEM);
    for (let i = 0; i < this.#blockCount; i++) {
      if (i > 0) this.#json[this.#jsonLength++] = 44; // ,
      this.#offsets[i] = this.#jsonLength;
      const length = writeItem(item, this.#blocks, i);
      item.copy(this.#json, this.#jsonLength, 0, length);
      this.#jsonLength += length;
    }
    this.#json[this.#jsonLength++] = 93; // ]
  }

  /** How many blocks the union is. */
  get size(): number {
    return this.#blockCount;
  }

  /** The blocks printed as mergeToLines prints them, one per line. */
  lines(): string {
    return printBlocksV4({ data: this.#blocks, size: 2 * this.#blockCount });
  }

  /** The blocks' printed list as JSON.stringify writes it: a view, valid until the next change. */
  json(): Uint8Array {
    return this.#json.subarray(0, this.#jsonLength);
  }

  /**
   * Takes `removed` entries out (one occurrence each) and puts `added` ones in, and works out the
   * union anew near them only: the runs of blocks that the changed entries touch or adjoin are
   * merged again from the entries that lie in them; every other block stays (an untouched run has a
   * gap of at least one address to the changed ones, before and after). Returns which blocks
   * [at, at + deleteCount) became `inserted` (printed as mergeToLines prints them); undefined when a
   * removed entry is not among the entries, and then the set is no longer usable.
   */
  change(
    removed: readonly Prefix[],
    added: readonly Prefix[],
  ): { at: number; deleteCount: number; inserted: string[] } | undefined {
    const gone = Float64Array.from(removed, packV4).sort();
    const put = Float64Array.from(added, packV4).sort();
    let low = Infinity;
    let high = -Infinity;
    for (const value of [...gone, ...put]) {
      const start = Math.floor(value / 64);
      low = Math.min(low, start);
      high = Math.max(high, start + (POW2[32 - (value - start * 64)] as number) - 1);
    }
    if (low === Infinity) return { at: 0, deleteCount: 0, inserted: [] };
    // The entries, in place: each removed one taken out, each added one put in, in order.
    this.#sorted = roomy(this.#sorted, this.#entries, this.#entries + put.length);
    const sorted = this.#sorted;
    for (const value of gone) {
      const at = lowerBound(sorted, value, 0, this.#entries);
      if (at >= this.#entries || sorted[at] !== value) return undefined;
      sorted.copyWithin(at, at + 1, this.#entries);
      this.#entries--;
    }
    for (const value of put) {
      const at = lowerBound(sorted, value, 0, this.#entries);
      sorted.copyWithin(at + 1, at, this.#entries);
      sorted[at] = value;
      this.#entries++;
    }
    // The span of the change, widened to the old runs it touches or adjoins.
    const blocks = this.#blocks;
    const count = this.#blockCount;
    let first = 0;
    let hi = count;
    while (first < hi) {
      const mid = (first + hi) >>> 1;
      if (blockEnd(blocks, mid) < low - 1) first = mid + 1;
      else hi = mid;
    }
    while (first > 0 && blockEnd(blocks, first - 1) + 1 === blocks[2 * first]) first--;
    let lo = first;
    hi = count;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((blocks[2 * mid] as number) <= high + 1) lo = mid + 1;
      else hi = mid;
    }
    let last = lo - 1;
    while (last + 1 < count && blockEnd(blocks, last) + 1 === blocks[2 * (last + 1)]) last++;
    const spanStart = last >= first ? Math.min(low, blocks[2 * first] as number) : low;
    const spanEnd = last >= first ? Math.max(high, blockEnd(blocks, last)) : high;
    // The entries that start in the span all lie in it.
    const entryFrom = lowerBound(sorted, spanStart * 64, 0, this.#entries);
    const entryTo = lowerBound(sorted, (spanEnd + 1) * 64, entryFrom, this.#entries);
    const middle: Blocks = {
      data: new Float64Array(2 * (entryTo - entryFrom) + MOST_PER_RANGE),
      size: 0,
    };
    sweepV4(sorted, entryFrom, entryTo, middle);
    const deleteCount = Math.max(0, last - first + 1);
    const inserting = middle.size / 2;
    this.#spliceJson(first, deleteCount, middle);
    // The blocks, in place: the tail moved, the middle's written.
    const nextCount = count - deleteCount + inserting;
    this.#blocks = roomy(this.#blocks, 2 * count, 2 * nextCount);
    this.#blocks.copyWithin(2 * (first + inserting), 2 * (first + deleteCount), 2 * count);
    this.#blocks.set(middle.data.subarray(0, middle.size), 2 * first);
    this.#blockCount = nextCount;
    const printed = printBlocksV4(middle);
    return { at: first, deleteCount, inserted: printed === '' ? [] : printed.split('\n') };
  }

  /** The JSON with blocks [at, at + deleteCount) replaced by `middle`'s, in place. */
  #spliceJson(at: number, deleteCount: number, middle: Blocks): void {
    const count = this.#blockCount;
    const inserting = middle.size / 2;
    const item = Buffer.allocUnsafe(LONGEST_ITEM);
    const parts: Buffer[] = [];
    for (let i = 0; i < inserting; i++)
      parts.push(Buffer.from(item.subarray(0, writeItem(item, middle.data, i))));
    // Bytes [from, to) go: the deleted items, each with the comma after it where an item follows
    // them, else (they end the list) with the comma before them, if any.
    const end = this.#jsonLength - 1; // the closing bracket
    const followed = at + deleteCount < count;
    let from: number;
    let to: number;
    if (followed) {
      from = this.#offsets[at] as number;
      to = this.#offsets[at + deleteCount] as number;
    } else {
      from = at === 0 ? 1 : deleteCount > 0 ? (this.#offsets[at] as number) - 1 : end;
      to = end;
    }
    const text: Buffer[] = [];
    const starts: number[] = [];
    let length = 0;
    const put = (bytes: Buffer) => {
      text.push(bytes);
      length += bytes.length;
    };
    if (!followed && at > 0 && inserting > 0) put(COMMA);
    for (let i = 0; i < inserting; i++) {
      if (i > 0) put(COMMA);
      starts.push(from + length);
      put(parts[i] as Buffer);
    }
    if (followed && inserting > 0) put(COMMA);
    const delta = length - (to - from);
    const nextLength = this.#jsonLength + delta;
    if (this.#json.length < nextLength) {
      const grown = Buffer.allocUnsafe(Math.ceil(nextLength * 1.25) + 64);
      this.#json.copy(grown, 0, 0, this.#jsonLength);
      this.#json = grown;
    }
    this.#json.copyWithin(to + delta, to, this.#jsonLength);
    let write = from;
    for (const bytes of text) write += bytes.copy(this.#json, write);
    this.#jsonLength = nextLength;
    // The offsets: the tail's moved by delta, the inserted items' put in.
    const nextCount = count - deleteCount + inserting;
    if (this.#offsets.length < nextCount) {
      const grown = new Uint32Array(Math.ceil(nextCount * 1.25) + 64);
      grown.set(this.#offsets.subarray(0, count));
      this.#offsets = grown;
    }
    const offsets = this.#offsets;
    offsets.copyWithin(at + inserting, at + deleteCount, count);
    for (let i = at + inserting; i < nextCount; i++) offsets[i] = (offsets[i] as number) + delta;
    for (let i = 0; i < inserting; i++) offsets[at + i] = starts[i] as number;
  }
}

const COMMA = Buffer.from(',');

/** The longest item: `"255.255.255.255/32"`. */
const LONGEST_ITEM = '"255.255.255.255/32"'.length;

/** Block i of `data` as a JSON string (`"a.b.c.d/n"`) at the start of `out`; returns its length. */
function writeItem(out: Buffer, data: Float64Array, i: number): number {
  out[0] = 34; // "
  const at = writeBlock(out, 1, data, i);
  out[at] = 34;
  return at + 1;
}

/** Block i's last address. */
function blockEnd(blocks: Float64Array, i: number): number {
  return (blocks[2 * i] as number) + (POW2[32 - (blocks[2 * i + 1] as number)] as number) - 1;
}
