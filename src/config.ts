// Environment -> one typed, validated configuration object.
// A bad value stops start-up with a one-line message naming the variable (see ConfigError).

import { isIP } from 'node:net';
import { PAYMENT_NETWORKS, type PaymentNetworkId } from './domain/x402.js';
import { EXT_AUTHZ_MAX_BYTES, parseGateRoutes, parseTrustedHeaders, type GateRoute, type UpstreamHeader } from './domain/gate.js';
import { DEFAULT_MAX_EXPORT_ELEMENTS } from './domain/otlp-export.js';
import { parseToolRules, UNLISTED_TOOL_POLICIES, type GateToolPolicy, type ToolRule } from './domain/tool-gate.js';
import { KEY_ENCRYPTION_SECRET_HELP, parseKeyEncryptionSecret } from './signing/secret-format.js';
import { DEFAULT_CACHE_MAX_ENTRIES } from './store/cache-limits.js';
import { DEFAULT_DATABASE_TIMEOUTS, type DatabaseTimeouts } from './db/db.js';

export const INTERFACE_VERSION = '1.3.0';

export interface Config {
  port: number;
  host: string;
  /** PostgreSQL connection string; null means embedded PGlite under dataDir. */
  databaseUrl: string | null;
  /**
   * DATABASE_READ_URL: a streaming replica (or a pool of them behind one address) for reads that
   * tolerate staleness (docs/deployment.md "Read replicas"); null: every read on the primary.
   */
  databaseReadUrl: string | null;
  /** DATABASE_READ_MAX_LAG_MS (default 2000): the replica serves reads only while at most this far behind the primary. */
  databaseReadMaxLagMs: number;
  /**
   * DATABASE_PREPARED_STATEMENTS (default true): the hot writes run as named prepared statements on
   * PostgreSQL. Off for a pooler that cannot carry them (PgBouncer before 1.21, or without
   * max_prepared_statements, in transaction mode).
   */
  databasePreparedStatements: boolean;
  /**
   * Bounds on every PostgreSQL statement and wait (docs/reliability.md "A database that holds or
   * stops answering"): DATABASE_STATEMENT_TIMEOUT_MS (default 15000), DATABASE_LOCK_TIMEOUT_MS
   * (5000), DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS (10000), DATABASE_LONG_STATEMENT_TIMEOUT_MS
   * (300000, compliance exports and the bundle's read).
   */
  databaseTimeouts: DatabaseTimeouts;
  dataDir: string;
  publicBaseUrl: string;
  allowPrivateTargets: boolean;
  /** CACHE_MAX_ENTRIES (default 20000): entries per in-memory cache (scores, server rows, listings, ...), per process. */
  cacheMaxEntries: number;
  /** TRUST_PROXY: false, a hop count, or a list of trusted proxy addresses/CIDRs. */
  trustProxy: boolean | number | string[];
  logLevel: string;
  /** Largest accepted request body, in bytes. */
  bodyLimit: number;
  /** GRPC_HEALTH_INTERVAL_MS: how often grpc.health.v1 Watch streams re-check the database. */
  healthIntervalMs: number;
  paymentWallet: string | null;
  paymentRpcUrl: string | null;
  /** PAYMENT_NETWORK: the CAIP-2 chain paid verdicts settle on, Base (eip155:8453, default) or Base Sepolia (eip155:84532). */
  paymentNetwork: PaymentNetworkId;
  /** FACILITATOR_URL: x402 facilitator whose /verify and /settle take signed (v2, and v1 EIP-3009) payments; null = none. */
  facilitatorUrl: string | null;
  /** PAYMENT_MAX_AGE_SECONDS (default 600): a paying transfer, and the payer's proof, must be at most this old. */
  paymentMaxAgeSeconds: number;
  /**
   * PAYMENT_LOOKUPS_PER_MINUTE (default 20, 0 = unlimited): payment look-ups (a transaction hash
   * on the chain's RPC, a signed authorization at the facilitator's /verify) per client network,
   * per instance.
   */
  paymentLookupsPerMinute: number;
  /**
   * PAYMENT_LOOKUPS_TOTAL_PER_MINUTE (default 600, 0 = unlimited): the same look-ups from every
   * client network together, per instance: many networks cannot spend the RPC endpoint's or the
   * facilitator's own quota (beyond it 503 with Retry-After).
   */
  paymentLookupsTotalPerMinute: number;
  clawhubApiUrl: string;
  /** Ed25519 private key as a JWK (JSON string); when unset the key ring lives in the database. */
  signingKeyJwk: string | null;
  /** NODE_ENV=production: secrets must be configured explicitly (KEY_ENCRYPTION_KEY), guards that cost performance are off. */
  production: boolean;
  /** KEY_ENCRYPTION_KEY: 32-byte secret that seals private signing keys in the database (docs/receipts.md "Keys at rest"). */
  keyEncryptionKey: Buffer | null;
  /** KEY_ENCRYPTION_KEY_FILE: a file holding that secret (read when the database opens). */
  keyEncryptionKeyFile: string | null;
  /** Gateway gate (/v1/gate, Envoy ext_authz): policy, verdict cache and optional route table. */
  gate: GateConfig;
  /** Probe requests (drift, agent-readiness, agency-checklist, compliance) per client address per minute, per instance; 0 = unlimited. */
  rateLimitProbesPerMinute: number;
  /**
   * DRIFT_TEXT_BYTES_PER_SERVER_PER_DAY (default 16 MiB, 0 = no limit): bytes of new tool-part texts
   * drift baselines of one server may store within 24 hours (the texts /drift shows). Beyond, a
   * baseline keeps its hashes only: drift is still detected, signed and flagged.
   */
  driftTextBytesPerServerPerDay: number;
  /**
   * PROBE_CONCURRENCY (default 32): on-demand probes (drift, agent-readiness, agency checklist,
   * attestation) running at once in this instance; one client network may run an eighth (at
   * least 2). Beyond: 503 (429 for a client's share) with Retry-After. Observation is not counted.
   */
  probeConcurrency: number;
  /**
   * EXPORT_CONCURRENCY (default 2): compliance exports (GET /api/compliance, ComplianceService
   * GetComplianceExport) running at once in this instance, one per client network (an eighth when
   * larger). Each reads a server's raw telemetry over its period; beyond, 429/503 + Retry-After.
   */
  exportConcurrency: number;
  /**
   * A2A_TASK_RETENTION_DAYS (default 30, 0 = keep for ever): an A2A task whose status has not
   * changed for this long is deleted (tasks/get then answers TaskNotFound). Every message/send
   * from anyone stores a task, so without a bound the table only grows.
   */
  a2aTaskRetentionDays: number;
  /**
   * A2A_TASK_BYTES_PER_CLIENT_PER_DAY (default 64 MiB, 0 = no limit): what one client network may
   * make this instance store as A2A tasks per day, counted per skill invocation as the JSON of its
   * params plus A2A_ANSWER_BYTES for the answer stored with it; beyond it message/send is refused
   * like a rate limit. The rate limit bounds how many tasks, this how many bytes (a message may
   * carry up to BODY_LIMIT of data parts and metadata, all kept in the task's history).
   */
  a2aTaskBytesPerClientPerDay: number;
  /** Pre-flight requests (REST and Connect) per client address per minute, per instance; 0 = unlimited. */
  rateLimitPreflightPerMinute: number;
  /** Gate decisions (/v1/gate, ext_authz Check) per client address (the gateway) per minute, per instance; 0 = unlimited. */
  rateLimitGatePerMinute: number;
  /** MCP preflight_check tool calls per client address per minute, per instance; 0 = unlimited. */
  rateLimitMcpPreflightPerMinute: number;
  /** A2A skill invocations (message/send) per client address per minute, per instance; 0 = unlimited. */
  rateLimitA2aSkillsPerMinute: number;
  /** A2A task reads (GetTask, ListTasks, CancelTask, SubscribeToTask and their 0.3 names, each call of a batch) per client network per minute; 0 = unlimited. */
  rateLimitA2aReadsPerMinute: number;
  /** GET /v1/bundle per client network per minute (each may filter, sign and compress the whole catalogue). */
  rateLimitBundlePerMinute: number;
  /** Searched or paged list requests (a non-empty `q`: leaderboard, /monitor, /atlas/report; a `window`: /api/demand) per client network per minute; 0 = unlimited. */
  rateLimitSearchPerMinute: number;
  /** HTML page requests (/monitor, /monitor/server/{slug}, /drift, /atlas/report) per client network per minute, when no stricter limit applies; 0 = unlimited. */
  rateLimitPagesPerMinute: number;
  /** Skill trust requests (/v1/trust, Connect GetSkillTrust: each may ask the ClawHub registry) per client network per minute; 0 = unlimited. */
  rateLimitSkillTrustPerMinute: number;
  /**
   * Raw telemetry older than this many days is deleted (whole monthly partitions); 0 keeps it
   * forever. Scores never read raw telemetry; compliance exports (event logs) do.
   */
  telemetryRetentionDays: number;
  /**
   * RECEIPT_RETENTION_DAYS (default 400, 0 = keep for ever, otherwise at least 183): stored
   * receipts issued longer ago are deleted (every 6 hours, once across instances); their id then
   * answers 404 at /v1/receipt/{id}, while the JWS itself still verifies offline against the JWKS.
   * Every pre-flight, gate decision and drift check whose claim changed in the last second stores
   * one, so without a bound the table only grows.
   */
  receiptRetentionDays: number;
  /**
   * DEMAND_RETENTION_DAYS (default 90, 0 = keep for ever, otherwise at least 31: /api/demand's
   * longest window is 30 days): pre-flight demand rows and hourly sums older than this are
   * deleted, and the per-target sums of targets that named no tracked server and were not checked
   * within it are folded into one retired row (every 6 hours, once across instances); all-time
   * figures keep counting them (src/services/demand-retention.ts).
   */
  demandRetentionDays: number;
  /**
   * NEW_SERVERS_PER_SOURCE_PER_HOUR (default 100, 0 = unlimited): servers one report source family
   * (a network, with the keys reporting from it) may newly track per hour, across instances; a
   * report over it is refused with 429 (docs/integrity.md).
   */
  newServersPerSourcePerHour: number;
  /** Active observation: the observatory probes tracked servers itself (docs/observation.md). */
  observe: ObserveConfig;
  /** The standing MCP Registry sync (docs/observation.md "Registry sync"). */
  registrySync: RegistrySyncConfig;
  /** OTLP receivers (/v1/traces, /v1/metrics, OTLP/gRPC; docs/telemetry.md). */
  otlp: OtlpConfig;
  /** Connection deadlines and the connection cap of the listener (docs/reliability.md "Connections"). */
  http: HttpConfig;
  /** Offline verdict bundles served at GET /v1/bundle (docs/bundles.md). */
  bundle: BundleConfig;
  /** A gate answering from a bundle, with no database (GATE_BUNDLE_URL; docs/bundles.md "A gate from a bundle"). */
  gateBundle: GateBundleConfig;
}

