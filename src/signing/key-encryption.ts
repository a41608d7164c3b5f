import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';
import { linkSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ConfigError, type Config } from '../config.js';
import { DataDirError, ensurePrivateDir, readOwnFile, tightenTree } from '../db/data-dir.js';
import { KEY_ENCRYPTION_SECRET_HELP as SECRET_HELP, parseKeyEncryptionSecret } from './secret-format.js';

// Private signing keys are never stored in clear (issue 17 finding 3): each one is sealed with
// AES-256-GCM under a key derived (HKDF-SHA256) from the key-encryption secret, with the key's
// kid as associated data, so a sealed key cannot be moved onto another key's row. The secret
// comes from KEY_ENCRYPTION_KEY or KEY_ENCRYPTION_KEY_FILE (required with NODE_ENV=production);
// outside production without one, it is generated into DATA_DIR (docs/receipts.md "Keys at rest").

/** A start-up refusal about the stored keys and the secret: printed as one line, never a stack. */
export class KeyEncryptionError extends Error {
  override name = 'KeyEncryptionError';
}

/** Name of the generated secret file inside DATA_DIR. */
export const GENERATED_SECRET_FILE = 'key-encryption.key';

const FORMAT = 'v1';
const HKDF_INFO = 'trust-observatory signing-key encryption v1';
const FINGERPRINT_LABEL = 'trust-observatory key-encryption fingerprint v1';

export interface KeyEncryptionKey {
  /** Public fingerprint of the secret (16 hex): says which secret sealed a key without revealing it. */
  readonly fingerprint: string;
  /** Where the secret came from, for messages (never the secret itself). */
  readonly source: string;
  /** Seals a private JWK for the row of `kid`. */
  seal(kid: string, privateJwk: Record<string, string>): string;
  /** Opens what `seal` produced for `kid`; a wrong secret or a moved/tampered value is a KeyEncryptionError. */
  open(kid: string, sealed: string): Record<string, string>;
}

export function keyEncryptionKey(secret: Buffer, source: string): KeyEncryptionKey {
  if (secret.length !== 32) throw new Error('the key-encryption secret must be 32 bytes');
  const key = Buffer.from(hkdfSync('sha256', secret, Buffer.alloc(0), HKDF_INFO, 32));
  const fingerprint = createHmac('sha256', secret).update(FINGERPRINT_LABEL).digest('hex').slice(0, 16);
  return {
    fingerprint,
    source,
    seal(kid, privateJwk) {
      const iv = randomBytes(12);
      const c = createCipheriv('aes-256-gcm', key, iv);
      c.setAAD(Buffer.from(kid, 'utf8'));
      const ct = Buffer.concat([c.update(JSON.stringify(privateJwk), 'utf8'), c.final()]);
      return [FORMAT, fingerprint, iv.toString('base64url'), ct.toString('base64url'), c.getAuthTag().toString('base64url')].join('.');
    },
    open(kid, sealed) {
      const parts = sealed.split('.');
      if (parts.length !== 5 || parts[0] !== FORMAT) {
        throw new KeyEncryptionError(`the stored private key ${kid} is not in a format this version reads (expected ${FORMAT})`);
      }
      const [, fp, iv, ct, tag] = parts as [string, string, string, string, string];
      if (fp !== fingerprint) {
        throw new KeyEncryptionError(
          `the signing key ${kid} in the database was encrypted with another key-encryption secret (fingerprint ${fp}); the configured one (${source}, fingerprint ${fingerprint}) cannot decrypt it. ` +
            'Start with the secret it was encrypted with, or run `observatory keys rotate` with this one: the old key retires (receipts it signed keep verifying) and a new key is sealed under this secret',
        );
      }
      try {
        const d = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
        d.setAAD(Buffer.from(kid, 'utf8'));
        d.setAuthTag(Buffer.from(tag, 'base64url'));
        const text = Buffer.concat([d.update(Buffer.from(ct, 'base64url')), d.final()]).toString('utf8');
        return JSON.parse(text) as Record<string, string>;
      } catch {
        throw new KeyEncryptionError(
          `the encrypted signing key ${kid} does not decrypt with the configured secret (${source}), whose fingerprint matches: the stored value was altered or moved from another key's row. Revoke it with \`observatory keys revoke ${kid}\``,
        );
      }
    },
  };
}

