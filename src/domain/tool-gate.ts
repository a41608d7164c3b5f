// Per-tool gateway decisions (DECISIONS.md "Gateway decisions"; docs/gateway.md "Per-tool
// decisions"): MCP 2026-07-28 clients name the JSON-RPC method in `Mcp-Method` on every request
// and the tool in `Mcp-Name` on `tools/call`, so a gateway can tell which tool is called without
// reading the body. Pure: no I/O, the clock passed in.

import { canonicalServerUrl, InvalidServerUrl } from './server-identity.js';
import type { ToolDriftPart, ToolPart } from './drift.js';
import type { GateDecision } from './gate.js';
import type { PreflightVerdict } from './verdict.js';

/** Longest `Mcp-Method` / decoded `Mcp-Name` read; longer is refused (no MCP method or tool name is near it). */
export const MAX_MCP_HEADER_LENGTH = 512;

/** The 2026-07-28 sentinel for header values that are not plain ASCII: `=?base64?{utf-8 as base64}?=`. */
const BASE64_PREFIX = '=?base64?';
const BASE64_SUFFIX = '?=';

/** What the MCP headers of a checked request say. */
export interface McpCall {
  /** `Mcp-Method` (JSON-RPC method), or null when the client sent none (clients before 2026-07-28). */
  method: string | null;
  /** The tool of a `tools/call` (`Mcp-Name`, decoded); null for any other method. */
  tool: string | null;
}

export type McpHeaderReading =
  | { ok: true; call: McpCall }
  /** `method`: the Mcp-Method when it was itself valid (so it can be recorded), else null. */
  | { ok: false; reason: 'tool_name_missing' | 'mcp_headers_invalid'; problem: string; method: string | null };

const ONE_VALUE = (name: string) => `${name} must be sent once with one value; it was sent more than once or as a comma-separated list`;

/** Printable ASCII (and tab): what a field value carries unencoded. */
function plainAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c !== 9 && (c < 0x20 || c > 0x7e)) return false;
  }
  return true;
}

/** Decodes a 2026-07-28 header value (plain, or the base64 sentinel); null when malformed. */
export function decodeMcpHeaderValue(raw: string): string | null {
  if (raw.startsWith(BASE64_PREFIX) && raw.endsWith(BASE64_SUFFIX) && raw.length >= BASE64_PREFIX.length + BASE64_SUFFIX.length) {
    const b64 = raw.slice(BASE64_PREFIX.length, raw.length - BASE64_SUFFIX.length);
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0) return null;
    const bytes = Buffer.from(b64, 'base64');
    const text = new TextDecoder('utf-8', { fatal: false }).decode(bytes);
    // Not valid UTF-8 (replacement characters the bytes did not contain) or control characters: malformed.
    if (Buffer.from(text, 'utf8').equals(bytes) === false) return null;
    if (/[\u0000-\u001f\u007f]/.test(text)) return null;
    return text;
  }
  return plainAscii(raw) ? raw : null;
}

/**
 * Reads `Mcp-Method` and `Mcp-Name` (lower-case keys) of the checked request. They come from the
 * client: they choose the tool judged, never the upstream, and can only narrow what passes (the
 * server's own decision stands whatever they say). `tools/call` without `Mcp-Name`, or a value
 * that is not a valid field value, is refused: a 2026-07-28 server refuses such a request too.
 * So is Mcp-Method, or on tools/call Mcp-Name, sent more than once (`repeated`, lower-case
 * names) or holding a comma.
 */
