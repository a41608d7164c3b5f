import { createHmac } from 'node:crypto';
import type { Queryable } from '../db/index.js';
import { bearerToken, hashApiKey, sourceAddressPrefix } from '../domain/access.js';
import { apiKeyStore } from '../store/api-keys.js';
import { sourceSecretStore } from '../store/source-secrets.js';
import { clientAddressKey, type CallContext } from './context.js';

/** Source of reports that carry neither a key nor a known address (in-process callers, tools). */
export const LOCAL_SOURCE = 'local';

/**
 * The source of a telemetry report (DECISIONS.md): `key:` + a hash of the Bearer API key when
 * the report carries a key registered through /agent/auth, else `addr:` + HMAC(daily secret,
 * client address; an IPv6 address by its /64). A Bearer string that is not a registered key is ignored (the report counts
 * as its address), so made-up tokens cannot mint sources (docs/integrity.md). Both are one-way;
 * the address itself is never stored or logged, and the daily secret makes hashes unlinkable
 * across days.
 */
export function reportSourceResolver(db: Queryable) {
  const secrets = sourceSecretStore(db);
  const keys = apiKeyStore(db);
  // Registered keys are never deleted, so a positive lookup can be remembered (bounded).
  const known = new Set<string>();
  let cached: { day: string; secret: Buffer } | null = null;

  async function secretFor(day: string): Promise<Buffer> {
    if (cached?.day !== day) cached = { day, secret: await secrets.forDay(day) };
    return cached.secret;
  }

  return async function sourceOf(ctx: CallContext | undefined, now: Date): Promise<string> {
    const token = bearerToken(ctx?.requestHeader.get('authorization') ?? null);
    if (token !== null && token !== 'malformed') {
      const hash = hashApiKey(token);
      if (known.has(hash) || (await keys.byHash(hash)) !== null) {
        if (known.size >= 10_000) known.clear();
        known.add(hash);
        return `key:${hash.slice(0, 32)}`;
      }
    }
    const address = ctx?.values.get(clientAddressKey);
    if (!address) return LOCAL_SOURCE;
    const day = now.toISOString().slice(0, 10);
    return `addr:${createHmac('sha256', await secretFor(day)).update(sourceAddressPrefix(address)).digest('hex').slice(0, 32)}`;
  };
}
