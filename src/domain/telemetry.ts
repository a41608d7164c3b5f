// Validation of one telemetry report (SPEC 2.2). One set of limits, used by the REST JSON
// schema and by the service for Connect and gRPC callers alike.

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

/** Returns why the report is invalid, or null when it is valid. */
export function validateReport(r: ReportInput): string | null {
  if (typeof r.server_url !== 'string' || r.server_url.length === 0) return 'server_url is required';
  if (r.server_url.length > REPORT_LIMITS.serverUrlMaxLength) return `server_url must be at most ${REPORT_LIMITS.serverUrlMaxLength} characters`;
  if (typeof r.success !== 'boolean') return 'success is required and must be a boolean';
  if (typeof r.latency_ms !== 'number' || !Number.isFinite(r.latency_ms)) return 'latency_ms is required and must be a finite number';
  if (r.latency_ms < 0 || r.latency_ms > REPORT_LIMITS.latencyMaxMs) return `latency_ms must be between 0 and ${REPORT_LIMITS.latencyMaxMs}`;
  if (r.tool_name !== undefined && r.tool_name !== null) {
    if (typeof r.tool_name !== 'string') return 'tool_name must be a string';
    if (r.tool_name.length > REPORT_LIMITS.toolNameMaxLength) return `tool_name must be at most ${REPORT_LIMITS.toolNameMaxLength} characters`;
  }
  if (r.http_status !== undefined && r.http_status !== null) {
    if (typeof r.http_status !== 'number' || !Number.isInteger(r.http_status)) return 'http_status must be an integer';
    if (r.http_status < REPORT_LIMITS.httpStatusMin || r.http_status > REPORT_LIMITS.httpStatusMax) return 'http_status must be between 100 and 599';
  }
  return null;
}
