import { createHash } from 'node:crypto';
import type { JsonObject, MessageInitShape } from '@bufbuild/protobuf';
import {
  GetBehavioralEvidenceResponseSchema,
  type GetBehavioralEvidenceRequest,
  type GetErc8004AttestationRequest,
  type GetErc8004AttestationResponseSchema,
  type GetReceiptRequest,
  type GetReceiptResponseSchema,
  type VerifyRequest,
  type VerifyResponseSchema,
} from '../../gen/observatory/v1/receipt_pb.js';
import { classifyCategory } from '../domain/category.js';
import { messageJson } from '../domain/message-json.js';
import { serverNameFromUrl } from '../domain/server-identity.js';
import { ObservatoryError } from '../errors.js';
import { receiptStore } from '../store/receipts.js';
import type { CallContext, ServiceDeps } from './context.js';
import { requireServerUrl, type TrustService } from './trust.js';

export const BEHAVIORAL_EVIDENCE_SCHEMA = 'mcp-behavioral-evidence-v1.0';
export const ERC8004_ATTESTATION_SCHEMA = 'erc8004-attestation-v1.0';
/** ERC-8004 validation tag of our attestations. */
export const ERC8004_TAG = 'mcp-endpoint-health';

/** ERC-8004 endpoint health from the 0-100 response (DECISIONS.md). */
export function endpointHealth(response: number): 'HEALTHY' | 'DEGRADED' | 'UNHEALTHY' {
  if (response >= 70) return 'HEALTHY';
  if (response >= 40) return 'DEGRADED';
  return 'UNHEALTHY';
}

