import { HTTPFacilitatorClient } from '@x402/core/http';
import { SettleError, VerifyError, type PaymentPayload, type PaymentRequirements, type SettleResponse, type VerifyResponse } from '@x402/core/types';

// Signed x402 payments are verified and settled by a facilitator (FACILITATOR_URL) through its
// standard endpoints, POST {url}/verify and POST {url}/settle, with the x402 request shapes
// {x402Version, paymentPayload, paymentRequirements}. @x402/core's HTTPFacilitatorClient speaks
// them; this module only turns its errors into three outcomes the service can answer with.

export type FacilitatorOutcome<T> = { ok: true; value: T } | { ok: false; unavailable: true; detail: string };

export interface Facilitator {
  verify(payload: PaymentPayload, requirements: PaymentRequirements): Promise<FacilitatorOutcome<VerifyResponse>>;
  settle(payload: PaymentPayload, requirements: PaymentRequirements): Promise<FacilitatorOutcome<SettleResponse>>;
}

export function createFacilitator(url: string, opts: { timeoutMs?: number } = {}): Facilitator {
  const client = new HTTPFacilitatorClient({ url, timeoutMs: opts.timeoutMs ?? 20_000 });
  const unavailable = (err: unknown) => ({ ok: false as const, unavailable: true as const, detail: (err as Error)?.name || 'error' });
  return {
    async verify(payload, requirements) {
      try {
        return { ok: true, value: await client.verify(payload, requirements) };
      } catch (err) {
        // A non-2xx answer that still carries a verify response is a verdict, not an outage.
        if (err instanceof VerifyError) return { ok: true, value: { isValid: false, invalidReason: err.invalidReason ?? 'invalid', invalidMessage: err.invalidMessage, payer: err.payer } };
        return unavailable(err);
      }
    },
    async settle(payload, requirements) {
      try {
        return { ok: true, value: await client.settle(payload, requirements) };
      } catch (err) {
        if (err instanceof SettleError) {
          return { ok: true, value: { success: false, errorReason: err.errorReason ?? 'settle_failed', errorMessage: err.errorMessage, payer: err.payer, transaction: err.transaction ?? '', network: err.network } };
        }
        return unavailable(err);
      }
    },
  };
}
