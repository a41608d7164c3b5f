import type { MessageInitShape } from '@bufbuild/protobuf';
import type { CheckRequest, CheckResponseSchema } from '../../gen/envoy/service/auth/v3/external_auth_pb.js';
import { HeaderValueOption_HeaderAppendAction } from '../../gen/envoy/config/core/v3/base_pb.js';
import { StatusCode } from '../../gen/envoy/type/v3/http_status_pb.js';
import { decideGate, gatewayAssertedHeaders, isSingleValued, mergedRepeats, resolveUpstream, type GateRequestInfo, type UpstreamSource } from '../domain/gate.js';
import { verdictFor, type PreflightVerdict } from '../domain/verdict.js';
import { computeTrustScore } from '../domain/scoring.js';
import { decideTool, readMcpHeaders, toolDriftOf, toolFindingJson, type ToolDrift, type ToolEvidence, type ToolFinding } from '../domain/tool-gate.js';
import type { Queryable } from '../db/index.js';
import { driftStore } from '../store/drift.js';
import { telemetryStore } from '../store/telemetry.js';
import { BoundedMap } from '../store/cache-limits.js';
import { invalidArgument, ObservatoryError } from '../errors.js';
import { PROBLEM_CONTENT_TYPE, problemBody } from '../errors.js';
import { clientAddressKey, type CallContext, type ServiceDeps } from './context.js';
import { rateLimitHeaders, rateLimitMessage, type RateLimiter } from './rate-limits.js';
import type { PreflightAssessment, PreflightService } from './preflight.js';

// The gateway gate (DECISIONS.md "Gateway decisions"; docs/gateway.md): nginx auth_request and
// Envoy HTTP ext_authz call /v1/gate, Envoy/Istio/agentgateway gRPC ext_authz call
// envoy.service.auth.v3.Authorization/Check; both land in `decide`.

/** The verdict of one upstream as the pre-flight service sees it; what the gate caches. */
export interface GateAssessment {
  verdict: PreflightVerdict;
  /** null when UNRATED. */
  trustScore: number | null;
  /** The tracked server's id, null when the upstream is not tracked (then no tool has evidence or drift). */
  serverId?: number | null;
}

/** What the per-tool check reads about one tool of a server. */
export interface ToolFacts {
  drift: ToolDrift | null;
  evidence: ToolEvidence;
  /** Whether the server's latest recorded manifest lists the tool; null or absent when none is recorded. */
  listed?: boolean | null;
}

const NO_TOOL_FACTS: ToolFacts = { drift: null, evidence: { verdict: 'UNRATED', trustScore: null, reports: 0 }, listed: null };

/**
 * The tool names of recorded manifests kept in memory per database handle, by manifest hash (the
 * hash fixes the names, so an entry is never stale): the listing check reads the latest manifest's
 * hash with the drift row it already reads, and a manifest's names once per process. Bounded by
 * CACHE_MAX_ENTRIES manifests and `maxChars` characters of names in all (a manifest holds at most
 * 2,000 names of at most 512 characters, about 1 M); the oldest go first.
 */
export const MANIFEST_NAMES_CACHE = { maxChars: 4_000_000 } as const;

interface NamesCache {
  sets: BoundedMap<string, { names: Set<string>; chars: number }>;
  chars: number;
  pending: Map<string, Promise<Set<string> | null>>;
}
const namesCaches = new WeakMap<Queryable, NamesCache>();

function namesCache(db: Queryable): NamesCache {
  let c = namesCaches.get(db);
  if (!c) {
    const cache: NamesCache = { sets: new BoundedMap(undefined, (_hash, v) => void (cache.chars -= v.chars)), chars: 0, pending: new Map() };
    namesCaches.set(db, (c = cache));
  }
  return c;
}

/** The names a recorded manifest lists (null: its list is gone), from memory when seen before. */
function manifestNames(db: Queryable, latest: { baseline_id: string; manifest_hash: string }): Promise<Set<string> | null> {
  const c = namesCache(db);
  const hit = c.sets.get(latest.manifest_hash);
  if (hit) return Promise.resolve(hit.names);
  let p = c.pending.get(latest.manifest_hash);
  if (!p) {
    p = driftStore(db)
      .manifestNames(latest.baseline_id)
      .then((list) => {
        if (list === null) return null;
        const names = new Set(list);
        // Each name's characters and a little for its place in the set.
        let chars = 0;
        for (const n of names) chars += n.length + 16;
        c.sets.set(latest.manifest_hash, { names, chars });
        c.chars += chars;
        for (const [hash, v] of c.sets) {
          if (c.chars <= MANIFEST_NAMES_CACHE.maxChars || hash === latest.manifest_hash) break;
          c.sets.delete(hash);
          c.chars -= v.chars;
        }
        return names;
      })
      .finally(() => c.pending.delete(latest.manifest_hash));
    c.pending.set(latest.manifest_hash, p);
  }
  return p;
}

