-- Signed x402 payments (EIP-3009 authorizations, x402 v2 PAYMENT-SIGNATURE or v1 X-Payment
-- payloads), settled through the facilitator. The primary key is the payment's identity:
-- network, token, payer and EIP-3009 nonce, lower-case. It is claimed before settlement, so one
-- authorization buys one verdict across all instances; a claim whose settlement failed outright
-- is released (settled_at stays null) so the payer may try again.
CREATE TABLE payment_authorizations (
  authorization_id text PRIMARY KEY,
  x402_version integer NOT NULL,
  payer text NOT NULL,
  amount_units numeric NOT NULL,
  server_url text NOT NULL,
  claimed_at timestamptz NOT NULL,
  settle_transaction text,
  settled_at timestamptz,
  receipt_id text
);

-- How a row of payments was paid: 'tx_hash' (a transaction hash with the payer's proof) or
-- 'facilitator' (the settlement transaction of a signed payment, recorded so that its hash can
-- never pay a second time through the hash path).
ALTER TABLE payments ADD COLUMN method text NOT NULL DEFAULT 'tx_hash';