/** Key order-independent JSON, so an evidence hash can be recomputed from the document alone. */
export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .filter((k) => o[k] !== undefined)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
    .join(',')}}`;
}

/**
 * ReceiptService: THE implementation of receipt lookup, stateless verification, behavioral
 * evidence and ERC-8004 attestations (REST, Connect, MCP and A2A call these functions).
 */
export function createReceiptService(deps: ServiceDeps, trust: Pick<TrustService, 'getTrust' | 'getBenchmark'>) {
  const { config, now, receipts } = deps;
  const observer = config.publicBaseUrl;

  async function getReceipt(req: Partial<GetReceiptRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetReceiptResponseSchema>> {
    const id = req.receiptId ?? '';
    const row = await receipts.get(id);
    if (!row) throw new ObservatoryError('not_found', `no receipt ${id}`);
    const v = await receipts.verify(row.jws);
    // Valid means: the signature verifies now against the published keys AND the token is this receipt.
    const valid = v.valid && v.payload.jti === id;
    return {
      receiptId: row.receipt_id,
      issuedAt: row.issued_at.toISOString(),
      // What was signed, when it verifies: the stored copy is not what valid:true vouches for.
      claim: (valid ? v.payload : row.claim) as JsonObject,
      jws: row.jws,
      verification: { valid, kid: row.kid, checkedAt: now().toISOString() },
      kind: row.kind,
    };
  }

  async function verify(req: Partial<VerifyRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof VerifyResponseSchema>> {
    const jws = req.jws ?? '';
    const v = await receipts.verify(jws);
    if (!v.valid) throw new ObservatoryError('invalid_signature', `the token does not verify: ${v.reason}`);
    return { valid: true, header: v.header as JsonObject, payload: v.payload as JsonObject };
  }

  /** The evidence document (unsigned) for a canonical URL. */
  async function buildEvidence(url: string): Promise<MessageInitShape<typeof GetBehavioralEvidenceResponseSchema>> {
    const observedAt = now().toISOString();
    let rec;
    try {
      rec = await trust.getTrust({ url });
    } catch (err) {
      if (err instanceof ObservatoryError && err.status === 404) {
        // SPEC 2.3 shows behavioral_summary as an object: an untracked server has one too, with
        // no figures (DECISIONS "Behavioral evidence behavioral_summary"; docs/receipts.md).
        return {
          schema: BEHAVIORAL_EVIDENCE_SCHEMA,
          serverUrl: url,
          observedAt,
          observer,
          found: false,
          verdict: 'UNRATED',
          behavioralSummary: {
            totalInteractions: 0,
            category: classifyCategory([serverNameFromUrl(url)]),
            anomalyFlags: [],
          },
        };
      }
      throw err;
    }
    const total = Number(rec.metrics?.totalInteractions ?? 0);
    // p95 and last observation exactly as the benchmark reports them (latency histogram rollups).
    const bench = total > 0 ? await trust.getBenchmark({ serverSlug: url }) : null;
    const rated = total > 0 && rec.verdict !== 'UNRATED';
    return {
      schema: BEHAVIORAL_EVIDENCE_SCHEMA,
      serverUrl: url,
      observedAt,
      observer,
      found: true,
      trustScore: rated ? rec.server?.trustScore : undefined,
      verdict: rated ? rec.verdict : 'UNRATED',
      behavioralSummary: {
        totalInteractions: total,
        successRate: total > 0 ? (rec.metrics?.successRate ?? undefined) : undefined,
        avgLatencyMs: total > 0 ? rec.metrics?.avgLatencyMs : undefined,
        p95LatencyMs: bench?.latency?.p95Ms ?? undefined,
        lastObserved: bench?.lastUpdated ?? undefined,
        category: rec.server?.category ?? 'general',
        anomalyFlags: [...(rec.anomaly?.anomalyFlags ?? [])],
      },
    };
  }

  async function getBehavioralEvidence(req: Partial<GetBehavioralEvidenceRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetBehavioralEvidenceResponseSchema>> {
    const url = requireServerUrl(req.url, 'url');
    const doc = await buildEvidence(url);
    // Signed but not stored: this read has no side effects; the attestation verifies offline and at /v1/verify.
    const body = messageJson(GetBehavioralEvidenceResponseSchema, doc);
    const signed = await receipts.issue('attestation', url, { ...body, attestation: undefined, receipt_id: undefined }, { persist: false });
    return { ...doc, attestation: signed.jws };
  }

  async function getErc8004Attestation(req: Partial<GetErc8004AttestationRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetErc8004AttestationResponseSchema>> {
    const url = requireServerUrl(req.url, 'url');
    const doc = messageJson(GetBehavioralEvidenceResponseSchema, await buildEvidence(url));
    delete doc.attestation;
    delete doc.receipt_id;
    const evidenceHash = `0x${createHash('sha256').update(canonicalJson(doc)).digest('hex')}`;
    const evidenceUri = `${config.publicBaseUrl}/v1/behavioral-evidence?url=${encodeURIComponent(url)}`;
    const found = doc.found === true;
    const score = typeof doc.trust_score === 'number' ? doc.trust_score : null;
    const response = score === null ? 0 : Math.max(0, Math.min(100, Math.round(score)));
    // One rule for every server (DECISIONS: HEALTHY >= 70, DEGRADED 40-69, UNHEALTHY < 40): without
    // runtime evidence nothing was validated, so the response is 0 and the status UNHEALTHY;
    // `found` and `trust_score: null` tell that apart from an observed failing server.
    const status = endpointHealth(response);
    const attestedAt = now().toISOString();
    const claim = {
      schema: ERC8004_ATTESTATION_SCHEMA,
      server_url: url,
      attested_at: attestedAt,
      attesting_observer: observer,
      found,
      endpoint_health_status: status,
      response,
      tag: ERC8004_TAG,
      evidence_uri: evidenceUri,
      evidence_hash: evidenceHash,
      evidence_hash_alg: 'sha-256 of the canonical JSON (sorted keys) of `evidence`',
      evidence: doc,
      trust_score: score,
    };
    const r = await receipts.issue('attestation', url, claim);
    return {
      schema: ERC8004_ATTESTATION_SCHEMA,
      serverUrl: url,
      attestedAt,
      attestingObserver: observer,
      found,
      endpointHealthStatus: status,
      response,
      tag: ERC8004_TAG,
      evidenceUri,
      evidenceHash,
      attestation: r.jws,
      receiptId: r.receiptId,
      trustScore: score ?? undefined,
    };
  }

  const receiptRows = receiptStore(deps.db);
  /** The newest receipts issued about a server (its canonical URL), newest first. */
  async function recentReceipts(serverUrl: string, limit = 10): Promise<{ receiptId: string; kind: string; issuedAt: Date; claim: Record<string, unknown> }[]> {
    const url = requireServerUrl(serverUrl, 'server');
    const rows = await receiptRows.bySubject(url, Math.min(Math.max(1, limit), 100));
    return rows.map((r) => ({ receiptId: r.receipt_id, kind: r.kind, issuedAt: r.issued_at, claim: r.claim }));
  }

  return { getReceipt, verify, getBehavioralEvidence, getErc8004Attestation, recentReceipts };
}

export type ReceiptService = ReturnType<typeof createReceiptService>;
