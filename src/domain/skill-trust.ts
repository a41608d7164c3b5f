import { roundScore, verdictFor, type Verdict } from './verdict.js';

// Trust of a skill in the ClawHub registry (SPEC 2.6, 3; DECISIONS.md "Skill registry").
// A documented, deterministic rubric over the registry's own signals; docs/access.md explains it.
//
//   moderation / scan   40  clean verdict 40; no moderation record 20; suspicious, malicious or
//                           blocked: badge FAIL and the score capped (30 suspicious, 10 malicious)
//   owner               10  a named owner (handle) is accountable
//   age                 15  linear up to 180 days since first publication
//   installs            15  log10(1 + all-time installs) / 4, full at 10,000
//   stars               10  log10(1 + stars) / 3, full at 1,000
//   versions            10  2 per published version, full at 5 (maintained, not a one-off)

/** The parts of ClawHub's `GET /skills/{slug}` answer the score reads. */
export interface ClawHubSkillAnswer {
  skill: {
    slug: string;
    displayName?: string | null;
    summary?: string | null;
    stats?: Record<string, unknown> | null;
    createdAt?: number | null;
    updatedAt?: number | null;
    tags?: Record<string, unknown> | null;
  };
  latestVersion?: { version?: string | null; createdAt?: number | null } | null;
  owner?: { handle?: string | null; displayName?: string | null } | null;
  moderation?: { isSuspicious?: boolean | null; isMalwareBlocked?: boolean | null; verdict?: string | null; reasonCodes?: unknown } | null;
}

export const SKILL_WEIGHTS = { moderation: 40, owner: 10, age: 15, installs: 15, stars: 10, versions: 10 } as const;
const SUSPICIOUS_CAP = 30;
const MALICIOUS_CAP = 10;
const FULL_AGE_DAYS = 180;

export interface SkillTrust {
  score: number;
  badge: Verdict;
  flags: string[];
  breakdown: Record<string, number | string | boolean | null>;
}

function num(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0;
}

/** True when the registry's moderation or scan says malicious, suspicious or blocked. */
export function registryFlagsDanger(m: ClawHubSkillAnswer['moderation']): 'malicious' | 'suspicious' | null {
  if (!m) return null;
  const verdict = (m.verdict ?? '').toLowerCase();
  if (m.isMalwareBlocked || verdict === 'malicious' || verdict === 'blocked') return 'malicious';
  if (m.isSuspicious || verdict === 'suspicious') return 'suspicious';
  return null;
}

export function computeSkillTrust(a: ClawHubSkillAnswer, now: Date): SkillTrust {
  const stats = a.skill.stats ?? {};
  const flags: string[] = [];
  const danger = registryFlagsDanger(a.moderation);

  let moderation: number;
  if (danger === 'malicious') {
    moderation = 0;
    flags.push(a.moderation?.isMalwareBlocked ? 'malware_blocked' : 'malicious_verdict');
  } else if (danger === 'suspicious') {
    moderation = 0;
    flags.push('suspicious');
  } else if (!a.moderation) {
    moderation = SKILL_WEIGHTS.moderation / 2;
    flags.push('no_moderation_record');
  } else {
    moderation = SKILL_WEIGHTS.moderation;
  }

  const owner = a.owner?.handle ? SKILL_WEIGHTS.owner : 0;
  if (!owner) flags.push('no_owner');

  const created = num(a.skill.createdAt);
  const ageDays = created ? Math.max(0, (now.getTime() - created) / 86_400_000) : 0;
  const age = SKILL_WEIGHTS.age * Math.min(1, ageDays / FULL_AGE_DAYS);
  if (ageDays < 30) flags.push('new_skill');

  const installsCount = num(stats.installsAllTime) || num(stats.installsCurrent);
  const installs = SKILL_WEIGHTS.installs * Math.min(1, Math.log10(1 + installsCount) / 4);
  if (installsCount < 10) flags.push('low_adoption');

  const starCount = num(stats.stars);
  const stars = SKILL_WEIGHTS.stars * Math.min(1, Math.log10(1 + starCount) / 3);

  const versionCount = num(stats.versions) || (a.latestVersion?.version ? 1 : 0);
  const versions = Math.min(SKILL_WEIGHTS.versions, 2 * versionCount);
  if (!a.latestVersion?.version) flags.push('no_published_version');

  let score = moderation + owner + age + installs + stars + versions;
  if (danger === 'malicious') score = Math.min(score, MALICIOUS_CAP);
  if (danger === 'suspicious') score = Math.min(score, SUSPICIOUS_CAP);
  score = roundScore(score);
  const badge: Verdict = danger ? 'FAIL' : verdictFor(score);
  const r1 = (x: number) => Math.round(x * 10) / 10;
  return {
    score,
    badge,
    flags,
    breakdown: {
      moderation: r1(moderation),
      owner: r1(owner),
      age: r1(age),
      installs: r1(installs),
      stars: r1(stars),
      versions: r1(versions),
      age_days: Math.floor(ageDays),
      installs_all_time: installsCount,
      stars_count: starCount,
      versions_count: versionCount,
      registry_danger: danger,
      cap_applied: danger === 'malicious' ? MALICIOUS_CAP : danger === 'suspicious' ? SUSPICIOUS_CAP : null,
      model: 'clawhub-skill-v1',
    },
  };
}
