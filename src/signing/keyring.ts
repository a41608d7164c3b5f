import { createPrivateKey, generateKeyPairSync, sign as edSign, type KeyObject } from 'node:crypto';
import { calculateJwkThumbprint } from 'jose';
import type { Db } from '../db/index.js';
import { ObservatoryError } from '../errors.js';
import { scrubSigningKeyTable, signingKeyStore, type StoredKey } from '../store/signing-keys.js';
import type { KeyEncryptionKey } from './key-encryption.js';
import { publicKeyFromJwk, signCompactAsync, type VerificationKey } from './jws.js';

// The key ring: Ed25519 keys in the database so every instance signs with the same active key
// and publishes the same JWKS. Only the active key has a private half, sealed under the
// key-encryption secret. A retired key stays published with its retirement time (`exp`) and
// verifies only what it signed before it; a revoked key is unpublished and verifies nothing.
//
// Signing never touches the database: it may run inside a transaction (the drift baseline signs
// inside one), and on PGlite's single connection a read from there waits for itself for ever
// (issue 17 finding 1). The view of the keys is re-read in the background instead.

const KEYRING_LOCK = 72_620_002;
/** Each instance re-reads the key table this often, in the background (rotation by another instance). */
export const KEY_REFRESH_MS = 10_000;
/**
 * An instance never signs with a view of the keys older than this; so a key rotated out retires
 * this long after the rotation, when no instance can still be signing with it, and receipts
 * every instance signed until then verify.
 */
export const ROTATION_GRACE_MS = 60_000;
/** An unknown kid re-reads the table at most this often, so garbage kids cannot hammer the database. */
const MISS_RELOAD_MS = 1_000;

/** A refusal about the keys themselves (a revoked SIGNING_KEY_JWK, an unknown kid to revoke): one line. */
export class SigningKeyError extends Error {
  override name = 'SigningKeyError';
}

export interface PublicJwk {
  kty: 'OKP';
  crv: 'Ed25519';
  x: string;
  kid: string;
  alg: 'EdDSA';
  use: 'sig';
  /**
   * Retired keys only: the retirement time (seconds since the epoch, like `iat`). Tokens this
   * key signed with a later `iat` are not ours. Same member as OpenID Federation's historical keys.
   */
  exp?: number;
}

export interface KeyRing {
  /** Signs a payload with the active key (no database access). */
  sign(payload: object): Promise<{ jws: string; kid: string }>;
  /**
   * Signs arbitrary bytes with the active key as a JWS (RFC 7515) whose protected header is
   * `header` plus alg EdDSA and the key's kid; returns the base64url protected header and
   * signature, for flattened or detached JWS (A2A agent card signatures, docs/agents.md).
   */
  signJws(payload: string, header: Record<string, unknown>): Promise<{ protected: string; signature: string; kid: string }>;
  /** Every published public key (active first); revoked keys are not published. */
  jwks(): Promise<{ keys: PublicJwk[] }>;
  /** The key that verifies tokens of `kid` and until when, or null when it is not ours or revoked. */
  verificationKey(kid: string): Promise<VerificationKey | null>;
  /** Re-reads the keys now (after a rotation or revocation elsewhere). */
  refresh(): Promise<void>;
  /** Makes a new key active (the current one retires after ROTATION_GRACE_MS); returns its kid. */
  rotate(): Promise<string>;
  /** Revokes a key (a new one becomes active if it was the active one). */
  revoke(kid: string): Promise<RevokeResult>;
  /** Stops the background refresh. */
  close(): void;
}

export async function jwkThumbprint(jwk: { kty?: string; crv?: string; x?: string }): Promise<string> {
  return calculateJwkThumbprint({ kty: jwk.kty, crv: jwk.crv, x: jwk.x }, 'sha256');
}

async function generateSealed(kek: KeyEncryptionKey): Promise<{ kid: string; public_jwk: Record<string, string>; private_key_enc: string }> {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const public_jwk = publicKey.export({ format: 'jwk' }) as Record<string, string>;
  const kid = await jwkThumbprint(public_jwk);
  return { kid, public_jwk, private_key_enc: kek.seal(kid, privateKey.export({ format: 'jwk' }) as Record<string, string>) };
}

function requireKek(kek: KeyEncryptionKey | null): KeyEncryptionKey {
  if (!kek) throw new SigningKeyError('no key-encryption secret is configured (KEY_ENCRYPTION_KEY / KEY_ENCRYPTION_KEY_FILE): a private key cannot be stored');
  return kek;
}

const retireAfterGrace = (now: Date) => new Date(now.getTime() + ROTATION_GRACE_MS);

