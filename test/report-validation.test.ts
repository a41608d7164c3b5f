import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { isRefusedValueError } from '../src/db/index.js';
import { canonicalServerUrl } from '../src/domain/server-identity.js';
import { REPORT_LIMITS, validateReport, type ReportInput } from '../src/domain/telemetry.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// Issue 17 finding 12: one row PostgreSQL refuses (NUL in tool_name) failed a whole ReportStream
// with `internal`. Every door (REST, Connect unary, the client stream) must refuse such a value
// with the same validation before it reaches the database, and a stream keeps its other rows.

const RUNS = Number(process.env.FUZZ_RUNS ?? 40);
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
console.log(`report-validation: fast-check seed ${SEED}, ${RUNS} runs per property (FUZZ_SEED / FUZZ_RUNS to replay)`);

let t: TestApp;
beforeAll(async () => {
  // Each property run reports from an address of its own (TRUST_PROXY), so per-source limits on
  // new servers never mask what validation decides.
  t = await startTestApp({ TRUST_PROXY: '1' });
}, 120_000);
afterAll(async () => t?.close());

const SERVER = 'https://stream-nul.example.com/mcp';
const interactions = async (url: string) => {
  const res = await fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`);
  return res.status === 404 ? 0 : ((await json(res)).metrics.total_interactions as number);
};

/** Any UTF-16 code unit, lone surrogate halves and NUL included. */
const codeUnit = fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c));
const hostileText = fc.oneof(
  fc.constantFrom('\u0000', 'a\u0000b', '\uD800', 'x\uDFFF', '\uDBFF\uDBFF', 'get_forecast', '𝕏🦄', '\u202E\u200B', 'é', ''),
  fc.string({ unit: codeUnit, maxLength: 12 }),
  fc.string({ unit: 'binary', maxLength: 12 }),
);
const hostileNumber = fc.oneof(
  fc.double(),
  fc.constantFrom(0, -0, 5e-324, -5e-324, 1e-310, 2.2250738585072014e-308, 1e308, -1, REPORT_LIMITS.latencyMaxMs, REPORT_LIMITS.latencyMaxMs + 1e-9, 2 ** 31, -(2 ** 31) - 1, 2 ** 53 + 1),
  fc.integer({ min: -1000, max: 1000 }),
);
const hostileReport = fc.record(
  {
    server_url: fc.oneof(
      fc.constant('https://prop.example.com/mcp'),
      hostileText.map((s) => `https://prop.example.com/${s}`),
      hostileText.map((s) => `https://${s}.example.com/`),
    ),
    success: fc.oneof(fc.boolean(), fc.constant(undefined)),
    latency_ms: hostileNumber,
    tool_name: fc.oneof(fc.constant(undefined), hostileText),
    http_status: fc.oneof(fc.constant(undefined), fc.integer({ min: 90, max: 610 }), hostileNumber),
  },
  { requiredKeys: ['server_url', 'latency_ms'] },
);

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const storable = (s: string) => !s.includes('\u0000') && !LONE_SURROGATE.test(s);

const canonical = (u: string) => {
  try {
    canonicalServerUrl(u);
    return true;
  } catch {
    return false;
  }
};

describe('report validation (domain)', () => {
  it('refuses NUL, lone surrogates and out-of-range numbers; whatever it accepts is storable text and a finite in-range number', () => {
    expect(validateReport({ server_url: SERVER, success: true, latency_ms: 1, tool_name: 'a\u0000b' })).toMatch(/tool_name/);
    expect(validateReport({ server_url: SERVER, success: true, latency_ms: 1, tool_name: 'a\uD800' })).toMatch(/tool_name/);
    expect(validateReport({ server_url: `${SERVER}\u0000`, success: true, latency_ms: 1 })).toMatch(/server_url/);
    expect(validateReport({ server_url: `${SERVER}\uDC00`, success: true, latency_ms: 1 })).toMatch(/server_url/);
    expect(validateReport({ server_url: SERVER, success: true, latency_ms: 1, tool_name: '𝕏🦄' })).toBeNull();
    fc.assert(
      fc.property(hostileReport, (r) => {
        if (validateReport(r as ReportInput) !== null) return;
        expect(storable(r.server_url)).toBe(true);
        if (typeof r.tool_name === 'string') expect(storable(r.tool_name)).toBe(true);
        expect(Number.isFinite(r.latency_ms) && r.latency_ms >= 0 && r.latency_ms <= REPORT_LIMITS.latencyMaxMs).toBe(true);
        if (r.http_status !== undefined) expect(Number.isInteger(r.http_status) && r.http_status >= 100 && r.http_status <= 599).toBe(true);
      }),
      { seed: SEED, numRuns: RUNS * 25 },
    );
  });
});

