// OTLP traces -> MCP tool calls (docs/telemetry.md "Mapping"). Pure: reads decoded OTLP messages,
// keeps nothing but what a telemetry report needs (and, in memory only, the span ids that join an
// MCP span with its HTTP child). No attribute value other than the mapped ones leaves this file.
//
// The conventions: the MCP semantic conventions of the semantic-conventions-genai project (status
// Development). An MCP client span has `mcp.method.name`, span kind CLIENT; a tool call is
// `tools/call` with `gen_ai.tool.name`; a failure has `error.type` (`tool_error` when the tool
// result had isError) and span status ERROR. With Streamable HTTP, the HTTP client span that
// carried the request is a child of the MCP span and holds `url.full` and
// `http.response.status_code`.

import type { ExportTraceServiceRequest } from '../../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { Span_SpanKind, Status_StatusCode, type Span } from '../../gen/opentelemetry/proto/trace/v1/trace_pb.js';
import { attributeMap, resourceFingerprint } from './otlp-attributes.js';
import { REPORT_LIMITS } from './telemetry.js';

export const MCP_METHOD = 'mcp.method.name';
export const MCP_TOOLS_CALL = 'tools/call';
export const TOOL_NAME = 'gen_ai.tool.name';
export const ERROR_TYPE = 'error.type';
export const SERVER_ADDRESS = 'server.address';
export const SERVER_PORT = 'server.port';
export const URL_FULL = 'url.full';
/** The HTTP conventions before 1.21 (still emitted by older instrumentations). */
export const LEGACY_HTTP_URL = 'http.url';
export const HTTP_STATUS = 'http.response.status_code';
export const LEGACY_HTTP_STATUS = 'http.status_code';

const SPAN_ATTRIBUTES = [MCP_METHOD, TOOL_NAME, ERROR_TYPE, SERVER_ADDRESS, SERVER_PORT, URL_FULL, LEGACY_HTTP_URL, HTTP_STATUS, LEGACY_HTTP_STATUS] as const;

/** One MCP client `tools/call` span, reduced to what a report (and the join) needs. */
export interface McpCall {
  /** Hex trace id + span id: what an HTTP child names as its parent. Null when the span has no ids. */
  joinKey: string | null;
  latencyMs: number;
  success: boolean;
  toolName: string | null;
  /** `url.full` when the sender put it on the MCP span itself. */
  url: string | null;
  httpStatus: number | null;
  serverAddress: string | null;
  serverPort: number | null;
  /** Fingerprint of the span's resource (metrics from a resource that sends spans are not counted twice). */
  resource: string;
}

/** An HTTP client span with a URL: possibly the transport child of an MCP span. */
export interface HttpChild {
  /** Hex trace id + parent span id. */
  parentKey: string;
  url: string;
  httpStatus: number | null;
  /** End time (ns): of several children (retries), the last one tells how the call ended. */
  endNs: bigint;
}

export interface TracesReading {
  calls: McpCall[];
  children: HttpChild[];
  /** Spans that are neither MCP client tool calls nor HTTP client spans with a URL. */
  other: number;
  /** MCP client tool-call spans that cannot be a report (no valid duration). */
  invalid: number;
  total: number;
}

const NS_PER_MS = 1_000_000n;

const hex = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

/** An HTTP status code within 100..599, else null (an out-of-range value is dropped, not the report). */
export function httpStatusOf(v: string | number | boolean | undefined): number | null {
  const n = typeof v === 'string' && /^\d{3}$/.test(v) ? Number(v) : v;
  return typeof n === 'number' && Number.isInteger(n) && n >= 100 && n <= 599 ? n : null;
}

function portOf(v: string | number | boolean | undefined): number | null {
  const n = typeof v === 'string' && /^\d{1,5}$/.test(v) ? Number(v) : v;
  return typeof n === 'number' && Number.isInteger(n) && n > 0 && n <= 65535 ? n : null;
}

const text = (v: string | number | boolean | undefined): string | null => (typeof v === 'string' && v !== '' ? v : null);

/** Span duration in milliseconds (microsecond precision), or null when the times are unusable. */
export function durationMs(startNs: bigint, endNs: bigint): number | null {
  if (startNs <= 0n || endNs < startNs) return null;
  const d = endNs - startNs;
  // Beyond REPORT_LIMITS.latencyMaxMs (an hour) a span is no round trip of a tool call.
  if (d > BigInt(REPORT_LIMITS.latencyMaxMs) * NS_PER_MS) return null;
  return Number(d / 1000n) / 1000;
}

function isMcpToolCall(span: Span, method: string | null): boolean {
  return method === MCP_TOOLS_CALL && span.kind === Span_SpanKind.CLIENT;
}

/**
 * Reads one export: which spans are MCP tool calls, which may be their HTTP children, how many are
 * neither. Or one piece of it (src/domain/otlp-export.ts) into the reading of the pieces before
 * it: a reading of the pieces in order is the reading of the whole export.
 */
export function readTraces(req: ExportTraceServiceRequest, out: TracesReading = { calls: [], children: [], other: 0, invalid: 0, total: 0 }): TracesReading {
  for (const rs of req.resourceSpans) {
    let resource: string | null = null;
    for (const ss of rs.scopeSpans) {
      for (const span of ss.spans) {
        out.total++;
        const a = attributeMap(span.attributes, SPAN_ATTRIBUTES);
        const method = text(a.get(MCP_METHOD));
        if (isMcpToolCall(span, method)) {
          const latencyMs = durationMs(span.startTimeUnixNano, span.endTimeUnixNano);
          if (latencyMs === null) {
            out.invalid++;
            continue;
          }
          resource ??= resourceFingerprint(rs.resource?.attributes ?? []);
          const errorType = text(a.get(ERROR_TYPE));
          out.calls.push({
            joinKey: span.traceId.length === 16 && span.spanId.length === 8 ? hex(span.traceId) + hex(span.spanId) : null,
            latencyMs,
            success: span.status?.code !== Status_StatusCode.ERROR && errorType === null,
            toolName: text(a.get(TOOL_NAME)),
            url: text(a.get(URL_FULL)) ?? text(a.get(LEGACY_HTTP_URL)),
            httpStatus: httpStatusOf(a.get(HTTP_STATUS) ?? a.get(LEGACY_HTTP_STATUS)),
            serverAddress: text(a.get(SERVER_ADDRESS)),
            serverPort: portOf(a.get(SERVER_PORT)),
            resource,
          });
          continue;
        }
        // MCP spans of other methods (initialize, tools/list, ...) and MCP server spans are not tool calls.
        const url = method === null && span.kind === Span_SpanKind.CLIENT ? (text(a.get(URL_FULL)) ?? text(a.get(LEGACY_HTTP_URL))) : null;
        if (url !== null && span.traceId.length === 16 && span.parentSpanId.length === 8) {
          out.children.push({
            parentKey: hex(span.traceId) + hex(span.parentSpanId),
            url,
            httpStatus: httpStatusOf(a.get(HTTP_STATUS) ?? a.get(LEGACY_HTTP_STATUS)),
            endNs: span.endTimeUnixNano,
          });
          continue;
        }
        out.other++;
      }
    }
  }
  return out;
}

/** The child that tells how a call ended: of several (retries), the one that ended last. */
export function laterChild(a: HttpChild | undefined, b: HttpChild): HttpChild {
  return a === undefined || b.endNs >= a.endNs ? b : a;
}