/** Generates a new sealed key and makes it the active one; the old one retires after the grace period and loses its private half. Returns the new kid. */
export async function rotateSigningKey(db: Db, opts: { kek: KeyEncryptionKey | null; now?: Date }): Promise<string> {
  const kek = requireKek(opts.kek);
  const now = opts.now ?? new Date();
  const k = await generateSealed(kek);
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [KEYRING_LOCK]);
    await signingKeyStore(tx).activate(k, now, retireAfterGrace(now));
    return k.kid;
  });
}

export interface RevokeResult {
  revoked: string;
  /** The key generated to replace a revoked active key; null when the revoked key was not active. */
  newActive: string | null;
}

/**
 * Revokes `kid`: it verifies nothing from now on, disappears from the JWKS and loses its private
 * half. Revoking the active key makes a freshly generated key active at once (no grace: what the
 * revoked key signs meanwhile verifies nowhere, which is the point of revoking it). With
 * SIGNING_KEY_JWK the active key is the operator's: it is replaced there, not revoked here.
 */
export async function revokeSigningKey(db: Db, kid: string, opts: { kek: KeyEncryptionKey | null; signingKeyJwk: string | null; now?: Date }): Promise<RevokeResult> {
  const now = opts.now ?? new Date();
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [KEYRING_LOCK]);
    const store = signingKeyStore(tx);
    const row = await store.byKid(kid);
    if (!row) throw new SigningKeyError(`no signing key ${kid} in this database (the kids are listed at /.well-known/jwks.json)`);
    if (row.revoked_at) throw new SigningKeyError(`signing key ${kid} was already revoked at ${row.revoked_at.toISOString()}`);
    if (row.active && opts.signingKeyJwk) {
      throw new SigningKeyError(
        `signing key ${kid} is the active key and comes from SIGNING_KEY_JWK: put a new key in SIGNING_KEY_JWK and restart every instance, then revoke ${kid}`,
      );
    }
    const replacement = row.active ? await generateSealed(requireKek(opts.kek)) : null;
    await store.revoke(kid, now);
    if (!replacement) return { revoked: kid, newActive: null };
    await store.activate(replacement, now, now);
    return { revoked: kid, newActive: replacement.kid };
  });
}

interface View {
  /** Date.now() just before the read: a conservative age. */
  loadedAt: number;
  all: StoredKey[];
  publicKeys: Map<string, KeyObject>;
  active: { kid: string; key: KeyObject } | null;
  /** With SIGNING_KEY_JWK: its row (retired or revoked by another instance's newer key?). */
  envRow: StoredKey | null;
}

/**
 * Opens the key ring. With SIGNING_KEY_JWK that key signs (its public half is recorded so it stays
 * in the JWKS after the operator moves to another); otherwise the active key in the database does,
 * generated on first start under an advisory lock so concurrent first starts agree on one key.
 * Private keys an earlier version stored in clear are sealed (the active one) or destroyed
 * (retired ones) here, and the table is scrubbed of their old bytes.
 */
