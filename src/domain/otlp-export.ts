import { create, fromJson, mergeFromBinary, type DescField, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import { ExportMetricsServiceRequestSchema } from '../../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { ExportTraceServiceRequestSchema } from '../../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import {
  ExponentialHistogramSchema,
  GaugeSchema,
  HistogramSchema,
  MetricSchema,
  ResourceMetricsSchema,
  ScopeMetricsSchema,
  SumSchema,
  SummarySchema,
} from '../../gen/opentelemetry/proto/metrics/v1/metrics_pb.js';
import { ResourceSpansSchema, ScopeSpansSchema } from '../../gen/opentelemetry/proto/trace/v1/trace_pb.js';
import { countElements, elementWalk, fieldRecords, MALFORMED, OVER_LIMIT, PAUSED, walkElements } from './otlp-wire.js';

// An OTLP export as received (binary protobuf, OTLP/JSON, or the proto3 JSON of Connect and
// gRPC-JSON), measured before anything of it is built and then decoded a piece at a time
// (docs/telemetry.md "What an export may cost"). Shared by every OTLP door: the OTLP/HTTP routes
// and the OTLP/gRPC services hand the bytes to src/services/otlp.ts, which calls these.
//
// - `measuring` counts the elements (messages and values) the decoder would build and refuses an
//   export with more than the cap (OTLP_MAX_EXPORT_ELEMENTS), or one whose framing fromBinary
//   would refuse. Binary: a walk of the wire format (src/domain/otlp-wire.ts), in steps. JSON: the
//   marks before values in the text (every value but the first follows a ':', ',' or '['), before
//   JSON.parse builds anything; each counts two, as JSON.parse builds a value before the decoder
//   builds its message.
// - `exportPieces` then decodes the export in pieces: requests of the same type, each holding a run
//   of spans (or data points) of about PIECE_ELEMENTS elements with their resource, scope (and
//   metric) decoded once and shared. A reader of the pieces sees what it would see in the whole
//   export, in the same order; the whole export is never built. One span or data point that holds
//   more than MAX_ITEM_ELEMENTS with its resource, scope and metric refuses the export.

export type OtlpFormat = 'protobuf' | 'otlp-json' | 'proto3-json';

/** An export as received, decompressed: its bytes and how they are written. */
export interface OtlpExportBytes {
  bytes: Uint8Array;
  format: OtlpFormat;
}

/** Why an export is refused whole: its bytes are no such export (400 / INVALID_ARGUMENT) or it would cost too much to decode (413 / RESOURCE_EXHAUSTED). */
export class OtlpExportRefused extends Error {
  constructor(
    readonly reason: 'malformed' | 'too_large',
    message: string,
  ) {
    super(message);
  }
}

/**
 * Most elements one span or data point may hold with its resource, scope (and metric): about 27 MB
 * of heap and 60 to 80 ms to decode when every element is an empty message (the densest there
 * is). No SDK builds a span or point near it (the SDKs' default limits are 128 attributes, 128
 * events and 128 links a span, 160 buckets a side of an exponential histogram); a hand-built point
 * of 100,000 explicit buckets (200,000 elements) is still read, and rejected in the partial success.
 */
export const MAX_ITEM_ELEMENTS = 250_000;

/** Elements a piece is filled to (one item larger than this is a piece of its own). */
export const PIECE_ELEMENTS = 16_384;

/** Default of OTLP_MAX_EXPORT_ELEMENTS (src/config.ts). */
export const DEFAULT_MAX_EXPORT_ELEMENTS = 2_000_000;

const FORMAT_NAMES: Record<OtlpFormat, string> = { protobuf: 'binary protobuf', 'otlp-json': 'OTLP/JSON', 'proto3-json': 'protobuf JSON' };

/** How an export request leads to its items: the fields to follow from each message type, down to the list of items. */
export interface ExportSpine<Desc extends DescMessage> {
  root: Desc;
  /** What one item is, with what it carries along, as a refusal says it. */
  piece: string;
  steps: ReadonlyMap<DescMessage, SpineStep>;
}

interface SpineStep {
  /** The fields that lead on (lists, or singular messages of a oneof), or the list of items. */
  fields: readonly DescField[];
  items: boolean;
  /** Field number -> field, and JSON key (json name and proto name) -> field. */
  byNumber: ReadonlyMap<number, DescField>;
  byKey: ReadonlyMap<string, DescField>;
}

function spine<Desc extends DescMessage>(root: Desc, piece: string, path: [DescMessage, string[], boolean][]): ExportSpine<Desc> {
  const steps = new Map<DescMessage, SpineStep>();
  for (const [desc, names, items] of path) {
    const fields = names.map((n) => {
      const f = desc.fields.find((x) => x.name === n);
      if (!f || (f.fieldKind !== 'list' && f.fieldKind !== 'message') || (f.fieldKind === 'list' && f.listKind !== 'message')) throw new Error(`${desc.typeName}.${n} is no message field`);
      return f;
    });
    steps.set(desc, {
      fields,
      items,
      byNumber: new Map(fields.map((f) => [f.number, f])),
      byKey: new Map(fields.flatMap((f) => [[f.jsonName, f] as const, [f.name, f] as const])),
    });
  }
  return { root, piece, steps };
}

export const TRACES_SPINE = spine(ExportTraceServiceRequestSchema, 'a span (with its resource and scope)', [
  [ExportTraceServiceRequestSchema, ['resource_spans'], false],
  [ResourceSpansSchema, ['scope_spans'], false],
  [ScopeSpansSchema, ['spans'], true],
]);

export const METRICS_SPINE = spine(ExportMetricsServiceRequestSchema, 'a data point (with its resource, scope and metric)', [
  [ExportMetricsServiceRequestSchema, ['resource_metrics'], false],
  [ResourceMetricsSchema, ['scope_metrics'], false],
  [ScopeMetricsSchema, ['metrics'], false],
  [MetricSchema, ['gauge', 'sum', 'histogram', 'exponential_histogram', 'summary'], false],
  [GaugeSchema, ['data_points'], true],
  [SumSchema, ['data_points'], true],
  [HistogramSchema, ['data_points'], true],
  [ExponentialHistogramSchema, ['data_points'], true],
  [SummarySchema, ['data_points'], true],
]);

function tooLarge(max: number, format: OtlpFormat): OtlpExportRefused {
  const json = format === 'protobuf' ? '' : '; a JSON value counts two';
  return new OtlpExportRefused('too_large', `the export holds more than ${max} elements (OTLP_MAX_EXPORT_ELEMENTS: each message and value counts one${json})`);
}

function malformed(spine: ExportSpine<DescMessage>, format: OtlpFormat): OtlpExportRefused {
  return new OtlpExportRefused('malformed', `the body is not a valid ${spine.root.typeName} in ${FORMAT_NAMES[format]}`);
}

/**
 * At least the values of a JSON text, counted on its bytes (JSON.parse builds nothing yet): one
 * plus every ':', ',' and '[' outside a string (every value but the first follows one of them; the
 * comma before a member's name counts too). OVER_LIMIT beyond `max`. Invalid JSON is JSON.parse's
 * to refuse.
 */
export function countJsonValues(buf: Uint8Array, max: number): number {
  let n = 1;
  let inString = false;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i]!;
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x3a || c === 0x2c || c === 0x5b) {
      if (++n > max) return OVER_LIMIT;
    }
  }
  return n;
}

