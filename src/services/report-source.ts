import { createHash, createHmac } from 'node:crypto';
import type { Queryable } from '../db/index.js';
import { sourceSecretStore } from '../store/source-secrets.js';
import { clientAddressKey, type CallContext } from './context.js';

/** Source of reports that carry neither a key nor a known address (in-process callers, tools). */
export const LOCAL_SOURCE = 'local';

/**
 * The source of a telemetry report (DECISIONS.md): `key:` + a hash of the Bearer API key when
 * the report carries one, else `addr:` + HMAC(daily secret, client address). Both are one-way;
 * the address itself is never stored or logged, and the daily secret makes hashes unlinkable
 * across days.
 */
export function reportSourceResolver(db: Queryable) {
  const secrets = sourceSecretStore(db);
  let cached: { day: string; secret: Buffer } | null = null;

  async function secretFor(day: string): Promise<Buffer> {
    if (cached?.day !== day) cached = { day, secret: await secrets.forDay(day) };
    return cached.secret;
  }

  return async function sourceOf(ctx: CallContext | undefined, now: Date): Promise<string> {
    const auth = ctx?.requestHeader.get('authorization');
    const m = auth ? /^Bearer\s+(\S{1,512})\s*$/i.exec(auth) : null;
    if (m) return `key:${createHash('sha256').update(m[1]!).digest('hex').slice(0, 32)}`;
    const address = ctx?.values.get(clientAddressKey);
    if (!address) return LOCAL_SOURCE;
    const day = now.toISOString().slice(0, 10);
    return `addr:${createHmac('sha256', await secretFor(day)).update(address).digest('hex').slice(0, 32)}`;
  };
}