/**
 * A tool's facts from the database: its newest drift within `driftWindowMs` (drift_tool_changes),
 * whether the server's latest recorded manifest lists it (read with the drift row, one statement;
 * the manifest's names from memory) and its own evidence (tool_evidence) scored with the server
 * model. Latency counts as neutral (no per-tool category baseline exists): a tool is judged on its
 * success rate, with the same prior, decay and per-source caps as a server, so one source alone
 * cannot make a tool FAIL faster than it can make a server FAIL.
 *
 * A change of the server's instructions within the window is a drift of every tool of the server
 * (docs/gateway.md "Per-tool decisions"): clients give the model the instructions with the tools,
 * as how to use them, so what a tool means to the model changed with them. Its time comes with the
 * latest baseline the same statement reads; the drift names the part `instructions`
 * (GATE_INSTRUCTIONS_DRIFT=allow leaves the tools to the other checks). Changes of
 * prompts and resources are no part of any tool and deny none (they raise the server's drift flag).
 */
export async function toolFacts(db: Queryable, serverId: number, tool: string, at: Date, driftWindowMs: number, instructionsDrift: 'deny' | 'allow' = 'deny'): Promise<ToolFacts> {
  const [row, sources] = await Promise.all([
    driftStore(db).toolGateRow(serverId, tool, driftWindowMs > 0 ? new Date(at.getTime() - driftWindowMs) : null),
    telemetryStore(db).toolEvidence(serverId, tool),
  ]);
  const names = row.latest ? await manifestNames(db, row.latest) : null;
  const reports = sources.reduce((n, s) => n + s.reports, 0);
  let evidence: ToolEvidence = { verdict: 'UNRATED', trustScore: null, reports: 0 };
  if (reports > 0) {
    const { trust_score } = computeTrustScore({ sources, baselineLatencyMs: 0, anomalyFlags: [], now: at });
    evidence = { verdict: verdictFor(trust_score), trustScore: trust_score, reports };
  }
  let drift = row.drift ? toolDriftOf([row.drift], at, driftWindowMs) : null;
  const instructions = row.instructionsDriftAt && instructionsDrift === 'deny' ? toolDriftOf([{ recorded_at: row.instructionsDriftAt, change: 'changed', parts: [] }], at, driftWindowMs) : null;
  if (instructions) {
    drift = {
      change: drift?.change ?? 'changed',
      parts: [...(drift?.parts ?? []), 'instructions'],
      detectedAt: drift && drift.detectedAt.getTime() > instructions.detectedAt.getTime() ? drift.detectedAt : instructions.detectedAt,
    };
  }
  return { drift, evidence, listed: names ? names.has(tool) : null };
}

/**
 * What the gate needs from the pre-flight service: a verdict lookup it may cache, and, for every
 * decision, a signed `kind: gateway` receipt counted as demand (never as score evidence),
 * committed before the gateway gets its answer.
 */
export interface GateVerdictSource<A extends GateAssessment = GateAssessment> {
  assess(upstream: string): Promise<A>;
  /** One tool's drift and evidence (per-tool decisions); absent: no tool ever has any. */
  tool?(a: A, tool: string, at: Date): Promise<ToolFacts>;
  /** `claimKey`: the claim's identity for receipt sharing (gatewayClaimKey of its `gateway` member). */
  record(upstream: string, assessment: A, claim: { gateway: GatewayClaim }, claimKey: string): Promise<GateEvidence>;
}

/** The gateway's decision as a gate receipt's claim states it, beside the pre-flight statement. */
export interface GatewayClaim {
  decision: 'allow' | 'deny';
  reason: string;
  via: 'http' | 'envoy_grpc';
  upstream_source: UpstreamSource;
  policy: { allow_uncertain: boolean; allow_unrated: boolean };
  cached_verdict: boolean;
  mcp_method: string | null;
  tool_name: string | null;
  tool: Record<string, unknown> | null;
}

const member = (s: string | null) => (s === null ? '-' : `${s.length}:${s}`);

