// Offline verdict bundles (docs/bundles.md): what one entry says about a tracked server, how a
// bundle's filters are read, and how a delta against an earlier bundle is worked out. Pure: no
// I/O, no clock, no crypto (hashes are computed by the caller and passed in).

import { CATEGORIES } from './category.js';
import { driftFlagActive, DRIFT_FLAG } from './drift.js';
import { SERVER_CARD_FLAG } from './server-card.js';
import { canonicalServerUrl, InvalidServerUrl, looksLikeUrl, serverHandle, withoutQuery } from './server-identity.js';
import { slaTierFor, type PreflightVerdict, type SlaTier } from './verdict.js';

/** `schema` of every bundle payload (and of the pulled file's `format`). */
export const BUNDLE_SCHEMA = 'observatory-bundle-v1';
/** `kind` of a bundle payload: never one of the receipt kinds, so a bundle is never read as a receipt. */
export const BUNDLE_KIND = 'bundle';
export const BUNDLE_VERDICTS: readonly PreflightVerdict[] = ['PASS', 'UNCERTAIN', 'FAIL', 'UNRATED'];
export const BUNDLE_ID_PATTERN = /^[0-9a-f]{16}$/;

/** One tracked server as a bundle states it. */
export interface BundleEntry {
  url: string;
  name: string;
  slug: string;
  category: string;
  /** The pre-flight verdict: UNRATED without accepted telemetry, else the cached score's. */
  verdict: PreflightVerdict;
  /** null when UNRATED. */
  trust_score: number | null;
  tier: SlaTier;
  total_interactions: number;
  /** Runtime anomaly flags of the cached score plus tool_manifest_drift and server_card_mismatch while active (as pre-flight reports them). */
  anomaly_flags: string[];
  drift: { tool_manifest_drift: boolean; last_drift_at: string | null };
  /** manifest_hash of the latest signed tool-manifest baseline (docs/probes.md); null: never probed. */
  tool_manifest_hash: string | null;
  /** Time of the latest accepted report (the newest runtime evidence); null: none. */
  evidence_at: string | null;
  /** When the cached score this entry states was computed; null: never scored. */
  score_computed_at: string | null;
}

/** What the store reads for one server (one row per tracked server, from the cached scores). */
export interface BundleSourceRow {
  url: string;
  name: string;
  slug: string;
  category: string;
  trust_score: number | null;
  verdict: string | null;
  anomaly_flags: string[] | null;
  computed_at: Date | null;
  n: number;
  last_at: Date | null;
  manifest_hash: string | null;
  last_drift_at: Date | null;
  card_mismatch_at: Date | null;
  interactions_30d: number;
}

/**
 * One entry, by the rules pre-flight applies (src/services/preflight.ts `assess`): UNRATED
 * without accepted telemetry, no score then; drift and Server Card flags added while active.
 */
export function bundleEntry(r: BundleSourceRow, now: Date, cardFlagWindowMs: number): BundleEntry {
  const rated = r.n > 0 && r.verdict !== null && r.trust_score !== null && (BUNDLE_VERDICTS as readonly string[]).includes(r.verdict) && r.verdict !== 'UNRATED';
  const verdict = rated ? (r.verdict as PreflightVerdict) : 'UNRATED';
  const drifted = driftFlagActive(r.last_drift_at, now);
  const cardActive = r.card_mismatch_at !== null && now.getTime() - r.card_mismatch_at.getTime() <= cardFlagWindowMs;
  const flags = [...(rated ? (r.anomaly_flags ?? []) : []), ...(drifted ? [DRIFT_FLAG] : []), ...(cardActive ? [SERVER_CARD_FLAG] : [])];
  return {
    url: r.url,
    name: r.name,
    slug: r.slug,
    category: r.category,
    verdict,
    trust_score: rated ? r.trust_score : null,
    tier: rated ? slaTierFor(r.trust_score!, r.interactions_30d) : 'Unrated',
    total_interactions: r.n,
    anomaly_flags: flags,
    drift: { tool_manifest_drift: drifted, last_drift_at: r.last_drift_at?.toISOString() ?? null },
    tool_manifest_hash: r.manifest_hash,
    evidence_at: r.last_at?.toISOString() ?? null,
    score_computed_at: r.computed_at?.toISOString() ?? null,
  };
}