/** Field records `measuring` reads between two pauses: a few milliseconds of work. */
export const MEASURE_STEPS = 250_000;

/**
 * Refuses, before anything of it is built, an export of more than `maxElements` elements, or a
 * binary one whose framing fromBinary refuses (throws OtlpExportRefused); returns the number of
 * elements otherwise. Pauses (yields) every MEASURE_STEPS field records, so that a caller can let
 * other work run between the steps.
 */
export function* measuring(spine: ExportSpine<DescMessage>, input: OtlpExportBytes, maxElements: number): Generator<void, number> {
  if (input.format === 'protobuf') {
    const walk = elementWalk(spine.root, input.bytes);
    let n: number;
    while ((n = walkElements(walk, maxElements, MEASURE_STEPS)) === PAUSED) yield;
    if (n === OVER_LIMIT) throw tooLarge(maxElements, input.format);
    if (n === MALFORMED) throw malformed(spine, input.format);
    return n;
  }
  const values = countJsonValues(input.bytes, Math.floor(maxElements / 2));
  if (values === OVER_LIMIT) throw tooLarge(maxElements, input.format);
  return values * 2;
}

/** `measuring` in one go. */
export function measureExport(spine: ExportSpine<DescMessage>, input: OtlpExportBytes, maxElements: number): number {
  const m = measuring(spine, input, maxElements);
  for (;;) {
    const r = m.next();
    if (r.done) return r.value;
  }
}

