import { create, fromBinary, isFieldSet, ScalarType, toBinary, toJson, toJsonString, type DescMessage, type Message, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import { describe, expect, it } from 'vitest';
import { ExportMetricsServiceRequestSchema } from '../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { ExportTraceServiceRequestSchema } from '../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import type { AnyValueSchema } from '../gen/opentelemetry/proto/common/v1/common_pb.js';
import { MetricSchema } from '../gen/opentelemetry/proto/metrics/v1/metrics_pb.js';
import { countJsonValues, exportPieces, MAX_ITEM_ELEMENTS, measureExport, METRICS_SPINE, OtlpExportRefused, PIECE_ELEMENTS, TRACES_SPINE, type OtlpFormat } from '../src/domain/otlp-export.js';
import { fingerprint, resourceFingerprint } from '../src/domain/otlp-attributes.js';
import { readMetrics } from '../src/domain/otlp-metrics.js';
import { readTraces } from '../src/domain/otlp-spans.js';
import { countElements, MALFORMED, OVER_LIMIT } from '../src/domain/otlp-wire.js';

// The measurement and the piecewise decoding of OTLP exports (src/domain/otlp-wire.ts,
// src/domain/otlp-export.ts; docs/telemetry.md "What an export may cost"): the count is what
// fromBinary builds, bytes it calls malformed are bytes fromBinary refuses, and a reading of the
// pieces is the reading of the whole export.

const attr = (key: string, v: string) => ({ key, value: { value: { case: 'stringValue' as const, value: v } } });
const filler = (n: number) => Array.from({ length: n }, (_, j) => attr(`attr.${j}`, `value ${j}`));

function span(i: number, attrs: number) {
  return {
    traceId: new Uint8Array(16).fill(1 + (i % 200)),
    spanId: new Uint8Array(8).fill(2 + (i % 100)),
    parentSpanId: i % 4 === 0 ? new Uint8Array(8).fill(9) : new Uint8Array(),
    name: 'tools/call search',
    kind: 3,
    startTimeUnixNano: 1_760_000_000_000_000_000n,
    endTimeUnixNano: 1_760_000_000_000_000_000n + BigInt(i) * 1_000_000n,
    status: i % 5 === 0 ? { code: 2 } : undefined,
    events: i % 7 === 0 ? [{ name: 'e', attributes: filler(3) }] : [],
    attributes: [
      attr('mcp.method.name', i % 3 ? 'tools/call' : 'tools/list'),
      attr('gen_ai.tool.name', `tool-${i % 11}`),
      attr(i % 2 ? 'url.full' : 'server.address', `https://s${i % 7}.example.com/mcp`),
      { key: 'n', value: { value: { case: 'intValue' as const, value: BigInt(i) } } },
      ...filler(i % 40),
    ],
  };
}

/** Several resources (one with a large attribute list), scopes and thousands of spans: many pieces. */
const TRACES = create(ExportTraceServiceRequestSchema, {
  resourceSpans: Array.from({ length: 4 }, (_, r) => ({
    resource: { attributes: [attr('service.name', `svc-${r}`), ...filler(r * 500)] },
    schemaUrl: 'https://opentelemetry.io/schemas/1.30.0',
    scopeSpans: Array.from({ length: 3 }, (_, s) => ({ scope: { name: `scope-${s}`, version: '1' }, spans: Array.from({ length: 600 }, (_, i) => span(i + 1000 * s + 10_000 * r, i)) })),
  })),
});

const point = (i: number) => ({
  attributes: [attr('mcp.method.name', 'tools/call'), attr('server.address', `s${i % 13}.example.com`), attr('gen_ai.tool.name', `t${i}`)],
  startTimeUnixNano: 1n,
  timeUnixNano: 2n + BigInt(i),
  count: 3n,
  sum: 1.5,
  scale: 3,
  zeroCount: 0n,
  positive: { offset: -10, bucketCounts: [1n, 1n, 1n] },
  negative: { offset: 0, bucketCounts: [] },
});

/** One metric of 20,000 points (split between pieces), beside other kinds. */
const METRICS = create(ExportMetricsServiceRequestSchema, {
  resourceMetrics: [
    {
      resource: { attributes: [attr('service.name', 'metrics-agent')] },
      scopeMetrics: [
        {
          scope: { name: 'mcp' },
          metrics: [
            { name: 'mcp.client.operation.duration', unit: 's', data: { case: 'exponentialHistogram', value: { aggregationTemporality: 1, dataPoints: Array.from({ length: 20_000 }, (_, i) => point(i)) } } },
            { name: 'other', unit: '1', data: { case: 'sum', value: { isMonotonic: true, dataPoints: Array.from({ length: 100 }, () => ({ value: { case: 'asInt' as const, value: 1n } })) } } },
            { name: 'mcp.client.operation.duration', unit: 'ms', data: { case: 'gauge', value: { dataPoints: [{ value: { case: 'asDouble' as const, value: 3 } }] } } },
          ],
        },
      ],
    },
  ],
});

/**
 * The field occurrences in toBinary's bytes, found on the message instead: every field set (a
 * list: each element; a packed list of numbers: its one record and each value) and everything in
 * each message. fromBinary reads each of them and builds all but a packed run's record.
 */
function built(desc: DescMessage, m: Record<string, unknown>): number {
  let n = 0;
  for (const f of desc.fields) {
    if (!isFieldSet(m as unknown as Message, f)) continue;
    const v = f.oneof ? (m[f.oneof.localName] as { value: unknown }).value : m[f.localName];
    if (f.fieldKind === 'list') {
      const packed = f.listKind === 'enum' || (f.listKind === 'scalar' && f.scalar !== ScalarType.STRING && f.scalar !== ScalarType.BYTES);
      if (packed) n++;
      for (const e of v as unknown[]) n += 1 + (f.listKind === 'message' ? built(f.message!, e as Record<string, unknown>) : 0);
    } else n += 1 + (f.fieldKind === 'message' ? built(f.message!, v as Record<string, unknown>) : 0);
  }
  return n;
}

/** A reading of the pieces, and the number of pieces. */
function readPieces<D extends DescMessage>(spine: { root: D }, bytes: Uint8Array, format: OtlpFormat, read: (m: MessageShape<D>, out: never) => unknown, out: unknown) {
  let pieces = 0;
  for (const p of exportPieces(spine as never, { bytes, format })) {
    pieces++;
    read(p as MessageShape<D>, out as never);
  }
  return { out, pieces };
}

const plain = (v: unknown) => JSON.parse(JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? x.toString() : x)));
const noSpans = () => ({ calls: [], children: [], other: 0, invalid: 0, total: 0 });
const noPoints = () => ({ points: [], other: 0, invalid: 0, invalidWhy: {}, total: 0 });

