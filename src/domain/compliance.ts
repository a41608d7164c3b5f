// Agency checklist, compliance attestation and governance export (docs/probes.md "Agency
// checklist" and "Compliance mapping"). Pure: decides control statuses from observed evidence.

export const AGENCY_STANDARD = 'agency-mcp-2026';
export const AGENCY_NOTICE =
  'Independent mapping by Trust Observatory of publicly observable evidence. Not affiliated with, endorsed by or issued by any government agency or regulator; not legal advice.';
export const CONTROL_CATEGORIES = ['transport', 'auth', 'rate_limit', 'audit_trail', 'provenance'] as const;
export type ControlCategory = (typeof CONTROL_CATEGORIES)[number];
export type ControlStatus = 'pass' | 'fail' | 'self_attestation_required';
export type DimensionResult = 'PASS' | 'FAIL' | 'PARTIAL';

/** Telemetry depth the audit-trail control asks for. */
export const AUDIT_MIN_REPORTS = 30;
export const AUDIT_MIN_DAYS = 7;

export interface Control {
  id: string;
  title: string;
  category: ControlCategory;
  status: ControlStatus;
  evidence: Record<string, unknown>;
  detail: string;
}

export interface AgencyObservation {
  url: string;
  endpoint: {
    reachable: boolean;
    status: number | null;
    error: string | null;
    tls: { protocol: string | null; authorized: boolean; cipher: string | null } | null;
    headers: Record<string, string>;
    /** The MCP conversation the probe managed: protocol revision and transport; null when it did not get that far. */
    mcp?: { protocol_version: string; era: 'modern' | 'legacy'; transport: 'streamable-http' | 'sse' } | null;
  };
  protected_resource_metadata: { url: string; found: boolean; status: number | null; resource: string | null; authorization_servers: string[] };
  did_document: { url: string; found: boolean; status: number | null; id: string | null; verification_methods: number };
  history: { tracked: boolean; total: number; first_observed: string | null; last_observed: string | null; days_observed: number };
  baseline: { baseline_id: string; recorded_at: string; receipt_id: string; manifest_hash: string } | null;
  drift_flag_active: boolean;
}

const RATE_LIMIT_HEADERS = ['ratelimit', 'ratelimit-policy', 'ratelimit-limit', 'ratelimit-remaining', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'x-rate-limit-limit', 'retry-after'];

/**
 * A probe's observation as control evidence: its HTTP status is `http_status` (as in
 * auth_challenge), so the word `status` only ever means a control's pass/fail verdict.
 */
function probeEvidence<T extends { status: number | null }>(probe: T): Omit<T, 'status'> & { http_status: number | null } {
  const { status, ...rest } = probe;
  return { ...rest, http_status: status };
}

