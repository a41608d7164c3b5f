import { createHmac } from 'node:crypto';
import type { Queryable } from '../db/index.js';
import { bearerToken, hashApiKey, secretDay } from '../domain/access.js';
import { clientNetwork } from '../domain/client-network.js';
import { keySource, sourceFamily } from '../domain/scoring.js';
import { apiKeyStore } from '../store/api-keys.js';
import { sourceSecretStore } from '../store/source-secrets.js';
import { clientAddressKey, requestHeaderValue, type CallContext } from './context.js';
import { BoundedMap } from '../store/cache-limits.js';

/** Source of reports that carry neither a key nor a known address (in-process callers, tools). */
export const LOCAL_SOURCE = 'local';

const DAY_MS = 86_400_000;

/**
 * HMAC(secret of the UTC day, network of a client address) (src/domain/client-network.ts), cut to
 * 32 hex digits: the `addr:` source of that network on that day (the family of every report from
 * it that day, keyed or not), and the registration record stored with a key registered from it. One-way; the secret is deleted after two days, so hashes of different days
 * cannot be linked or reversed.
 */
export function networkHasher(db: Queryable) {
  const secrets = sourceSecretStore(db);
  // The secrets of the last two days, each read once: concurrent first asks share one read (an
  // export's reports are prepared together, and each asked anew: three statements apiece).
  let cached: { day: string; secret: Promise<Buffer> }[] = [];
  function secretFor(day: string): Promise<Buffer> {
    const hit = cached.find((c) => c.day === day);
    if (hit) return hit.secret;
    const secret = secrets.forDay(day);
    cached = [{ day, secret }, ...cached].slice(0, 2);
    // A failed read is not kept: the next ask reads again.
    secret.catch(() => {
      cached = cached.filter((c) => c.secret !== secret);
    });
    return secret;
  }
  // One HMAC per network and day, not per report (a reporter sends many): in memory only,
  // bounded like every cache, and like the secrets kept for the last two days only (a hash of a
  // day whose secret is gone is not kept either).
  let hashes: { day: string; byNetwork: BoundedMap<string, string> }[] = [];
  return async (address: string, day: string): Promise<string> => {
    const network = clientNetwork(address);
    let days = hashes.find((h) => h.day === day);
    if (!days) {
      days = { day, byNetwork: new BoundedMap<string, string>() };
      hashes = [days, ...hashes].sort((a, b) => (a.day < b.day ? 1 : -1)).slice(0, 2);
    }
    let hash = days.byNetwork.get(network);
    if (hash === undefined) {
      hash = createHmac('sha256', await secretFor(day)).update(network).digest('hex').slice(0, 32);
      days.byNetwork.set(network, hash);
    }
    return hash;
  };
}

/** Who sent a report, as the scoring and the per-source limits see it. */
export interface ReportSource {
  /** Stored with the evidence: `addr:<hash>`, `key:<hash>[@<family>]` or `local`. */
  id: string;
  /**
   * Keys this reporter's limits (new servers per hour) are counted under: its family, and for an
   * address also yesterday's hash of its network (a window may span midnight). The first is the
   * one new events are recorded under. Empty for in-process callers, which are not limited.
   * Computed on demand (only a report that would create a server needs them).
   */
  limitKeys(): Promise<string[]>;
}

/**
 * The source of a telemetry report (DECISIONS.md): `key:` + a hash of the Bearer API key when
 * the report carries a key registered through /agent/auth, followed by `@` + the hashed network
 * of the client address that day; else `addr:` + that hashed network (IPv4 address, IPv6 /64).
 * Both are the family of that network on that day. A Bearer string that is not a registered key
 * is ignored (the report counts as its address), so made-up tokens cannot mint sources
 * (docs/integrity.md). The address itself is never stored or logged.
 */
export function reportSourceResolver(db: Queryable) {
  const keys = apiKeyStore(db);
  const hashNetwork = networkHasher(db);
  // Registered keys are never deleted, so a positive lookup can be remembered (bounded).
  const known = new BoundedMap<string, true>();

  return async function sourceOf(ctx: CallContext | undefined, now: Date): Promise<ReportSource> {
    const token = bearerToken(requestHeaderValue(ctx, 'authorization'));
    let keyHash: string | null = null;
    if (token !== null && token !== 'malformed') {
      const hash = hashApiKey(token);
      if (known.get(hash) === true || (await keys.byHash(hash)) !== null) {
        known.set(hash, true);
        keyHash = hash;
      }
    }
    const address = ctx?.values.get(clientAddressKey);
    if (!address) return { id: keyHash !== null ? keySource(keyHash, null) : LOCAL_SOURCE, async limitKeys() { return []; } };
    // A key's report belongs to the network it comes from on that day, as the address's own
    // reports do (docs/integrity.md "Source families"): whatever keys a network holds, and
    // whenever it registered them, it speaks as one source a day.
    const network = await hashNetwork(address, secretDay(now));
    const id = keyHash !== null ? keySource(keyHash, network) : `addr:${network}`;
    // Method shorthand, not an arrow function: tsx (esbuild keepNames) names a property's arrow
    // function with Object.defineProperty each time it is made (~1 us, once per report).
    return {
      id,
      async limitKeys() {
        return [sourceFamily(id), sourceFamily(`addr:${await hashNetwork(address, secretDay(new Date(now.getTime() - DAY_MS)))}`)];
      },
    };
  };
}