export async function openKeyRing(
  db: Db,
  opts: { signingKeyJwk: string | null; kek: KeyEncryptionKey | null; now?: () => Date; onError?: (err: unknown) => void },
): Promise<KeyRing> {
  const now = opts.now ?? (() => new Date());
  const kek = opts.kek;
  let envKey: { kid: string; key: KeyObject } | null = null;
  let envPub: Record<string, string> | null = null;
  if (opts.signingKeyJwk) {
    const jwk = JSON.parse(opts.signingKeyJwk) as Record<string, string>;
    const key = createPrivateKey({ key: jwk, format: 'jwk' });
    envPub = publicKeyFromJwk(jwk).export({ format: 'jwk' }) as Record<string, string>;
    envKey = { kid: await jwkThumbprint(envPub), key };
  }

  const sealedLegacy = await db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [KEYRING_LOCK]);
    const store = signingKeyStore(tx);
    const legacy = await store.legacyClearKeys();
    for (const k of legacy) await store.seal(k.kid, k.active && kek ? kek.seal(k.kid, k.private_jwk) : null);
    const at = now();
    if (envKey) {
      const row = await store.byKid(envKey.kid);
      if (row?.revoked_at) {
        throw new SigningKeyError(`SIGNING_KEY_JWK is signing key ${envKey.kid}, revoked at ${row.revoked_at.toISOString()}: it signs nothing any more; supply a new key`);
      }
      if (row && !row.active && row.retired_at) {
        throw new SigningKeyError(
          `SIGNING_KEY_JWK is signing key ${envKey.kid}, retired at ${row.retired_at.toISOString()}: a retired key verifies only what it signed before, so it must not sign again; supply a new key`,
        );
      }
      if (!row?.active) await store.activate({ kid: envKey.kid, public_jwk: envPub!, private_key_enc: null }, at, retireAfterGrace(at));
    } else {
      const active = await store.active();
      if (!active || active.private_key_enc === null) await store.activate(await generateSealed(requireKek(kek)), at, retireAfterGrace(at));
    }
    return legacy.length;
  });
  if (sealedLegacy > 0) await scrubSigningKeyTable(db);

  const store = signingKeyStore(db);
  const opened = new Map<string, KeyObject>(); // decrypted private keys by kid (sealing is per kid)
  let view: View;

  async function read(): Promise<View> {
    const loadedAt = Date.now();
    const all = await store.all();
    const publicKeys = new Map(all.map((k) => [k.kid, publicKeyFromJwk(k.public_jwk)]));
    let active: View['active'] = null;
    let envRow: StoredKey | null = null;
    if (envKey) {
      active = envKey;
      envRow = all.find((k) => k.kid === envKey!.kid) ?? null;
    } else {
      const a = all.find((k) => k.active && k.private_key_enc !== null);
      if (a) {
        let key = opened.get(a.kid);
        if (!key) {
          key = createPrivateKey({ key: requireKek(kek).open(a.kid, a.private_key_enc!), format: 'jwk' });
          opened.clear(); // only the active key's private half is kept in memory
          opened.set(a.kid, key);
        }
        active = { kid: a.kid, key };
      }
    }
    return { loadedAt, all, publicKeys, active, envRow };
  }

  let loading: Promise<void> | null = null;
  function reload(): Promise<void> {
    loading ??= read()
      .then((v) => {
        view = v;
      })
      .finally(() => {
        loading = null;
      });
    return loading;
  }
  /** A background re-read: its failure is reported, and the view ages until one succeeds. */
  function reloadInBackground(): void {
    reload().catch((err: unknown) => opts.onError?.(err));
  }

  view = await read();
  const timer = setInterval(reloadInBackground, KEY_REFRESH_MS);
  timer.unref();

  const unavailable = (detail: string) => new ObservatoryError('unavailable', detail, { headers: { 'retry-after': '5' } });

  async function rotate(): Promise<string> {
    const kid = await rotateSigningKey(db, { kek, now: now() });
    await reload();
    return kid;
  }

  /** The active key, when this instance may sign with it (no database access: see above). */
  function signingKey(): { kid: string; key: KeyObject } {
    const v = view;
    const age = Date.now() - v.loadedAt;
    if (age > KEY_REFRESH_MS) reloadInBackground();
    if (age > ROTATION_GRACE_MS) {
      throw unavailable(`the signing keys could not be re-read for ${Math.round(age / 1000)} s: not signing with a key that may have been rotated out`);
    }
    if (v.envRow?.revoked_at) throw unavailable(`this instance's SIGNING_KEY_JWK (${v.envRow.kid}) was revoked: restart it with the new key`);
    if (v.envRow?.retired_at && now().getTime() >= v.envRow.retired_at.getTime()) {
      throw unavailable(`this instance's SIGNING_KEY_JWK (${v.envRow.kid}) retired at ${v.envRow.retired_at.toISOString()}: restart it with the new key`);
    }
    if (!v.active) throw unavailable('no active signing key');
    return v.active;
  }

  return {
    async sign(payload) {
      const { key, kid } = signingKey();
      return { jws: await signCompactAsync(payload, key, kid), kid };
    },
    async signJws(payload, header) {
      const { key, kid } = signingKey();
      const protectedHeader = Buffer.from(JSON.stringify({ ...header, alg: 'EdDSA', kid }), 'utf8').toString('base64url');
      const input = `${protectedHeader}.${Buffer.from(payload, 'utf8').toString('base64url')}`;
      const signature = await new Promise<Buffer>((resolve, reject) => edSign(null, Buffer.from(input), key, (err, sig) => (err ? reject(err) : resolve(sig))));
      return { protected: protectedHeader, signature: signature.toString('base64url'), kid };
    },
    async jwks() {
      const published = view.all.filter((k) => k.revoked_at === null);
      const sorted = [...published].sort((a, b) => Number(b.active) - Number(a.active));
      return {
        keys: sorted.map((k) => {
          const jwk: PublicJwk = { kty: 'OKP', crv: 'Ed25519', x: k.public_jwk.x!, kid: k.kid, alg: 'EdDSA', use: 'sig' };
          if (!k.active && k.retired_at) jwk.exp = Math.floor(k.retired_at.getTime() / 1000);
          return jwk;
        }),
      };
    },
    async verificationKey(kid) {
      let row = view.all.find((k) => k.kid === kid);
      if (!row && Date.now() - view.loadedAt >= MISS_RELOAD_MS) {
        await reload();
        row = view.all.find((k) => k.kid === kid);
      }
      if (!row || row.revoked_at) return null;
      const key = view.publicKeys.get(kid);
      if (!key) return null;
      return { key, retiredAt: row.active ? null : row.retired_at };
    },
    refresh: reload,
    rotate,
    async revoke(kid) {
      const r = await revokeSigningKey(db, kid, { kek, signingKeyJwk: opts.signingKeyJwk, now: now() });
      await reload();
      return r;
    },
    close() {
      clearInterval(timer);
    },
  };
}