/** Reads a secret file; problems are ConfigErrors naming KEY_ENCRYPTION_KEY_FILE. */
function readSecretFile(path: string, variable = 'KEY_ENCRYPTION_KEY_FILE'): Buffer {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(variable, `cannot read ${resolve(path)} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return parseSecret(text, path, variable);
}

function parseSecret(text: string, path: string, variable: string): Buffer {
  const secret = parseKeyEncryptionSecret(text);
  if (!secret) throw new ConfigError(variable, `${resolve(path)} must hold ${SECRET_HELP}`);
  return secret;
}

/**
 * The generated secret file, read only when it is this user's own regular file: opened without
 * following a link (O_NOFOLLOW) and checked on the open file (fstat), so a key-encryption.key
 * planted by another user, or a link put in its place, stops start-up (DataDirError) instead of
 * becoming the sealing secret. Group/other bits on our own file are taken off, as in DATA_DIR.
 * null: there is none.
 */
function readGeneratedSecretFile(path: string): Buffer | null {
  let text: string | null;
  try {
    text = readOwnFile('DATA_DIR', path, 'tighten');
  } catch (err) {
    if (err instanceof DataDirError) throw err;
    throw new ConfigError('DATA_DIR', `cannot read ${resolve(path)} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return text === null ? null : parseSecret(text, path, 'DATA_DIR');
}

/**
 * The generated secret of DATA_DIR: read when present, otherwise created (0600 in a 0700
 * directory), atomically. DATA_DIR, everything in it and the directories above it are checked
 * first (src/db/data-dir.ts): another user's entry or a link stops start-up.
 */
function generatedSecret(dataDir: string): { secret: Buffer; path: string; created: boolean } {
  ensurePrivateDir(dataDir);
  tightenTree(dataDir);
  const path = join(dataDir, GENERATED_SECRET_FILE);
  const existing = readGeneratedSecretFile(path);
  if (existing) return { secret: existing, path, created: false };
  // Created exclusively under a name nobody can predict: never written through a planted link.
  const tmp = `${path}.${randomBytes(8).toString('hex')}.tmp`;
  writeFileSync(tmp, `${randomBytes(32).toString('base64url')}\n`, { mode: 0o600, flag: 'wx' });
  let created = true;
  try {
    linkSync(tmp, path); // fails if another process created it first: then we read theirs
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
      rmSync(tmp, { force: true });
      throw err;
    }
    created = false;
  }
  rmSync(tmp, { force: true });
  const secret = readGeneratedSecretFile(path);
  if (!secret) throw new ConfigError('DATA_DIR', `${resolve(path)} disappeared while it was being created`);
  return { secret, path, created };
}

export interface ResolvedKeyEncryption {
  /** null: no private key is kept in the database (SIGNING_KEY_JWK without a configured secret). */
  kek: KeyEncryptionKey | null;
  /** Something the operator should read at start-up (a generated secret shared through PostgreSQL). */
  warning?: string;
}

/**
 * Where the key-encryption secret comes from (docs/receipts.md "Keys at rest"):
 * KEY_ENCRYPTION_KEY, else KEY_ENCRYPTION_KEY_FILE; without either, SIGNING_KEY_JWK means no
 * private key is stored (no secret needed); NODE_ENV=production refuses to start; an in-memory
 * database gets a random secret held in memory; otherwise DATA_DIR/key-encryption.key.
 */
export function resolveKeyEncryptionKey(
  config: Pick<Config, 'keyEncryptionKey' | 'keyEncryptionKeyFile' | 'production' | 'signingKeyJwk' | 'dataDir'>,
  db: { kind: 'postgres' | 'pglite'; ephemeral: boolean },
): ResolvedKeyEncryption {
  if (config.keyEncryptionKey) return { kek: keyEncryptionKey(config.keyEncryptionKey, 'KEY_ENCRYPTION_KEY') };
  if (config.keyEncryptionKeyFile) {
    return { kek: keyEncryptionKey(readSecretFile(config.keyEncryptionKeyFile), `KEY_ENCRYPTION_KEY_FILE ${resolve(config.keyEncryptionKeyFile)}`) };
  }
  if (config.signingKeyJwk) return { kek: null };
  if (config.production) {
    throw new ConfigError(
      'KEY_ENCRYPTION_KEY',
      `required when NODE_ENV=production, so that private signing keys are stored encrypted: set KEY_ENCRYPTION_KEY (${SECRET_HELP}) or KEY_ENCRYPTION_KEY_FILE, the same on every instance, or supply the key itself in SIGNING_KEY_JWK`,
    );
  }
  if (db.ephemeral) return { kek: keyEncryptionKey(randomBytes(32), 'a random secret held in memory (in-memory database)') };
  const g = generatedSecret(config.dataDir);
  const kek = keyEncryptionKey(g.secret, `the generated secret in ${resolve(g.path)}`);
  if (db.kind === 'postgres') {
    return {
      kek,
      warning: `KEY_ENCRYPTION_KEY is not set: private signing keys in PostgreSQL are encrypted under ${g.created ? 'a secret just generated into' : 'the secret generated earlier into'} ${resolve(g.path)}. Every instance sharing this database needs that secret (KEY_ENCRYPTION_KEY_FILE); NODE_ENV=production requires it to be set explicitly`,
    };
  }
  return { kek };
}
