import type { MessageInitShape } from '@bufbuild/protobuf';
import type { GetAgentReadinessRequest, GetAgentReadinessResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import { scoreReadiness } from '../domain/readiness.js';
import { ObservatoryError } from '../errors.js';
import { probeError } from '../probes/probe-errors.js';
import { probeMcpEndpoint, probeReadiness } from '../probes/readiness.js';
import { createSafeFetcher } from '../probes/safe-fetch.js';
import type { CallContext, ServiceDeps } from './context.js';
import { createProbeSlots, type ProbeSlots } from './probe-slots.js';
import { requireServerUrl } from './trust.js';

/** GetAgentReadiness (GET /api/agent-readiness): probes five surfaces (robots.txt, llms.txt, openapi.json, the MCP document, the A2A card; up to seven requests, docs/probes.md) and scores them; connects to the MCP endpoint the MCP document names. */
export function createProbeService({ config, now }: ServiceDeps, { probeSlots = createProbeSlots(config.probeConcurrency) }: { probeSlots?: ProbeSlots } = {}) {
  const fetcher = createSafeFetcher({ allowPrivate: config.allowPrivateTargets });

  return {
    async getAgentReadiness(req: Partial<GetAgentReadinessRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof GetAgentReadinessResponseSchema>> {
      const origin = new URL(requireServerUrl(req.url, 'url')).origin;
      const { observation, probes, mcpProbe } = await probeSlots.run(ctx, async () => {
        // The lookup runs in the probe's slot: a name whose servers stall holds a slot (until the
        // lookup's deadline), never anything unbounded.
        try {
          await fetcher.check(origin);
        } catch (err) {
          throw probeError(err);
        }
        const found = await probeReadiness(fetcher, origin);
        if (found.probes.every((p) => p.http_status === null && !p.note.startsWith('redirect refused'))) {
          throw new ObservatoryError('upstream_error', `${origin} could not be reached: ${found.probes[0]?.note ?? 'no answer'}`);
        }
        // The endpoint mcp.json names, reached with the one MCP probe: shown, not scored.
        return { ...found, mcpProbe: await probeMcpEndpoint(fetcher, origin, found.observation.mcp) };
      });
      const s = scoreReadiness(observation);
      return {
        url: origin,
        score: s.score,
        discoverabilityScore: s.dimensions.discoverability,
        comprehensionScore: s.dimensions.comprehension,
        usabilityScore: s.dimensions.usability,
        trustabilityScore: s.dimensions.trustability,
        transactabilityScore: s.dimensions.transactability,
        detectedSurfaces: probes.filter((p) => p.found).map((p) => p.surface),
        missingSurfaces: probes.filter((p) => !p.found).map((p) => p.surface),
        reasons: { ...s.reasons, probes: probes.map((p) => ({ surface: p.surface, path: p.path, found: p.found, note: p.note })), mcp_endpoint: mcpProbe } as never,
        recommendedNextAction: s.recommended_next_action,
        checkedAt: now().toISOString(),
        probes: probes.map((p) => ({ path: p.path, found: p.found, httpStatus: p.http_status ?? undefined })),
      };
    },
  };
}

export type ProbeService = ReturnType<typeof createProbeService>;