export interface BundleFilters {
  /** One category, or null for all. */
  category: string | null;
  /** The verdicts kept (sorted, distinct), or null for all. */
  verdicts: PreflightVerdict[] | null;
}

/** Reads ?category= and ?verdict= (comma-separated); a reason string when a value is not one we know. */
export function parseBundleFilters(category: string | undefined, verdict: string | undefined): BundleFilters | { problem: string } {
  let cat: string | null = null;
  if (category !== undefined) {
    const c = category.trim().toLowerCase();
    if (!CATEGORIES.includes(c)) return { problem: `category must be one of ${CATEGORIES.join(', ')}` };
    cat = c;
  }
  let verdicts: PreflightVerdict[] | null = null;
  if (verdict !== undefined) {
    const parts = verdict.split(',').map((v) => v.trim().toUpperCase());
    const bad = parts.find((v) => !(BUNDLE_VERDICTS as readonly string[]).includes(v));
    if (bad !== undefined || parts.length === 0) {
      return { problem: `verdict must be a comma-separated list of ${BUNDLE_VERDICTS.join(', ')}${bad === '' ? '' : `; got "${bad ?? ''}"`}` };
    }
    verdicts = BUNDLE_VERDICTS.filter((v) => parts.includes(v));
  }
  return { category: cat, verdicts };
}

/** A stable text naming a filter set: bundles of one key are one series (deltas stay inside it). */
export function filterKey(f: BundleFilters): string {
  return `category=${f.category ?? '*'};verdict=${f.verdicts?.join(',') ?? '*'}`;
}

export function keepEntry(e: BundleEntry, f: BundleFilters): boolean {
  return (f.category === null || e.category === f.category) && (f.verdicts === null || f.verdicts.includes(e.verdict));
}

/** What changed from an earlier bundle (its url -> entry digest) to the current entries. */
export function bundleDelta<E extends { url: string }>(
  base: ReadonlyMap<string, string>,
  current: readonly { entry: E; digest: string }[],
): { changed: E[]; removed: string[] } {
  const changed: E[] = [];
  const seen = new Set<string>();
  for (const { entry, digest } of current) {
    seen.add(entry.url);
    if (base.get(entry.url) !== digest) changed.push(entry);
  }
  const removed = [...base.keys()].filter((u) => !seen.has(u)).sort();
  return { changed, removed };
}

/**
 * The exit code of an offline check, the online check's codes (src/cli/check.ts): 0 PASS,
 * 1 FAIL, 2 neither (UNCERTAIN, or UNRATED: no runtime evidence to pass on); 3 is kept for a
 * check that could not be made (no usable bundle).
 */
export function bundleExitCode(verdict: PreflightVerdict): 0 | 1 | 2 {
  if (verdict === 'PASS') return 0;
  if (verdict === 'FAIL') return 1;
  return 2;
}

/** The signed claims of a bundle (the JWS payload). */
export interface BundlePayload {
  schema: typeof BUNDLE_SCHEMA;
  kind: typeof BUNDLE_KIND;
  iss: string;
  /** Issue and expiry times, integer seconds since the epoch. */
  iat: number;
  exp: number;
  /** This token's own id (16 hex): the ETag. */
  jti: string;
  /** The state this document brings its reader to (16 hex, derived from the filters and entries). */
  bundle_id: string;
  filters: { category: string | null; verdict: PreflightVerdict[] | null };
  /** null for a full bundle; for a delta, the bundle it applies to. */
  delta: { since: string } | null;
  /** Servers in the state (not in this document, for a delta). */
  server_count: number;
  /** Every server (full) or those added or changed since `delta.since` (delta), by URL. */
  servers: BundleEntry[];
  /** Delta only: URLs in `delta.since` that the state no longer holds. [] for a full bundle. */
  removed: string[];
}

