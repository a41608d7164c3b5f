import type { MessageInitShape } from '@bufbuild/protobuf';
import { isAddressEqual } from 'viem';
import { encodePaymentRequiredHeader, encodePaymentResponseHeader } from '@x402/core/http';
import type { PaymentPayload, PaymentRequirements, SettleResponse } from '@x402/core/types';
import { PaymentRequiredSchema } from '../../gen/observatory/v1/access_pb.js';
import { clientNetwork } from '../domain/client-network.js';
import { createTokenBuckets } from '../domain/token-bucket.js';
import {
  PAID_ANSWER_CACHE_CONTROL,
  PAYMENT_REQUIRED_CACHE_CONTROL,
  PRICE,
  X402_VERSION,
  acceptsOurTerms,
  authorizationId,
  eip3009Authorization,
  evaluatePayment,
  parsePaymentSignature,
  parseXPayment,
  paymentChain,
  paymentFailureText,
  paymentInstructions,
  paymentSummaryHeader,
  proofFresh,
  proofSigner,
  transferFresh,
  x402Accepts,
  x402PaymentRequired,
  x402V2Requirements,
  type PaymentFailure,
  type PaymentTerms,
  type XPayment,
} from '../domain/x402.js';
import { ObservatoryError } from '../errors.js';
import { messageJson } from '../domain/message-json.js';
import { createPaymentVerifier, type PaymentVerifier } from '../payments/chain.js';
import { createFacilitator, type Facilitator } from '../payments/facilitator.js';
import { paymentStore } from '../store/payments.js';
import { clientAddressKey, type CallContext, type ServiceDeps } from './context.js';

// x402 payments for paid verdicts (docs/access.md "Paying per verdict"). Three ways to pay:
//  - x402 v2: PAYMENT-SIGNATURE carries a PaymentPayload (EIP-3009 authorization); verified and
//    settled through FACILITATOR_URL; identity = the authorization's nonce.
//  - x402 v1 payload: X-Payment carries a v1 PaymentPayload; same facilitator, v1 shapes.
//  - transaction hash: X-Payment carries the hash of a mined USDC transfer plus the payer's
//    signed proof; checked on chain (PAYMENT_RPC_URL) within PAYMENT_MAX_AGE_SECONDS.
// Every payment is claimed in the database before the verdict is handed out, so each pays once
// across all instances. Paid answers carry PAYMENT-RESPONSE (a base64 x402 SettleResponse).

export interface PaymentServiceOptions {
  /** On-chain look-up of transaction hashes; defaults to viem over PAYMENT_RPC_URL. */
  paymentVerifier?: PaymentVerifier;
  /** Facilitator for signed payments; defaults to FACILITATOR_URL (none when unset). */
  facilitator?: Facilitator | null;
}

/** What a paid request delivers: the verdict, whose receipt id is recorded beside the payment. */
export interface Deliverable {
  receiptId?: string;
}

