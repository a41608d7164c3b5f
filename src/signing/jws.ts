import { createPublicKey, sign as edSign, verify as edVerify, type KeyObject } from 'node:crypto';

// Compact JWS with Ed25519 (RFC 7515 + RFC 8037), done with node:crypto directly: signing is in
// the pre-flight hot path, and verification must be strict about everything it does not need.

/** Tokens longer than this are refused unread (DECISIONS.md: over 10 KiB is 422). */
export const MAX_JWS_LENGTH = 10 * 1024;
export const ACCEPTED_ALGS = ['EdDSA', 'Ed25519'] as const;
// Header members that would make us trust something the token carries itself, or change how the
// payload is read. Any of them means the token is not one of ours: refuse.
const FORBIDDEN_HEADERS = ['crit', 'b64', 'jwk', 'jku', 'x5u', 'x5c', 'x5t', 'x5t#S256', 'zip', 'enc'];

export interface JwsHeader {
  alg: string;
  kid: string;
  typ?: string;
  [k: string]: unknown;
}

const b64u = (b: Buffer | string) => Buffer.from(b).toString('base64url');

function signingInput(payload: object, kid: string): string {
  const header = { alg: 'EdDSA', kid, typ: 'JWT' };
  return `${b64u(JSON.stringify(header))}.${b64u(JSON.stringify(payload))}`;
}

export function signCompact(payload: object, key: KeyObject, kid: string): string {
  const input = signingInput(payload, kid);
  return `${input}.${b64u(edSign(null, Buffer.from(input), key))}`;
}

/**
 * The same signature computed on libuv's thread pool: Ed25519 costs ~0.1 ms of CPU, which on
 * the pre-flight hot path would otherwise be spent on the event loop serving every request.
 */
export function signCompactAsync(payload: object, key: KeyObject, kid: string): Promise<string> {
  const input = signingInput(payload, kid);
  return new Promise((resolve, reject) => {
    edSign(null, Buffer.from(input), key, (err, sig) => (err ? reject(err) : resolve(`${input}.${sig.toString('base64url')}`)));
  });
}

export type VerifyOutcome =
  | { valid: true; header: JwsHeader; payload: Record<string, unknown> }
  | { valid: false; reason: string };

const B64U = /^[A-Za-z0-9_-]*$/;

/**
 * Canonical unpadded base64url only (RFC 7515 section 2, RFC 4648 sections 3.5 and 5): the URL-safe
 * alphabet, no padding, no impossible length, and zero trailing bits, so each byte string has
 * exactly one spelling. Decoders tolerate the others, which would give one signature several
 * spellings (issue 17 finding 11).
 */
export function isCanonicalBase64url(part: string): boolean {
  return B64U.test(part) && Buffer.from(part, 'base64url').toString('base64url') === part;
}

/** Issue times this far ahead of our clock are refused (clock skew between signer and verifier). */
export const MAX_FUTURE_IAT_SECONDS = 60;

/** The key for a kid and, for a retired key, the instant after which it signed nothing of ours. */
export interface VerificationKey {
  key: KeyObject;
  retiredAt: Date | null;
}

function decodeJson(part: string): unknown {
  const text = Buffer.from(part, 'base64url').toString('utf8');
  return JSON.parse(text);
}

/**
 * Checks what every compact JWS we accept must satisfy, whatever its payload: size, three
 * base64url parts, a JSON-object header with an accepted alg and none of the forbidden members,
 * and a 64-byte Ed25519 signature. RFC 7515/8037 only; no receipt-specific rules.
 */
function parseGeneric(token: string, maxLength = MAX_JWS_LENGTH): { header: Record<string, unknown>; payloadPart: string; input: string; signature: Buffer } | { reason: string } {
  if (typeof token !== 'string' || token.length === 0) return { reason: 'no token' };
  if (token.length > maxLength) return { reason: `token longer than ${maxLength} bytes` };
  const parts = token.split('.');
  if (parts.length !== 3) return { reason: 'not a compact JWS (header.payload.signature)' };
  const [h, p, s] = parts as [string, string, string];
  if (!isCanonicalBase64url(h) || !isCanonicalBase64url(p) || !isCanonicalBase64url(s)) {
    return { reason: 'not canonical base64url (unpadded, URL-safe alphabet, zero trailing bits)' };
  }
  let header: unknown;
  try {
    header = decodeJson(h);
  } catch {
    return { reason: 'header is not JSON' };
  }
  if (!header || typeof header !== 'object' || Array.isArray(header)) return { reason: 'header is not a JSON object' };
  const hd = header as Record<string, unknown>;
  if (typeof hd.alg !== 'string' || !(ACCEPTED_ALGS as readonly string[]).includes(hd.alg)) {
    return { reason: `algorithm ${JSON.stringify(hd.alg ?? null)} is not accepted (EdDSA or Ed25519 only)` };
  }
  for (const f of FORBIDDEN_HEADERS) if (f in hd) return { reason: `header member "${f}" is not accepted` };
  const signature = Buffer.from(s, 'base64url');
  if (signature.length !== 64) return { reason: 'signature is not an Ed25519 signature' };
  return { header: hd, payloadPart: p, input: `${h}.${p}`, signature };
}