export interface BundleConfig {
  /** BUNDLE_TTL_SECONDS (default 86400): a bundle expires this long after it was signed. */
  ttlSeconds: number;
  /** BUNDLE_CACHE_SECONDS (default 60): a built bundle is served this long before the cached scores are read again. */
  cacheSeconds: number;
  /** BUNDLE_DELTA_RETENTION_HOURS (default 168): how long an earlier bundle can be named by ?since=. */
  deltaRetentionHours: number;
  /**
   * BUNDLE_CACHE_MAX_ENTRIES (default 8): built bundles kept in memory, per process: at most this
   * many filter sets and this many deltas, the oldest dropped first. Not CACHE_MAX_ENTRIES: each
   * entry is a whole-catalogue document (~56 MB at 100,000 servers, plus its compressed forms).
   */
  cacheMaxEntries: number;
}

export interface GateBundleConfig {
  /** GATE_BUNDLE_URL: the /v1/bundle URL of the observatory to mirror; set, this instance is a database-less gate. */
  url: string | null;
  /** GATE_BUNDLE_JWKS: the pinned JWKS (a file path or an http(s) URL); default: the source's /.well-known/jwks.json. */
  jwks: string | null;
  /** GATE_BUNDLE_REFRESH_SECONDS (default 60): how often the bundle is fetched again (conditionally). */
  refreshSeconds: number;
  /** GATE_BUNDLE_CACHE_FILE (default DATA_DIR/gate-bundle.json; `off`: none): the last good bundle, kept across restarts. */
  cacheFile: string | null;
}

