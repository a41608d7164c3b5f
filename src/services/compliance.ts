import type { MessageInitShape } from '@bufbuild/protobuf';
import type {
  GetAgencyChecklistRequest,
  GetAgencyChecklistResponseSchema,
  GetComplianceAttestationRequest,
  GetComplianceAttestationResponseSchema,
  GetComplianceExportRequest,
  GetComplianceExportResponseSchema,
} from '../../gen/observatory/v1/compliance_pb.js';
import {
  AGENCY_NOTICE,
  AGENCY_STANDARD,
  BadDateRange,
  CONTROL_CATEGORIES,
  dimensionEvidence,
  dimensionResult,
  evaluateControls,
  EXIT_CODES,
  exportPeriod,
  overallResult,
  REGULATORY_MAPPINGS,
  summarize,
  type Control,
} from '../domain/compliance.js';
import { DRIFT_FLAG, driftFlagActive } from '../domain/drift.js';
import { latencyP95 } from '../domain/latency-histogram.js';
import { looksLikeUrl } from '../domain/server-identity.js';
import { invalidArgument } from '../errors.js';
import { probeAgency } from '../probes/agency.js';
import { probeError } from '../probes/probe-errors.js';
import { createSafeFetcher } from '../probes/safe-fetch.js';
import { driftStore } from '../store/drift.js';
import { evidenceStore } from '../store/evidence.js';
import { serverStore } from '../store/servers.js';
import type { CallContext, ServiceDeps } from './context.js';
import { createExportSlots, createProbeSlots, type ProbeSlots } from './probe-slots.js';
import type { TrustService } from './trust.js';
import { requireServerUrl } from './trust.js';

const EXPORT_NOTICE =
  'Governance export of the evidence this observatory logged independently. Telemetry carries no agent, user or prompt data (SPEC 1.3), so agent_id labels the export but cannot filter events. Not affiliated with any regulator; not legal advice.';