/** The file `observatory bundle pull` writes and GET /v1/bundle answers (JSON). */
export interface BundleFile {
  format: typeof BUNDLE_SCHEMA;
  bundle_id: string;
  issuer: string;
  issued_at: string;
  expires_at: string;
  server_count: number;
  delta: { since: string } | null;
  /** The signed bundle (compact JWS, payload BundlePayload). Only this is trusted, once verified. */
  jws: string;
  /** The observatory's JWKS when the file was made: convenience, not trust (docs/bundles.md "Trust"). */
  jwks: { keys: Record<string, unknown>[] };
}

/** Checks the claims of a payload whose signature verified; a reason when it is not a usable bundle at `now`. */
export function checkBundleClaims(p: Record<string, unknown>, now: Date): { ok: true; payload: BundlePayload } | { ok: false; reason: string } {
  if (p.kind !== BUNDLE_KIND || p.schema !== BUNDLE_SCHEMA) return { ok: false, reason: `not an observatory bundle (kind ${JSON.stringify(p.kind ?? null)}, schema ${JSON.stringify(p.schema ?? null)})` };
  if (typeof p.exp !== 'number' || !Number.isSafeInteger(p.exp)) return { ok: false, reason: 'bundle has no exp (expiry)' };
  if (typeof p.iat !== 'number' || p.exp <= p.iat) return { ok: false, reason: 'bundle expiry is not after its issue time' };
  const nowS = Math.floor(now.getTime() / 1000);
  if (nowS >= p.exp) return { ok: false, reason: `bundle expired at ${new Date(p.exp * 1000).toISOString()} (issued ${new Date(p.iat * 1000).toISOString()})` };
  if (typeof p.bundle_id !== 'string' || !BUNDLE_ID_PATTERN.test(p.bundle_id)) return { ok: false, reason: 'bundle has no bundle_id' };
  if (!Array.isArray(p.servers) || !Array.isArray(p.removed)) return { ok: false, reason: 'bundle has no servers list' };
  return { ok: true, payload: p as unknown as BundlePayload };
}

/** A bundle's entries indexed for look-ups by URL and by handle (name or slug). */
export interface BundleIndex {
  byUrl: ReadonlyMap<string, BundleEntry>;
  byHandle: ReadonlyMap<string, BundleEntry>;
}

export function indexBundle(entries: readonly BundleEntry[]): BundleIndex {
  const byUrl = new Map<string, BundleEntry>();
  const byHandle = new Map<string, BundleEntry>();
  for (const e of entries) {
    byUrl.set(e.url, e);
    for (const h of [serverHandle(e.slug), serverHandle(e.name)]) if (h !== '' && !byHandle.has(h)) byHandle.set(h, e);
  }
  return { byUrl, byHandle };
}

/**
 * The entry a target means, as the observatory resolves it (docs/scoring.md "Server identity"):
 * a URL by its canonical form, a URL with a query falling back to the URL without it; anything
 * else by its handle (slug or name). null: not in the bundle (the verdict is then UNRATED).
 * Throws InvalidServerUrl for a URL that cannot be a server's.
 */
export function lookupBundleEntry(index: BundleIndex, target: string): BundleEntry | null {
  const t = target.trim();
  if (looksLikeUrl(t)) {
    const url = canonicalServerUrl(t);
    return index.byUrl.get(url) ?? index.byUrl.get(withoutQuery(url)) ?? null;
  }
  const h = serverHandle(t);
  return h === '' ? null : (index.byHandle.get(h) ?? null);
}

export { InvalidServerUrl };
