-- Private signing keys at rest are sealed (AES-256-GCM under the key-encryption secret, kid as
-- associated data; src/signing/key-encryption.ts) in private_key_enc. private_jwk (clear) is no
-- longer written: the key ring seals what an earlier version left there at its next start and
-- clears it (the SQL here cannot: it has no secret). Only the active key keeps a private half;
-- retired keys only verify what they signed before retired_at, revoked keys verify nothing.
ALTER TABLE signing_keys ADD COLUMN private_key_enc text;
ALTER TABLE signing_keys ADD COLUMN revoked_at timestamptz;
