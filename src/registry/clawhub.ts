import type { ClawHubSkillAnswer } from '../domain/skill-trust.js';
import { BoundedMap } from '../store/cache-limits.js';

// ClawHub reader (DECISIONS.md "Skill registry"): GET {CLAWHUB_API_URL}/skills/{slug}, with a
// short in-memory cache. The fetch function is injectable; by default it is the global fetch with
// a timeout and a response size cap. TODO(integrator): switch the default to the safe outbound
// client (src/probes/safe-fetch.ts) once it lands.

export type FetchFn = (url: string, init: { signal: AbortSignal; headers: Record<string, string> }) => Promise<Response>;

export const SKILL_CACHE_TTL_MS = 60_000;
const TIMEOUT_MS = 5000;
const MAX_BYTES = 1024 * 1024;

export type RegistryLookup = { found: true; answer: ClawHubSkillAnswer; fetchedAt: Date } | { found: false; fetchedAt: Date };

export class RegistryUnavailable extends Error {}

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

export function createClawHubClient(opts: { baseUrl: string; now: () => Date; fetch?: FetchFn; ttlMs?: number }) {
  const doFetch: FetchFn = opts.fetch ?? ((url, init) => fetch(url, { ...init, redirect: 'error' }));
  const ttl = opts.ttlMs ?? SKILL_CACHE_TTL_MS;
  // Bounded by CACHE_MAX_ENTRIES (src/store/cache-limits.ts): the oldest answers go first.
  const cache = new BoundedMap<string, { at: number; value: RegistryLookup }>();
  const inflight = new Map<string, Promise<RegistryLookup>>();

  async function load(slug: string): Promise<RegistryLookup> {
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
    /** The skill as the registry describes it; cached for a short while (errors are not cached). */
    async skill(slug: string): Promise<RegistryLookup> {
      const t = opts.now().getTime();
      const hit = cache.get(slug);
      if (hit && t - hit.at < ttl) return hit.value;
      let p = inflight.get(slug);
      if (!p) {
        p = load(slug).finally(() => inflight.delete(slug));
        inflight.set(slug, p);
      }
      const value = await p;
      cache.set(slug, { at: t, value });
      return value;
    },
  };
}

export type ClawHubClient = ReturnType<typeof createClawHubClient>;