export interface RegistrySyncConfig {
  /** REGISTRY_SYNC_URL: a registry base URL (its /v0.1/servers is read) or list URL; null: no sync. */
  url: string | null;
  /** REGISTRY_SYNC_INTERVAL_SECONDS (default 3600): one sync per interval, across all instances. */
  intervalSeconds: number;
}

export interface OtlpConfig {
  /** OTLP_MAX_EXPORT_BYTES (default 4 MiB): largest OTLP export, as received and after gzip decompression. */
  maxExportBytes: number;
  /**
   * OTLP_MAX_EXPORT_ELEMENTS (default 2,000,000): most messages and values one export may hold,
   * counted on its bytes before it is decoded (src/domain/otlp-export.ts).
   */
  maxExportElements: number;
  /** OTLP_JOIN_WINDOW_MS (default 5000, 0 = no holding): how long a span waits for its MCP parent or HTTP child from a later export. */
  joinWindowMs: number;
  /** OTLP_JOIN_MAX_SPANS (default 10000): most spans held for the join at once; beyond, the oldest is released. */
  joinMaxSpans: number;
  /** OTLP_METRIC_STREAMS (default 10000): most histogram streams remembered to turn cumulative points into deltas. */
  metricStreams: number;
}

/**
 * Every stage of a client connection has a deadline, measured while the service waits on the
 * client (never while a handler works or a stream keeps moving), plus a cap on open connections.
 */
export interface HttpConfig {
  /** HTTP_FIRST_BYTE_TIMEOUT_MS (default 10000): from accept until the first bytes choose HTTP/1.1 or HTTP/2. */
  firstByteTimeoutMs: number;
  /** HTTP_HEADERS_TIMEOUT_MS (default 20000): an HTTP/1.1 request head must arrive whole within this (408). */
  headersTimeoutMs: number;
  /**
   * HTTP_REQUEST_TIMEOUT_MS (default 60000): an HTTP/1.1 request (head and body) must arrive whole
   * within this (408); an HTTP/2 stream is reset, and an HTTP/1.1 connection closed, when the
   * client's body or its reading of the response stalls this long (moving streams are never cut).
   */
  requestTimeoutMs: number;
  /** HTTP_IDLE_TIMEOUT_MS (default 75000): an HTTP/1.1 keep-alive connection waiting for its next request is closed after this. */
  idleTimeoutMs: number;
  /** HTTP2_SESSION_IDLE_TIMEOUT_MS (default 120000): an HTTP/2 connection with no open stream is closed (GOAWAY) after this. */
  h2SessionIdleTimeoutMs: number;
  /**
   * HTTP2_MAX_CONCURRENT_STREAMS (default 100): streams one HTTP/2 connection may have open at
   * once (SETTINGS_MAX_CONCURRENT_STREAMS); clients queue calls beyond it, a client that opens
   * more anyway loses the connection (node's HTTP/2 takes it as a protocol error: GOAWAY).
   */
  h2MaxConcurrentStreams: number;
  /** MAX_CONNECTIONS (default 0 = derived from the open-file limit at start): open connections served at once. */
  maxConnections: number;
  /**
   * MAX_CONNECTIONS_PER_CLIENT (default 0 = an eighth of the served connections, at least 16):
   * open connections one client network (an IPv4 address, an IPv6 /64) may hold, so that one
   * client cannot hold every connection the service serves. Peers TRUST_PROXY trusts are exempt.
   */
  maxConnectionsPerClient: number;
  /** TRUST_PROXY, as Config.trustProxy: a trusted proxy's connections carry many clients. */
  trustProxy: boolean | number | string[];
  /**
   * HTTP_BODY_BUDGET_BYTES (default 256 MiB): request body bytes the process may hold at once, one
   * client network an eighth of them; at least eight of the largest body a route accepts.
   */
  bodyBudgetBytes: number;
  /**
   * HTTP_ANSWER_BUDGET_BYTES (default 128 MiB): bytes of answers of 4 KiB or more the process may
   * hold for clients that have not read them yet, one client network an eighth of them
   * (src/http/answer-budget.ts). Absent: the default.
   */
  answerBudgetBytes?: number;
}