/** Splits and checks a compact JWS of ours (kid, JSON-object payload) without verifying the signature. */
export function parseCompact(token: string, maxLength = MAX_JWS_LENGTH): { header: JwsHeader; payload: Record<string, unknown>; input: string; signature: Buffer } | { reason: string } {
  const g = parseGeneric(token, maxLength);
  if ('reason' in g) return g;
  let payload: unknown;
  try {
    payload = decodeJson(g.payloadPart);
  } catch {
    return { reason: 'payload is not JSON' };
  }
  if (!payload || typeof payload !== 'object' || Array.isArray(payload)) return { reason: 'payload is not a JSON object' };
  if (typeof g.header.kid !== 'string' || g.header.kid.length === 0) return { reason: 'header has no kid' };
  return { header: g.header as JwsHeader, payload: payload as Record<string, unknown>, input: g.input, signature: g.signature };
}

function edVerifies(input: string, key: KeyObject, signature: Buffer): boolean {
  try {
    return edVerify(null, Buffer.from(input), key, signature);
  } catch {
    return false;
  }
}

/**
 * Verifies a compact JWS of ours against the key its kid names, at `now`: unknown (or revoked)
 * kids fail; the payload's `iat` must be an integer no more than MAX_FUTURE_IAT_SECONDS ahead of
 * `now`, and, for a retired key, not after its retirement (DECISIONS.md: a retired key verifies
 * only what it signed before its retirement).
 */
export async function verifyCompact(
  token: string,
  keyFor: (kid: string) => Promise<VerificationKey | null>,
  opts: { now: Date; /** Longest token read (default MAX_JWS_LENGTH; offline bundles are larger). */ maxLength?: number },
): Promise<VerifyOutcome> {
  const parsed = parseCompact(token, opts.maxLength);
  if ('reason' in parsed) return { valid: false, reason: parsed.reason };
  const found = await keyFor(parsed.header.kid);
  if (!found) return { valid: false, reason: `unknown key id ${parsed.header.kid}` };
  const { key, retiredAt } = found;
  if (key.asymmetricKeyType !== 'ed25519') return { valid: false, reason: 'the key is not an Ed25519 key' };
  if (!edVerifies(parsed.input, key, parsed.signature)) return { valid: false, reason: 'signature does not verify' };
  const iat = parsed.payload.iat;
  if (typeof iat !== 'number' || !Number.isSafeInteger(iat) || iat < 0) return { valid: false, reason: 'payload has no iat (issue time, integer seconds since the epoch)' };
  const nowSeconds = Math.floor(opts.now.getTime() / 1000);
  if (iat > nowSeconds + MAX_FUTURE_IAT_SECONDS) {
    return { valid: false, reason: `issued in the future (iat ${new Date(iat * 1000).toISOString()}, more than ${MAX_FUTURE_IAT_SECONDS} s ahead)` };
  }
  if (retiredAt && iat * 1000 > retiredAt.getTime()) {
    return { valid: false, reason: `key ${parsed.header.kid} retired at ${retiredAt.toISOString()}, before this token's issue time ${new Date(iat * 1000).toISOString()}` };
  }
  return { valid: true, header: parsed.header, payload: parsed.payload };
}

/**
 * Verifies any compact Ed25519 JWS against one given key (RFC 8037), with the same strict header
 * rules but no requirement on kid or on the payload's format: the payload comes back as bytes.
 */
export function verifyCompactWithKey(
  token: string,
  key: KeyObject,
): { valid: true; header: Record<string, unknown>; payload: Buffer } | { valid: false; reason: string } {
  const g = parseGeneric(token);
  if ('reason' in g) return { valid: false, reason: g.reason };
  if (key.asymmetricKeyType !== 'ed25519') return { valid: false, reason: 'the key is not an Ed25519 key' };
  if (!edVerifies(g.input, key, g.signature)) return { valid: false, reason: 'signature does not verify' };
  return { valid: true, header: g.header, payload: Buffer.from(g.payloadPart, 'base64url') };
}

export function publicKeyFromJwk(jwk: Record<string, string>): KeyObject {
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x! }, format: 'jwk' });
}
