import { Code, ConnectError, type ConnectRouter, type HandlerContext } from '@connectrpc/connect';
import { TelemetryService } from '../../gen/observatory/v1/telemetry_pb.js';
import { TrustService } from '../../gen/observatory/v1/trust_pb.js';
import { ReceiptService } from '../../gen/observatory/v1/receipt_pb.js';
import { ComplianceService } from '../../gen/observatory/v1/compliance_pb.js';
import { AccessService } from '../../gen/observatory/v1/access_pb.js';
import type { ServiceDeps } from './context.js';
import { enforceContract } from './contract.js';
import { createTelemetryService } from './telemetry.js';
import { createTrustService } from './trust.js';
import { createAccessService } from './access.js';
import { createSkillTrustService } from './skill-trust.js';
import { createVerifyReceiptService } from './verify-receipt.js';
import { createPreflightService } from './preflight.js';
import { createReceiptService } from './receipt.js';
import { createGateService, preflightGateSource } from './gate.js';
import { EXT_AUTHZ_MAX_BYTES } from '../domain/gate.js';
import { createBundleService } from './bundle.js';
import { createCoverageService } from './coverage.js';
import { Authorization } from '../../gen/envoy/service/auth/v3/external_auth_pb.js';
import { createDriftService } from './drift.js';
import { createProbeSlots } from './probe-slots.js';
import { createProbeService } from './probes.js';
import { createComplianceService } from './compliance.js';
import { createCatalogueService } from './catalogue.js';
import { createObservationService } from './observation.js';
import { createMcpProbeService } from './mcp-probe.js';
import { createTelemetryRetention } from './telemetry-retention.js';
import { createA2aTaskRetention } from './a2a-retention.js';
import { createReceiptRetention } from './receipt-retention.js';
import { createDemandRetention } from './demand-retention.js';
import { createRateLimiter } from './rate-limits.js';
import { createRegistrySync } from './registry-sync.js';
import { createOtlpService, otlpExportKey } from './otlp.js';
import { OtlpExportRefused, type OtlpExportBytes } from '../domain/otlp-export.js';
import { ROLLUP_INTERVAL_MS, rollupAggregator } from '../store/rollup-aggregator.js';
import { startEvidenceBus } from './evidence-bus.js';
import { TraceService } from '../../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { MetricsService } from '../../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { setCacheLimits } from '../store/cache-limits.js';