export function evaluateControls(o: AgencyObservation): Control[] {
  const https = o.url.startsWith('https:');
  const tlsOk = https && o.endpoint.tls !== null && o.endpoint.tls.authorized && /^TLSv1\.[23]$/.test(o.endpoint.tls.protocol ?? '');
  const hsts = o.endpoint.headers['strict-transport-security'] ?? null;
  const challenge = o.endpoint.headers['www-authenticate'] ?? null;
  const rl = Object.fromEntries(RATE_LIMIT_HEADERS.filter((h) => o.endpoint.headers[h] !== undefined).map((h) => [h, o.endpoint.headers[h]!]));
  const saw429 = o.endpoint.status === 429;
  const deep = o.history.total >= AUDIT_MIN_REPORTS && o.history.days_observed >= AUDIT_MIN_DAYS;
  const host = (() => {
    try {
      return new URL(o.url).host;
    } catch {
      return '';
    }
  })();
  const didExpected = `did:web:${host.replace(':', '%3A')}`;
  const didOk = o.did_document.found && o.did_document.id === didExpected && o.did_document.verification_methods > 0;
  const prmOk = o.protected_resource_metadata.found && o.protected_resource_metadata.resource !== null && o.protected_resource_metadata.authorization_servers.length > 0;

  const controls: Control[] = [
    {
      id: 'transport_tls',
      title: 'Encrypted transport (TLS 1.2+ with a valid certificate)',
      category: 'transport',
      status: tlsOk ? 'pass' : 'fail',
      evidence: {
        scheme: https ? 'https' : 'http',
        reachable: o.endpoint.reachable,
        tls: o.endpoint.tls,
        error: o.endpoint.error,
        mcp_protocol_version: o.endpoint.mcp?.protocol_version ?? null,
        mcp_transport: o.endpoint.mcp?.transport ?? null,
      },
      detail: tlsOk ? `TLS ${o.endpoint.tls!.protocol} with a certificate that verified` : !https ? 'the endpoint is plain http' : !o.endpoint.reachable ? `the endpoint could not be reached: ${o.endpoint.error}` : 'TLS did not verify or is older than 1.2',
    },
    {
      id: 'transport_hsts',
      title: 'HTTP Strict Transport Security',
      category: 'transport',
      status: https && hsts !== null && /max-age=\d+/i.test(hsts) ? 'pass' : 'fail',
      evidence: { strict_transport_security: hsts },
      detail: hsts ? `Strict-Transport-Security: ${hsts}` : 'no Strict-Transport-Security header on the endpoint',
    },
    {
      id: 'auth_protected_resource_metadata',
      title: 'OAuth protected resource metadata (RFC 9728)',
      category: 'auth',
      status: prmOk ? 'pass' : 'fail',
      evidence: probeEvidence(o.protected_resource_metadata),
      detail: prmOk
        ? `metadata at ${o.protected_resource_metadata.url} names ${o.protected_resource_metadata.authorization_servers.length} authorization server(s)`
        : `no usable metadata (resource and authorization_servers) at ${o.protected_resource_metadata.url}`,
    },
    {
      id: 'auth_challenge',
      title: 'Unauthenticated calls are challenged (401 with WWW-Authenticate)',
      category: 'auth',
      status: o.endpoint.status === 401 && challenge !== null ? 'pass' : 'fail',
      evidence: { http_status: o.endpoint.status, www_authenticate: challenge, resource_metadata_advertised: challenge !== null && /resource_metadata=/i.test(challenge) },
      detail:
        o.endpoint.status === 401 && challenge !== null
          ? `an unauthenticated MCP request got 401 with WWW-Authenticate: ${challenge}`
          : o.endpoint.status === null
            ? 'the endpoint did not answer an unauthenticated MCP request'
            : `an unauthenticated MCP request got ${o.endpoint.status} without a Bearer challenge`,
    },
    {
      id: 'rate_limit_signals',
      title: 'Rate limiting is signalled (RateLimit headers or 429)',
      category: 'rate_limit',
      status: Object.keys(rl).length > 0 || saw429 ? 'pass' : 'self_attestation_required',
      evidence: { headers: rl, saw_429: saw429 },
      detail:
        Object.keys(rl).length > 0 || saw429
          ? `rate-limit signals seen: ${[...Object.keys(rl), ...(saw429 ? ['429'] : [])].join(', ')}`
          : 'no rate-limit headers or 429 seen; we do not load-test third-party servers, so the operator must attest its limits',
    },
    {
      id: 'audit_telemetry_history',
      title: `Independent runtime record (at least ${AUDIT_MIN_REPORTS} reports over ${AUDIT_MIN_DAYS} days)`,
      category: 'audit_trail',
      status: deep ? 'pass' : 'fail',
      evidence: { ...o.history },
      detail: !o.history.tracked
        ? 'the server is not tracked by this observatory: no independent runtime record exists'
        : deep
          ? `${o.history.total} reports over ${o.history.days_observed} days`
          : `only ${o.history.total} reports over ${o.history.days_observed} days`,
    },
    {
      id: 'audit_operator_logs',
      title: 'Operator keeps tamper-evident logs of tool calls',
      category: 'audit_trail',
      status: 'self_attestation_required',
      evidence: {},
      detail: "the operator's own logging cannot be observed from outside; it must be attested",
    },
    {
      id: 'provenance_manifest_baseline',
      title: 'Signed tool-manifest baseline without recent drift',
      category: 'provenance',
      status: o.baseline !== null && !o.drift_flag_active ? 'pass' : 'fail',
      evidence: { baseline: o.baseline, drift_flag_active: o.drift_flag_active },
      detail:
        o.baseline === null
          ? 'no signed tool-manifest baseline; GET /api/drift?server= records one for a tracked server'
          : o.drift_flag_active
            ? 'the tool manifest drifted recently (tool_manifest_drift)'
            : `signed baseline ${o.baseline.baseline_id} of ${o.baseline.recorded_at} (receipt ${o.baseline.receipt_id})`,
    },
    {
      id: 'provenance_did_document',
      title: 'Operator identity published as did:web',
      category: 'provenance',
      status: didOk ? 'pass' : 'fail',
      evidence: { ...probeEvidence(o.did_document), expected_id: didExpected },
      detail: didOk ? `${o.did_document.url} identifies ${didExpected} with ${o.did_document.verification_methods} verification method(s)` : `no did.json at ${o.did_document.url} naming ${didExpected} with a verification method`,
    },
  ];
  return controls;
}

export function summarize(controls: Control[]) {
  const passed = controls.filter((c) => c.status === 'pass').length;
  const failed = controls.filter((c) => c.status === 'fail').length;
  return {
    total_controls: controls.length,
    passed,
    failed,
    self_attestation_required: controls.length - passed - failed,
    pass_rate: passed + failed === 0 ? null : Math.round((passed / (passed + failed)) * 1000) / 1000,
  };
}

/**
 * The evidence of one attestation dimension: per control, its evidence with its verdict as
 * `status` (pass, fail or self_attestation_required). The verdict is written last, so no
 * evidence member can ever replace it.
 */
export function dimensionEvidence(controls: readonly Control[]): Record<string, Record<string, unknown>> {
  return Object.fromEntries(controls.map((c) => [c.id, { ...c.evidence, status: c.status }]));
}

