// The text form of the key-encryption secret (KEY_ENCRYPTION_KEY, KEY_ENCRYPTION_KEY_FILE):
// 32 bytes as hex, base64 or base64url. Kept apart so config.ts can validate it without crypto.

export const KEY_ENCRYPTION_SECRET_HELP = '32 random bytes, base64 or hex (for example the output of `openssl rand -base64 32`)';

/** The secret as 32 bytes from its text form (surrounding whitespace ignored), or null. */
export function parseKeyEncryptionSecret(text: string): Buffer | null {
  const t = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(t)) return Buffer.from(t, 'hex');
  if (/^[A-Za-z0-9+/_-]{43}=?$/.test(t)) {
    const bytes = Buffer.from(t.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, ''), 'base64url');
    if (bytes.length === 32) return bytes;
  }
  return null;
}
