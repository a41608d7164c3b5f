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
