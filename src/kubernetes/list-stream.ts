// A list answer decoded as it streams (docs/kubernetes.md, "Kubernetes API (opt-in)"): the bytes of
// `{"kind": …, "metadata": {…}, "items": [{…}, {…}, …]}` are scanned for their structure only, and
// each element of the top-level `items` array is parsed on its own as soon as its last byte
// arrives, handed over, and dropped; the top-level `metadata` (resourceVersion, continue) is parsed
// too, everything else skipped. Memory is bounded by one item, not by the answer: a 500 MiB list of
// Nodes costs what its largest Node does, and what the caller keeps of each.

/** The largest single item accepted (a Node with 1 MiB of annotations is already extraordinary). */
export const MAX_ITEM_BYTES = 64 * 1024 * 1024;

export class ListStreamError extends Error {
  override name = 'ListStreamError';
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COLON = 0x3a;
const COMMA = 0x2c;

/** What is being captured: a top-level member's value, or an element of `items`. */
type Capture = 'metadata' | 'item';

export class ListScanner {
  /** Nesting: 0 outside the answer, 1 inside its object, 2 inside a top-level value, … */
  private depth = 0;
  private inString = false;
  /** A backslash inside a string: the next byte is escaped. */
  private escaped = false;
  /** At depth 1: the next string is a key (after `{` or `,`), not a value. */
  private expectKey = false;
  /** At depth 1: the key's bytes while it is read (bounded; a long key is no key of ours). */
  private keyBytes: number[] | undefined;
  private key = '';
  /** Inside the top-level `items` array (depth 2 is its elements' level). */
  private inItems = false;
  private capture: Capture | undefined;
  /** The depth the captured value returns to when it ends. */
  private captureBase = 0;
  private pieces: Buffer[] = [];
  private captured = 0;
  private ended = false;
  metadata: Record<string, unknown> = {};
  /** Items handed over so far. */
  count = 0;

  constructor(
    private readonly onItem: (item: unknown) => void,
    private readonly maxItemBytes = MAX_ITEM_BYTES,
  ) {}

  write(chunk: Buffer): void {
    if (this.ended) {
      this.onlyWhitespace(chunk, 0);
      return;
    }
    let from = this.capture ? 0 : -1;
    const length = chunk.length;
    for (let i = 0; i < length; i++) {
      const byte = chunk[i]!;
      if (this.inString) {
        if (this.escaped) {
          this.escaped = false;
          if (this.keyBytes) this.keyByte(byte);
          continue;
        }
        if (byte === BACKSLASH) {
          this.escaped = true;
          if (this.keyBytes) this.keyByte(byte);
          continue;
        }
        if (byte === QUOTE) {
          this.inString = false;
          if (this.keyBytes) {
            this.key = this.keyBytes.length <= 64 ? String.fromCharCode(...this.keyBytes) : '';
            this.keyBytes = undefined;
          }
          continue;
        }
        if (this.keyBytes) {
          this.keyByte(byte);
          continue;
        }
        // The rest of a long string at once: up to its next quote or backslash.
        const quote = chunk.indexOf(QUOTE, i + 1);
        const slash = chunk.indexOf(BACKSLASH, i + 1);
        const next = Math.min(quote === -1 ? length : quote, slash === -1 ? length : slash);
        i = next - 1;
        continue;
      }
      switch (byte) {
        case QUOTE:
          this.stringOpened();
          break;
        case OPEN_OBJECT:
        case OPEN_ARRAY:
          from = this.opened(byte, i, from);
          break;
        case CLOSE_OBJECT:
        case CLOSE_ARRAY:
          from = this.closed(byte, chunk, i, from);
          break;
        case COMMA:
          if (this.depth === 1) this.expectKey = true;
          break;
        case COLON:
          break;
        default:
          // Numbers, literals, whitespace: a scalar value of a member we skip, or inside a capture.
          if (byte > 0x20) {
            if (this.depth === 0)
              throw new ListStreamError('list: the answer is not a JSON object');
            this.notAnItem();
          }
      }
      if (this.ended) {
        this.onlyWhitespace(chunk, i + 1);
        return;
      }
    }
    if (this.capture && from >= 0) this.keep(chunk.subarray(from));
  }