export function createPaymentService(deps: ServiceDeps, opts: PaymentServiceOptions = {}) {
  const { db, config, now } = deps;
  const store = paymentStore(db);
  const chain = paymentChain(config.paymentNetwork);
  const wallet = config.paymentWallet;
  const maxAge = config.paymentMaxAgeSeconds;
  const verifier = opts.paymentVerifier ?? createPaymentVerifier(config.paymentRpcUrl, { chainId: chain.chainId });
  const facilitator = opts.facilitator !== undefined ? opts.facilitator : config.facilitatorUrl ? createFacilitator(config.facilitatorUrl) : null;
  // Payment look-ups (the chain's RPC, the facilitator's /verify) per client network (an IPv6 /64
  // counts as one client), and from all networks together, per instance.
  const lookups = config.paymentLookupsPerMinute > 0 ? createTokenBuckets(config.paymentLookupsPerMinute, { now: () => now().getTime(), maxClients: 50_000 }) : null;
  const allLookups = config.paymentLookupsTotalPerMinute > 0 ? createTokenBuckets(config.paymentLookupsTotalPerMinute, { now: () => now().getTime(), maxClients: 1 }) : null;

  const terms = (resource: string): PaymentTerms => ({ wallet, resource, baseUrl: config.publicBaseUrl, chain, facilitator: facilitator !== null, maxAgeSeconds: maxAge });
  const resourceFor = (slug: string) => `${config.publicBaseUrl}/agent-query/${encodeURIComponent(slug)}`;

  /** The 402: v1 body (DECISIONS.md), the v2 PAYMENT-REQUIRED header, the summary headers. */
  function paymentRequired(slug: string, reason: 'credentials_missing' | 'trial_exhausted' | PaymentFailure, detail: string): ObservatoryError {
    const t = terms(resourceFor(slug));
    const msg: MessageInitShape<typeof PaymentRequiredSchema> = {
      wallet: wallet ?? undefined,
      amount: PRICE.amount,
      currency: PRICE.currency,
      chain: chain.v1Network,
      chainId: chain.chainId,
      instructions: paymentInstructions(t),
      accepts: x402Accepts(t) as never,
      to: wallet ?? undefined,
      x402Version: X402_VERSION,
      paymentsEnabled: wallet !== null,
    };
    // No cache keeps or replays a payment-required answer (as @x402/core's server answers a 402).
    const headers: Record<string, string> = { 'x-payment-required': paymentSummaryHeader(chain), 'cache-control': PAYMENT_REQUIRED_CACHE_CONTROL };
    if (wallet) headers['x-payment-wallet'] = wallet;
    const v2 = x402PaymentRequired(t, detail);
    if (v2) headers['payment-required'] = encodePaymentRequiredHeader(v2);
    const err = new ObservatoryError('payment_required', detail, {
      // x402 v1 clients read x402Version / accepts / error; the snake_case members are DECISIONS.md's.
      extra: { ...messageJson(PaymentRequiredSchema, msg), asset: chain.asset, network: chain.network, reason, x402Version: X402_VERSION, error: detail },
      headers,
    });
    err.details.push({ desc: PaymentRequiredSchema, value: msg });
    return err;
  }

  const refuse = (slug: string, f: PaymentFailure, more?: string) => {
    const text = paymentFailureText(f, chain, maxAge);
    return paymentRequired(slug, f, more ? `${text}: ${more}` : text);
  };
  const upstream = (what: string) =>
    new ObservatoryError('upstream_error', `the payment could not be checked: ${what} is unavailable; retry shortly with the same payment`, { headers: { 'retry-after': '5' } });

  function paid(ctx: CallContext | undefined, settle: SettleResponse, v1Header: boolean) {
    const value = encodePaymentResponseHeader(settle);
    ctx?.responseHeader?.set('payment-response', value);
    ctx?.responseHeader?.set('cache-control', PAID_ANSWER_CACHE_CONTROL);
    if (v1Header) ctx?.responseHeader?.set('x-payment-response', value);
  }

  /**
   * Before a payment look-up that goes over the network (the chain's RPC, the facilitator's
   * /verify): one token of the client network's allowance (429), then one of the instance's
   * (503: many networks together would spend the RPC endpoint's or the facilitator's own quota,
   * and with it every payer's look-ups). Payments that need no look-up cost nothing.
   */
  function throttle(ctx: CallContext | undefined, where: string) {
    if (lookups) {
      const address = ctx?.values.get(clientAddressKey);
      const d = lookups.take(address ? clientNetwork(address) : 'unknown');
      if (!d.allowed) {
        throw new ObservatoryError(
          'rate_limited',
          `at most ${config.paymentLookupsPerMinute} payment look-ups ${where} per minute from one client network; retry in ${d.retryAfterSeconds} s`,
          { headers: { 'retry-after': String(d.retryAfterSeconds) }, extra: { retry_after_seconds: d.retryAfterSeconds } },
        );
      }
    }
    if (allLookups) {
      const d = allLookups.take('all');
      if (!d.allowed) {
        throw new ObservatoryError(
          'unavailable',
          `this instance makes at most ${config.paymentLookupsTotalPerMinute} payment look-ups a minute (PAYMENT_LOOKUPS_TOTAL_PER_MINUTE), all clients together; retry in ${d.retryAfterSeconds} s with the same payment`,
          { headers: { 'retry-after': String(d.retryAfterSeconds) }, extra: { retry_after_seconds: d.retryAfterSeconds } },
        );
      }
    }
  }

  async function payByTransaction<T extends Deliverable>(x: Extract<XPayment, { kind: 'tx' }>, slug: string, serverUrl: string, ctx: CallContext | undefined, deliver: () => Promise<T>): Promise<T> {
    const { txHash, proof } = x;
    // What costs next to nothing comes first: a hash without its payer's proof is refused at once.
    if (!proof) throw refuse(slug, 'payment_proof_missing');
    if (proof.signature === '0x') throw refuse(slug, 'payment_proof_invalid', 'resource (string), issued_at (unix seconds) and signature (0x + 130 hex) are required');
    if (!proofFresh(proof.issuedAt, now(), maxAge)) throw refuse(slug, 'payment_proof_expired');
    if (proof.resource !== resourceFor(slug)) throw refuse(slug, 'payment_proof_invalid', `it names ${proof.resource.slice(0, 200)}, this resource is ${resourceFor(slug)}`);
    // Recovering the proof's signer costs about 1.5 ms of CPU on the event loop, and anyone can send
    // well-formed signatures: it takes the client network's look-up token like the chain look-up.
    throttle(ctx, 'on the chain');
    const signer = await proofSigner(txHash, proof);
    if (!signer) throw refuse(slug, 'payment_proof_invalid');
    // No early "already used?" answer: it would tell anyone holding a public hash whether its payer
    // bought a verdict with it. A replay is found by the claim, after the proof matched the payer.
    const look = await verifier.lookup(txHash);
    if (!look.ok) {
      if (look.failure === 'rpc_unavailable') throw upstream('the chain RPC');
      throw refuse(slug, look.failure);
    }
    if (!transferFresh(look.minedAt, now(), maxAge)) throw refuse(slug, 'payment_expired');
    const verdict = evaluatePayment(look.receipt, wallet!, chain.asset, signer);
    if (!verdict.ok) throw refuse(slug, verdict.failure);
    const claimed = await store.claim({ txHash, payer: verdict.payer, units: verdict.units, blockNumber: look.receipt.blockNumber, serverUrl, at: now() });
    if (!claimed) throw refuse(slug, 'payment_replayed');
    let result: T;
    try {
      result = await deliver();
    } catch (err) {
      // No verdict, no charge: the hash stays usable by its payer.
      await store.release(txHash).catch(() => {});
      throw err;
    }
    if (result.receiptId) await store.attachReceipt(txHash, result.receiptId);
    paid(ctx, { success: true, transaction: txHash, network: chain.network, payer: verdict.payer, amount: verdict.units.toString() }, false);
    return result;
  }

  async function payBySignature<T extends Deliverable>(payload: PaymentPayload, slug: string, serverUrl: string, ctx: CallContext | undefined, deliver: () => Promise<T>): Promise<T> {
    if (!facilitator) throw refuse(slug, 'payment_needs_facilitator');
    const t = terms(resourceFor(slug));
    const requirements = (payload.x402Version === 2 ? x402V2Requirements(t)[0] : x402Accepts(t)[0]) as PaymentRequirements;
    if (!acceptsOurTerms(payload, requirements)) throw refuse(slug, 'payment_mismatch');
    const auth = eip3009Authorization(payload);
    if (!auth) throw refuse(slug, 'payment_unsupported');
    if (!isAddressEqual(auth.to, wallet as `0x${string}`) || auth.value < PRICE.units) throw refuse(slug, 'payment_mismatch', 'the authorization must pay at least the amount to payTo');
    const id = authorizationId(chain, auth);
    if (await store.authorizationExists(id)) throw refuse(slug, 'payment_replayed');
    // Anyone can sign an authorization with a fresh key: each costs a call to the facilitator.
    throttle(ctx, 'at the facilitator');
    const verified = await facilitator.verify(payload, requirements);
    if (!verified.ok) throw upstream('the facilitator');
    if (!verified.value.isValid) throw refuse(slug, 'payment_invalid', [verified.value.invalidReason, verified.value.invalidMessage].filter(Boolean).join(': ').slice(0, 300));
    const claimed = await store.claimAuthorization({ id, x402Version: payload.x402Version, payer: auth.from, units: auth.value, serverUrl, at: now() });
    if (!claimed) throw refuse(slug, 'payment_replayed');
    let result: T;
    try {
      result = await deliver();
    } catch (err) {
      await store.releaseAuthorization(id).catch(() => {});
      throw err;
    }
    const settled = await facilitator.settle(payload, requirements);
    // An unanswered settle may still have gone through on chain: keep the claim (the nonce is spent
    // or will never be accepted again by us), and say so.
    if (!settled.ok) throw new ObservatoryError('upstream_error', 'the facilitator did not answer the settlement; its outcome is unknown, so this authorization will not be accepted again; pay with a fresh one', { headers: { 'retry-after': '5' } });
    if (!settled.value.success || settled.value.transaction === '') {
      await store.releaseAuthorization(id).catch(() => {});
      throw refuse(slug, 'payment_settle_failed', [settled.value.errorReason, settled.value.errorMessage].filter(Boolean).join(': ').slice(0, 300));
    }
    // The settlement transaction is a USDC transfer to our wallet: record its hash so it can never
    // pay again through the transaction-hash path.
    const recorded = await store.claim({ txHash: settled.value.transaction, payer: auth.from, units: auth.value, blockNumber: null, serverUrl, at: now(), method: 'facilitator' });
    if (!recorded) throw refuse(slug, 'payment_replayed', 'the facilitator reported a settlement transaction that has already paid');
    await store.authorizationSettled(id, { transaction: settled.value.transaction, receiptId: result.receiptId ?? null, at: now() });
    if (result.receiptId) await store.attachReceipt(settled.value.transaction, result.receiptId);
    paid(ctx, settled.value, payload.x402Version === 1);
    return result;
  }

  return {
    chain,
    paymentRequired,
    /** Whether the request carries any payment header (PAYMENT-SIGNATURE or X-Payment). */
    carriesPayment(headers: Headers): boolean {
      return (headers.get('payment-signature') ?? '').trim() !== '' || (headers.get('x-payment') ?? '').trim() !== '';
    },

    /**
     * Takes the request's payment for one verdict of `serverUrl`; `deliver` produces it and is
     * called only once the payment is verified and claimed.
     */
    async pay<T extends Deliverable>(slug: string, serverUrl: string, ctx: CallContext | undefined, deliver: () => Promise<T>): Promise<T> {
      if (!wallet) throw refuse(slug, 'payments_disabled');
      const headers = ctx?.requestHeader ?? new Headers();
      const signature = (headers.get('payment-signature') ?? '').trim();
      if (signature !== '') {
        const payload = parsePaymentSignature(signature);
        if (!payload) throw refuse(slug, 'payment_malformed');
        return payBySignature(payload, slug, serverUrl, ctx, deliver);
      }
      const x = parseXPayment(headers.get('x-payment') ?? '');
      if (!x) throw refuse(slug, 'payment_malformed');
      if (x.kind === 'x402v1') return payBySignature(x.payload, slug, serverUrl, ctx, deliver);
      return payByTransaction(x, slug, serverUrl, ctx, deliver);
    },

    /** The payment configuration of /api/payment-info, beyond the price. */
    info() {
      const t = terms(`${config.publicBaseUrl}/agent-query/{server_slug}`);
      return { terms: t, instructions: paymentInstructions(t), facilitator: facilitator !== null };
    },
  };
}

export type PaymentService = ReturnType<typeof createPaymentService>;