describe('countElements: what fromBinary would build, counted on the bytes', () => {
  it('counts every field set and every message, a packed run per value', () => {
    for (const [desc, msg] of [
      [ExportTraceServiceRequestSchema, TRACES],
      [ExportMetricsServiceRequestSchema, METRICS],
    ] as const) {
      const bytes = toBinary(desc, msg as never);
      expect(countElements(desc, bytes, 1e9)).toBe(built(desc, msg as unknown as Record<string, unknown>));
    }
  });

  it('stops at the limit', () => {
    const bytes = toBinary(ExportTraceServiceRequestSchema, TRACES);
    const n = countElements(ExportTraceServiceRequestSchema, bytes, 1e9);
    expect(countElements(ExportTraceServiceRequestSchema, bytes, n)).toBe(n);
    expect(countElements(ExportTraceServiceRequestSchema, bytes, n - 1)).toBe(OVER_LIMIT);
  });

  it('calls malformed only bytes fromBinary refuses (random cuts and flips of an export)', () => {
    const bytes = toBinary(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{ scopeSpans: [{ spans: Array.from({ length: 20 }, (_, i) => span(i, 5)) }] }] }));
    let seed = 7;
    const random = (n: number) => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31), seed % n);
    let malformed = 0;
    for (let k = 0; k < 3000; k++) {
      const b = Uint8Array.from(bytes.subarray(0, k % 3 === 0 ? random(bytes.length) : bytes.length));
      for (let f = 0; f < 1 + random(4); f++) if (b.length > 0) b[random(b.length)] = random(256);
      const n = countElements(ExportTraceServiceRequestSchema, b, 1e9);
      let decoded = true;
      try {
        fromBinary(ExportTraceServiceRequestSchema, b);
      } catch {
        decoded = false;
      }
      if (n === MALFORMED) {
        malformed++;
        expect(decoded, `bytes ${Buffer.from(b).toString('hex')}`).toBe(false);
      }
    }
    expect(malformed).toBeGreaterThan(100);
  });

  it('reads nesting, unknown fields and groups as fromBinary does', () => {
    // Nested arrays: fromBinary reads 100 levels of messages and refuses the 101st.
    let outcomes = 0;
    for (let k = 40; k <= 55; k++) {
      let value: MessageInitShape<typeof AnyValueSchema> = { value: { case: 'stringValue', value: 'x' } };
      for (let i = 0; i < k; i++) value = { value: { case: 'arrayValue', value: { values: [value] } } };
      const b = toBinary(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{ resource: { attributes: [{ key: 'k', value }] } }] }));
      let decoded = true;
      try {
        fromBinary(ExportTraceServiceRequestSchema, b);
      } catch {
        decoded = false;
      }
      outcomes += decoded ? 1 : 100;
      expect(countElements(ExportTraceServiceRequestSchema, b, 1e9) !== MALFORMED, `${k} nested arrays`).toBe(decoded);
    }
    // Both outcomes were seen.
    expect(outcomes % 100).toBeGreaterThan(0);
    expect(outcomes).toBeGreaterThan(100);
    // Unknown fields of every wire type, each one element; a group and the field in it, two.
    const w = new BinaryWriter();
    w.tag(99, 0).uint64(123n).tag(98, 1).fixed64(1n).tag(97, 5).fixed32(1).tag(96, 2).bytes(new Uint8Array(10));
    w.tag(95, 3).tag(1, 0).uint32(1).tag(95, 4);
    expect(countElements(ExportTraceServiceRequestSchema, w.finish(), 1e9)).toBe(6);
    const bad = new BinaryWriter().tag(95, 3).tag(1, 0).uint32(1).tag(94, 4).finish();
    expect(countElements(ExportTraceServiceRequestSchema, bad, 1e9)).toBe(MALFORMED);
    expect(() => fromBinary(ExportTraceServiceRequestSchema, bad)).toThrow();
  });
});