/**
 * The identity of a gateway claim for receipt sharing (pre-flight's claimKey): equal exactly when
 * the claims are. Read left to right it parses back: each string member is `-` (null) or its
 * length, a colon and itself, so no content (not even NUL, which a base64 Mcp-Name can hold) runs
 * two members together; the three flags are one digit each; the tool finding, rare, is JSON.
 * Built on every decision, where JSON.stringify of the whole claim cost ten times as much.
 */
export function gatewayClaimKey(g: GatewayClaim): string {
  return (
    member(g.decision) + member(g.reason) + member(g.via) + member(g.upstream_source) +
    `${g.policy.allow_uncertain ? 1 : 0}${g.policy.allow_unrated ? 1 : 0}${g.cached_verdict ? 1 : 0}` +
    member(g.mcp_method) + member(g.tool_name) + (g.tool === null ? '-' : JSON.stringify(g.tool))
  );
}

/**
 * What a decision rests on: a signed receipt of its own (the database-backed gate), or the signed
 * bundle its verdict was read from (the gate answering from a bundle, which has no database to
 * store a receipt in and no key to sign one with; docs/bundles.md).
 */
export interface GateEvidence {
  receiptId: string | null;
  jws: string | null;
  bundle?: GateBundleRef;
}

/** The bundle a decision was read from: its id, when it was signed and how old it was then. */
export interface GateBundleRef {
  bundleId: string;
  issuedAt: string;
  expiresAt: string;
  ageSeconds: number;
}

/**
 * The gate's decision path is the pre-flight service: its lookup (cached by the gate) and its
 * receipt issuance with `kind: gateway`, which records the check as demand in the same
 * transaction as the receipt and never touches score evidence.
 */
export function preflightGateSource(
  preflight: Pick<PreflightService, 'assess' | 'preflight'>,
  tools?: { db: Queryable; driftWindowMs: number; instructionsDrift?: 'deny' | 'allow' },
): GateVerdictSource<GateAssessment & { found: PreflightAssessment }> {
  return {
    async assess(upstream) {
      const found = await preflight.assess(upstream);
      return { verdict: found.verdict, trustScore: found.trustScore ?? null, serverId: found.server?.id ?? null, found };
    },
    async tool(a, tool, at) {
      if (!tools || a.serverId === null || a.serverId === undefined) return NO_TOOL_FACTS;
      return toolFacts(tools.db, a.serverId, tool, at, tools.driftWindowMs, tools.instructionsDrift);
    },
    async record(upstream, a, claim, claimKey) {
      const r = await preflight.preflight({ target: upstream }, undefined, { kind: 'gateway', claim, claimKey, assessment: a.found });
      return { receiptId: r.receiptId, jws: r.diligenceReceipt };
    },
  };
}

export interface GateOutcome {
  allow: boolean;
  reason: string;
  upstream: string;
  source: UpstreamSource;
  verdict: PreflightVerdict;
  trustScore: number | null;
  /** null when the decision rests on a bundle (see GateEvidence). */
  receiptId: string | null;
  jws: string | null;
  bundle?: GateBundleRef;
  /** Whether the verdict came from the short-lived cache (GATE_CACHE_SECONDS). */
  cached: boolean;
  decidedAt: string;
  /** The checked request's `Mcp-Method`, null when it sent none. */
  mcpMethod: string | null;
  /** The tool of a `tools/call` (`Mcp-Name`), null otherwise. */
  toolName: string | null;
  /** What the per-tool check found; null when no tool was named or the server was already denied. */
  tool: ToolFinding | null;
  /** Why the MCP headers were refused, when they were. */
  headerProblem?: string;
}

/** The one-line reason of a denial (problem+json `detail`, gRPC status message). */
export function denialDetail(o: GateOutcome): string {
  if (o.headerProblem) return `traffic to ${o.upstream} is denied: ${o.headerProblem} (${o.reason})`;
  if (o.toolName !== null && ['tool_drift', 'tool_verdict_fail', 'policy_denies_tool', 'tool_not_in_baseline'].includes(o.reason)) {
    return `tool "${o.toolName}" of ${o.upstream} is denied (${o.reason}); the server's verdict is ${o.verdict}`;
  }
  return `traffic to ${o.upstream} is denied: verdict ${o.verdict} (${o.reason})`;
}

