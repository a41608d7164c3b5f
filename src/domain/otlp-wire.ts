import { ScalarType, type DescMessage } from '@bufbuild/protobuf';

// The protobuf wire format of an OTLP export, read without building it (docs/telemetry.md "What an
// export may cost"). Decoding builds an object per message and per value: a 4 MiB export of
// 2,000,000 empty AnyValues took 660 ms of one thread and 265 MB of heap in fromBinary. Before
// anything is built, `countElements` walks the bytes as fromBinary would (guided by the message
// descriptors, so nested messages are entered and unknown fields skipped the same way) and counts
// what it would build, allocating nothing per element; `fieldRecords` lists the records of one
// message, for decoding an export a piece at a time (src/domain/otlp-export.ts).
//
// The walk mirrors @bufbuild/protobuf's reader (from-binary.js, 2.x) rather than the wire types:
// a known message field is read as a length and a nested message whatever its wire type says, a
// known scalar by its declared type, a packable repeated scalar as packed when it is length-
// delimited; unknown fields are skipped by wire type (groups included). So the count bounds what
// fromBinary does with the same bytes: every field occurrence (a message, a value, an unknown
// field) counts one, every element of a packed run one. BinaryReader is not used here: its tag()
// returns an array and skip() a subarray per call, and reading through its position property was
// 3 to 7 times slower than this loop (50 to 80 ms for 4 MiB against 3 to 23 ms).

/** Deepest nesting fromBinary reads (its default recursionLimit): deeper is malformed here too. */
export const MAX_MESSAGE_DEPTH = 100;

/** `countElements` found more elements than it was allowed. */
export const OVER_LIMIT = -1;
/** `countElements` found bytes fromBinary refuses (a bad tag, a truncated field, too deep). */
export const MALFORMED = -2;

const UNKNOWN = 0;
const MESSAGE = 1;
const VARINT = 2;
const FIXED32 = 3;
const FIXED64 = 4;
const LENGTH = 5;
const PACKABLE_VARINT = 6;
const PACKABLE_FIXED32 = 7;
const PACKABLE_FIXED64 = 8;

/** How each field number of a message is read: a kind per number, and the plan of each message field. */
export interface WirePlan {
  readonly kinds: Uint8Array;
  readonly children: readonly (WirePlan | null)[];
}

const plans = new WeakMap<DescMessage, WirePlan>();

function scalarKind(t: ScalarType, repeated: boolean): number {
  switch (t) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return LENGTH;
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
    case ScalarType.FLOAT:
      return repeated ? PACKABLE_FIXED32 : FIXED32;
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
    case ScalarType.DOUBLE:
      return repeated ? PACKABLE_FIXED64 : FIXED64;
    default:
      return repeated ? PACKABLE_VARINT : VARINT;
  }
}

/** The plan of a message type (built once per type). Maps and delimited (group) messages are not read: OTLP has none. */
export function wirePlan(desc: DescMessage): WirePlan {
  const known = plans.get(desc);
  if (known) return known;
  const size = desc.fields.reduce((m, f) => Math.max(m, f.number), 0) + 1;
  const kinds = new Uint8Array(size);
  const children = new Array<WirePlan | null>(size).fill(null);
  const plan: WirePlan = { kinds, children };
  plans.set(desc, plan);
  for (const f of desc.fields) {
    if (f.fieldKind === 'map') throw new Error(`${desc.typeName}.${f.name}: map fields are not read by the OTLP wire walk`);
    if ((f.fieldKind === 'message' || (f.fieldKind === 'list' && f.listKind === 'message')) && f.delimitedEncoding) {
      throw new Error(`${desc.typeName}.${f.name}: delimited messages are not read by the OTLP wire walk`);
    }
    if (f.fieldKind === 'message' || (f.fieldKind === 'list' && f.listKind === 'message')) {
      kinds[f.number] = MESSAGE;
      children[f.number] = wirePlan(f.message!);
    } else if (f.fieldKind === 'list') {
      kinds[f.number] = scalarKind(f.listKind === 'enum' ? ScalarType.INT32 : f.scalar!, true);
    } else if (f.fieldKind === 'scalar') {
      kinds[f.number] = scalarKind(f.scalar, false);
    } else {
      kinds[f.number] = VARINT;
    }
  }
  return plan;
}

/** `walkElements` stopped after its steps: call it again to go on. */
export const PAUSED = -3;

/**
 * A walk of a message's bytes that can stop and go on: where it is, what it counted, and its
 * stack (the end of each open message, its plan, and for an unknown group the field number that
 * closes it).
 */
export interface ElementWalk {
  buf: Uint8Array;
  pos: number;
  top: number;
  elements: number;
  readonly ends: Float64Array;
  readonly frames: (WirePlan | null)[];
  readonly groups: Int32Array;
}

