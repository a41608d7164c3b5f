// Validation of one telemetry report (SPEC 2.2). The value rules are the buf.validate annotations
// of ReportRequest in proto/observatory/v1/telemetry.proto, enforced by protovalidate: one
// decision for REST, Connect unary, the ReportStream client stream, OTLP and MCP alike
// (docs/reliability.md "Values the database refuses", docs/validation.md).
import { ReportRequestSchema } from '../../gen/observatory/v1/telemetry_pb.js';
import { contractField, maxLength, numericBounds, ruleViolations, violationsDetail, type RuleViolation } from './contract-rules.js';

import { canonicalServerUrl, InvalidServerUrl } from './server-identity.js';

function must(n: number | undefined, what: string): number {
  if (n === undefined) throw new Error(`proto/observatory/v1/telemetry.proto: ReportRequest lost its ${what} rule`);
  return n;
}
const field = (name: string) => contractField(ReportRequestSchema, name);

/** The report limits as the contract states them (read from the descriptor, never restated). */
export const REPORT_LIMITS = Object.freeze({
  serverUrlMaxLength: must(maxLength(field('server_url')), 'server_url max_len'),
  toolNameMaxLength: must(maxLength(field('tool_name')), 'tool_name max_len'),
  /** Latencies above one hour are not round trips of a tool call; refusing them keeps means sane. */
  latencyMaxMs: must(numericBounds(field('latency_ms')).max, 'latency_ms lte'),
  httpStatusMin: must(numericBounds(field('http_status')).min, 'http_status gte'),
  httpStatusMax: must(numericBounds(field('http_status')).max, 'http_status lte'),
});

export interface ReportInput {
  server_url?: unknown;
  success?: unknown;
  latency_ms?: unknown;
  tool_name?: unknown;
  http_status?: unknown;
}

const present = (v: unknown) => v !== undefined && v !== null;

// JSON values a ReportRequest cannot hold at all (REST bodies, MCP arguments). Module-level: a
// report is validated on every ingestion path, so nothing here is rebuilt per report.
const TYPED: readonly (readonly [keyof ReportInput, string, (v: unknown) => boolean])[] = [
  ['server_url', 'a string', (v) => typeof v === 'string'],
  ['success', 'a boolean', (v) => typeof v === 'boolean'],
  ['latency_ms', 'a number', (v) => typeof v === 'number'],
  ['tool_name', 'a string', (v) => typeof v === 'string'],
  ['http_status', 'an integer', (v) => typeof v === 'number' && Number.isInteger(v)],
];

/** Every reason the report is invalid (empty when it is valid): JSON types, then the contract's rules (storable text among them). */
export function reportViolations(r: ReportInput): RuleViolation[] {
  const wrong = TYPED.filter(([k, , ok]) => present(r[k]) && !ok(r[k]));
  if (wrong.length) return wrong.map(([k, what]) => ({ field: k, rule: 'type', message: `must be ${what}` }));
  // The init shape, not a message: the contract's plain first check reads it as it is, and only a
  // report that check does not accept is built into a message for protovalidate.
  const violations = ruleViolations(ReportRequestSchema, {
    serverUrl: (r.server_url as string | undefined) ?? '',
    success: (r.success as boolean | null | undefined) ?? undefined,
    latencyMs: (r.latency_ms as number | null | undefined) ?? undefined,
    toolName: (r.tool_name as string | null | undefined) ?? undefined,
    httpStatus: (r.http_status as number | null | undefined) ?? undefined,
  });
  // Text that cannot be stored as given (NUL, a lone surrogate) is among them (storable-text.ts).
  return violations;
}

/** Returns why the report is invalid, or null when it is valid. */
export function validateReport(r: ReportInput): string | null {
  const v = reportViolations(r);
  return v.length ? violationsDetail(v) : null;
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
export function parseReport(r: ReportInput): ValidReport | { problem: string; violations: RuleViolation[] } {
  const violations = reportViolations(r);
  if (violations.length) return { problem: violationsDetail(violations), violations };
  let url: string;
  try {
    url = canonicalServerUrl(r.server_url as string);
  } catch (err) {
    if (err instanceof InvalidServerUrl) {
      return { problem: `server_url: ${err.message}`, violations: [{ field: 'server_url', rule: 'server_url', message: err.message }] };
    }
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
