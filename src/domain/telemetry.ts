// Validation of one telemetry report (SPEC 2.2). One set of limits and one decision, used by the
// REST JSON schema (types) and by the telemetry service for REST, Connect unary and the
// ReportStream client stream alike (docs/reliability.md "Values the database refuses").
import { canonicalServerUrl, InvalidServerUrl } from './server-identity.js';

export const REPORT_LIMITS = {
  serverUrlMaxLength: 2048,
  toolNameMaxLength: 200,
  /** Latencies above one hour are not round trips of a tool call; refusing them keeps means sane. */
  latencyMaxMs: 3_600_000,
  httpStatusMin: 100,
  httpStatusMax: 599,
} as const;

export interface ReportInput {
  server_url?: unknown;
  success?: unknown;
  latency_ms?: unknown;
  tool_name?: unknown;
  http_status?: unknown;
}

// A high surrogate not followed by a low one, or a low one not preceded by a high one (no `u`
// flag: the pattern sees UTF-16 code units). String.prototype.isWellFormed is ES2024.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Why a text value cannot be stored as given, or null. PostgreSQL refuses NUL in `text`
 * (SQLSTATE 22021 / 22P05 in JSON); a lone UTF-16 surrogate has no UTF-8 form at all, so drivers
 * would silently store U+FFFD instead of what was sent. Both are refused at the edge.
 */
export function unstorableText(s: string): string | null {
  if (s.includes('\u0000')) return 'must not contain NUL characters';
  if (LONE_SURROGATE.test(s)) return 'must be well-formed Unicode (no lone surrogates)';
  return null;
}

/** Returns why the report is invalid, or null when it is valid. */
export function validateReport(r: ReportInput): string | null {
  if (typeof r.server_url !== 'string' || r.server_url.length === 0) return 'server_url is required';
  if (r.server_url.length > REPORT_LIMITS.serverUrlMaxLength) return `server_url must be at most ${REPORT_LIMITS.serverUrlMaxLength} characters`;
  const badUrl = unstorableText(r.server_url);
  if (badUrl) return `server_url ${badUrl}`;
  if (typeof r.success !== 'boolean') return 'success is required and must be a boolean';
  if (typeof r.latency_ms !== 'number' || !Number.isFinite(r.latency_ms)) return 'latency_ms is required and must be a finite number';
  if (r.latency_ms < 0 || r.latency_ms > REPORT_LIMITS.latencyMaxMs) return `latency_ms must be between 0 and ${REPORT_LIMITS.latencyMaxMs}`;
  if (r.tool_name !== undefined && r.tool_name !== null) {
    if (typeof r.tool_name !== 'string') return 'tool_name must be a string';
    if (r.tool_name.length > REPORT_LIMITS.toolNameMaxLength) return `tool_name must be at most ${REPORT_LIMITS.toolNameMaxLength} characters`;
    const badTool = unstorableText(r.tool_name);
    if (badTool) return `tool_name ${badTool}`;
  }
  if (r.http_status !== undefined && r.http_status !== null) {
    if (typeof r.http_status !== 'number' || !Number.isInteger(r.http_status)) return 'http_status must be an integer';
    if (r.http_status < REPORT_LIMITS.httpStatusMin || r.http_status > REPORT_LIMITS.httpStatusMax) return 'http_status must be between 100 and 599';
  }
  return null;
}

/** A report that passed validation: the five fields, the server URL in canonical form. */
export interface ValidReport {
  server_url: string;
  success: boolean;
  latency_ms: number;
  tool_name: string | null;
  http_status: number | null;
}

/**
 * THE acceptance decision for one report: validation plus the canonical server URL. Returns the
 * report to store, or the reason it is refused (every door answers it as invalid_argument).
 */
export function parseReport(r: ReportInput): ValidReport | { problem: string } {
  const problem = validateReport(r);
  if (problem) return { problem };
  let url: string;
  try {
    url = canonicalServerUrl(r.server_url as string);
  } catch (err) {
    if (err instanceof InvalidServerUrl) return { problem: `server_url: ${err.message}` };
    throw err;
  }
  return {
    server_url: url,
    success: r.success as boolean,
    // -0 is stored as 0 (the same latency; keeps the stored text form canonical).
    latency_ms: (r.latency_ms as number) + 0,
    tool_name: (r.tool_name as string | null | undefined) ?? null,
    http_status: (r.http_status as number | null | undefined) ?? null,
  };
}
