import { createHash, createHmac, randomBytes } from 'node:crypto';
import { clientNetwork } from './client-network.js';

// Access rules of SPEC.md 4.5, 4.6, 5 and 8 (DECISIONS.md "Access and payment"), in one place.

/** Free trust checks per anonymous key. */
export const TRIAL_LIMIT = 50;
export const KEY_SCOPES = ['trust:read'] as const;
/** Registrations allowed per client network (IPv4 address, IPv6 /64) within REGISTRATION_WINDOW_MS. */
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

/**
 * Keyed hash of the network of a client address (DECISIONS.md "Client address";
 * src/domain/client-network.ts): never the address itself, and every address of one IPv6 /64 alike.
 */
export function addressHash(secret: string, address: string): string {
  return createHmac('sha256', secret).update(clientNetwork(address), 'utf8').digest('hex');
}

/** UTC day (YYYY-MM-DD) whose secret keys the address hashes made at `at`. */
export function secretDay(at: Date): string {
  return at.toISOString().slice(0, 10);
}

/** A sliding-window limit's answer: allowed, or refused with the seconds until a slot frees. */
export type WindowDecision = { allowed: true } | { allowed: false; retryAfterSeconds: number };

/**
 * Sliding-window decision: given the times of one client's events in the last window, either
 * allowed (fewer than `limit`), or refused with the seconds until the oldest leaves the window.
 * Used by the registration limit and by the bound on new servers per source (telemetry).
 */
export function slidingWindowDecision(recent: readonly Date[], now: Date, limit: number, windowMs: number): WindowDecision {
  const inWindow = recent.filter((t) => now.getTime() - t.getTime() < windowMs);
  if (inWindow.length < limit) return { allowed: true };
  const oldest = Math.min(...inWindow.map((t) => t.getTime()));
  const retry = Math.ceil((oldest + windowMs - now.getTime()) / 1000);
  return { allowed: false, retryAfterSeconds: Math.max(1, retry) };
}

/** The registration limit: REGISTRATION_LIMIT per client network per REGISTRATION_WINDOW_MS. */
export function registrationDecision(recent: Date[], now: Date): WindowDecision {
  return slidingWindowDecision(recent, now, REGISTRATION_LIMIT, REGISTRATION_WINDOW_MS);
}

/** Parses `Authorization: Bearer <key>`; null when absent, 'malformed' for any other scheme or junk. */
export function bearerToken(header: string | null): string | null | 'malformed' {
  if (header === null || header.trim() === '') return null;
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header.trim());
  if (!m || !looksLikeApiKey(m[1]!)) return 'malformed';
  return m[1]!;
}
