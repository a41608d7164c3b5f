import { createHash, createHmac, randomBytes } from 'node:crypto';

// Access rules of SPEC.md 4.5, 4.6, 5 and 8 (DECISIONS.md "Access and payment"), in one place.

/** Free trust checks per anonymous key. */
export const TRIAL_LIMIT = 50;
export const KEY_SCOPES = ['trust:read'] as const;
/** Registrations allowed per client address within REGISTRATION_WINDOW_MS. */
export const REGISTRATION_LIMIT = 5;
export const REGISTRATION_WINDOW_MS = 60 * 60 * 1000;

const KEY_PREFIX = 'tobs_';

/** A new opaque API key: prefix (so leaked keys are recognisable) + 256 bits from a CSPRNG. */
export function newApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('base64url');
}

/** What is stored instead of the key: its SHA-256 (the key has 256 bits of entropy, so no salt is needed). */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** Syntactic check before any lookup, so junk never reaches the database. */
export function looksLikeApiKey(key: string): boolean {
  return key.length <= 200 && /^[A-Za-z0-9_\-.~+/=]+$/.test(key);
}

/** Keyed hash of a client address (DECISIONS.md "Client address"): never the address itself. */
export function addressHash(secret: string, address: string): string {
  return createHmac('sha256', secret).update(address.trim().toLowerCase(), 'utf8').digest('hex');
}

/** UTC day (YYYY-MM-DD) whose secret keys the address hashes made at `at`. */
export function secretDay(at: Date): string {
  return at.toISOString().slice(0, 10);
}

/**
 * Sliding-window decision for a registration: given the times of this address's registrations in
 * the last window (oldest first), either allowed, or refused with the seconds until the oldest
 * one leaves the window.
 */
export function registrationDecision(recent: Date[], now: Date): { allowed: true } | { allowed: false; retryAfterSeconds: number } {
  const inWindow = recent.filter((t) => now.getTime() - t.getTime() < REGISTRATION_WINDOW_MS);
  if (inWindow.length < REGISTRATION_LIMIT) return { allowed: true };
  const oldest = Math.min(...inWindow.map((t) => t.getTime()));
  const retry = Math.ceil((oldest + REGISTRATION_WINDOW_MS - now.getTime()) / 1000);
  return { allowed: false, retryAfterSeconds: Math.max(1, retry) };
}

/** Parses `Authorization: Bearer <key>`; null when absent, 'malformed' for any other scheme or junk. */
export function bearerToken(header: string | null): string | null | 'malformed' {
  if (header === null || header.trim() === '') return null;
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header.trim());
  if (!m || !looksLikeApiKey(m[1]!)) return 'malformed';
  return m[1]!;
}

/**
 * The part of a client address that identifies a report source (docs/integrity.md): an IPv4
 * address as is (IPv4-mapped IPv6 too), an IPv6 address by its /64 prefix, because one
 * subscriber is routinely given a whole /64 and could otherwise pose as 2^64 sources.
 */
export function sourceAddressPrefix(address: string): string {
  const a = address.trim().toLowerCase().replace(/%.*$/, '');
  const mapped = /^(?:0{0,4}:){0,5}ffff:(\d+\.\d+\.\d+\.\d+)$|^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (mapped) return mapped[1] ?? mapped[2]!;
  if (!a.includes(':')) return a;
  const [head, tail] = a.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const tl = tail !== undefined && tail !== '' ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(Math.max(0, 8 - h.length - tl.length)).fill('0'), ...tl];
  return `${groups.slice(0, 4).map((g) => (parseInt(g, 16) || 0).toString(16)).join(':')}::/64`;
}
