import type { ConnectRouter } from '@connectrpc/connect';
import { TelemetryService } from '../../gen/observatory/v1/telemetry_pb.js';
import { TrustService } from '../../gen/observatory/v1/trust_pb.js';
import { ReceiptService } from '../../gen/observatory/v1/receipt_pb.js';
import { ComplianceService } from '../../gen/observatory/v1/compliance_pb.js';
import { AccessService } from '../../gen/observatory/v1/access_pb.js';
import type { ServiceDeps } from './context.js';
import { createTelemetryService } from './telemetry.js';
import { createTrustService } from './trust.js';
import { createAccessService } from './access.js';
import { createSkillTrustService } from './skill-trust.js';
import { createVerifyReceiptService } from './verify-receipt.js';
import { createPreflightService } from './preflight.js';
import { createReceiptService } from './receipt.js';
import { createGateService, preflightGateSource } from './gate.js';
import { createCoverageService } from './coverage.js';
import { Authorization } from '../../gen/envoy/service/auth/v3/external_auth_pb.js';
import { createDriftService } from './drift.js';
import { createProbeService } from './probes.js';
import { createComplianceService } from './compliance.js';
import { createCatalogueService } from './catalogue.js';
import { createObservationService } from './observation.js';
import { createMcpProbeService } from './mcp-probe.js';
import { createTelemetryRetention } from './telemetry-retention.js';
import { createRateLimiter } from './rate-limits.js';
import { createRegistrySync } from './registry-sync.js';
import { createOtlpService } from './otlp.js';
import { TraceService } from '../../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import { MetricsService } from '../../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { setCacheLimits } from '../store/cache-limits.js';

/** Every service implementation, built once per process. */
export function createServices(deps: ServiceDeps) {
  // Every in-memory cache is bounded by CACHE_MAX_ENTRIES (process-wide; src/store/cache-limits.ts).
  if (deps.config.cacheMaxEntries !== undefined) setCacheLimits({ maxEntries: deps.config.cacheMaxEntries });
  const trust = createTrustService(deps);
  const preflight = createPreflightService(deps, trust);
  const telemetry = createTelemetryService(deps);
  const mcpProbe = createMcpProbeService(deps);
  const drift = createDriftService(deps, { mcpProbe });
  const observation = createObservationService(deps, { telemetry, drift, mcpProbe }, { onError: deps.onBackgroundError });
  const telemetryRetention = createTelemetryRetention(deps, { onError: deps.onBackgroundError });
  const limits = createRateLimiter(deps.config);
  const catalogue = createCatalogueService(deps);
  const registrySync = createRegistrySync(deps, catalogue, { onError: deps.onBackgroundError });
  const otlp = createOtlpService(deps, { telemetry }, { onError: deps.onBackgroundError });
  return {
    keyring: deps.keyring,
    receipts: deps.receipts,
    trust,
    telemetry,
    access: createAccessService(deps, { trust, preflight }),
    skillTrust: createSkillTrustService(deps),
    verifyReceipt: createVerifyReceiptService(deps),
    /** Pre-flight checks and demand (TrustService.Preflight, TrustService.GetDemand). */
    preflight,
    /** Gateway/service-mesh gate: /v1/gate and Envoy ext_authz, decided through pre-flight. */
    gate: createGateService(deps, preflightGateSource(preflight), limits),
    /** Per-client rate limits (in memory, per instance), shared by every door: REST, Connect, gate, MCP, A2A. */
    limits,
    /** Receipt lookup, verification, behavioral evidence, ERC-8004 attestations (ReceiptService). */
    receipt: createReceiptService(deps, trust),
    drift,
    /** The MCP probe (v2 SDK client): protocol revision, transport and Server Card of a server, recorded. */
    mcpProbe,
    /** Catalogue import from an MCP Registry (the `observatory import` command). */
    catalogue,
    /** The standing MCP Registry sync (REGISTRY_SYNC_URL; started by `serve`). */
    registrySync,
    /** Active observation: the observatory's own scheduled probes (started by `serve` and `observe`). */
    observation,
    probes: createProbeService(deps),
    compliance: createComplianceService(deps, { trust }),
    /** The coverage report (/atlas/report): index coverage next to pre-flight demand. */
    coverage: createCoverageService(deps, trust),
    /** Monthly telemetry partitions and TELEMETRY_RETENTION_DAYS (periodic job). */
    telemetryRetention,
    /** OTLP receivers: OpenTelemetry MCP client spans and metrics as telemetry (docs/telemetry.md). */
    otlp,
    /** Stops background work owned by services (flushers, schedulers). */
    async close(): Promise<void> {
      await observation.stop();
      // Spans held for the join were acknowledged: written before the database closes.
      await otlp.close();
      trust.close();
      await telemetryRetention.close();
      await registrySync.close();
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
    router.service(Authorization, { check: s.gate.check });
    // OTLP/gRPC (docs/telemetry.md). readMaxBytes bounds each export as received and after
    // decompression (gRPC RESOURCE_EXHAUSTED beyond it), like OTLP/HTTP's 413.
    const otlpLimits = { readMaxBytes: s.otlp.maxExportBytes };
    router.service(TraceService, { export: (req, ctx) => s.otlp.exportTraces(req, ctx) }, otlpLimits);
    router.service(MetricsService, { export: (req, ctx) => s.otlp.exportMetrics(req, ctx) }, otlpLimits);
  };
}