/** Every service implementation, built once per process. */
export function createServices(deps: ServiceDeps) {
  // Every in-memory cache is bounded by CACHE_MAX_ENTRIES (process-wide; src/store/cache-limits.ts).
  if (deps.config.cacheMaxEntries !== undefined) setCacheLimits({ maxEntries: deps.config.cacheMaxEntries });
  // Every TrustService, ReceiptService, ComplianceService and AccessService method checks its
  // request against the buf.validate rules of proto/ first (services/contract.ts); telemetry
  // reports are checked row by row in domain/telemetry.ts (the stream keeps its other rows).
  const trust = enforceContract(createTrustService(deps), TrustService);
  const preflight = enforceContract(createPreflightService(deps, trust), TrustService);
  const telemetry = createTelemetryService(deps);
  const mcpProbe = createMcpProbeService(deps);
  // One bound on the on-demand probes running at once, shared by every service that probes.
  const probeSlots = createProbeSlots(deps.config.probeConcurrency);
  const drift = enforceContract(createDriftService(deps, { mcpProbe, probeSlots }), TrustService);
  const observation = createObservationService(deps, { telemetry, drift, mcpProbe }, { onError: deps.onBackgroundError });
  const telemetryRetention = createTelemetryRetention(deps, { onError: deps.onBackgroundError });
  const a2aTaskRetention = createA2aTaskRetention(deps, { onError: deps.onBackgroundError });
  const receiptRetention = createReceiptRetention(deps, { onError: deps.onBackgroundError });
  const demandRetention = createDemandRetention(deps, { onError: deps.onBackgroundError });
  const limits = createRateLimiter(deps.config);
  const catalogue = createCatalogueService(deps);
  const registrySync = createRegistrySync(deps, catalogue, { onError: deps.onBackgroundError });
  const otlp = createOtlpService(deps, { telemetry }, { onError: deps.onBackgroundError });
  const rollups = rollupAggregator(deps.db);
  let rollupsStarted = false;
  // New evidence reaches the other instances' caches through LISTEN/NOTIFY (PostgreSQL only).
  const evidenceBus = startEvidenceBus(deps.db, { onError: deps.onBackgroundError });
  evidenceBus.catch((err: unknown) => deps.onBackgroundError?.(err));
  return {
    keyring: deps.keyring,
    receipts: deps.receipts,
    trust,
    telemetry,
    access: enforceContract(createAccessService(deps, { trust, preflight }), AccessService),
    skillTrust: enforceContract(createSkillTrustService(deps), TrustService),
    verifyReceipt: enforceContract(createVerifyReceiptService(deps), ReceiptService),
    /** Pre-flight checks and demand (TrustService.Preflight, TrustService.GetDemand). */
    preflight,
    /** Gateway/service-mesh gate: /v1/gate and Envoy ext_authz, decided through pre-flight. */
    gate: createGateService(deps, preflightGateSource(preflight, { db: deps.db, driftWindowMs: deps.config.gate.tools.driftWindowMs, instructionsDrift: deps.config.gate.tools.instructionsDrift }), limits),
    /** The signed offline bundle of every verdict (GET /v1/bundle; docs/bundles.md). */
    bundle: createBundleService(deps, trust),
    /** Per-client rate limits (in memory, per instance), shared by every door: REST, Connect, gate, MCP, A2A. */
    limits,
    /** Receipt lookup, verification, behavioral evidence, ERC-8004 attestations (ReceiptService). */
    receipt: enforceContract(createReceiptService(deps, trust), ReceiptService),
    drift,
    /** The MCP probe (v2 SDK client): protocol revision, transport and Server Card of a server, recorded. */
    mcpProbe,
    /** Catalogue import from an MCP Registry (the `observatory import` command). */
    catalogue,
    /** The standing MCP Registry sync (REGISTRY_SYNC_URL; started by `serve`). */
    registrySync,
    /** Active observation: the observatory's own scheduled probes (started by `serve` and `observe`). */
    observation,
    probes: enforceContract(createProbeService(deps, { probeSlots }), TrustService),
    compliance: enforceContract(createComplianceService(deps, { trust, probeSlots }), ComplianceService),
    /** On-demand probes running at once (PROBE_CONCURRENCY), shared by drift, agent-readiness and compliance. */
    probeSlots,
    /** The coverage report (/atlas/report): index coverage next to pre-flight demand. */
    coverage: createCoverageService(deps, trust),
    /** Monthly telemetry partitions and TELEMETRY_RETENTION_DAYS (periodic job). */
    telemetryRetention,
    /** A2A_TASK_RETENTION_DAYS (periodic job). */
    a2aTaskRetention,
    receiptRetention,
    /** DEMAND_RETENTION_DAYS (periodic job). */
    demandRetention,
    /** OTLP receivers: OpenTelemetry MCP client spans and metrics as telemetry (docs/telemetry.md). */
    otlp,
    /**
     * The rollup aggregator's background pass (every ROLLUP_INTERVAL_MS on every serving instance,
     * one pass at a time across instances): folds raw reports into the rollups (src/store/rollup-aggregator.ts).
     */
    startRollups(): void {
      if (rollupsStarted) return;
      rollupsStarted = true;
      rollups.start(ROLLUP_INTERVAL_MS, (err) => deps.onBackgroundError?.(err));
    },
    /** Tells the other instances on the same PostgreSQL about new evidence, and listens to theirs (src/services/evidence-bus.ts). */
    evidenceBus,
    /** Stops background work owned by services (flushers, schedulers). */
    async close(): Promise<void> {
      await observation.stop();
      // Spans held for the join were acknowledged: written before the database closes.
      await otlp.close();
      trust.close();
      await telemetryRetention.close();
      drift.close();
      a2aTaskRetention.close();
      receiptRetention.close();
      demandRetention.close();
      await registrySync.close();
      // Demand counted in memory (pre-flight, gate) is written before the database closes.
      await preflight.close().catch((err: unknown) => deps.onBackgroundError?.(err));
      // Last: everything acknowledged above (reports, spans) is folded before the database closes.
      if (rollupsStarted) await rollups.stop();
      else await rollups.settle().catch(() => undefined);
      await evidenceBus.then((b) => b.close(), () => {});
    },
  };
}