export interface ObserveConfig {
  /** OBSERVE_ENABLED (default on): `serve` runs the observation loop. */
  enabled: boolean;
  /** OBSERVE_INTERVAL_SECONDS (default 300): each tracked server is probed once per interval, across all instances. */
  intervalSeconds: number;
  /** OBSERVE_CONCURRENCY (default 4): probes in flight at once, per instance. */
  concurrency: number;
  /** OBSERVE_RATE_PER_MINUTE (default 60): probes started per minute, across all instances sharing the database. */
  ratePerMinute: number;
  /** OBSERVE_TIMEOUT_MS (default 10000): one probe (initialize + tools/list) must finish within this. */
  timeoutMs: number;
  /**
   * OBSERVE_MIN_SOURCES (default 3): a server no catalogue lists is observed only while it has
   * evidence from at least this many independent source families in the last 7 days.
   */
  minSources: number;
}

/** Default of TELEMETRY_RETENTION_DAYS: a year and a month (README "Configuration" says why). */
export const DEFAULT_TELEMETRY_RETENTION_DAYS = 400;
/** Shortest non-zero retention: the six months the EU AI Act asks logs to be kept (Art. 19(1), 26(6)). */
export const MIN_TELEMETRY_RETENTION_DAYS = 183;

export interface GateConfig {
  /** GATE_ALLOW_UNCERTAIN (default on): let UNCERTAIN servers through. */
  allowUncertain: boolean;
  /** GATE_ALLOW_UNRATED (default off): let servers without runtime evidence through. */
  allowUnrated: boolean;
  /** GATE_CACHE_SECONDS (default 5, 0 = off): how long one upstream's verdict is reused. */
  cacheSeconds: number;
  /** GATE_ROUTES: host/path-prefix -> upstream, for gateways that cannot send an upstream header. */
  routes: GateRoute[];
  /**
   * GATE_TRUSTED_HEADERS (default none): upstream headers the gateway sets on the checked request
   * of an ext_authz gRPC Check (overwriting the client's), so they may name the upstream there.
   */
  trustedHeaders: UpstreamHeader[];
  /**
   * Per-tool decisions (Mcp-Method: tools/call with Mcp-Name): GATE_TOOLS_DENY (tools always
   * denied), GATE_TOOLS_EXEMPT (tools skipping the drift and tool-evidence checks) and
   * GATE_TOOL_DRIFT_HOURS (default 168, 0 = drift never denies a tool); GATE_REQUIRE_MCP_METHOD
   * (default off) denies requests without Mcp-Method; GATE_UNLISTED_TOOLS (deny, the default, or
   * allow) for a tool the server's latest recorded manifest does not list; GATE_INSTRUCTIONS_DRIFT
   * (deny, the default, or allow) for the tools of a server whose instructions changed.
   */
  tools: GateToolPolicy;
}

const PAYMENT_NETWORK_ALIASES: Record<string, PaymentNetworkId> = { base: 'eip155:8453', 'base-sepolia': 'eip155:84532' };

export { PAYMENT_NETWORKS, type PaymentNetworkId };

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
  }
}

type Env = Record<string, string | undefined>;

function str(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === '' ? undefined : v.trim();
}