// ---- OTLP/JSON -----------------------------------------------------------------------------

const ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId', 'trace_id', 'span_id', 'parent_span_id']);
const HEX = /^(?:[0-9a-fA-F]{2})*$/;
/** The int64 oneof members of AnyValue and of a number data point (or exemplar), and the double beside each. */
const INT_TO_DOUBLE = new Map([
  ['intValue', 'doubleValue'],
  ['int_value', 'double_value'],
  ['asInt', 'asDouble'],
  ['as_int', 'as_double'],
]);
const INT64_MIN = -(2 ** 63);
const INT64_END = 2 ** 63;

/**
 * Rewrites a part of an OTLP/JSON body in place for the proto3 JSON mapping: ids are hex in
 * OTLP/JSON and base64 there; and an int64 value written as a JSON number outside int64's range
 * (the stock JavaScript exporters write any integer-valued number as intValue: 2 ** 64, 1e21)
 * becomes the double it is, which the mapping would refuse, the whole export with it. The binary
 * exporters send such a value wrapped and it decodes; here as there it is only ever read past.
 * Every rule looks at one object's own keys, so the pieces of a body are rewritten one by one.
 */
export function normalizeOtlpJson(root: unknown): void {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const v = stack.pop();
    if (Array.isArray(v)) {
      for (const x of v) if (x !== null && typeof x === 'object') stack.push(x);
    } else if (v !== null && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      for (const [k, x] of Object.entries(o)) {
        if (ID_FIELDS.has(k) && typeof x === 'string') {
          if (!HEX.test(x)) throw new OtlpExportRefused('malformed', `${k} must be hex-encoded in OTLP/JSON`);
          o[k] = Buffer.from(x, 'hex').toString('base64');
        } else if (typeof x === 'number' && INT_TO_DOUBLE.has(k) && !(x >= INT64_MIN && x < INT64_END)) {
          // A Map, not an object: a key such as "__proto__" or "constructor" is no int64 member.
          delete o[k];
          o[INT_TO_DOUBLE.get(k)!] = x;
        } else if (x !== null && typeof x === 'object') stack.push(x);
      }
    }
  }
}

/** The values of a parsed JSON value (itself included), or OVER_LIMIT beyond `max`. */
function jsonValues(value: unknown, max: number): number {
  let n = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (++n > max) return OVER_LIMIT;
    if (v !== null && typeof v === 'object') for (const x of Array.isArray(v) ? v : Object.values(v)) stack.push(x);
  }
  return n;
}

// ---- Pieces --------------------------------------------------------------------------------

type Message = Record<string, unknown> & { $typeName: string };

/** One message on the way from the request to the items: its own fields decoded (not those that lead on), and how it hangs from its parent. */
interface Level {
  desc: DescMessage;
  step: SpineStep;
  template: Message;
  via: DescField | null;
  /** Elements of this message's own fields. */
  own: number;
  /** The same with the own fields of the messages above it. */
  elements: number;
}

/**
 * A piece being filled: a request of the spine's type with a branch down to each run of items it
 * holds. Its elements count its items, and the own fields of the messages it holds that are no
 * longer on the walk's path (those on the path are held by the walk anyway): a piece never holds
 * much more than PIECE_ELEMENTS beyond what the walk holds.
 */
class Piece {
  root: Message | null = null;
  elements = 0;
  private readonly shells: Message[] = [];
  private readonly levels: Level[] = [];

  /** The first level of `path` this piece does not hold. */
  private firstNew(path: readonly Level[]): number {
    let k = 0;
    if (this.root !== null) while (k < path.length && this.levels[k] === path[k]) k++;
    return k;
  }

  /** The elements an item of `n` elements at the end of `path` adds to this piece. */
  cost(path: readonly Level[], n: number): number {
    let extra = n;
    for (let k = this.firstNew(path); k < this.levels.length; k++) extra += this.levels[k]!.own;
    return extra;
  }

