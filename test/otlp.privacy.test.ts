import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { OTLPMetricExporter as ProtoMetricExporter } from '@opentelemetry/exporter-metrics-otlp-proto';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, TracerProvider, type SpanExporter } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { mcpMeter, recordingMetricExporter, recordingSpanExporter } from './support/otel.js';

// Privacy of the OTLP receivers (issue 21 item 3): of an export only the five report fields are
// kept. Every attribute, the span and event names, the resource, the scope, the status message,
// request headers and the query of url.full carry a unique marker; trace and span ids are noted.
// None of them may appear in the database (every table, every column), in the logs (debug level:
// a line per request) or on /metrics.

const IP = '203.0.113.77';
const M = (what: string) => `MARK-${what}-q7z`;
const SERVER = 'https://privacy-otlp.example.com/mcp';
const TOOL = 'privacy_tool';

let t: TestApp;
const logs: string[] = [];
const markers = new Set<string>([IP]);
const mark = (what: string) => {
  const m = M(what);
  markers.add(m);
  return m;
};

beforeAll(async () => {
  t = await startTestApp({ TRUST_PROXY: '1', LOG_LEVEL: 'debug', OTLP_JOIN_WINDOW_MS: '200' }, { logStream: { write: (line: string) => void logs.push(line) } });
}, 120_000);
afterAll(async () => {
  await t?.close();
}, 60_000);

async function emit(exporter: SpanExporter, tag: string): Promise<void> {
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': mark(`${tag}-service`), 'host.name': mark(`${tag}-host`), 'enduser.id': mark(`${tag}-enduser`) }),
    spanProcessors: [new BatchSpanProcessor({ exporter, scheduledDelayMillis: 60_000 })],
  });
  const tracer = provider.getTracer(mark(`${tag}-scope`), mark(`${tag}-scope-version`));
  const start = Date.now() - 5_000;
  const span = tracer.startSpan(
    `tools/call ${mark(`${tag}-span-name`)}`,
    {
      kind: SpanKind.CLIENT,
      startTime: start,
      attributes: {
        'mcp.method.name': 'tools/call',
        'gen_ai.tool.name': TOOL,
        'mcp.session.id': mark(`${tag}-session`),
        'jsonrpc.request.id': mark(`${tag}-request-id`),
        'gen_ai.tool.call.arguments': JSON.stringify({ ssn: mark(`${tag}-argument`) }),
        'gen_ai.tool.call.result': JSON.stringify({ answer: mark(`${tag}-result`) }),
        'mcp.protocol.version': mark(`${tag}-protocol`),
        'enduser.id': mark(`${tag}-user`),
        'custom.list': [mark(`${tag}-list-a`), mark(`${tag}-list-b`)],
        // What the 3.x SDK also sends (any AnyValue): maps, bytes, mixed arrays.
        'custom.map': { secret: mark(`${tag}-map-value`), deeper: { list: [mark(`${tag}-map-list`), 1, null] } },
        'custom.bytes': new TextEncoder().encode(mark(`${tag}-bytes`)),
        'custom.mixed': [mark(`${tag}-mixed`), 7, true],
      },
    },
    ROOT_CONTEXT,
  );
  span.addEvent(mark(`${tag}-event`), { detail: mark(`${tag}-event-attr`), 'detail.map': { k: mark(`${tag}-event-map`) } });
  span.addLink({ context: { traceId: 'ab'.repeat(16), spanId: 'cd'.repeat(8), traceFlags: 1 }, attributes: { why: mark(`${tag}-link-attr`) } });
  markers.add(span.spanContext().traceId).add(span.spanContext().spanId);
  const child = tracer.startSpan(
    'POST',
    {
      kind: SpanKind.CLIENT,
      startTime: start + 1,
      attributes: {
        'http.request.method': 'POST',
        // The query of url.full may hold a token: it is dropped from the server URL.
        'url.full': `${SERVER}?token=${mark(`${tag}-url-query`)}#${mark(`${tag}-url-fragment`)}`,
        'http.response.status_code': 200,
        'http.request.header.authorization': mark(`${tag}-http-header`),
        'user_agent.original': mark(`${tag}-user-agent`),
      },
    },
    trace.setSpan(ROOT_CONTEXT, span),
  );
  markers.add(child.spanContext().spanId);
  child.end(start + 30);
  span.setAttribute('error.type', 'tool_error');
  span.setStatus({ code: SpanStatusCode.ERROR, message: mark(`${tag}-status-message`) });
  span.end(start + 40);
  await provider.forceFlush();
  await provider.shutdown();
}