describe('countJsonValues: at least the values of a JSON text, before JSON.parse', () => {
  it('counts the marks before values (":", ",", "["), not those inside strings', () => {
    expect(countJsonValues(Buffer.from('{}'), 100)).toBe(1);
    // 7 values; the comma before "c" is counted too (a member after the first counts two).
    expect(countJsonValues(Buffer.from('{"a":[1,2,{"b":"x,[:\\"]"}],"c":null}'), 100)).toBe(8);
    expect(countJsonValues(Buffer.from('[{},{},{}]'), 100)).toBe(4);
    expect(countJsonValues(Buffer.from('[{},{},{}]'), 3)).toBe(OVER_LIMIT);
  });
});

describe('measureExport: refused before anything is built', () => {
  it('refuses an export over the cap as too large, naming it, and malformed bytes as malformed', () => {
    const dense = toBinary(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{ resource: { attributes: [{ key: 'k', value: { value: { case: 'arrayValue', value: { values: Array.from({ length: 50_000 }, () => ({})) } } } }] } }] }));
    const refusal = (f: () => unknown) => {
      try {
        f();
      } catch (err) {
        return err as OtlpExportRefused;
      }
      throw new Error('not refused');
    };
    const tooLarge = refusal(() => measureExport(TRACES_SPINE, { bytes: dense, format: 'protobuf' }, 40_000));
    expect(tooLarge).toBeInstanceOf(OtlpExportRefused);
    expect(tooLarge.reason).toBe('too_large');
    expect(tooLarge.message).toContain('more than 40000 elements (OTLP_MAX_EXPORT_ELEMENTS');
    expect(measureExport(TRACES_SPINE, { bytes: dense, format: 'protobuf' }, 60_000)).toBe(50_006);
    expect(refusal(() => measureExport(TRACES_SPINE, { bytes: dense.subarray(0, 1000), format: 'protobuf' }, 60_000)).reason).toBe('malformed');
    // JSON: each value counts two.
    const json = Buffer.from(toJsonString(ExportTraceServiceRequestSchema, fromBinary(ExportTraceServiceRequestSchema, dense)));
    expect(refusal(() => measureExport(TRACES_SPINE, { bytes: json, format: 'otlp-json' }, 100_000)).message).toContain('a JSON value counts two');
    expect(measureExport(TRACES_SPINE, { bytes: json, format: 'otlp-json' }, 110_000)).toBe(2 * countJsonValues(json, 1e9));
  });
});