  /** The message at the end of `path` in this piece (built from the templates where the path changed). */
  at(path: readonly Level[]): Message {
    const first = this.firstNew(path);
    for (let k = first; k < this.levels.length; k++) this.elements += this.levels[k]!.own;
    for (let k = first; k < path.length; k++) {
      const level = path[k]!;
      const shell = { ...level.template };
      // The fields that lead on are this piece's own: new lists, oneofs unset until a child is added.
      for (const f of level.step.fields) {
        if (f.fieldKind === 'list') shell[f.localName] = [];
        else if (f.oneof) shell[f.oneof.localName] = { case: undefined };
        else shell[f.localName] = undefined;
      }
      if (k === 0) this.root = shell;
      else {
        const parent = this.shells[k - 1]!;
        const via = level.via!;
        if (via.fieldKind === 'list') (parent[via.localName] as Message[]).push(shell);
        else if (via.oneof) parent[via.oneof.localName] = { case: via.localName, value: shell };
        else parent[via.localName] = shell;
      }
      this.shells[k] = shell;
      this.levels[k] = level;
    }
    this.shells.length = path.length;
    this.levels.length = path.length;
    return this.shells[path.length - 1]!;
  }

  take(): Message {
    const r = this.root!;
    this.root = null;
    this.elements = 0;
    this.shells.length = 0;
    this.levels.length = 0;
    return r;
  }
}

const BINARY = { readUnknownFields: false } as const;
const JSON_READ = { ignoreUnknownFields: true } as const;

interface Walk {
  spine: ExportSpine<DescMessage>;
  piece: Piece;
  pieceRefused: () => OtlpExportRefused;
}

function levelOf(w: Walk, desc: DescMessage, template: Message, via: DescField | null, path: readonly Level[], own: number): Level {
  const elements = (path.length > 0 ? path[path.length - 1]!.elements : 0) + own;
  if (own === OVER_LIMIT || elements > MAX_ITEM_ELEMENTS) throw w.pieceRefused();
  return { desc, step: w.spine.steps.get(desc)!, template, via, own, elements };
}

/** Adds an item of `n` elements at the end of `path`: the piece in `w` is yielded first when the item would not fit in it. */
function* room(w: Walk, path: readonly Level[], n: number): Generator<Message, Message> {
  const level = path[path.length - 1]!;
  if (n === OVER_LIMIT || level.elements + n > MAX_ITEM_ELEMENTS) throw w.pieceRefused();
  if (w.piece.root !== null && w.piece.elements + w.piece.cost(path, n) > PIECE_ELEMENTS) yield w.piece.take();
  const at = w.piece.at(path);
  w.piece.elements += n;
  return at;
}

/** Pieces of a binary message of `desc` whose records are in `ranges` (one range; several for a singular field sent more than once, merged as fromBinary merges them). */
function* binaryPieces(w: Walk, buf: Uint8Array, desc: DescMessage, ranges: readonly [number, number][], via: DescField | null, path: readonly Level[]): Generator<Message> {
  const step = w.spine.steps.get(desc)!;
  // Its own fields first, wherever they are among the others: each piece carries them.
  const template = create(desc) as unknown as Message;
  let own = 0;
  for (const [start, end] of ranges) {
    for (const r of fieldRecords(desc, buf, start, end)) {
      if (step.byNumber.has(r.fieldNo)) continue;
      const n = countElements(desc, buf, MAX_ITEM_ELEMENTS, r.start, r.end);
      own = n === OVER_LIMIT || own + n > MAX_ITEM_ELEMENTS ? OVER_LIMIT : own + n;
      if (own === OVER_LIMIT) throw w.pieceRefused();
      mergeFromBinary(desc, template as never, buf.subarray(r.start, r.end), BINARY);
    }
  }
  const level = levelOf(w, desc, template, via, path, own);
  const here = [...path, level];
  // A singular message that leads on (a Metric's data) is one child however often it is sent:
  // as in fromBinary, the records of one oneof member merge, and another member replaces them.
  let singular: DescField | null = null;
  let singularRanges: [number, number][] = [];
  for (const [start, end] of ranges) {
    for (const r of fieldRecords(desc, buf, start, end)) {
      const f = step.byNumber.get(r.fieldNo);
      if (f === undefined) continue;
      if (step.items) {
        const at = yield* room(w, here, countElements(desc, buf, MAX_ITEM_ELEMENTS, r.start, r.end));
        mergeFromBinary(desc, at as never, buf.subarray(r.start, r.end), BINARY);
      } else if (f.fieldKind === 'list') {
        yield* binaryPieces(w, buf, f.message!, [[r.valueStart, r.end]], f, here);
      } else {
        if (singular !== f) singularRanges = [];
        singular = f;
        singularRanges.push([r.valueStart, r.end]);
      }
    }
  }
  if (singular !== null) yield* binaryPieces(w, buf, singular.message!, singularRanges, singular, here);
}