export function readMcpHeaders(headers: Readonly<Record<string, string | undefined>>, repeated: readonly string[] = []): McpHeaderReading {
  const rawMethod = headers['mcp-method'];
  // Sent more than once (separate lines, or the comma list node and Envoy make of them): refused
  // whatever the values, none is read. Read as one value, "tools/call, tools/call" was a method
  // other than tools/call and skipped the per-tool checks while a server reading the first value
  // ran tools/call. No JSON-RPC method and no MCP tool name holds a comma.
  if (repeated.includes('mcp-method') || rawMethod?.includes(',')) {
    return { ok: false, reason: 'mcp_headers_invalid', problem: ONE_VALUE('Mcp-Method'), method: null };
  }
  if (rawMethod === undefined) return { ok: true, call: { method: null, tool: null } };
  const method = rawMethod.trim();
  if (method === '' || method.length > MAX_MCP_HEADER_LENGTH || !plainAscii(method)) {
    return { ok: false, reason: 'mcp_headers_invalid', problem: `Mcp-Method must be a JSON-RPC method name of at most ${MAX_MCP_HEADER_LENGTH} printable ASCII characters`, method: null };
  }
  // Mcp-Name is read (and so must be one value) on tools/call only.
  if (method !== 'tools/call') return { ok: true, call: { method, tool: null } };
  const rawName = headers['mcp-name'];
  if (repeated.includes('mcp-name') || rawName?.includes(',')) {
    return { ok: false, reason: 'mcp_headers_invalid', problem: ONE_VALUE('Mcp-Name'), method };
  }
  if (rawName === undefined || rawName.trim() === '') {
    return { ok: false, reason: 'tool_name_missing', problem: 'Mcp-Method is tools/call but Mcp-Name (the tool) is missing', method };
  }
  const tooLong = { ok: false as const, reason: 'mcp_headers_invalid' as const, problem: `Mcp-Name is longer than ${MAX_MCP_HEADER_LENGTH} characters`, method };
  if (rawName.length > MAX_MCP_HEADER_LENGTH * 2) return tooLong;
  const tool = decodeMcpHeaderValue(rawName.trim());
  if (tool === null || tool === '') return { ok: false, reason: 'mcp_headers_invalid', problem: 'Mcp-Name is neither a plain ASCII value nor a valid =?base64?...?= value', method };
  if (tool.length > MAX_MCP_HEADER_LENGTH) return tooLong;
  return { ok: true, call: { method, tool } };
}

/** One GATE_TOOLS_DENY / GATE_TOOLS_EXEMPT entry: a tool name, on every upstream or on one. */
export interface ToolRule {
  /** Canonical upstream URL, or null for every upstream. */
  upstream: string | null;
  name: string;
}

/** Per-tool policy: tools always denied, tools exempt from the per-tool checks, how long a drift counts. */
export interface GateToolPolicy {
  deny: ToolRule[];
  exempt: ToolRule[];
  /** A tool changed or added by a drift detected within this many ms is denied; 0 = drift never denies a tool. */
  driftWindowMs: number;
  /**
   * Deny requests without `Mcp-Method` (GATE_REQUIRE_MCP_METHOD): only 2026-07-28 requests pass,
   * so a client cannot skip the per-tool checks by speaking an earlier revision.
   */
  requireMcpMethod?: boolean;
  /**
   * A tool the server's latest recorded manifest does not list (GATE_UNLISTED_TOOLS, default
   * deny): `deny` refuses it (`tool_not_in_baseline`), `allow` judges it by the other checks.
   */
  unlistedTools?: 'deny' | 'allow';
  /**
   * A server whose instructions changed within the drift window (GATE_INSTRUCTIONS_DRIFT, default
   * deny): `deny` treats it as a drift of every tool of the server (`tool_drift`, part
   * `instructions`), `allow` leaves its tools to the other checks (the drift is still reported and
   * flagged).
   */
  instructionsDrift?: 'deny' | 'allow';
}

/** The values of GATE_UNLISTED_TOOLS and GATE_INSTRUCTIONS_DRIFT. */
export const UNLISTED_TOOL_POLICIES = ['deny', 'allow'] as const;

/**
 * Parses a comma-separated list of tool rules: `name` (on every upstream) or `<upstream URL>#name`
 * (on that server only; the last `#` separates, MCP tool names contain neither `#` nor `,`).
 * Throws Error with a reason.
 */
export function parseToolRules(raw: string): ToolRule[] {
  const out: ToolRule[] = [];
  for (const entry of raw.split(',').map((e) => e.trim()).filter((e) => e !== '')) {
    const hash = entry.lastIndexOf('#');
    let upstream: string | null = null;
    let name = entry;
    if (hash !== -1) {
      name = entry.slice(hash + 1).trim();
      const url = entry.slice(0, hash).trim();
      try {
        upstream = canonicalServerUrl(url);
      } catch (err) {
        if (err instanceof InvalidServerUrl) throw new Error(`"${entry}": ${url} ${err.message}`);
        throw err;
      }
    }
    if (name === '' || name.length > MAX_MCP_HEADER_LENGTH || /[\u0000-\u001f\u007f]/.test(name)) {
      throw new Error(`"${entry}": expected a tool name or <upstream URL>#<tool name>`);
    }
    out.push({ upstream, name });
  }
  return out;
}