  /** A string begins: a key of the answer's object, or a value (never the answer itself). */
  private stringOpened(): void {
    this.inString = true;
    if (this.depth === 1 && this.expectKey) {
      this.keyBytes = [];
      this.expectKey = false;
    } else if (this.depth === 0) {
      throw new ListStreamError('list: the answer is not a JSON object');
    } else {
      this.notAnItem();
    }
  }

  /**
   * An object or array opens at `i`: `items` entered, or the top-level metadata or an item begins
   * its capture. Where the captured bytes start in this chunk afterwards (-1: nothing captured).
   */
  private opened(byte: number, i: number, from: number): number {
    if (this.depth === 0 && byte !== OPEN_OBJECT)
      throw new ListStreamError('list: the answer is not a JSON object');
    if (this.capture === undefined) {
      if (this.depth === 1 && this.key === 'items' && byte === OPEN_ARRAY) {
        this.inItems = true;
      } else if (this.depth === 1 && this.key === 'metadata' && byte === OPEN_OBJECT) {
        from = this.begin('metadata', i);
      } else if (this.depth === 2 && this.inItems) {
        if (byte !== OPEN_OBJECT) this.notAnItem();
        from = this.begin('item', i);
      }
    }
    this.depth++;
    if (this.depth === 1) this.expectKey = true;
    return from;
  }

  /** An object or array closes at `i`: a capture may end with it, or `items`, or the answer. */
  private closed(byte: number, chunk: Buffer, i: number, from: number): number {
    if (this.depth === 0) throw new ListStreamError('list: unbalanced answer');
    this.depth--;
    if (this.capture && this.depth === this.captureBase) {
      this.finish(chunk, from, i + 1);
      from = -1;
    } else if (this.depth === 1 && this.inItems && byte === CLOSE_ARRAY) {
      this.inItems = false;
    }
    if (this.depth === 0) this.ended = true;
    return from;
  }

  /** The answer ended: it must have been whole. */
  end(): void {
    if (!this.ended || this.inString) throw new ListStreamError('list: the answer was cut short');
  }

  /** After the answer's end only JSON's whitespace may follow. */
  private onlyWhitespace(chunk: Buffer, from: number): void {
    for (let j = from; j < chunk.length; j++) {
      const rest = chunk[j]!;
      if (rest !== 0x20 && rest !== 0x0a && rest !== 0x0d && rest !== 0x09)
        throw new ListStreamError('list: bytes after the end of the answer');
    }
  }

  private keyByte(byte: number): void {
    if (this.keyBytes!.length <= 64) this.keyBytes!.push(byte);
  }

  /** An element of `items` that is not an object (a string, a number, an array) is refused. */
  private notAnItem(): void {
    if (this.capture === undefined && this.depth === 2 && this.inItems)
      throw new ListStreamError('list: an item that is not an object');
  }

  /** A capture starts at byte `i` of the chunk being scanned; returns where its bytes start. */
  private begin(what: Capture, i: number): number {
    this.capture = what;
    this.captureBase = this.depth;
    this.pieces = [];
    this.captured = 0;
    return i;
  }

  private keep(piece: Buffer): void {
    this.captured += piece.length;
    if (this.captured > this.maxItemBytes)
      throw new ListStreamError(`list: an item larger than ${this.maxItemBytes} bytes`);
    // A copy: the chunk's memory is the socket's, and this piece may be all that is kept of it.
    this.pieces.push(Buffer.from(piece));
  }

  private finish(chunk: Buffer, from: number, to: number): void {
    this.keep(chunk.subarray(Math.max(from, 0), to));
    const text = Buffer.concat(this.pieces, this.captured).toString('utf8');
    this.pieces = [];
    this.captured = 0;
    const what = this.capture;
    this.capture = undefined;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw new ListStreamError(
        `list: ${what === 'item' ? 'an item' : 'its metadata'} is not JSON`,
      );
    }
    if (what === 'metadata') {
      if (typeof value === 'object' && value !== null && !Array.isArray(value))
        this.metadata = value as Record<string, unknown>;
      return;
    }
    this.count++;
    this.onItem(value);
  }
}
