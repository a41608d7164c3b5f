import { createPrivateKey, randomBytes, type KeyObject } from 'node:crypto';
import type { Queryable } from '../../src/db/index.js';
import { keyEncryptionKey, type KeyEncryptionKey } from '../../src/signing/key-encryption.js';

/** The key-encryption secret tests run with (KEY_ENCRYPTION_KEY), one per test process. */
export const TEST_KEK_TEXT = randomBytes(32).toString('base64');
export const testKek: KeyEncryptionKey = keyEncryptionKey(Buffer.from(TEST_KEK_TEXT, 'base64'), 'the test secret');

/** The active private key, unsealed with `kek` (what an attacker holding the secret and the database would have). */
export async function activePrivateKey(db: Queryable, kek: KeyEncryptionKey): Promise<{ kid: string; key: KeyObject; jwk: Record<string, string> }> {
  const [row] = await db.query<{ kid: string; private_key_enc: string }>('SELECT kid, private_key_enc FROM signing_keys WHERE active');
  if (!row?.private_key_enc) throw new Error('no sealed active key');
  const jwk = kek.open(row.kid, row.private_key_enc);
  return { kid: row.kid, key: createPrivateKey({ key: jwk, format: 'jwk' }), jwk };
}
