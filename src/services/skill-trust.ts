import type { MessageInitShape } from '@bufbuild/protobuf';
import type { GetSkillTrustRequest, GetSkillTrustResponseSchema } from '../../gen/observatory/v1/trust_pb.js';
import { computeSkillTrust } from '../domain/skill-trust.js';
import { ObservatoryError, invalidArgument } from '../errors.js';
import { createClawHubClient, REGISTRY_MAX_IN_FLIGHT, RegistryUnavailable, type FetchFn } from '../registry/clawhub.js';
import { networkShare } from '../domain/client-network.js';
import type { CallContext, ServiceDeps } from './context.js';
import { createSlotPool } from './probe-slots.js';

export const SUPPORTED_REGISTRY = 'clawhub';
const SLUG = /^[a-z0-9][a-z0-9._-]{0,127}$/;

function iso(ms: unknown): string | undefined {
  return typeof ms === 'number' && Number.isFinite(ms) && ms > 0 ? new Date(ms).toISOString() : undefined;
}

/** TrustService.GetSkillTrust: THE implementation of GET /v1/trust (registry skills). */
export function createSkillTrustService({ config, now }: ServiceDeps, opts: { fetch?: FetchFn } = {}) {
  const registry = createClawHubClient({ baseUrl: config.clawhubApiUrl, now, fetch: opts.fetch });
  // Requests to the registry in flight, and a client network's share of them (an eighth, at least
  // 2): beyond, refused before anything is sent, 429 for the share and 503 for the process, like
  // probes beyond PROBE_CONCURRENCY (a registry answer takes at most 5 s). Without the share, one
  // network asking slow slugs held every request.
  const registrySlots = createSlotPool({ total: REGISTRY_MAX_IN_FLIGHT, perClient: networkShare(REGISTRY_MAX_IN_FLIGHT), what: 'requests to the ClawHub registry', setting: 'REGISTRY_MAX_IN_FLIGHT' });

  return {
    async getSkillTrust(req: Partial<GetSkillTrustRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof GetSkillTrustResponseSchema>> {
      const reg = (req.registry ?? '').trim().toLowerCase();
      if (reg === '') throw invalidArgument(`registry is required; the supported registry is "${SUPPORTED_REGISTRY}"`);
      if (reg !== SUPPORTED_REGISTRY) throw invalidArgument(`unsupported registry "${req.registry}"; the supported registry is "${SUPPORTED_REGISTRY}"`);
      const skill = (req.skill ?? '').trim().toLowerCase();
      if (skill === '') throw invalidArgument('skill is required (the skill slug in the registry)');
      if (!SLUG.test(skill)) throw invalidArgument('skill must be a registry slug: letters, digits, ".", "_" or "-", at most 128 characters');

      let found;
      try {
        found = await registry.skill(skill, (work) => registrySlots.run(ctx, work));
      } catch (err) {
        if (err instanceof RegistryUnavailable) throw new ObservatoryError('upstream_error', `the ClawHub registry could not be read: ${err.message}`, { headers: { 'retry-after': '30' } });
        throw err;
      }
      if (!found.found) throw new ObservatoryError('not_found', `skill "${skill}" is not in the ClawHub registry`);
      const a = found.answer;
      const t = computeSkillTrust(a, now());
      const m = a.moderation;
      return {
        registry: SUPPORTED_REGISTRY,
        skill: a.skill.slug,
        score: t.score,
        badge: t.badge,
        signals: {
          displayName: a.skill.displayName ?? undefined,
          summary: a.skill.summary ?? undefined,
          owner: a.owner?.handle ?? undefined,
          latestVersion: a.latestVersion?.version ?? undefined,
          updatedAt: iso(a.skill.updatedAt),
          stats: (a.skill.stats ?? {}) as never,
          moderation: { isSuspicious: Boolean(m?.isSuspicious), isMalwareBlocked: Boolean(m?.isMalwareBlocked), verdict: m?.verdict ?? undefined },
          flags: t.flags,
        },
        checkedAt: found.fetchedAt.toISOString(),
        scoreBreakdown: t.breakdown as never,
      };
    },
  };
}
