import { createPrivateKey, generateKeyPairSync, sign as edSign, type KeyObject } from 'node:crypto';
import { calculateJwkThumbprint } from 'jose';
import type { Db } from '../db/index.js';
import { signingKeyStore, type StoredKey } from '../store/signing-keys.js';
import { publicKeyFromJwk, signCompactAsync } from './jws.js';

// The key ring: Ed25519 keys in the database so every instance signs with the same active key
// and publishes the same JWKS; retired keys stay published so old receipts keep verifying.

const KEYRING_LOCK = 72_620_002;
/** How long an instance trusts its view of the active key before re-reading (rotation by another instance). */
const ACTIVE_TTL_MS = 30_000;
/** An unknown kid re-reads the table at most this often, so garbage kids cannot hammer the database. */
const MISS_RELOAD_MS = 1_000;

export interface PublicJwk {
  kty: 'OKP';
  crv: 'Ed25519';
  x: string;
  kid: string;
  alg: 'EdDSA';
  use: 'sig';
}

export interface KeyRing {
  /** Signs a payload with the active key. */
  sign(payload: object): Promise<{ jws: string; kid: string }>;
  /**
   * Signs arbitrary bytes with the active key as a JWS (RFC 7515) whose protected header is
   * `header` plus alg EdDSA and the key's kid; returns the base64url protected header and
   * signature, for flattened or detached JWS (A2A agent card signatures, docs/agents.md).
   */
  signJws(payload: string, header: Record<string, unknown>): Promise<{ protected: string; signature: string; kid: string }>;
  /** Every published public key (active first). */
  jwks(): Promise<{ keys: PublicJwk[] }>;
  /** The public key for a kid, or null when it is not ours. */
  publicKey(kid: string): Promise<KeyObject | null>;
  /** Forgets cached keys (after a rotation in this process). */
  refresh(): void;
}

export async function jwkThumbprint(jwk: { kty?: string; crv?: string; x?: string }): Promise<string> {
  return calculateJwkThumbprint({ kty: jwk.kty, crv: jwk.crv, x: jwk.x }, 'sha256');
}

function generate(): { public_jwk: Record<string, string>; private_jwk: Record<string, string> } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  return {
    public_jwk: publicKey.export({ format: 'jwk' }) as Record<string, string>,
    private_jwk: privateKey.export({ format: 'jwk' }) as Record<string, string>,
  };
}

/** Generates a new key and makes it the active one; the old key stays published. Returns its kid. */
export async function rotateSigningKey(db: Db, now: Date = new Date()): Promise<string> {
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [KEYRING_LOCK]);
    const k = generate();
    const kid = await jwkThumbprint(k.public_jwk);
    await signingKeyStore(tx).activate({ kid, public_jwk: k.public_jwk, private_jwk: k.private_jwk }, now);
    return kid;
  });
}

/**
 * Opens the key ring. With SIGNING_KEY_JWK that key signs (its public half is recorded so it stays
 * in the JWKS after the operator moves to another); otherwise the active key in the database does,
 * generated on first start under an advisory lock so concurrent first starts agree on one key.
 */
export async function openKeyRing(db: Db, opts: { signingKeyJwk: string | null; now?: () => Date }): Promise<KeyRing> {
  const now = opts.now ?? (() => new Date());
  let envKey: { kid: string; key: KeyObject } | null = null;
  if (opts.signingKeyJwk) {
    const jwk = JSON.parse(opts.signingKeyJwk) as Record<string, string>;
    const key = createPrivateKey({ key: jwk, format: 'jwk' });
    const pub = publicKeyFromJwk(jwk).export({ format: 'jwk' }) as Record<string, string>;
    const kid = await jwkThumbprint(pub);
    envKey = { kid, key };
    await db.transaction(async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [KEYRING_LOCK]);
      const store = signingKeyStore(tx);
      if ((await store.active())?.kid !== kid) await store.activate({ kid, public_jwk: pub, private_jwk: null }, now());
    });
  } else {
    await db.transaction(async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [KEYRING_LOCK]);
      const store = signingKeyStore(tx);
      const active = await store.active();
      if (!active || active.private_jwk === null) {
        const k = generate();
        await store.activate({ kid: await jwkThumbprint(k.public_jwk), ...k }, now());
      }
    });
  }

  const store = signingKeyStore(db);
  let all: StoredKey[] = [];
  let publicKeys = new Map<string, KeyObject>();
  let active: { kid: string; key: KeyObject } | null = null;
  let loadedAt = 0;
  let loading: Promise<void> | null = null;

  async function load() {
    all = await store.all();
    publicKeys = new Map(all.map((k) => [k.kid, publicKeyFromJwk(k.public_jwk)]));
    const a = all.find((k) => k.active);
    if (envKey) active = envKey;
    else if (a?.private_jwk) active = { kid: a.kid, key: createPrivateKey({ key: a.private_jwk, format: 'jwk' }) };
    loadedAt = Date.now();
  }
  function ensure(maxAgeMs: number): Promise<void> {
    if (Date.now() - loadedAt < maxAgeMs && active) return Promise.resolve();
    loading ??= load().finally(() => {
      loading = null;
    });
    return loading;
  }
  await load();

  return {
    async sign(payload) {
      await ensure(ACTIVE_TTL_MS);
      if (!active) throw new Error('no active signing key');
      const { key, kid } = active;
      return { jws: await signCompactAsync(payload, key, kid), kid };
    },
    async signJws(payload, header) {
      await ensure(ACTIVE_TTL_MS);
      if (!active) throw new Error('no active signing key');
      const { key, kid } = active;
      const protectedHeader = Buffer.from(JSON.stringify({ ...header, alg: 'EdDSA', kid }), 'utf8').toString('base64url');
      const input = `${protectedHeader}.${Buffer.from(payload, 'utf8').toString('base64url')}`;
      const signature = await new Promise<Buffer>((resolve, reject) => edSign(null, Buffer.from(input), key, (err, sig) => (err ? reject(err) : resolve(sig))));
      return { protected: protectedHeader, signature: signature.toString('base64url'), kid };
    },
    async jwks() {
      await ensure(ACTIVE_TTL_MS);
      const sorted = [...all].sort((a, b) => Number(b.active) - Number(a.active));
      return {
        keys: sorted.map((k) => ({ kty: 'OKP', crv: 'Ed25519', x: k.public_jwk.x!, kid: k.kid, alg: 'EdDSA', use: 'sig' }) as PublicJwk),
      };
    },
    async publicKey(kid) {
      const hit = publicKeys.get(kid);
      if (hit) return hit;
      await ensure(MISS_RELOAD_MS);
      return publicKeys.get(kid) ?? null;
    },
    refresh() {
      loadedAt = 0;
    },
  };
}