/** Whether a rule names this tool of this upstream. */
export function toolRuleMatches(rules: readonly ToolRule[], upstream: string, tool: string): boolean {
  return rules.some((r) => r.name === tool && (r.upstream === null || r.upstream === upstream));
}

/** How a tool drifted: changed since the baseline before, or added (absent from it). */
export interface ToolDrift {
  change: 'changed' | 'added';
  /** Parts that changed (empty when added), and `instructions` when the server's instructions changed. */
  parts: ToolDriftPart[];
  detectedAt: Date;
}

/**
 * The newest of a tool's drifts (each: when, changed or added, which parts) within `windowMs` of
 * `now`; null when none. The store finds the candidates by index (drift_tool_changes).
 */
export function toolDriftOf(drifts: readonly { recorded_at: Date; change: 'changed' | 'added'; parts: readonly ToolPart[] }[], now: Date, windowMs: number): ToolDrift | null {
  if (windowMs <= 0) return null;
  let best: ToolDrift | null = null;
  for (const d of drifts) {
    const at = d.recorded_at.getTime();
    if (now.getTime() - at > windowMs) continue;
    if (best && at <= best.detectedAt.getTime()) continue;
    best = { change: d.change, parts: d.change === 'changed' ? [...d.parts] : [], detectedAt: d.recorded_at };
  }
  return best;
}

/** A tool's own runtime evidence, scored with the server model (src/domain/scoring.ts). */
export interface ToolEvidence {
  /** UNRATED when no report named the tool. */
  verdict: PreflightVerdict;
  trustScore: number | null;
  reports: number;
}

/** What the per-tool check found, as the decision body and receipt carry it. */
export interface ToolFinding {
  name: string;
  /** Whether the server's latest recorded manifest lists the tool; null when none is recorded (or the server is not tracked). */
  listed: boolean | null;
  drift: ToolDrift | null;
  evidence: ToolEvidence;
  denied_by_policy: boolean;
  exempt: boolean;
}

/**
 * The per-tool decision, applied after the server's: a server-level denial stands (the tool
 * headers never widen what passes); then a tool named in GATE_TOOLS_DENY is denied
 * (`policy_denies_tool`); a tool named in GATE_TOOLS_EXEMPT skips the remaining checks; a tool
 * the server's latest recorded manifest does not list is denied (`tool_not_in_baseline`, unless
 * GATE_UNLISTED_TOOLS=allow): no probe ever saw its definition, so neither drift nor anything
 * else vouches for it; a tool that drifted within the window is denied (`tool_drift`); a tool
 * whose own evidence is FAIL is denied (`tool_verdict_fail`). Otherwise the server's decision
 * stands. `found.listed` null (no manifest recorded) skips the listing check.
 */
export function decideTool(
  server: GateDecision,
  upstream: string,
  tool: string,
  found: { drift: ToolDrift | null; evidence: ToolEvidence; listed?: boolean | null },
  policy: GateToolPolicy,
): { decision: GateDecision; finding: ToolFinding } {
  const deniedByPolicy = toolRuleMatches(policy.deny, upstream, tool);
  const exempt = !deniedByPolicy && toolRuleMatches(policy.exempt, upstream, tool);
  const listed = found.listed ?? null;
  const finding: ToolFinding = { name: tool, listed, drift: found.drift, evidence: found.evidence, denied_by_policy: deniedByPolicy, exempt };
  if (!server.allow) return { decision: server, finding };
  if (deniedByPolicy) return { decision: { allow: false, reason: 'policy_denies_tool' }, finding };
  if (exempt) return { decision: server, finding };
  if (listed === false && (policy.unlistedTools ?? 'deny') === 'deny') return { decision: { allow: false, reason: 'tool_not_in_baseline' }, finding };
  if (found.drift) return { decision: { allow: false, reason: 'tool_drift' }, finding };
  if (found.evidence.verdict === 'FAIL') return { decision: { allow: false, reason: 'tool_verdict_fail' }, finding };
  return { decision: server, finding };
}

/** The `tool` member of a decision body and of the gateway receipt (snake_case JSON). */
export function toolFindingJson(f: ToolFinding): Record<string, unknown> {
  return {
    name: f.name,
    listed: f.listed,
    drift: f.drift ? { change: f.drift.change, parts: f.drift.parts, detected_at: f.drift.detectedAt.toISOString() } : null,
    verdict: f.evidence.verdict,
    trust_score: f.evidence.trustScore,
    reports: f.evidence.reports,
    denied_by_policy: f.denied_by_policy,
    exempt: f.exempt,
  };
}
