import type { ClawHubSkillAnswer } from '../domain/skill-trust.js';
import { BoundedMap, cacheLimits } from '../store/cache-limits.js';

// ClawHub reader (DECISIONS.md "Skill registry"): GET {CLAWHUB_API_URL}/skills/{slug}, with a
// short in-memory cache. The fetch function is injectable; by default it is the global fetch with
// a timeout, no redirects and a response size cap. Not the safe outbound client of the probes
// (src/probes/safe-fetch.ts): the registry's address is the operator's setting, never a caller's,
// and may be private (a mirror in the operator's network).
//
// Bounds (docs/reliability.md "ClawHub skill trust"): at most REGISTRY_MAX_IN_FLIGHT requests to
// the registry at once per process (the same slug asked again meanwhile shares its request);
// beyond, refused before anything is sent (the caller's slot pool, src/services/skill-trust.ts,
// with a share per client network). Before, every distinct slug not cached was a
// request and a socket of its own: 500 concurrent made-up slugs were 500 sockets to the registry.
// Answers and misses (404) are cached apart, the misses in a cache an eighth the size, so made-up
// slugs only ever evict other made-up slugs.

export type FetchFn = (url: string, init: { signal: AbortSignal; headers: Record<string, string> }) => Promise<Response>;

export const SKILL_CACHE_TTL_MS = 60_000;
const TIMEOUT_MS = 5000;
const MAX_BYTES = 1024 * 1024;

export type RegistryLookup = { found: true; answer: ClawHubSkillAnswer; fetchedAt: Date } | { found: false; fetchedAt: Date };

/** Requests to the registry in flight at once, per process (each holds a socket to it). */
export const REGISTRY_MAX_IN_FLIGHT = 8;

export class RegistryUnavailable extends Error {}

/** How many misses (404s) are kept: an eighth of CACHE_MAX_ENTRIES, at least 1. */
export const missCacheEntries = (): number => Math.max(1, Math.floor(cacheLimits().maxEntries / 8));

async function readCapped(res: Response): Promise<string> {
  const len = Number(res.headers.get('content-length') ?? '0');
  if (len > MAX_BYTES) throw new RegistryUnavailable('registry answer too large');
  if (!res.body) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > MAX_BYTES) {
      await reader.cancel();
      throw new RegistryUnavailable('registry answer too large');
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function isAnswer(x: unknown): x is ClawHubSkillAnswer {
  if (!x || typeof x !== 'object') return false;
  const s = (x as { skill?: unknown }).skill;
  return !!s && typeof s === 'object' && typeof (s as { slug?: unknown }).slug === 'string';
}

/** Runs one request to the registry in a place of the caller's bound (REGISTRY_MAX_IN_FLIGHT), or refuses it before anything is sent. */
export type RegistrySlot = <T>(work: () => Promise<T>) => Promise<T>;

export function createClawHubClient(opts: { baseUrl: string; now: () => Date; fetch?: FetchFn; ttlMs?: number }) {
  const doFetch: FetchFn = opts.fetch ?? ((url, init) => fetch(url, { ...init, redirect: 'error' }));
  const ttl = opts.ttlMs ?? SKILL_CACHE_TTL_MS;
  // Bounded by CACHE_MAX_ENTRIES (src/store/cache-limits.ts): the oldest answers go first.
  const found = new BoundedMap<string, { at: number; value: RegistryLookup }>();
  // Misses apart, an eighth the size: a flood of made-up slugs cannot push a real answer out.
  const missing = new BoundedMap<string, { at: number; value: RegistryLookup }>(missCacheEntries);
  const inflight = new Map<string, Promise<RegistryLookup>>();

  async function ask(slug: string): Promise<RegistryLookup> {
    const url = `${opts.baseUrl}/skills/${encodeURIComponent(slug)}`;
    let res: Response;
    try {
      res = await doFetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS), headers: { accept: 'application/json' } });
    } catch (err) {
      throw new RegistryUnavailable((err as Error).name === 'TimeoutError' ? 'the registry did not answer in time' : 'the registry is unreachable');
    }
    if (res.status === 404) {
      await res.body?.cancel();
      return { found: false, fetchedAt: opts.now() };
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw new RegistryUnavailable(`the registry answered HTTP ${res.status}`);
    }
    let body: unknown;
    try {
      body = JSON.parse(await readCapped(res));
    } catch (err) {
      if (err instanceof RegistryUnavailable) throw err;
      throw new RegistryUnavailable('the registry answered something that is not JSON');
    }
    if (!isAnswer(body)) throw new RegistryUnavailable('the registry answer lacks the skill object');
    return { found: true, answer: body, fetchedAt: opts.now() };
  }

  return {
    /**
     * The skill as the registry describes it; cached for a short while (errors are not cached).
     * A request to the registry runs in `slot` (which may refuse it: its error is thrown as is);
     * RegistryUnavailable when the registry failed.
     */
    async skill(slug: string, slot: RegistrySlot = (work) => work()): Promise<RegistryLookup> {
      const t = opts.now().getTime();
      const hit = found.get(slug) ?? missing.get(slug);
      if (hit && t - hit.at < ttl) return hit.value;
      let p = inflight.get(slug);
      if (!p) {
        p = slot(() => ask(slug)).finally(() => inflight.delete(slug));
        inflight.set(slug, p);
      }
      const value = await p;
      // A slug is in one cache at a time: the one of its latest answer.
      if (value.found) {
        missing.delete(slug);
        found.set(slug, { at: t, value });
      } else {
        found.delete(slug);
        missing.set(slug, { at: t, value });
      }
      return value;
    },
  };
}

export type ClawHubClient = ReturnType<typeof createClawHubClient>;
