import { randomBytes } from 'node:crypto';
import type { Queryable } from '../db/index.js';
import { receiptStore } from '../store/receipts.js';
import type { KeyRing } from './keyring.js';
import { verifyCompact, type VerifyOutcome } from './jws.js';

// Diligence receipts (SPEC 2.4, DECISIONS.md "Receipts and signatures"): a signed claim with
// iss, sub, iat, jti (= receipt_id) and kind, stored so /v1/receipt/{id} can resolve it.

export const RECEIPT_KINDS = ['preflight', 'compliance', 'agent_query', 'gateway', 'attestation', 'drift_baseline'] as const;
export type ReceiptKind = (typeof RECEIPT_KINDS)[number];
export const RECEIPT_ID_PATTERN = /^[0-9a-f]{16}$/;

export interface IssuedReceipt {
  receiptId: string;
  jws: string;
  kid: string;
  issuedAt: Date;
  payload: Record<string, unknown>;
}

// Receipt ids are 8 random bytes (hex); drawn from a pooled CSPRNG buffer, each byte used once,
// instead of one randomBytes call per pre-flight.
let idPool = Buffer.alloc(0);
let idOffset = 0;
export function newReceiptId(): string {
  if (idOffset + 8 > idPool.length) {
    idPool = randomBytes(4096);
    idOffset = 0;
  }
  const id = idPool.toString('hex', idOffset, idOffset + 8);
  idOffset += 8;
  return id;
}

export function createReceiptIssuer(deps: { db: Queryable; keyring: KeyRing; issuer: string; now: () => Date }) {
  const store = receiptStore(deps.db);
  return {
    /**
     * Signs a claim about `sub` and stores it; resolves after the row is committed. `persist:
     * false` signs without storing (statements verifiable offline but not resolvable by id).
     */
    async issue(kind: ReceiptKind, sub: string, claim: Record<string, unknown>, opts: { persist?: boolean; db?: Queryable } = {}): Promise<IssuedReceipt> {
      const issuedAt = deps.now();
      const receiptId = newReceiptId();
      const payload = Object.assign({}, claim, { iss: deps.issuer, sub, iat: Math.floor(issuedAt.getTime() / 1000), jti: receiptId, kind });
      const { jws, kid } = await deps.keyring.sign(payload);
      if (opts.persist !== false) {
        await (opts.db ? receiptStore(opts.db) : store).insert({ receipt_id: receiptId, kind, sub, issued_at: issuedAt, kid, claim: payload, jws });
      }
      return { receiptId, jws, kid, issuedAt, payload };
    },

    /**
     * Verifies any compact JWS against our keys (stateless), now: every verification path (REST,
     * Connect, MCP, A2A, stored receipts) comes here, so each applies the same rules.
     */
    verify(jws: string): Promise<VerifyOutcome> {
      return verifyCompact(jws, (kid) => deps.keyring.verificationKey(kid), { now: deps.now() });
    },

    get: store.get,
  };
}

export type ReceiptIssuer = ReturnType<typeof createReceiptIssuer>;
