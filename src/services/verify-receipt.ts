import type { MessageInitShape } from '@bufbuild/protobuf';
import type { VerifyReceiptRequest, VerifyReceiptResponseSchema } from '../../gen/observatory/v1/receipt_pb.js';
import type { CallContext, ServiceDeps } from './context.js';

/** ReceiptService.VerifyReceipt: THE implementation of GET /v1/verify-receipt?id=. */
export function createVerifyReceiptService({ receipts, now }: ServiceDeps) {
  return {
    async verifyReceipt(req: Partial<VerifyReceiptRequest>, _ctx?: CallContext): Promise<MessageInitShape<typeof VerifyReceiptResponseSchema>> {
      const id = (req.id ?? '').trim();
      const row = await receipts.get(id);
      const checkedAt = now().toISOString();
      if (!row) return { receiptId: id, found: false, valid: false, checkedAt, reason: 'no receipt with this id was issued here' };
      // Live check at each request: signature against the published keys, and the signed jti is this id.
      const outcome = await receipts.verify(row.jws);
      let reason: string | undefined;
      if (!outcome.valid) reason = outcome.reason;
      else if (outcome.payload.jti !== id) reason = 'the signed jti does not match this receipt id';
      return {
        receiptId: id,
        found: true,
        valid: reason === undefined,
        checkedAt,
        kid: row.kid,
        kind: row.kind,
        issuedAt: row.issued_at.toISOString(),
        // What was signed, when it verifies: the stored copy is not what valid:true vouches for.
        claim: (outcome.valid && reason === undefined ? outcome.payload : row.claim) as never,
        jws: row.jws,
        reason,
      };
    },
  };
}
