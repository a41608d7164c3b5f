import { publicKeyFromJwk, verifyCompact, type VerificationKey } from './jws.js';
import { BUNDLE_SCHEMA, checkBundleClaims, type BundleFile, type BundlePayload } from '../domain/bundle.js';

// Verifying an offline bundle (docs/bundles.md): the same strict compact-JWS rules as receipts
// (src/signing/jws.ts), with a size limit fit for a whole index, then the bundle's own claims
// (kind, schema, exp). Used by the CLI (bundle pull, check --bundle, verify) and by the gate
// that answers from a bundle; none of them needs a database.

/** Largest bundle token read: about 1.3 KiB per server of base64url leaves room for ~400,000 servers. */
export const MAX_BUNDLE_JWS_LENGTH = 512 * 1024 * 1024;

/**
 * The Ed25519 keys of a JWKS document by kid, each with its retirement time when the entry
 * carries one (`exp`: it verifies nothing signed later). Entries we cannot use are skipped.
 */
export function keysOfJwks(doc: unknown): Map<string, VerificationKey> | { problem: string } {
  if (!doc || typeof doc !== 'object' || !Array.isArray((doc as { keys?: unknown }).keys)) return { problem: 'not a JWKS (no "keys" array)' };
  const keys = new Map<string, VerificationKey>();
  for (const k of (doc as { keys: Record<string, unknown>[] }).keys) {
    if (k?.kty !== 'OKP' || k.crv !== 'Ed25519' || typeof k.x !== 'string' || typeof k.kid !== 'string') continue;
    if (k.exp !== undefined && (typeof k.exp !== 'number' || !Number.isFinite(k.exp))) continue; // a key we cannot bound verifies nothing
    try {
      keys.set(k.kid, { key: publicKeyFromJwk({ x: k.x }), retiredAt: k.exp === undefined ? null : new Date((k.exp as number) * 1000) });
    } catch {
      // a malformed entry verifies nothing
    }
  }
  return keys;
}

/** Reads a bundle file (the JSON GET /v1/bundle answers) or a bare compact JWS. */
export function readBundleText(text: string): { jws: string; file: BundleFile | null } | { problem: string } {
  const t = text.trim();
  if (t.startsWith('{')) {
    let doc: unknown;
    try {
      doc = JSON.parse(t);
    } catch {
      return { problem: 'not JSON' };
    }
    const f = doc as Partial<BundleFile>;
    if (f.format !== BUNDLE_SCHEMA || typeof f.jws !== 'string') return { problem: `not an observatory bundle file (format ${BUNDLE_SCHEMA} with a jws member)` };
    return { jws: f.jws, file: f as BundleFile };
  }
  if (/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(t)) return { jws: t, file: null };
  return { problem: 'neither a bundle file nor a compact JWS' };
}

export type BundleVerification = { valid: true; kid: string; payload: BundlePayload } | { valid: false; reason: string };

/** Verifies a bundle JWS against `keys` (a pinned JWKS) at `now`: signature, key retirement, iat, kind, expiry. */
export async function verifyBundle(jws: string, keys: ReadonlyMap<string, VerificationKey>, now: Date): Promise<BundleVerification> {
  const v = await verifyCompact(jws, async (kid) => keys.get(kid) ?? null, { now, maxLength: MAX_BUNDLE_JWS_LENGTH });
  if (!v.valid) return { valid: false, reason: v.reason };
  const c = checkBundleClaims(v.payload, now);
  if (!c.ok) return { valid: false, reason: c.reason };
  return { valid: true, kid: v.header.kid, payload: c.payload };
}

/** A JWKS read from a file or an http(s) URL, by kid; throws Error with one line naming the source. */
export async function loadJwksFrom(source: string, opts: { fetch?: typeof fetch; timeoutMs?: number } = {}): Promise<Map<string, VerificationKey>> {
  return parseJwks(await readJwksText(source, opts), source);
}

/** The text of a JWKS file or http(s) URL; throws Error with one line naming the source. */
export async function readJwksText(source: string, opts: { fetch?: typeof fetch; timeoutMs?: number } = {}): Promise<string> {
  let text: string;
  if (/^https?:\/\//i.test(source)) {
    let res: Response;
    try {
      res = await (opts.fetch ?? globalThis.fetch)(source, { signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000), headers: { accept: 'application/json' } });
    } catch (err) {
      throw new Error(`could not fetch the JWKS at ${source}: ${(err as Error).message}`);
    }
    if (!res.ok) throw new Error(`could not fetch the JWKS at ${source}: HTTP ${res.status}`);
    text = await res.text();
  } else {
    const { readFile } = await import('node:fs/promises');
    text = await readFile(source, 'utf8').catch((e: NodeJS.ErrnoException) => {
      throw new Error(`cannot read the JWKS file ${source}: ${e.code ?? e.message}`);
    });
  }
  return text;
}

/** A JWKS document's keys by kid; throws Error with one line naming where it came from. */
export function parseJwks(text: string, source: string): Map<string, VerificationKey> {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new Error(`${source} is not JSON`);
  }
  const keys = keysOfJwks(doc);
  if (!(keys instanceof Map)) throw new Error(`${source} is ${keys.problem}`);
  return keys;
}