/** The headers every decision carries, allow and deny alike. */
export function gateHeaders(o: Pick<GateOutcome, 'verdict' | 'trustScore' | 'receiptId' | 'bundle'>): Record<string, string> {
  const h: Record<string, string> = {
    'x-trust-verdict': o.verdict,
    // A header must carry some text: UNRATED has no score, written as JSON's null.
    'x-trust-score': o.trustScore === null ? 'null' : o.trustScore.toFixed(1),
  };
  if (o.receiptId !== null) h['x-trust-receipt'] = o.receiptId;
  if (o.bundle) {
    h['x-trust-bundle'] = o.bundle.bundleId;
    h['x-trust-bundle-age'] = String(o.bundle.ageSeconds);
  }
  return h;
}

const DECIDED_AT = '"decided_at":"';

/** The JSON body of a decision (HTTP gate, Envoy denied_response). */
export function gateBody(o: GateOutcome, publicBaseUrl: string): Record<string, unknown> {
  return {
    allow: o.allow,
    decision: o.allow ? 'allow' : 'deny',
    reason: o.reason,
    upstream: o.upstream,
    upstream_source: o.source,
    verdict: o.verdict,
    trust_score: o.trustScore,
    receipt_id: o.receiptId,
    receipt_url: o.receiptId === null ? null : `${publicBaseUrl}/v1/receipt/${o.receiptId}`,
    cached_verdict: o.cached,
    decided_at: o.decidedAt,
    // undefined (left out of the JSON) rather than a conditional spread, after which every member
    // would be added slowly (docs/performance.md "Object spread").
    bundle: o.bundle ? { bundle_id: o.bundle.bundleId, issued_at: o.bundle.issuedAt, expires_at: o.bundle.expiresAt, age_seconds: o.bundle.ageSeconds } : undefined,
    mcp_method: o.mcpMethod,
    tool_name: o.toolName,
    tool: o.tool ? toolFindingJson(o.tool) : null,
  };
}

/**
 * `limits` bounds the gRPC Check per client (the gateway); /v1/gate is limited by its route
 * (src/http/rate-limit.ts), so `decide` itself takes no token.
 */
