import type { MessageInitShape } from '@bufbuild/protobuf';
import type { GetTrustRequest, GetTrustResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import { computeTrustScore } from '../domain/scoring.js';
import { canonicalServerUrl, InvalidServerUrl } from '../domain/server-identity.js';
import { verdictFor } from '../domain/verdict.js';
import { invalidArgument, notTracked } from '../errors.js';
import { serverStore } from '../store/servers.js';
import { telemetryStore } from '../store/telemetry.js';
import type { CallContext, ServiceDeps } from './context.js';

/** Parses a required URL parameter into a canonical server URL or throws 400. */
export function requireServerUrl(value: string | undefined, param: string): string {
  if (value === undefined || value === '') throw invalidArgument(`${param} is required`);
  try {
    return canonicalServerUrl(value);
  } catch (err) {
    if (err instanceof InvalidServerUrl) throw invalidArgument(`${param}: ${err.message}`);
    throw err;
  }
}

/** TrustService: THE implementation of the trust reads (REST, Connect, MCP and A2A call it). */
export function createTrustService({ db }: ServiceDeps) {
  const servers = serverStore(db);
  const telemetry = telemetryStore(db);

  return {
    async getTrust(req: Partial<GetTrustRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof GetTrustResponseSchema>> {
      const url = requireServerUrl(req.url, 'url');
      const server = await servers.byUrl(url);
      if (!server) throw notTracked(url);
      const [m, baseline] = await Promise.all([telemetry.metrics(server.id), telemetry.categoryBaseline(server.category)]);
      const { trust_score, breakdown } = computeTrustScore(
        { total: m.total_interactions, successes: m.successes, avg_latency_ms: m.avg_latency_ms },
        { avg_latency_ms: baseline.avg_latency_ms },
      );
      return {
        server: {
          name: server.name,
          url: server.url,
          slug: server.slug,
          category: server.category,
          trustScore: trust_score,
          registeredAt: server.registered_at.toISOString(),
        },
        metrics: {
          totalInteractions: m.total_interactions,
          avgLatencyMs: m.avg_latency_ms,
          successRate: m.total_interactions > 0 ? m.successes / m.total_interactions : undefined,
        },
        categoryBaseline: {
          category: server.category,
          avgLatencyMs: baseline.avg_latency_ms,
          p95LatencyMs: baseline.p95_latency_ms,
          avgSuccessRate: baseline.avg_success_rate,
          serverCount: baseline.server_count,
        },
        anomaly: { isAnomalous: false, anomalyFlags: [] },
        scoreBreakdown: breakdown,
        verdict: m.total_interactions > 0 ? verdictFor(trust_score) : 'UNRATED',
      };
    },
  };
}

export type TrustService = ReturnType<typeof createTrustService>;