export type Services = ReturnType<typeof createServices>;

/**
 * Connect/gRPC/gRPC-Web registration. Methods not yet implemented are simply absent: the Connect
 * runtime answers them with Code.Unimplemented, never with fake data.
 */

export function connectRoutes(s: Services) {
  return (router: ConnectRouter) => {
    router.service(TrustService, {
      getTrust: s.trust.getTrust,
      getLeaderboard: s.trust.getLeaderboard,
      getStats: s.trust.getStats,
      getBenchmark: s.trust.getBenchmark,
      getSlaTier: s.trust.getSlaTier,
      getTrustDelta: s.trust.getTrustDelta,
      getBadge: s.trust.getBadge,
      getSkillTrust: s.skillTrust.getSkillTrust,
      preflight: (req, ctx) => s.preflight.preflight(req, ctx),
      getDemand: s.preflight.getDemand,
      getDrift: s.drift.getDrift,
      getAgentReadiness: s.probes.getAgentReadiness,
    });
    router.service(TelemetryService, { report: s.telemetry.report, reportStream: s.telemetry.reportStream });
    router.service(ReceiptService, {
      getReceipt: s.receipt.getReceipt,
      verify: s.receipt.verify,
      getBehavioralEvidence: s.receipt.getBehavioralEvidence,
      getErc8004Attestation: s.receipt.getErc8004Attestation,
      verifyReceipt: s.verifyReceipt.verifyReceipt,
    });
    router.service(ComplianceService, {
      getAgencyChecklist: s.compliance.getAgencyChecklist,
      getComplianceAttestation: s.compliance.getComplianceAttestation,
      getComplianceExport: s.compliance.getComplianceExport,
    });
    router.service(AccessService, { registerAgent: s.access.registerAgent, agentQuery: s.access.agentQuery, getPaymentInfo: s.access.getPaymentInfo });
    // Envoy's external authorization API (ext_authz v3), for Envoy, Istio and agentgateway.
    // A CheckRequest carries the checked request's headers (and its body with Envoy's
    // with_request_body), so it may exceed BODY_LIMIT, the router-wide message limit.
    router.service(Authorization, { check: s.gate.check }, { readMaxBytes: EXT_AUTHZ_MAX_BYTES });
    // OTLP/gRPC (docs/telemetry.md). readMaxBytes bounds each export as received and after
    // decompression (gRPC RESOURCE_EXHAUSTED beyond it), like OTLP/HTTP's 413. connect-es does not
    // decode the export: src/http/otlp-grpc.ts reads its bytes with the library's own framing and
    // hands them over (otlpExportKey), and the service measures and decodes them as it does
    // OTLP/HTTP's (docs/telemetry.md "What an export may cost").
    const otlpLimits = { readMaxBytes: s.otlp.maxExportBytes };
    router.service(TraceService, { export: (_req, ctx) => otlpRpc(() => s.otlp.exportTraces(grpcExport(ctx), ctx)) }, otlpLimits);
    router.service(MetricsService, { export: (_req, ctx) => otlpRpc(() => s.otlp.exportMetrics(grpcExport(ctx), ctx)) }, otlpLimits);
  };
}

/** The bytes src/http/otlp-grpc.ts read for this call; never absent when it wraps the OTLP handlers. */
function grpcExport(ctx: HandlerContext): OtlpExportBytes {
  const input = ctx.values.get(otlpExportKey);
  if (input === null) throw new ConnectError('the OTLP export was not read (src/http/otlp-grpc.ts wraps no handler of this router)', Code.Internal);
  return input;
}

/** An export the service refuses, as OTLP/gRPC says it: INVALID_ARGUMENT, or RESOURCE_EXHAUSTED (no RetryInfo: not to be retried), as OTLP/HTTP's 400 and 413. */
async function otlpRpc<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof OtlpExportRefused) throw new ConnectError(err.message, err.reason === 'too_large' ? Code.ResourceExhausted : Code.InvalidArgument);
    throw err;
  }
}