describe(`OTLP privacy (${backend})`, () => {
  it('keeps nothing of an export but the five report fields: not in the database, the logs or /metrics', async () => {
    const headers = { 'x-forwarded-for': IP, 'x-privacy': mark('header'), baggage: `user=${mark('baggage')}` };
    const proto = recordingSpanExporter(new ProtoTraceExporter({ url: `${t.base}/v1/traces`, headers }));
    await emit(proto.exporter, 'proto');
    const jsonx = recordingSpanExporter(new JsonTraceExporter({ url: `${t.base}/v1/traces`, headers }));
    await emit(jsonx.exporter, 'json');
    expect(proto.ok() && jsonx.ok()).toBe(true);

    const metrics = recordingMetricExporter(new ProtoMetricExporter({ url: `${t.base}/v1/metrics`, headers }));
    const meter = mcpMeter(metrics.exporter, { 'service.name': mark('metric-service'), 'k8s.pod.name': mark('metric-pod') });
    meter.record(0.2, { 'gen_ai.tool.name': TOOL, 'server.address': 'privacy-metrics.example.com', 'mcp.session.id': mark('metric-session'), custom: mark('metric-attr') });
    await meter.flush();
    await meter.shutdown();
    expect(metrics.ok()).toBe(true);

    // A malformed export full of markers, and one that is too large: refused, and not logged.
    const bad = await fetch(`${t.base}/v1/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: `{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"stringValue":"${mark('malformed')}"}}]},"scopeSpans":[{"spans":[{"traceId":"${mark('bad-id')}"}]}]}]}`,
    });
    expect(bad.status).toBe(400);
    expect(await bad.text()).not.toContain(M('malformed'));

    // The reports are there, with exactly the mapped fields (positive control).
    const rec = await json(await fetch(`${t.base}/api/trust?url=${encodeURIComponent(SERVER)}`));
    expect(rec.metrics.total_interactions).toBe(2);
    expect(rec.metrics.success_rate).toBe(0);
    const stored = await t.obs.db.query<{ tool_name: string; http_status: number }>(
      'SELECT tool_name, http_status FROM telemetry t JOIN servers s ON s.id = t.server_id WHERE s.url = $1',
      [SERVER],
    );
    expect(stored).toEqual([
      { tool_name: TOOL, http_status: 200 },
      { tool_name: TOOL, http_status: 200 },
    ]);
    expect((await json(await fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://privacy-metrics.example.com')}`))).metrics.total_interactions).toBe(1);

    const tables = await t.obs.db.query<{ table_name: string }>(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name",
    );
    let dump = '';
    for (const { table_name } of tables) {
      const rows = await t.obs.db.query<{ row: string }>(`SELECT x::text AS row FROM "${table_name}" x`);
      dump += `${table_name}\n${rows.map((r) => r.row).join('\n')}\n`;
    }
    expect(dump).toContain('privacy-otlp.example.com');
    expect(dump).toContain(TOOL);
    const metricsText = await (await fetch(`${t.base}/metrics`)).text();
    expect(metricsText).toContain('observatory_otlp_items_total');
    const logText = logs.join('');
    expect(logText).toContain('/v1/traces'); // request logging was on
    expect(markers.size).toBeGreaterThan(40);
    for (const needle of markers) {
      const forms = [needle, Buffer.from(needle).toString('base64'), Buffer.from(needle).toString('hex')];
      // Ids are hex already; their base64 (OTLP protobuf bytes as JSON) is checked as well.
      if (/^[0-9a-f]+$/.test(needle)) forms.push(Buffer.from(needle, 'hex').toString('base64'));
      for (const f of forms) {
        expect(dump.includes(f), `database contains ${f}`).toBe(false);
        expect(logText.includes(f), `logs contain ${f}`).toBe(false);
        expect(metricsText.includes(f), `metrics contain ${f}`).toBe(false);
      }
    }
  }, 60_000);
});