/** Pieces of a parsed (proto3) JSON message of `desc`. */
function* jsonPieces(w: Walk, obj: Record<string, unknown>, desc: DescMessage, via: DescField | null, path: readonly Level[], otlp: boolean): Generator<Message> {
  const step = w.spine.steps.get(desc)!;
  const own: Record<string, unknown> = {};
  const next = new Map<DescField, unknown>();
  for (const [k, v] of Object.entries(obj)) {
    const f = step.byKey.get(k);
    if (f === undefined) own[k] = v;
    else next.set(f, v);
  }
  const count = jsonValues(own, MAX_ITEM_ELEMENTS);
  if (count === OVER_LIMIT) throw w.pieceRefused();
  if (otlp) normalizeOtlpJson(own);
  const level = levelOf(w, desc, fromJson(desc, own as never, JSON_READ) as unknown as Message, via, path, count);
  const here = [...path, level];
  // As fromJson: null is an unset field; two members of one oneof are an error.
  const set = [...next].filter(([, v]) => v !== null);
  if (set.filter(([f]) => f.oneof !== undefined).length > 1) throw new Error('a oneof set twice');
  for (const [f, v] of set) {
    if (f.fieldKind === 'list') {
      if (!Array.isArray(v)) throw new Error(`${f.name} is not a list`);
      for (const item of v) {
        if (item === null || typeof item !== 'object' || Array.isArray(item)) throw new Error(`an item of ${f.name} is not an object`);
        if (!step.items) {
          yield* jsonPieces(w, item as Record<string, unknown>, f.message!, f, here, otlp);
          continue;
        }
        const at = yield* room(w, here, jsonValues(item, MAX_ITEM_ELEMENTS));
        if (otlp) normalizeOtlpJson(item);
        (at[f.localName] as unknown[]).push(fromJson(f.message!, item as never, JSON_READ));
      }
    } else {
      if (typeof v !== 'object' || Array.isArray(v)) throw new Error(`${f.name} is not an object`);
      yield* jsonPieces(w, v as Record<string, unknown>, f.message!, f, here, otlp);
    }
  }
}

/**
 * The export decoded a piece at a time (see above): requests of the spine's type, in the order of
 * their items. Only what `measureExport` accepted. Throws OtlpExportRefused: malformed (fromBinary,
 * JSON.parse or fromJson refused a part, or an OTLP/JSON id is not hex), or too_large (one item
 * with its resource, scope and metric holds more than MAX_ITEM_ELEMENTS).
 */
export function* exportPieces<Desc extends DescMessage>(spine: ExportSpine<Desc>, input: OtlpExportBytes): Generator<MessageShape<Desc>> {
  const w: Walk = {
    spine,
    piece: new Piece(),
    pieceRefused: () => new OtlpExportRefused('too_large', `${spine.piece} holds more than ${MAX_ITEM_ELEMENTS} elements`),
  };
  try {
    // Delegated, never held in a variable here: a piece is dropped as soon as its reader drops it.
    yield* walk(w, input) as Generator<MessageShape<Desc>>;
  } catch (err) {
    if (err instanceof OtlpExportRefused) throw err;
    throw malformed(spine, input.format);
  }
}

function* walk(w: Walk, input: OtlpExportBytes): Generator<Message> {
  if (input.format === 'protobuf') {
    yield* binaryPieces(w, input.bytes, w.spine.root, [[0, input.bytes.length]], null, []);
  } else {
    const json: unknown = JSON.parse(new TextDecoder('utf-8', { ignoreBOM: true }).decode(input.bytes));
    if (json === null || typeof json !== 'object' || Array.isArray(json)) throw new OtlpExportRefused('malformed', 'the JSON body must be an object');
    yield* jsonPieces(w, json as Record<string, unknown>, w.spine.root, null, [], input.format === 'otlp-json');
  }
  if (w.piece.root !== null) yield w.piece.take();
}