function int(env: Env, name: string, def: number, min: number, max: number): number {
  const raw = str(env, name);
  if (raw === undefined) return def;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be an integer, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

function databaseTimeouts(env: Env): DatabaseTimeouts {
  const d = DEFAULT_DATABASE_TIMEOUTS;
  const statementTimeoutMs = int(env, 'DATABASE_STATEMENT_TIMEOUT_MS', d.statementTimeoutMs, 100, 3_600_000);
  const lockTimeoutMs = int(env, 'DATABASE_LOCK_TIMEOUT_MS', d.lockTimeoutMs, 10, 3_600_000);
  if (lockTimeoutMs > statementTimeoutMs) {
    throw new ConfigError('DATABASE_LOCK_TIMEOUT_MS', `must not exceed DATABASE_STATEMENT_TIMEOUT_MS (${statementTimeoutMs}), got ${lockTimeoutMs}`);
  }
  const longStatementTimeoutMs = int(env, 'DATABASE_LONG_STATEMENT_TIMEOUT_MS', Math.max(d.longStatementTimeoutMs, statementTimeoutMs), 100, 86_400_000);
  if (longStatementTimeoutMs < statementTimeoutMs) {
    throw new ConfigError('DATABASE_LONG_STATEMENT_TIMEOUT_MS', `must be at least DATABASE_STATEMENT_TIMEOUT_MS (${statementTimeoutMs}), got ${longStatementTimeoutMs}`);
  }
  return {
    statementTimeoutMs,
    lockTimeoutMs,
    idleInTransactionTimeoutMs: int(env, 'DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS', d.idleInTransactionTimeoutMs, 1000, 3_600_000),
    longStatementTimeoutMs,
  };
}

function bool(env: Env, name: string): boolean {
  const raw = str(env, name);
  if (raw === undefined) return false;
  if (['1', 'true', 'yes', 'on'].includes(raw.toLowerCase())) return true;
  if (['0', 'false', 'no', 'off'].includes(raw.toLowerCase())) return false;
  throw new ConfigError(name, `must be 1/0 or true/false, got "${raw}"`);
}

function boolDefault(env: Env, name: string, def: boolean): boolean {
  return str(env, name) === undefined ? def : bool(env, name);
}

function gateRoutes(env: Env): GateRoute[] {
  const raw = str(env, 'GATE_ROUTES');
  if (raw === undefined) return [];
  try {
    return parseGateRoutes(raw);
  } catch (err) {
    throw new ConfigError('GATE_ROUTES', (err as Error).message);
  }
}

function toolRules(env: Env, name: string): ToolRule[] {
  const raw = str(env, name);
  if (raw === undefined) return [];
  try {
    return parseToolRules(raw);
  } catch (err) {
    throw new ConfigError(name, (err as Error).message);
  }
}

/** GATE_UNLISTED_TOOLS and GATE_INSTRUCTIONS_DRIFT: deny (the default) or allow. */
function denyOrAllow(env: Env, name: 'GATE_UNLISTED_TOOLS' | 'GATE_INSTRUCTIONS_DRIFT'): 'deny' | 'allow' {
  const raw = str(env, name);
  if (raw === undefined) return 'deny';
  const v = UNLISTED_TOOL_POLICIES.find((p) => p === raw.toLowerCase());
  if (!v) throw new ConfigError(name, `must be deny or allow, got "${raw}"`);
  return v;
}

function trustedHeaders(env: Env): UpstreamHeader[] {
  const raw = str(env, 'GATE_TRUSTED_HEADERS');
  if (raw === undefined) return [];
  try {
    return parseTrustedHeaders(raw);
  } catch (err) {
    throw new ConfigError('GATE_TRUSTED_HEADERS', (err as Error).message);
  }
}

function httpUrl(name: string, raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    // The value is not quoted back: these URLs often carry a credential (a provider's RPC key in
    // the path, a presigned query), and this message goes to logs. Say what is wrong instead.
    throw new ConfigError(name, `must be an absolute http(s) URL; the value (${raw.length} characters, not shown: URLs may carry credentials) ${/^[a-z][a-z0-9+.-]*:/i.test(raw.trim()) ? 'does not parse as a URL' : 'has no scheme (start it with https://)'}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw new ConfigError(name, `must use http or https, got "${u.protocol}"`);
  }
  return raw.replace(/\/+$/, '');
}

function paymentNetwork(env: Env): PaymentNetworkId {
  const raw = str(env, 'PAYMENT_NETWORK');
  if (raw === undefined) return 'eip155:8453';
  const v = raw.toLowerCase();
  const id = PAYMENT_NETWORK_ALIASES[v] ?? (PAYMENT_NETWORKS as readonly string[]).find((n) => n === v);
  if (!id) throw new ConfigError('PAYMENT_NETWORK', `must be eip155:8453 (Base) or eip155:84532 (Base Sepolia), or base / base-sepolia; got "${raw}"`);
  return id as PaymentNetworkId;
}

function trustProxy(env: Env): Config['trustProxy'] {
  const raw = str(env, 'TRUST_PROXY');
  if (raw === undefined || ['0', 'false', 'no', 'off'].includes(raw.toLowerCase())) return false;
  if (['true', 'yes', 'on'].includes(raw.toLowerCase())) return 1;
  if (/^\d+$/.test(raw)) return Number(raw);
  const list = raw.split(',').map((s) => s.trim()).filter(Boolean);
  for (const item of list) {
    // An address, or an address and a prefix length its family allows.
    const [address, prefix, ...rest] = item.split('/');
    const family = isIP(address ?? '');
    const validPrefix = prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 6 ? 128 : 32));
    if (family === 0 || !validPrefix || rest.length > 0) {
      throw new ConfigError('TRUST_PROXY', `must be 1, a hop count, or a list of addresses/CIDRs; bad entry "${item}"`);
    }
  }
  return list;
}

/** A record-keeping retention: 0 (keep for ever) or at least MIN_TELEMETRY_RETENTION_DAYS. */
function retentionDays(env: Env, name: 'TELEMETRY_RETENTION_DAYS' | 'RECEIPT_RETENTION_DAYS', why: string): number {
  const days = int(env, name, DEFAULT_TELEMETRY_RETENTION_DAYS, 0, 36_500);
  if (days !== 0 && days < MIN_TELEMETRY_RETENTION_DAYS) {
    throw new ConfigError(name, `must be 0 (keep forever) or at least ${MIN_TELEMETRY_RETENTION_DAYS} days (${why}; the EU AI Act asks for six months of logs), got ${days}`);
  }
  return days;
}

/** The shortest demand retention: /api/demand's longest window (30d) reads the hourly sums. */
export const MIN_DEMAND_RETENTION_DAYS = 31;

function demandRetentionDays(env: Env): number {
  const days = int(env, 'DEMAND_RETENTION_DAYS', 90, 0, 36_500);
  if (days !== 0 && days < MIN_DEMAND_RETENTION_DAYS) {
    throw new ConfigError('DEMAND_RETENTION_DAYS', `must be 0 (keep for ever) or at least ${MIN_DEMAND_RETENTION_DAYS} days (/api/demand's 30d window reads them), got ${days}`);
  }
  return days;
}

function httpLimits(env: Env, proxies: Config['trustProxy']): HttpConfig {
  const headersTimeoutMs = int(env, 'HTTP_HEADERS_TIMEOUT_MS', 20_000, 100, 600_000);
  const requestTimeoutMs = int(env, 'HTTP_REQUEST_TIMEOUT_MS', 60_000, 100, 3_600_000);
  if (headersTimeoutMs > requestTimeoutMs) {
    throw new ConfigError('HTTP_HEADERS_TIMEOUT_MS', `must not exceed HTTP_REQUEST_TIMEOUT_MS (${requestTimeoutMs}), got ${headersTimeoutMs}`);
  }
  const maxConnections = int(env, 'MAX_CONNECTIONS', 0, 0, 1_000_000);
  if (maxConnections !== 0 && maxConnections < 4) {
    throw new ConfigError('MAX_CONNECTIONS', `must be 0 (derived from the open-file limit) or at least 4, got ${maxConnections}`);
  }
  return {
    firstByteTimeoutMs: int(env, 'HTTP_FIRST_BYTE_TIMEOUT_MS', 10_000, 100, 600_000),
    headersTimeoutMs,
    requestTimeoutMs,
    idleTimeoutMs: int(env, 'HTTP_IDLE_TIMEOUT_MS', 75_000, 100, 3_600_000),
    h2SessionIdleTimeoutMs: int(env, 'HTTP2_SESSION_IDLE_TIMEOUT_MS', 120_000, 100, 86_400_000),
    h2MaxConcurrentStreams: int(env, 'HTTP2_MAX_CONCURRENT_STREAMS', 100, 1, 2_147_483_647),
    maxConnections,
    maxConnectionsPerClient: int(env, 'MAX_CONNECTIONS_PER_CLIENT', 0, 0, 1_000_000),
    trustProxy: proxies,
    bodyBudgetBytes: int(env, 'HTTP_BODY_BUDGET_BYTES', DEFAULT_BODY_BUDGET_BYTES, 1024 * 1024, 64 * 1024 * 1024 * 1024),
    answerBudgetBytes: int(env, 'HTTP_ANSWER_BUDGET_BYTES', DEFAULT_ANSWER_BUDGET_BYTES, 1024 * 1024, 64 * 1024 * 1024 * 1024),
  };
}

/**
 * HTTP_ANSWER_BUDGET_BYTES unless set: 128 A2A answers of 1 MiB unread at once, 16 per client
 * network. An answer counted may hold up to twice its bytes (fastify keeps an answer's text and
 * its bytes while an HTTP/2 client reads it): about 300 MB for the process, 40 MB for a network.
 */
export const DEFAULT_ANSWER_BUDGET_BYTES = 128 * 1024 * 1024;

/** HTTP_BODY_BUDGET_BYTES unless set: 64 OTLP exports of the default 4 MiB at once, 8 per client network. */
export const DEFAULT_BODY_BUDGET_BYTES = 256 * 1024 * 1024;

export function loadConfig(env: Env = process.env): Config {
  const port = int(env, 'PORT', 8080, 0, 65535);
  const databaseUrl = str(env, 'DATABASE_URL') ?? null;
  if (databaseUrl !== null && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new ConfigError('DATABASE_URL', 'must start with postgres:// or postgresql://');
  }
  const bodyLimit = int(env, 'BODY_LIMIT', 64 * 1024, 1024, 16 * 1024 * 1024);
  const otlpMaxExportBytes = int(env, 'OTLP_MAX_EXPORT_BYTES', 4 * 1024 * 1024, 64 * 1024, 64 * 1024 * 1024);
  const proxies = trustProxy(env);
  const http = httpLimits(env, proxies);
  // One client network's share (an eighth) must hold the largest body a route accepts (an OTLP
  // export, or ext_authz's 4 MiB CheckRequest), or such a request could never be taken.
  const largestBody = Math.max(bodyLimit, otlpMaxExportBytes, EXT_AUTHZ_MAX_BYTES);
  if (http.bodyBudgetBytes < 8 * largestBody) {
    throw new ConfigError('HTTP_BODY_BUDGET_BYTES', `must be at least ${8 * largestBody} (eight of the largest body a route accepts, ${largestBody} bytes), got ${http.bodyBudgetBytes}`);
  }
  const databaseReadUrl = str(env, 'DATABASE_READ_URL') ?? null;
  if (databaseReadUrl !== null && !/^postgres(ql)?:\/\//.test(databaseReadUrl)) {
    throw new ConfigError('DATABASE_READ_URL', 'must start with postgres:// or postgresql://');
  }
  if (databaseReadUrl !== null && databaseUrl === null) {
    throw new ConfigError('DATABASE_READ_URL', 'needs DATABASE_URL (a replica of the embedded database does not exist)');
  }
  const wallet = str(env, 'PAYMENT_WALLET') ?? null;
  if (wallet !== null && !/^0x[0-9a-fA-F]{40}$/.test(wallet)) {
    throw new ConfigError('PAYMENT_WALLET', 'must be a 0x-prefixed 20-byte hex address');
  }
  const rpc = str(env, 'PAYMENT_RPC_URL');
  const facilitator = str(env, 'FACILITATOR_URL');
  const jwk = str(env, 'SIGNING_KEY_JWK') ?? null;
  if (jwk !== null) {
    try {
      const parsed = JSON.parse(jwk) as Record<string, unknown>;
      if (parsed.kty !== 'OKP' || parsed.crv !== 'Ed25519' || typeof parsed.d !== 'string') throw new Error();
    } catch {
      throw new ConfigError('SIGNING_KEY_JWK', 'must be an Ed25519 private key as a JSON JWK (kty OKP, crv Ed25519, d)');
    }
  }
  const syncUrl = str(env, 'REGISTRY_SYNC_URL');
  const kekText = str(env, 'KEY_ENCRYPTION_KEY') ?? null;
  const kekFile = str(env, 'KEY_ENCRYPTION_KEY_FILE') ?? null;
  if (kekText !== null && kekFile !== null) {
    throw new ConfigError('KEY_ENCRYPTION_KEY', 'set KEY_ENCRYPTION_KEY or KEY_ENCRYPTION_KEY_FILE, not both');
  }
  const keyEncryptionKey = kekText === null ? null : parseKeyEncryptionSecret(kekText);
  if (kekText !== null && keyEncryptionKey === null) throw new ConfigError('KEY_ENCRYPTION_KEY', `must be ${KEY_ENCRYPTION_SECRET_HELP}`);
  const logLevel = str(env, 'LOG_LEVEL') ?? 'info';
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', `must be one of fatal, error, warn, info, debug, trace, silent; got "${logLevel}"`);
  }
  const dataDir = str(env, 'DATA_DIR') ?? './data';
  return {
    port,
    host: str(env, 'HOST') ?? '0.0.0.0',
    databaseUrl,
    databaseReadUrl,
    databaseReadMaxLagMs: int(env, 'DATABASE_READ_MAX_LAG_MS', 2000, 100, 600_000),
    databasePreparedStatements: boolDefault(env, 'DATABASE_PREPARED_STATEMENTS', true),
    databaseTimeouts: databaseTimeouts(env),
    dataDir,
    publicBaseUrl: httpUrl('PUBLIC_BASE_URL', str(env, 'PUBLIC_BASE_URL') ?? `http://localhost:${port}`),
    allowPrivateTargets: bool(env, 'ALLOW_PRIVATE_TARGETS'),
    cacheMaxEntries: int(env, 'CACHE_MAX_ENTRIES', DEFAULT_CACHE_MAX_ENTRIES, 100, 10_000_000),
    trustProxy: proxies,
    logLevel,
    bodyLimit,
    healthIntervalMs: int(env, 'GRPC_HEALTH_INTERVAL_MS', 5_000, 100, 600_000),
    paymentWallet: wallet,
    paymentRpcUrl: rpc === undefined ? null : httpUrl('PAYMENT_RPC_URL', rpc),
    paymentNetwork: paymentNetwork(env),
    facilitatorUrl: facilitator === undefined ? null : httpUrl('FACILITATOR_URL', facilitator),
    paymentMaxAgeSeconds: int(env, 'PAYMENT_MAX_AGE_SECONDS', 600, 60, 86_400),
    paymentLookupsPerMinute: int(env, 'PAYMENT_LOOKUPS_PER_MINUTE', 20, 0, 1_000_000),
    paymentLookupsTotalPerMinute: int(env, 'PAYMENT_LOOKUPS_TOTAL_PER_MINUTE', 600, 0, 1_000_000),
    clawhubApiUrl: httpUrl('CLAWHUB_API_URL', str(env, 'CLAWHUB_API_URL') ?? 'https://clawhub.ai/api/v1'),
    signingKeyJwk: jwk,
    production: str(env, 'NODE_ENV') === 'production',
    keyEncryptionKey,
    keyEncryptionKeyFile: kekFile,
    gate: {
      allowUncertain: boolDefault(env, 'GATE_ALLOW_UNCERTAIN', true),
      allowUnrated: boolDefault(env, 'GATE_ALLOW_UNRATED', false),
      cacheSeconds: int(env, 'GATE_CACHE_SECONDS', 5, 0, 3600),
      routes: gateRoutes(env),
      trustedHeaders: trustedHeaders(env),
      tools: {
        deny: toolRules(env, 'GATE_TOOLS_DENY'),
        exempt: toolRules(env, 'GATE_TOOLS_EXEMPT'),
        driftWindowMs: int(env, 'GATE_TOOL_DRIFT_HOURS', 168, 0, 8760) * 3_600_000,
        requireMcpMethod: boolDefault(env, 'GATE_REQUIRE_MCP_METHOD', false),
        unlistedTools: denyOrAllow(env, 'GATE_UNLISTED_TOOLS'),
        instructionsDrift: denyOrAllow(env, 'GATE_INSTRUCTIONS_DRIFT'),
      },
    },
    rateLimitProbesPerMinute: int(env, 'RATE_LIMIT_PROBES_PER_MINUTE', 30, 0, 1_000_000),
    driftTextBytesPerServerPerDay: int(env, 'DRIFT_TEXT_BYTES_PER_SERVER_PER_DAY', 16 * 1024 * 1024, 0, 1024 * 1024 * 1024 * 1024),
    probeConcurrency: int(env, 'PROBE_CONCURRENCY', 32, 1, 10_000),
    exportConcurrency: int(env, 'EXPORT_CONCURRENCY', 2, 1, 1000),
    a2aTaskRetentionDays: int(env, 'A2A_TASK_RETENTION_DAYS', 30, 0, 36_500),
    a2aTaskBytesPerClientPerDay: int(env, 'A2A_TASK_BYTES_PER_CLIENT_PER_DAY', 64 * 1024 * 1024, 0, 1024 * 1024 * 1024 * 1024),
    rateLimitPreflightPerMinute: int(env, 'RATE_LIMIT_PREFLIGHT_PER_MINUTE', 600, 0, 1_000_000),
    // A gateway asks for every request it forwards, all from its own address (docs/reliability.md
    // "Rate limits" sizes these defaults).
    rateLimitGatePerMinute: int(env, 'RATE_LIMIT_GATE_PER_MINUTE', 6000, 0, 10_000_000),
    rateLimitMcpPreflightPerMinute: int(env, 'RATE_LIMIT_MCP_PREFLIGHT_PER_MINUTE', 300, 0, 1_000_000),
    rateLimitA2aSkillsPerMinute: int(env, 'RATE_LIMIT_A2A_SKILLS_PER_MINUTE', 300, 0, 1_000_000),
    rateLimitA2aReadsPerMinute: int(env, 'RATE_LIMIT_A2A_READS_PER_MINUTE', 600, 0, 1_000_000),
    rateLimitBundlePerMinute: int(env, 'RATE_LIMIT_BUNDLE_PER_MINUTE', 60, 0, 1_000_000),
    rateLimitSearchPerMinute: int(env, 'RATE_LIMIT_SEARCH_PER_MINUTE', 120, 0, 1_000_000),
    rateLimitPagesPerMinute: int(env, 'RATE_LIMIT_PAGES_PER_MINUTE', 300, 0, 1_000_000),
    rateLimitSkillTrustPerMinute: int(env, 'RATE_LIMIT_SKILL_TRUST_PER_MINUTE', 120, 0, 1_000_000),
    telemetryRetentionDays: retentionDays(env, 'TELEMETRY_RETENTION_DAYS', 'compliance exports read raw telemetry'),
    receiptRetentionDays: retentionDays(env, 'RECEIPT_RETENTION_DAYS', 'compliance exports cite receipts'),
    demandRetentionDays: demandRetentionDays(env),
    newServersPerSourcePerHour: int(env, 'NEW_SERVERS_PER_SOURCE_PER_HOUR', 100, 0, 1_000_000),
    observe: {
      enabled: boolDefault(env, 'OBSERVE_ENABLED', true),
      intervalSeconds: int(env, 'OBSERVE_INTERVAL_SECONDS', 300, 10, 7 * 86_400),
      concurrency: int(env, 'OBSERVE_CONCURRENCY', 4, 1, 64),
      ratePerMinute: int(env, 'OBSERVE_RATE_PER_MINUTE', 60, 1, 100_000),
      timeoutMs: int(env, 'OBSERVE_TIMEOUT_MS', 10_000, 100, 120_000),
      minSources: int(env, 'OBSERVE_MIN_SOURCES', 3, 1, 1000),
    },
    registrySync: {
      url: syncUrl === undefined ? null : httpUrl('REGISTRY_SYNC_URL', syncUrl),
      intervalSeconds: int(env, 'REGISTRY_SYNC_INTERVAL_SECONDS', 3600, 60, 7 * 86_400),
    },
    otlp: {
      maxExportBytes: otlpMaxExportBytes,
      maxExportElements: int(env, 'OTLP_MAX_EXPORT_ELEMENTS', DEFAULT_MAX_EXPORT_ELEMENTS, 10_000, 100_000_000),
      joinWindowMs: int(env, 'OTLP_JOIN_WINDOW_MS', 5000, 0, 60_000),
      joinMaxSpans: int(env, 'OTLP_JOIN_MAX_SPANS', 10_000, 0, 1_000_000),
      metricStreams: int(env, 'OTLP_METRIC_STREAMS', 10_000, 100, 1_000_000),
    },
    http,
    bundle: {
      ttlSeconds: int(env, 'BUNDLE_TTL_SECONDS', 86_400, 300, 30 * 86_400),
      cacheSeconds: int(env, 'BUNDLE_CACHE_SECONDS', 60, 0, 3600),
      deltaRetentionHours: int(env, 'BUNDLE_DELTA_RETENTION_HOURS', 168, 1, 90 * 24),
      cacheMaxEntries: int(env, 'BUNDLE_CACHE_MAX_ENTRIES', 8, 1, 1000),
    },
    gateBundle: gateBundle(env, dataDir),
  };
}

function gateBundle(env: Env, dataDir: string): GateBundleConfig {
  const url = str(env, 'GATE_BUNDLE_URL');
  const jwks = str(env, 'GATE_BUNDLE_JWKS');
  const cacheFile = str(env, 'GATE_BUNDLE_CACHE_FILE');
  if (jwks !== undefined && url === undefined) throw new ConfigError('GATE_BUNDLE_JWKS', 'is only read with GATE_BUNDLE_URL');
  if (cacheFile !== undefined && url === undefined) throw new ConfigError('GATE_BUNDLE_CACHE_FILE', 'is only read with GATE_BUNDLE_URL');
  return {
    url: url === undefined ? null : httpUrl('GATE_BUNDLE_URL', url),
    jwks: jwks === undefined ? null : /^https?:\/\//i.test(jwks) ? httpUrl('GATE_BUNDLE_JWKS', jwks) : jwks,
    refreshSeconds: int(env, 'GATE_BUNDLE_REFRESH_SECONDS', 60, 1, 86_400),
    cacheFile: cacheFile === 'off' ? null : (cacheFile ?? `${dataDir.replace(/\/+$/, '')}/gate-bundle.json`),
  };
}