describe(`report validation on every door (${backend})`, () => {
  it('a gRPC ReportStream with a NUL tool_name keeps the other rows and counts the bad one as rejected', async () => {
    const client = createClient(TelemetryService, createGrpcTransport({ baseUrl: t.base }));
    const n0 = await interactions(SERVER);
    async function* reports() {
      for (let i = 0; i < 30; i++) {
        const toolName = i === 7 ? 'get\u0000forecast' : i === 19 ? 'x'.repeat(REPORT_LIMITS.toolNameMaxLength + 1) : 'get_forecast';
        yield { report: { serverUrl: SERVER, success: true, latencyMs: 10 + i, toolName } };
      }
    }
    const res = await client.reportStream(reports());
    expect(res.accepted).toBe(28);
    expect(res.rejected).toBe(2);
    expect(res.rejections.map((r) => [r.index, r.code])).toEqual([
      [7, 'invalid_argument'],
      [19, 'invalid_argument'],
    ]);
    expect(res.rejections[0]!.detail).toMatch(/tool_name/);
    expect(await interactions(SERVER)).toBe(n0 + 28);
  });

  it('Connect unary refuses NUL and lone surrogates with InvalidArgument (never Internal)', async () => {
    for (const transport of [createGrpcTransport({ baseUrl: t.base }), createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', useBinaryFormat: false })]) {
      const client = createClient(TelemetryService, transport);
      const err = await client.report({ serverUrl: SERVER, success: true, latencyMs: 5, toolName: 'a\u0000b' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    }
    // JSON carries a lone surrogate as an escape ("\ud800"); binary protobuf cannot carry one.
    const jsonClient = createClient(TelemetryService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', useBinaryFormat: false }));
    await expect(jsonClient.report({ serverUrl: SERVER, success: true, latencyMs: 5, toolName: 'tool\uD800' })).rejects.toMatchObject({ code: Code.InvalidArgument });
  });

  it.skipIf(backend !== 'postgres')('recognises PostgreSQL refusing NUL as a refused value (the backstop behind validation)', async () => {
    const err = await t.obs.db.query('SELECT $1::text AS v', ['a\u0000b']).catch((e: unknown) => e);
    expect(isRefusedValueError(err)).toBe(true);
    expect(isRefusedValueError(new Error('other'))).toBe(false);
  });

  it('REST refuses NUL and lone surrogates with 400 problem+json', async () => {
    await expectProblem(await postJson(`${t.base}/api/report`, { server_url: SERVER, success: true, latency_ms: 5, tool_name: 'a\u0000b' }), 400, 'invalid_argument');
    await expectProblem(await postJson(`${t.base}/api/report`, { server_url: SERVER, success: true, latency_ms: 5, tool_name: 'tool\uDFFF' }), 400, 'invalid_argument');
    await expectProblem(await postJson(`${t.base}/api/report`, { server_url: `${SERVER}\uD800`, success: true, latency_ms: 5 }), 400, 'invalid_argument');
  });

  it('property: what the validator accepts is stored, what it refuses every door refuses with invalid_argument', async () => {
    const grpc = createClient(TelemetryService, createGrpcTransport({ baseUrl: t.base }));
    const connectJson = createClient(TelemetryService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', useBinaryFormat: false }));
    let run = 1;
    const proto = (r: Record<string, unknown>) => ({
      serverUrl: r.server_url as string,
      success: r.success as boolean | undefined,
      latencyMs: r.latency_ms as number,
      toolName: r.tool_name as string | undefined,
      // int32 on the wire: out-of-range or fractional statuses are a REST-only case.
      httpStatus: r.http_status as number | undefined,
    });
    await fc.assert(
      fc.asyncProperty(hostileReport, async (r) => {
        const valid = validateReport(r as ReportInput) === null && canonical(r.server_url);
        const from = { 'x-forwarded-for': `10.${(run >> 8) & 255}.${run & 255}.${(run++ % 200) + 1}` };
        // REST: JSON carries every value the generator makes, NaN and ±Infinity as null, which
        // REST reads as absent in an optional field (http_status): judge it by what it receives.
        const sent = JSON.parse(JSON.stringify(r)) as typeof r;
        const restValid = validateReport(sent as ReportInput) === null && canonical(r.server_url);
        const rest = await postJson(`${t.base}/api/report`, r, from);
        const restText = await rest.text();
        expect(rest.status, restText).toBeLessThan(500);
        if (restValid) {
          expect(rest.status, restText).toBe(200);
          // Stored exactly as sent (no truncation at NUL, no U+FFFD for a lone surrogate).
          const [row] = await t.obs.db.query<{ tool_name: string | null; latency_ms: number; http_status: number | null }>(
            `SELECT t.tool_name, t.latency_ms, t.http_status FROM telemetry t JOIN servers s ON s.id = t.server_id
              WHERE s.url = $1 ORDER BY t.id DESC LIMIT 1`,
            [canonicalServerUrl(r.server_url)],
          );
          expect(row).toEqual({ tool_name: r.tool_name ?? null, latency_ms: r.latency_ms + 0, http_status: sent.http_status ?? null });
        } else expect(rest.status, restText).toBe(400);
        // Connect JSON unary: the service's own validation.
        const wireSafe = r.http_status === undefined || (Number.isInteger(r.http_status) && Math.abs(r.http_status) < 2 ** 31);
        if (wireSafe) {
          const u = await connectJson.report(proto(r), { headers: from }).then(
            () => 'ok',
            (e: unknown) => (e instanceof ConnectError ? e.code : 'thrown'),
          );
          expect(u).toBe(valid ? 'ok' : Code.InvalidArgument);
        }
        // The client stream, binary protobuf: a refused row is a rejection, never a failed stream.
        if (wireSafe) {
          async function* one() {
            yield { report: proto(r) };
            yield { report: { serverUrl: 'https://prop-neighbour.example.com/mcp', success: true, latencyMs: 3 } };
          }
          const s = await grpc.reportStream(one(), { headers: from });
          expect(s.accepted + s.rejected).toBe(2);
          expect(s.rejections.every((x) => x.index === 0 && x.code === 'invalid_argument')).toBe(true);
          // Binary protobuf turns lone surrogates into U+FFFD on the client, so the row may be
          // valid on the wire while its JSON form was not: only the neighbour is certain.
          expect(s.accepted).toBeGreaterThanOrEqual(1);
          if (valid) expect(s.accepted).toBe(2);
        }
      }),
      { seed: SEED, numRuns: RUNS },
    );
    expect((await fetch(`${t.base}/healthz`)).status).toBe(200);
  }, 240_000);
});