/** ComplianceService: agency checklist, signed attestation, governance export. */
export function createComplianceService({ db, config, now, receipts }: ServiceDeps, { trust, probeSlots = createProbeSlots(config.probeConcurrency) }: { trust: Pick<TrustService, 'scoreFor'>; probeSlots?: ProbeSlots }) {
  // Exports read raw telemetry over long periods: a few at once, whatever door asks (probe-slots.ts).
  const exportSlots = createExportSlots(config.exportConcurrency);
  const fetcher = createSafeFetcher({ allowPrivate: config.allowPrivateTargets });
  const servers = serverStore(db);
  const evidence = evidenceStore(db);
  const drift = driftStore(db);

  /** The evidence both the checklist and the attestation stand on. */
  async function controlsFor(url: string, ctx: CallContext | undefined): Promise<{ controls: Control[]; checkedAt: Date }> {
    let live;
    try {
      // The target's name is looked up inside the slot: a lookup can take its whole deadline.
      live = await probeSlots.run(ctx, async () => {
        await fetcher.check(url);
        return probeAgency(fetcher, url);
      });
    } catch (err) {
      throw probeError(err);
    }
    const server = await servers.lookupUrl(url);
    const checkedAt = now();
    const [history, latest, lastDrift] = server
      ? await Promise.all([evidence.historyDepth(server.id), drift.latestSummary(server.id), drift.lastDriftAt(server.id)])
      : [null, null, null];
    const controls = evaluateControls({
      url,
      ...live,
      history: {
        tracked: server !== null,
        total: history?.total ?? 0,
        first_observed: history?.first_observed?.toISOString() ?? null,
        last_observed: history?.last_observed?.toISOString() ?? null,
        days_observed: history?.days_observed ?? 0,
      },
      baseline: latest ? { baseline_id: latest.baseline_id, recorded_at: latest.recorded_at.toISOString(), receipt_id: latest.receipt_id, manifest_hash: latest.manifest_hash } : null,
      drift_flag_active: driftFlagActive(lastDrift, checkedAt),
    });
    return { controls, checkedAt };
  }

  /** `server` may be a URL or the name/slug of a tracked server. */
  async function targetUrl(value: string | undefined, param: string): Promise<string> {
    const v = (value ?? '').trim();
    if (v !== '' && !looksLikeUrl(v) && v.length <= 2048) {
      const s = await servers.resolve(v);
      if (s) return s.url;
    }
    return requireServerUrl(v, param);
  }

  return {
    async getAgencyChecklist(req: Partial<GetAgencyChecklistRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof GetAgencyChecklistResponseSchema>> {
      const url = requireServerUrl(req.url, 'url');
      const { controls, checkedAt } = await controlsFor(url, ctx);
      const s = summarize(controls);
      return {
        url,
        standard: AGENCY_STANDARD,
        checkedAt: checkedAt.toISOString(),
        controls: controls.map((c) => ({ id: c.id, title: c.title, category: c.category, status: c.status, evidence: c.evidence as never, detail: c.detail })),
        complianceSummary: { totalControls: s.total_controls, passed: s.passed, failed: s.failed, selfAttestationRequired: s.self_attestation_required, passRate: s.pass_rate ?? undefined },
        notice: AGENCY_NOTICE,
      };
    },

    async getComplianceAttestation(req: Partial<GetComplianceAttestationRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof GetComplianceAttestationResponseSchema>> {
      const standard = req.standard === undefined || req.standard === '' ? AGENCY_STANDARD : req.standard;
      if (standard !== AGENCY_STANDARD) throw invalidArgument(`standard "${standard.slice(0, 64)}" is not supported; the only standard is ${AGENCY_STANDARD}`);
      const url = await targetUrl(req.server, 'server');
      const { controls, checkedAt } = await controlsFor(url, ctx);
      const dimensions = CONTROL_CATEGORIES.map((cat) => {
        const mine = controls.filter((c) => c.category === cat);
        return {
          dimension: cat,
          result: dimensionResult(mine),
          evidence: dimensionEvidence(mine),
          detail: mine.map((c) => `${c.id}: ${c.status} (${c.detail})`).join('; '),
        };
      });
      const overall = overallResult(dimensions.map((d) => d.result));
      const exitCode = EXIT_CODES[overall];
      const summary = `${overall} ${AGENCY_STANDARD} for ${url}: ${dimensions.map((d) => `${d.dimension}=${d.result}`).join(' ')}`;
      const receipt = await receipts.issue('compliance', url, {
        standard,
        overall_result: overall,
        dimensions: Object.fromEntries(dimensions.map((d) => [d.dimension, d.result])),
        exit_code: exitCode,
        attested_at: checkedAt.toISOString(),
      });
      return {
        schema: 'mcp-compliance-attestation-v1.0',
        serverUrl: url,
        standard,
        attestedAt: checkedAt.toISOString(),
        dimensions: dimensions.map((d) => ({ dimension: d.dimension, result: d.result, evidence: d.evidence as never, detail: d.detail })),
        overallResult: overall,
        ci: { exitCode, summary },
        receipt: receipt.jws,
        receiptId: receipt.receiptId,
      };
    },

    async getComplianceExport(req: Partial<GetComplianceExportRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof GetComplianceExportResponseSchema>> {
      const url = requireServerUrl(req.serverUrl, 'server_url');
      const agentId = req.agentId === undefined || req.agentId === '' ? undefined : req.agentId;
      const generatedAt = now();
      let period;
      try {
        period = exportPeriod(req.startDate || undefined, req.endDate || undefined, generatedAt);
      } catch (err) {
        if (err instanceof BadDateRange) throw invalidArgument(err.message);
        throw err;
      }
      const server = await servers.lookupUrl(url);
      const [ev, rcpts, drifts, score] = await exportSlots.run(ctx, () =>
        Promise.all([
          server ? evidence.events(server.id, period.from, period.to) : null,
          evidence.receiptsFor(url, period.from, period.to),
          server ? drift.driftsBetween(server.id, period.from, period.to) : [],
          server ? trust.scoreFor(server) : null,
        ]),
      );
      // The trust service is the one source of the score, verdict and active anomaly flags.
      const rated = score !== null && score.total_interactions > 0;
      const trustScore = rated ? score.trust_score : undefined;
      const verdict = rated ? score.verdict : 'UNRATED';
      const activeFlags = (score?.anomaly_flags ?? []).filter((f) => f !== DRIFT_FLAG);
      const total = ev?.total ?? 0;
      return {
        schema: 'mcp-compliance-export-v1.0',
        serverUrl: url,
        name: server?.name,
        agentId,
        period: { startDate: period.start_date, endDate: period.end_date },
        events: {
          totalEvents: total,
          successful: ev?.successful ?? 0,
          failed: total - (ev?.successful ?? 0),
          successRate: total > 0 ? ev!.successful / total : undefined,
          avgLatencyMs: ev?.avg_latency_ms ?? undefined,
          p95LatencyMs: ev ? (latencyP95(ev.latency_hist) ?? undefined) : undefined,
          firstEventAt: ev?.first_event_at?.toISOString(),
          lastEventAt: ev?.last_event_at?.toISOString(),
          byTool: (ev?.by_tool ?? []).map((t) => ({ toolName: t.tool_name, calls: t.calls, failures: t.failures })),
        },
        trustScore,
        verdict,
        anomalies: drifts.map((d): { flag: string; description: string; detectedAt?: string } => ({
          flag: DRIFT_FLAG,
          description: `tool manifest changed: ${d.added} added, ${d.removed} removed, ${d.changed} changed${d.context.length > 0 ? `; ${d.context.join(', ')} changed` : ''} (baseline ${d.baseline_id})`,
          detectedAt: d.recorded_at.toISOString(),
        })).concat(activeFlags.map((f) => ({ flag: f, description: `active anomaly on the trust record at export time: ${f}`, }))),
        receipts: rcpts.map((r) => ({ receiptId: r.receipt_id, kind: r.kind, issuedAt: r.issued_at.toISOString(), verdict: r.verdict ?? undefined })),
        mappings: REGULATORY_MAPPINGS.map((x) => ({ ...x })),
        dataCollected: ['server_url', 'success', 'latency_ms', 'tool_name', 'http_status'],
        generatedAt: generatedAt.toISOString(),
        notice: EXPORT_NOTICE,
      };
    },
  };
}

export type ComplianceService = ReturnType<typeof createComplianceService>;