function stack(buf: Uint8Array): ElementWalk {
  return {
    buf,
    pos: 0,
    top: 0,
    elements: 0,
    ends: new Float64Array(MAX_MESSAGE_DEPTH + 1),
    frames: new Array<WirePlan | null>(MAX_MESSAGE_DEPTH + 1).fill(null),
    groups: new Int32Array(MAX_MESSAGE_DEPTH + 1),
  };
}

/** A walk of `buf[start, end)` read as a message of `desc` (`reuse`: a walk whose stack is taken over). */
export function elementWalk(desc: DescMessage, buf: Uint8Array, start = 0, end = buf.length, reuse: ElementWalk = stack(buf)): ElementWalk {
  const w = reuse;
  w.buf = buf;
  w.pos = start;
  w.top = 0;
  w.elements = 0;
  w.frames[0] = wirePlan(desc);
  w.ends[0] = end;
  w.groups[0] = 0;
  return w;
}

// The walk countElements makes in one go (never re-entered: it is synchronous).
const shared = stack(new Uint8Array(0));

/**
 * How many elements fromBinary would build from `buf[start, end)` read as a message of `desc`:
 * each field occurrence at any depth, plus each element of a packed run. OVER_LIMIT as soon as
 * there are more than `max`, MALFORMED where fromBinary would throw on the framing (UTF-8 and
 * values are the decoder's to check). Allocates nothing.
 */
export function countElements(desc: DescMessage, buf: Uint8Array, max: number, start = 0, end = buf.length): number {
  return walkElements(elementWalk(desc, buf, start, end, shared), max);
}

/**
 * Goes on with a walk for at most `steps` field records: the elements of the message (as
 * countElements), OVER_LIMIT, MALFORMED, or PAUSED when the steps ran out first.
 */
export function walkElements(w: ElementWalk, max: number, steps = Infinity): number {
  const { buf, ends, frames, groups } = w;
  const len = buf.length;
  let pos = w.pos;
  let top = w.top;
  let elements = w.elements;
  let left = steps;
  for (;;) {
    while (groups[top] === 0 && pos >= ends[top]!) {
      if (top === 0) return elements;
      top--;
    }
    if (--left < 0) {
      w.pos = pos;
      w.top = top;
      w.elements = elements;
      return PAUSED;
    }
    // The tag: a varint of at most five bytes that fits 32 bits (BinaryReader.tag()).
    let b = buf[pos++]!;
    let tag = b & 0x7f;
    if (b >= 0x80) {
      b = buf[pos++]!;
      tag |= (b & 0x7f) << 7;
      if (b >= 0x80) {
        b = buf[pos++]!;
        tag |= (b & 0x7f) << 14;
        if (b >= 0x80) {
          b = buf[pos++]!;
          tag |= (b & 0x7f) << 21;
          if (b >= 0x80) {
            b = buf[pos++]!;
            if (b > 0x0f) return MALFORMED;
            tag = (tag | (b << 28)) >>> 0;
          }
        }
      }
    }
    if (pos > len) return MALFORMED;
    const fieldNo = tag >>> 3;
    const wireType = tag & 7;
    if (fieldNo === 0 || wireType > 5) return MALFORMED;
    if (groups[top] !== 0 && wireType === 4) {
      if (fieldNo !== groups[top]) return MALFORMED;
      top--;
      continue;
    }
    if (++elements > max) return OVER_LIMIT;
    const plan = frames[top]!;
    const kind = plan !== null && fieldNo < plan.kinds.length ? plan.kinds[fieldNo]! : UNKNOWN;
    let length = 0;
    if (kind === MESSAGE || kind === LENGTH || (wireType === 2 && (kind === UNKNOWN || kind >= PACKABLE_VARINT))) {
      // A length: a varint read as BinaryReader.uint32() reads it (up to ten bytes, low 32 bits kept).
      b = buf[pos++]!;
      length = b & 0x7f;
      if (b >= 0x80) {
        b = buf[pos++]!;
        length |= (b & 0x7f) << 7;
        if (b >= 0x80) {
          b = buf[pos++]!;
          length |= (b & 0x7f) << 14;
          if (b >= 0x80) {
            b = buf[pos++]!;
            length |= (b & 0x7f) << 21;
            if (b >= 0x80) {
              b = buf[pos++]!;
              length = (length | ((b & 0x0f) << 28)) >>> 0;
              for (let n = 5; b >= 0x80 && n < 10; n++) b = buf[pos++]!;
              if (b >= 0x80) return MALFORMED;
            }
          }
        }
      }
      if (pos > len) return MALFORMED;
    }
    switch (kind) {
      case MESSAGE:
        if (top + 1 >= MAX_MESSAGE_DEPTH) return MALFORMED;
        // An empty message is built but opens nothing.
        if (length === 0) break;
        top++;
        frames[top] = plan.children[fieldNo]!;
        ends[top] = pos + length;
        groups[top] = 0;
        continue;
      case LENGTH:
        pos += length;
        break;
      case VARINT:
        for (let n = 0; buf[pos++]! >= 0x80; ) if (++n >= 10) return MALFORMED;
        break;
      case FIXED32:
        pos += 4;
        break;
      case FIXED64:
        pos += 8;
        break;
      case UNKNOWN:
        switch (wireType) {
          case 0:
            while (buf[pos++]! & 0x80) {
              if (pos > len) return MALFORMED;
            }
            break;
          case 1:
            pos += 8;
            break;
          case 5:
            pos += 4;
            break;
          case 2:
            pos += length;
            break;
          case 3:
            if (top + 1 >= MAX_MESSAGE_DEPTH) return MALFORMED;
            top++;
            frames[top] = null;
            ends[top] = len;
            groups[top] = fieldNo;
            break;
          default:
            return MALFORMED;
        }
        break;
      default:
        // A packable repeated scalar: one value, or a packed run when length-delimited.
        if (wireType !== 2) {
          if (kind === PACKABLE_VARINT) {
            for (let n = 0; buf[pos++]! >= 0x80; ) if (++n >= 10) return MALFORMED;
          } else pos += kind === PACKABLE_FIXED32 ? 4 : 8;
          break;
        }
        {
          // fromBinary reads values while it is before the run's end: the last one may read past it.
          const stop = pos + length;
          if (stop > len) return MALFORMED;
          let n = 0;
          if (kind === PACKABLE_VARINT) {
            while (pos < stop) {
              n++;
              for (let k = 0; buf[pos++]! >= 0x80; ) if (++k >= 10) return MALFORMED;
            }
          } else {
            const size = kind === PACKABLE_FIXED32 ? 4 : 8;
            n = Math.ceil(length / size);
            pos += n * size;
          }
          elements += n;
          if (elements > max) return OVER_LIMIT;
        }
    }
    if (pos > len) return MALFORMED;
    if (groups[top] !== 0 && pos >= len) return MALFORMED;
  }
}