describe('exportPieces: the export a piece at a time', () => {
  it('a reading of the pieces is the reading of the whole export (traces: binary, protobuf JSON, OTLP/JSON)', () => {
    const bytes = toBinary(ExportTraceServiceRequestSchema, TRACES);
    const whole = plain(readTraces(fromBinary(ExportTraceServiceRequestSchema, bytes)));
    expect(whole.calls.length).toBeGreaterThan(1000);
    const binary = readPieces(TRACES_SPINE, bytes, 'protobuf', readTraces, noSpans());
    expect(binary.pieces).toBeGreaterThan(10);
    expect(plain(binary.out)).toEqual(whole);
    const json = Buffer.from(toJsonString(ExportTraceServiceRequestSchema, TRACES));
    expect(plain(readPieces(TRACES_SPINE, json, 'proto3-json', readTraces, noSpans()).out)).toEqual(whole);
    const otlp = toJson(ExportTraceServiceRequestSchema, TRACES) as { resourceSpans: { scopeSpans: { spans: Record<string, string>[] }[] }[] };
    for (const rs of otlp.resourceSpans) {
      for (const ss of rs.scopeSpans) {
        for (const s of ss.spans) for (const id of ['traceId', 'spanId', 'parentSpanId']) if (s[id]) s[id] = Buffer.from(s[id], 'base64').toString('hex');
      }
    }
    expect(plain(readPieces(TRACES_SPINE, Buffer.from(JSON.stringify(otlp)), 'otlp-json', readTraces, noSpans()).out)).toEqual(whole);
  });

  it('a reading of the pieces is the reading of the whole export (metrics: a metric split between pieces, a oneof sent twice)', () => {
    const bytes = toBinary(ExportMetricsServiceRequestSchema, METRICS);
    const whole = plain(readMetrics(fromBinary(ExportMetricsServiceRequestSchema, bytes)));
    const binary = readPieces(METRICS_SPINE, bytes, 'protobuf', readMetrics, noPoints());
    expect(binary.pieces).toBeGreaterThan(5);
    expect(plain(binary.out)).toEqual(whole);
    expect(plain(readPieces(METRICS_SPINE, Buffer.from(toJsonString(ExportMetricsServiceRequestSchema, METRICS)), 'proto3-json', readMetrics, noPoints()).out)).toEqual(whole);
    // One Metric sent as a sum, then a histogram, then more of the histogram: fromBinary keeps the
    // histogram with the points of both of its records.
    const a = toBinary(MetricSchema, create(MetricSchema, { data: { case: 'sum', value: { dataPoints: [{}, {}] } } }));
    const pointAt = (host: string) => ({ attributes: [attr('mcp.method.name', 'tools/call'), attr('server.address', host)], timeUnixNano: 5n, count: 1n, bucketCounts: [1n], explicitBounds: [] });
    const b = toBinary(MetricSchema, create(MetricSchema, { name: 'mcp.client.operation.duration', unit: 's', data: { case: 'histogram', value: { aggregationTemporality: 1, dataPoints: [pointAt('a.example.com')] } } }));
    const c = toBinary(MetricSchema, create(MetricSchema, { data: { case: 'histogram', value: { dataPoints: [pointAt('b.example.com')] } } }));
    const odd = new BinaryWriter().tag(1, 2).fork().tag(2, 2).fork().tag(2, 2).bytes(new Uint8Array([...a, ...b, ...c])).join().join().finish();
    const oddWhole = plain(readMetrics(fromBinary(ExportMetricsServiceRequestSchema, odd)));
    expect(oddWhole.points).toHaveLength(2);
    expect(plain(readPieces(METRICS_SPINE, odd, 'protobuf', readMetrics, noPoints()).out)).toEqual(oddWhole);
  });

  it(`holds a piece to about ${PIECE_ELEMENTS} elements, and refuses a span that holds more than ${MAX_ITEM_ELEMENTS} with its resource and scope`, () => {
    const many = create(ExportTraceServiceRequestSchema, { resourceSpans: [{ resource: { attributes: filler(20_000) }, scopeSpans: [{ spans: Array.from({ length: 20_000 }, (_, i) => span(i, 0)) }] }] });
    for (const p of exportPieces(TRACES_SPINE, { bytes: toBinary(ExportTraceServiceRequestSchema, many), format: 'protobuf' })) {
      // The resource is the walk's (it is on its path): a piece holds its spans beside it.
      const spans = p.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans));
      expect(countElements(ExportTraceServiceRequestSchema, toBinary(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{ scopeSpans: [{ spans }] }] })), 1e9)).toBeLessThanOrEqual(PIECE_ELEMENTS + 100);
    }
    const big = (resourceAttrs: number, spanAttrs: number) =>
      toBinary(ExportTraceServiceRequestSchema, create(ExportTraceServiceRequestSchema, { resourceSpans: [{ resource: { attributes: filler(resourceAttrs) }, scopeSpans: [{ spans: [{ ...span(1, 0), attributes: filler(spanAttrs) }] }] }] }));
    const read = (bytes: Uint8Array) => () => [...exportPieces(TRACES_SPINE, { bytes, format: 'protobuf' })];
    expect(read(big(30_000, 30_000))).not.toThrow();
    expect(read(big(40_000, 30_000))).toThrow(/a span \(with its resource and scope\) holds more than 250000 elements/);
    expect(read(big(0, 70_000))).toThrow(OtlpExportRefused);
  });
});

describe('fingerprints of attribute lists', () => {
  it('read a list once, however often it is fingerprinted (a resource shared by the pieces, read again for each of its points)', () => {
    let reads = 0;
    const list = Array.from({ length: 3 }, (_, i) => ({
      get key() {
        reads++;
        return `k${i}`;
      },
      value: { value: { case: 'stringValue' as const, value: 'v' } },
    }));
    const first = resourceFingerprint(list as never);
    const once = reads;
    expect(once).toBeGreaterThan(0);
    expect(resourceFingerprint(list as never)).toBe(first);
    expect(fingerprint(list as never, 'scope', 'mcp.client.operation.duration')).not.toBe(first);
    expect(reads).toBe(once);
    // Another list of the same attributes: read, and the same fingerprint.
    expect(resourceFingerprint(list.map((kv) => ({ key: kv.key, value: kv.value })) as never)).toBe(first);
  });
});