/** PASS when every decidable control passes, FAIL when none passes, PARTIAL otherwise or when nothing is decidable. */
export function dimensionResult(controls: Control[]): DimensionResult {
  const decidable = controls.filter((c) => c.status !== 'self_attestation_required');
  if (decidable.length === 0) return 'PARTIAL';
  if (decidable.every((c) => c.status === 'pass')) return 'PASS';
  if (decidable.every((c) => c.status === 'fail')) return 'FAIL';
  return 'PARTIAL';
}

/** Any FAIL dimension fails the whole; all PASS passes; anything else is PARTIAL. */
export function overallResult(results: DimensionResult[]): DimensionResult {
  if (results.some((r) => r === 'FAIL')) return 'FAIL';
  if (results.every((r) => r === 'PASS')) return 'PASS';
  return 'PARTIAL';
}

export const EXIT_CODES: Record<DimensionResult, number> = { PASS: 0, FAIL: 1, PARTIAL: 2 };

// ---- governance export ---------------------------------------------------------------------

export class BadDateRange extends Error {}

const DAY_MS = 86_400_000;
export const DEFAULT_EXPORT_DAYS = 30;
export const MAX_EXPORT_DAYS = 3660;

function parseDay(name: string, v: string): Date {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(v);
  if (!m) throw new BadDateRange(`${name} must be a date as YYYY-MM-DD, got "${v.slice(0, 40)}"`);
  const d = new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3])));
  if (d.getUTCFullYear() !== Number(m[1]) || d.getUTCMonth() !== Number(m[2]) - 1 || d.getUTCDate() !== Number(m[3])) throw new BadDateRange(`${name} is not a calendar date: ${v}`);
  return d;
}
const day = (d: Date) => d.toISOString().slice(0, 10);

/** Inclusive day range -> [from, to) instants; default the 30 days ending today (UTC). */
export function exportPeriod(start: string | undefined, end: string | undefined, now: Date) {
  const endDay = end ? parseDay('end_date', end) : parseDay('end_date', day(now));
  const startDay = start ? parseDay('start_date', start) : new Date(endDay.getTime() - (DEFAULT_EXPORT_DAYS - 1) * DAY_MS);
  if (startDay.getTime() > endDay.getTime()) throw new BadDateRange(`start_date ${day(startDay)} is after end_date ${day(endDay)}`);
  if ((endDay.getTime() - startDay.getTime()) / DAY_MS + 1 > MAX_EXPORT_DAYS) throw new BadDateRange(`the range may span at most ${MAX_EXPORT_DAYS} days`);
  return { start_date: day(startDay), end_date: day(endDay), from: startDay, to: new Date(endDay.getTime() + DAY_MS) };
}

/** How each part of the export answers a record-keeping requirement. */
export const REGULATORY_MAPPINGS = [
  { framework: 'EU AI Act', reference: 'Article 12(1)', requirement: 'Automatic recording of events (logs) over the lifetime of the system', evidence: 'events, receipts' },
  { framework: 'EU AI Act', reference: 'Article 12(2)(a)', requirement: 'Identify situations that may result in a risk or a substantial modification', evidence: 'anomalies (including tool_manifest_drift), verdict' },
  { framework: 'EU AI Act', reference: 'Article 12(2)(b)', requirement: 'Facilitate post-market monitoring', evidence: 'events.success_rate, events.p95_latency_ms, trust_score' },
  { framework: 'EU AI Act', reference: 'Article 12(2)(c)', requirement: 'Monitor the operation of the system', evidence: 'events.by_tool, events.first_event_at, events.last_event_at' },
  { framework: 'EU AI Act', reference: 'Article 12(3)(a)', requirement: 'Record the period of each use (start and end)', evidence: 'period, events.first_event_at, events.last_event_at' },
  { framework: 'EU AI Act', reference: 'Article 12(3)(b)', requirement: 'The reference data against which input was checked', evidence: 'receipts (signed pre-flight verdicts and drift baselines)' },
  { framework: 'EU AI Act', reference: 'Article 12(3)(d)', requirement: 'Identify who verified the results', evidence: 'receipts (issuer and key id, verifiable against /.well-known/jwks.json)' },
  { framework: 'Singapore IMDA Model AI Governance Framework for Agentic AI', reference: 'Assess and bound the risks upfront', requirement: 'Vet tools and third-party services before agents use them', evidence: 'verdict, trust_score, receipts of kind preflight' },
  { framework: 'Singapore IMDA Model AI Governance Framework for Agentic AI', reference: 'Make humans meaningfully accountable', requirement: 'Keep records that let humans review what agents relied on', evidence: 'receipts, events' },
  { framework: 'Singapore IMDA Model AI Governance Framework for Agentic AI', reference: 'Implement technical controls and processes', requirement: 'Monitor tool behaviour and detect changes during operation', evidence: 'anomalies, events.by_tool, receipts of kind drift_baseline' },
  { framework: 'Singapore IMDA Model AI Governance Framework for Agentic AI', reference: 'Enable end-user responsibility', requirement: 'Transparent, minimal data handling', evidence: 'data_collected' },
] as const;