/** One field record of a message: its field number, where its tag starts, where its value starts and ends. */
export interface FieldRecord {
  fieldNo: number;
  start: number;
  valueStart: number;
  end: number;
}

function varint(buf: Uint8Array, at: { pos: number }): number {
  let result = 0;
  let shift = 0;
  for (let n = 0; n < 10; n++) {
    const b = buf[at.pos++]!;
    if (shift < 28) result |= (b & 0x7f) << shift;
    else if (shift === 28) result |= (b & 0x0f) << 28;
    shift += 7;
    if (b < 0x80) return result >>> 0;
  }
  throw new RangeError('invalid varint');
}

/**
 * The records of `buf[start, end)` read as a message of `desc`, in order (each field occurrence
 * once, its value skipped as `countElements` reads it). For bytes `countElements` accepted; a
 * record that runs past the end throws.
 */
export function* fieldRecords(desc: DescMessage, buf: Uint8Array, start: number, end: number): Generator<FieldRecord> {
  const plan = wirePlan(desc);
  const at = { pos: start };
  while (at.pos < end) {
    const recordStart = at.pos;
    const tag = varint(buf, at);
    const fieldNo = tag >>> 3;
    const wireType = tag & 7;
    const kind = fieldNo < plan.kinds.length ? plan.kinds[fieldNo]! : UNKNOWN;
    let valueStart = at.pos;
    if (kind === MESSAGE || kind === LENGTH || (wireType === 2 && kind === UNKNOWN)) {
      const length = varint(buf, at);
      valueStart = at.pos;
      at.pos += length;
    } else if (wireType === 2 && kind >= PACKABLE_VARINT) {
      // A packed run, read to where fromBinary stops (its last value may end past the run).
      const length = varint(buf, at);
      valueStart = at.pos;
      const stop = at.pos + length;
      if (kind === PACKABLE_VARINT) while (at.pos < stop) varint(buf, at);
      else at.pos += Math.ceil(length / (kind === PACKABLE_FIXED32 ? 4 : 8)) * (kind === PACKABLE_FIXED32 ? 4 : 8);
    } else if (kind === VARINT || kind === PACKABLE_VARINT || (kind === UNKNOWN && wireType === 0)) {
      varint(buf, at);
    } else if (kind === FIXED32 || kind === PACKABLE_FIXED32 || (kind === UNKNOWN && wireType === 5)) {
      at.pos += 4;
    } else if (kind === FIXED64 || kind === PACKABLE_FIXED64 || (kind === UNKNOWN && wireType === 1)) {
      at.pos += 8;
    } else if (kind === UNKNOWN && wireType === 3) {
      // An unknown group: to its matching end (countElements checked the nesting).
      let depth = 1;
      while (depth > 0) {
        const t = varint(buf, at);
        const wt = t & 7;
        if (wt === 3) depth++;
        else if (wt === 4) depth--;
        else if (wt === 0) varint(buf, at);
        else if (wt === 1) at.pos += 8;
        else if (wt === 5) at.pos += 4;
        else if (wt === 2) at.pos += varint(buf, at);
      }
    }
    if (at.pos > buf.length) throw new RangeError('premature EOF');
    yield { fieldNo, start: recordStart, valueStart, end: at.pos };
  }
}