export function createGateService<A extends GateAssessment>(deps: Pick<ServiceDeps, 'config' | 'now'>, source: GateVerdictSource<A>, limits?: RateLimiter) {
  const { config, now } = deps;
  const policy = { allowUncertain: config.gate.allowUncertain, allowUnrated: config.gate.allowUnrated };
  // The policy as every receipt states it: fixed for the process, one frozen object for all of them.
  const claimPolicy = Object.freeze({ allow_uncertain: policy.allowUncertain, allow_unrated: policy.allowUnrated });
  const toolPolicy = config.gate.tools;
  // (upstream, tool) -> facts, cached like verdicts; at most CACHE_MAX_ENTRIES, the oldest dropped first.
  const toolCache = new BoundedMap<string, { f: ToolFacts; expires: number }>();
  const toolInflight = new Map<string, Promise<ToolFacts>>();

  async function facts(upstream: string, a: A, tool: string, at: Date): Promise<ToolFacts> {
    if (!source.tool) return NO_TOOL_FACTS;
    const key = JSON.stringify([upstream, tool]);
    if (ttlMs > 0) {
      const hit = toolCache.get(key);
      if (hit && hit.expires > at.getTime()) return hit.f;
      if (hit) toolCache.delete(key);
    }
    let p = toolInflight.get(key);
    if (!p) {
      p = source.tool(a, tool, at).finally(() => toolInflight.delete(key));
      toolInflight.set(key, p);
    }
    const f = await p;
    if (ttlMs > 0) {
      toolCache.set(key, { f, expires: at.getTime() + ttlMs });
    }
    return f;
  }
  const ttlMs = config.gate.cacheSeconds * 1000;
  // upstream -> verdict and when it expires; at most CACHE_MAX_ENTRIES upstreams (process-wide
  // setting, src/store/cache-limits.ts), the oldest dropped first.
  const cache = new BoundedMap<string, { a: A; expires: number }>();
  // One lookup in flight per upstream: a burst of gateway calls shares it.
  const inflight = new Map<string, Promise<A>>();

  async function assessment(upstream: string, at: number): Promise<{ a: A; cached: boolean }> {
    if (ttlMs > 0) {
      const hit = cache.get(upstream);
      if (hit && hit.expires > at) return { a: hit.a, cached: true };
      if (hit) cache.delete(upstream);
    }
    let p = inflight.get(upstream);
    if (!p) {
      p = source.assess(upstream).finally(() => inflight.delete(upstream));
      inflight.set(upstream, p);
    }
    const a = await p;
    if (ttlMs > 0) {
      cache.set(upstream, { a, expires: at + ttlMs });
    }
    return { a, cached: false };
  }

  /** One gate decision: resolve the upstream (400 when impossible), decide, sign, record. */
  async function decide(info: GateRequestInfo, via: 'http' | 'envoy_grpc', _ctx?: CallContext): Promise<GateOutcome> {
    const resolved = resolveUpstream(info, config.gate.routes);
    if (!resolved.ok) throw invalidArgument(resolved.problem);
    const at = now();
    const { a, cached } = await assessment(resolved.upstream, at.getTime());
    let d = decideGate(a.verdict, policy);
    // Per tool (Mcp-Method / Mcp-Name of the checked request): can only turn an allow into a deny.
    const mcp = readMcpHeaders(info.mcpHeaders ?? {}, info.repeated);
    let mcpMethod: string | null = null;
    let toolName: string | null = null;
    let finding: ToolFinding | null = null;
    let headerProblem: string | undefined;
    if (!mcp.ok) {
      // Only a valid method is recorded: the rest is client text (a gRPC header may even hold NUL).
      mcpMethod = mcp.method;
      if (d.allow) {
        d = { allow: false, reason: mcp.reason };
        headerProblem = mcp.problem;
      }
    } else {
      mcpMethod = mcp.call.method;
      toolName = mcp.call.tool;
      if (mcpMethod === null && toolPolicy.requireMcpMethod && d.allow) {
        d = { allow: false, reason: 'mcp_method_required' };
        headerProblem = 'Mcp-Method is required here (GATE_REQUIRE_MCP_METHOD): send MCP 2026-07-28 requests';
      } else if (toolName !== null && d.allow) {
        const tool = decideTool(d, resolved.upstream, toolName, await facts(resolved.upstream, a, toolName, at), toolPolicy);
        d = tool.decision;
        finding = tool.finding;
      }
    }
    const gateway: GatewayClaim = {
      decision: d.allow ? 'allow' : 'deny',
      reason: d.reason,
      via,
      upstream_source: resolved.source,
      policy: claimPolicy,
      cached_verdict: cached,
      mcp_method: mcpMethod,
      tool_name: toolName,
      tool: finding ? toolFindingJson(finding) : null,
    };
    const { receiptId, jws, bundle } = await source.record(resolved.upstream, a, { gateway }, gatewayClaimKey(gateway));
    return {
      mcpMethod,
      toolName,
      tool: finding,
      headerProblem,
      allow: d.allow,
      reason: d.reason,
      upstream: resolved.upstream,
      source: resolved.source,
      verdict: a.verdict,
      trustScore: a.trustScore,
      receiptId,
      jws,
      ...(bundle ? { bundle } : {}),
      cached,
      decidedAt: at.toISOString(),
    };
  }

  const header = (key: string, value: string) => ({
    header: { key, value },
    appendAction: HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD,
  });

  /** envoy.service.auth.v3.Authorization/Check: the same decision in Envoy's terms. */
  async function check(req: Partial<CheckRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof CheckResponseSchema>> {
    // Every decision signs and stores a receipt: one bucket per client (the gateway), shared with
    // /v1/gate. Over the limit is a definite 429 for Envoy to send (with Retry-After), not a
    // transport error that failure_mode_allow could turn into an allow.
    const limited = limits?.take('gate', ctx?.values.get(clientAddressKey));
    if (limited && !limited.allowed) {
      const detail = rateLimitMessage(limited);
      return {
        // google.rpc.Code RESOURCE_EXHAUSTED
        status: { code: 8, message: detail },
        httpResponse: {
          case: 'deniedResponse',
          value: {
            status: { code: StatusCode.TooManyRequests },
            headers: [...Object.entries(rateLimitHeaders(limited)).map(([k, v]) => header(k, v)), header('content-type', PROBLEM_CONTENT_TYPE)],
            body: JSON.stringify(problemBody('rate_limited', detail)),
          },
        },
      };
    }
    const http = req.attributes?.request?.http;
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(http?.headers ?? {})) headers[k.toLowerCase()] = v;
    // In the map Envoy joins a repeated header's values with ",": a comma where a value has none
    // is a repeat (mergedRepeats).
    const repeated: string[] = mergedRepeats(headers);
    // With encode_raw_headers Envoy sends a list instead of the map, one entry per header line: a
    // single-valued name listed twice is a repeat, whatever the values; otherwise the first wins.
    for (const hv of http?.headerMap?.headers ?? []) {
      const k = hv.key.toLowerCase();
      const v = hv.value || Buffer.from(hv.rawValue ?? new Uint8Array()).toString('utf8');
      if (headers[k] === undefined) headers[k] = v;
      else if (isSingleValued(k) && !repeated.includes(k)) repeated.push(k);
    }
    const info: GateRequestInfo = {
      // The checked request's headers are the client's (Envoy forwards them): only those the
      // operator declared gateway-set (GATE_TRUSTED_HEADERS) may name the upstream.
      gatewayHeaders: gatewayAssertedHeaders(headers, config.gate.trustedHeaders),
      configured: req.attributes?.contextExtensions?.['mcp_server'],
      via: 'envoy_grpc',
      fallback: http?.host ? { scheme: http.scheme || 'http', host: http.host, path: http.path || '/', routeOnly: false } : undefined,
      // The client's Mcp-Method / Mcp-Name: they choose the tool judged, never the upstream.
      mcpHeaders: { 'mcp-method': headers['mcp-method'], 'mcp-name': headers['mcp-name'] },
      // Only names the gate reads here: an untrusted upstream header's repeats are ignored with it.
      repeated: repeated.filter((n) => n === 'mcp-method' || n === 'mcp-name' || (config.gate.trustedHeaders as readonly string[]).includes(n)),
    };
    let o: GateOutcome;
    try {
      o = await decide(info, 'envoy_grpc', ctx);
    } catch (err) {
      // Unresolvable upstream: a definite 400 denial for Envoy to send, not a transport error
      // (which Envoy would settle by its failure_mode_allow setting).
      if (err instanceof ObservatoryError && err.problem === 'invalid_argument') {
        return {
          // google.rpc.Code INVALID_ARGUMENT
          status: { code: 3, message: err.rawMessage },
          httpResponse: {
            case: 'deniedResponse',
            value: {
              status: { code: StatusCode.BadRequest },
              headers: [header('content-type', PROBLEM_CONTENT_TYPE)],
              body: JSON.stringify(problemBody('invalid_argument', err.rawMessage)),
            },
          },
        };
      }
      throw err;
    }
    const verdictHeaders = Object.entries(gateHeaders(o)).map(([k, v]) => header(k, v));
    const metadata = {
      trust_verdict: o.verdict,
      trust_score: o.trustScore,
      trust_receipt: o.receiptId,
      ...(o.bundle ? { trust_bundle: o.bundle.bundleId, trust_bundle_age: o.bundle.ageSeconds } : {}),
      upstream: o.upstream,
      decision: o.allow ? 'allow' : 'deny',
      reason: o.reason,
      mcp_tool: o.toolName,
    };
    if (o.allow) {
      return {
        status: { code: 0, message: '' },
        httpResponse: { case: 'okResponse', value: { headers: verdictHeaders, responseHeadersToAdd: verdictHeaders } },
        dynamicMetadata: metadata,
      };
    }
    return {
      // google.rpc.Code PERMISSION_DENIED
      status: { code: 7, message: o.tool || o.headerProblem ? denialDetail(o) : `${o.upstream} is ${o.verdict}: ${o.reason}` },
      httpResponse: {
        case: 'deniedResponse',
        value: {
          status: { code: StatusCode.Forbidden },
          headers: [...verdictHeaders, header('content-type', 'application/json')],
          body: bodyText(o),
        },
      },
      dynamicMetadata: metadata,
    };
  }

  // The JSON text of a decision. Everything in it but `decided_at` follows from its receipt (the
  // receipt signs the claim: decision, reason, upstream, verdict, score, cached_verdict, the MCP
  // method, tool and finding), and decisions share a receipt for a second: the text around
  // `decided_at` is kept per receipt, the most frequent answer costs a concatenation.
  const texts = new BoundedMap<string, readonly [string, string]>();
  function bodyText(o: GateOutcome): string {
    if (o.receiptId === null) return JSON.stringify(gateBody(o, config.publicBaseUrl));
    let t = texts.get(o.receiptId);
    if (t === undefined) {
      const whole = JSON.stringify(gateBody({ ...o, decidedAt: '' }, config.publicBaseUrl));
      // The first `"decided_at":"` is the member's own: inside a JSON string every quote is escaped.
      const at = whole.indexOf(DECIDED_AT) + DECIDED_AT.length;
      t = [whole.slice(0, at), whole.slice(at)];
      texts.set(o.receiptId, t);
    }
    return t[0] + o.decidedAt + t[1];
  }

  return { decide, check, policy, body: (o: GateOutcome) => gateBody(o, config.publicBaseUrl), bodyText };
}

export type GateService = ReturnType<typeof createGateService>;
