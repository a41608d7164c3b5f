import type { MessageInitShape } from '@bufbuild/protobuf';
import {
  PaymentRequiredSchema,
  type AgentQueryRequest,
  type AgentQueryResponseSchema,
  type GetPaymentInfoResponseSchema,
  type RegisterAgentRequest,
  type RegisterAgentResponseSchema,
} from '../../gen/observatory/v1/access_pb.js';
import {
  KEY_SCOPES,
  REGISTRATION_LIMIT,
  REGISTRATION_WINDOW_MS,
  TRIAL_LIMIT,
  addressHash,
  bearerToken,
  hashApiKey,
  newApiKey,
  registrationDecision,
  secretDay,
} from '../domain/access.js';
import {
  BASE_USDC,
  PAYMENT_FAILURE_TEXT,
  PAYMENT_REQUIRED_HEADER,
  PRICE,
  X402_VERSION,
  parseXPayment,
  paymentInstructions,
  type PaymentFailure,
  x402Accepts,
} from '../domain/x402.js';
import { ObservatoryError, invalidArgument } from '../errors.js';
import { restJson } from '../http/rest-json.js';
import { createPaymentVerifier, type PaymentVerifier } from '../payments/chain.js';
import { apiKeyStore } from '../store/api-keys.js';
import { addressSecretStore, registrationStore } from '../store/address-hashes.js';
import { paymentStore } from '../store/payments.js';
import { serverStore } from '../store/servers.js';
import { clientAddressKey, type CallContext, type ServiceDeps } from './context.js';
import { networkHasher } from './report-source.js';
import type { TrustService } from './trust.js';
import type { PreflightService } from './preflight.js';

type AgentQueryResult = MessageInitShape<typeof AgentQueryResponseSchema>;

export interface AccessServiceOptions {
  /** The trust read the latency figures come from (public TrustService method). */
  trust: Pick<TrustService, 'getTrust'>;
  /** The shared pre-flight: verdict, score, signed receipt (kind agent_query) and demand signal. */
  preflight: Pick<PreflightService, 'preflight'>;
  /** On-chain payment check; defaults to viem over PAYMENT_RPC_URL. */
  paymentVerifier?: PaymentVerifier;
}

/** AccessService: THE implementation of /agent/auth, /agent-query/{slug} and /api/payment-info. */
export function createAccessService(deps: ServiceDeps, opts: AccessServiceOptions) {
  const { db, config, now, receipts } = deps;
  const keys = apiKeyStore(db);
  const secrets = addressSecretStore(db);
  const registrations = registrationStore(db);
  const payments = paymentStore(db);
  const servers = serverStore(db);
  const hashNetwork = networkHasher(db);
  const verifier = opts.paymentVerifier ?? createPaymentVerifier(config.paymentRpcUrl);
  const base = config.publicBaseUrl;
  const wallet = config.paymentWallet;
  const challenge = `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource"`;

  function paymentRequired(slug: string, reason: 'credentials_missing' | 'trial_exhausted' | PaymentFailure, detail: string): ObservatoryError {
    const resource = `${base}/agent-query/${encodeURIComponent(slug)}`;
    const terms = { wallet, resource, baseUrl: base };
    const msg: MessageInitShape<typeof PaymentRequiredSchema> = {
      wallet: wallet ?? undefined,
      amount: PRICE.amount,
      currency: PRICE.currency,
      chain: PRICE.chain,
      chainId: PRICE.chainId,
      instructions: paymentInstructions(terms),
      accepts: x402Accepts(terms) as never,
      to: wallet ?? undefined,
      x402Version: X402_VERSION,
      paymentsEnabled: wallet !== null,
    };
    const headers: Record<string, string> = { 'x-payment-required': PAYMENT_REQUIRED_HEADER };
    if (wallet) headers['x-payment-wallet'] = wallet;
    const err = new ObservatoryError('payment_required', detail, {
      // x402 v1 clients read x402Version / accepts / error; the snake_case members are DECISIONS.md's.
      extra: { ...restJson(PaymentRequiredSchema, msg), asset: BASE_USDC, reason, x402Version: X402_VERSION, error: detail },
      headers,
    });
    err.details.push({ desc: PaymentRequiredSchema, value: msg });
    return err;
  }

  /**
   * The verdict for one server, signed. Kept in one place so it can later be pointed at the shared
   * pre-flight service: resolve, trust read, verdict band, receipt of kind agent_query.
   */
  async function signedVerdict(serverUrl: string, slug: string, paymentMethod: 'api_key' | 'x402', trialRemaining: number | null): Promise<AgentQueryResult> {
    const t = await opts.trust.getTrust({ url: serverUrl });
    const total = Number(t.metrics?.totalInteractions ?? 0);
    const metrics = {
      avg_latency_ms: total > 0 ? (t.metrics?.avgLatencyMs ?? null) : null,
      success_rate: t.metrics?.successRate ?? null,
      payment_method: paymentMethod,
    };
    // The verdict, score and signed receipt come from the one pre-flight implementation, so a paid
    // verdict is counted as demand and can never disagree with GET /v1/preflight.
    const p = await opts.preflight.preflight({ target: serverUrl }, undefined, { kind: 'agent_query', claim: metrics });
    return {
      serverSlug: slug,
      serverUrl,
      name: t.server?.name,
      verdict: p.verdict,
      trustScore: p.trustScore,
      avgLatencyMs: metrics.avg_latency_ms ?? undefined,
      successRate: metrics.success_rate ?? undefined,
      totalInteractions: total,
      anomalyFlags: [...(p.anomalyFlags ?? [])],
      receiptId: p.receiptId,
      diligenceReceipt: p.diligenceReceipt,
      checkedAt: p.checkedAt,
      paymentMethod,
      trialRemaining: trialRemaining ?? undefined,
      scoreBreakdown: (t.scoreBreakdown ?? {}) as never,
    };
  }

  async function payByTransaction(header: string, serverUrl: string, slug: string): Promise<AgentQueryResult> {
    const fail = (f: PaymentFailure) => paymentRequired(slug, f, PAYMENT_FAILURE_TEXT[f]);
    if (!wallet) throw fail('payments_disabled');
    const txHash = parseXPayment(header);
    if (!txHash) throw fail('payment_malformed');
    if (await payments.exists(txHash)) throw fail('payment_replayed');
    const check = await verifier.verify(txHash, wallet);
    if (!check.ok) {
      if (check.failure === 'rpc_unavailable') throw new ObservatoryError('upstream_error', 'the payment could not be checked: the chain RPC is unavailable; retry shortly with the same X-Payment', { headers: { 'retry-after': '5' } });
      throw fail(check.failure);
    }
    const claimed = await payments.claim({ txHash, payer: check.payer, units: check.units, blockNumber: check.blockNumber, serverUrl, at: now() });
    if (!claimed) throw fail('payment_replayed');
    const result = await signedVerdict(serverUrl, slug, 'x402', null);
    await payments.attachReceipt(txHash, result.receiptId!);
    return result;
  }

  /** The registration limit, per client network (IPv4 address, IPv6 /64; src/domain/client-network.ts). */
  async function registrationAllowed(address: string): Promise<void> {
    const at = now();
    const today = secretDay(at);
    const yesterday = secretDay(new Date(at.getTime() - 86_400_000));
    // The window may span midnight: count hashes under yesterday's secret too.
    const hashes = [addressHash(await secrets.secretFor(today), address), addressHash(await secrets.secretFor(yesterday), address)];
    const decision = await registrations.attempt(hashes, new Date(at.getTime() - REGISTRATION_WINDOW_MS), at, (recent) => registrationDecision(recent, at));
    if (!decision.allowed) {
      throw new ObservatoryError('rate_limited', `at most ${REGISTRATION_LIMIT} registrations per hour from one network (an IPv4 address or an IPv6 /64); retry in ${decision.retryAfterSeconds} s`, {
        headers: { 'retry-after': String(decision.retryAfterSeconds) },
        extra: { retry_after_seconds: decision.retryAfterSeconds },
      });
    }
    // Housekeeping: events and secrets expire with their window.
    await registrations.purgeBefore(new Date(at.getTime() - REGISTRATION_WINDOW_MS));
    await secrets.purgeBefore(yesterday);
  }

  return {
    async registerAgent(req: Partial<RegisterAgentRequest>, ctx?: CallContext): Promise<MessageInitShape<typeof RegisterAgentResponseSchema>> {
      if (req.type !== 'anonymous') throw invalidArgument('type must be "anonymous" (the only registration flow offered)');
      if (req.requestedCredentialType !== 'api_key') throw invalidArgument('requested_credential_type must be "api_key"');
      const address = ctx?.values.get(clientAddressKey);
      await registrationAllowed(address ?? 'unknown');
      const apiKey = newApiKey();
      const issuedAt = now();
      // The key's family: keys registered from one network on one day weigh as one report source.
      const networkFamily = address ? await hashNetwork(address, secretDay(issuedAt)) : null;
      await keys.insert({ keyHash: hashApiKey(apiKey), scopes: KEY_SCOPES, trialLimit: TRIAL_LIMIT, createdAt: issuedAt, networkFamily });
      return {
        apiKey,
        credentialType: 'api_key',
        scopes: [...KEY_SCOPES],
        trialLimit: TRIAL_LIMIT,
        credentialExpires: undefined,
        issuedAt: issuedAt.toISOString(),
        usage: `Send "Authorization: Bearer <api_key>" to GET ${base}/agent-query/{server_slug}; each verdict uses one of ${TRIAL_LIMIT} free checks. The key is shown only once.`,
      };
    },

    async agentQuery(req: Partial<AgentQueryRequest>, ctx?: CallContext): Promise<AgentQueryResult> {
      const slug = (req.serverSlug ?? '').trim();
      if (slug === '') throw invalidArgument('server_slug is required');
      if (slug.length > 2048) throw invalidArgument('server_slug is too long');
      const server = await servers.resolve(slug);
      if (!server) throw new ObservatoryError('not_tracked', `${slug} is not tracked by this observatory; nothing was charged`);

      const headers = ctx?.requestHeader ?? new Headers();
      const token = bearerToken(headers.get('authorization'));
      const xPayment = headers.get('x-payment');
      let exhausted = false;
      if (token !== null && token !== 'malformed') {
        const keyHash = hashApiKey(token);
        const spent = await keys.spendTrial(keyHash, now());
        if (spent) {
          try {
            return await signedVerdict(server.url, slug, 'api_key', spent.remaining);
          } catch (err) {
            await keys.refundTrial(spent.id).catch(() => {});
            throw err;
          }
        }
        exhausted = (await keys.byHash(keyHash)) !== null;
      }
      if (xPayment !== null && xPayment.trim() !== '') return payByTransaction(xPayment, server.url, slug);
      if (token !== null && !exhausted) {
        throw new ObservatoryError('unauthenticated', 'unknown API key; register one with POST /agent/auth or pay with X-Payment', {
          headers: { 'www-authenticate': challenge },
        });
      }
      if (exhausted) throw paymentRequired(slug, 'trial_exhausted', `this key has used its ${TRIAL_LIMIT} free checks; pay per verdict with X-Payment`);
      throw paymentRequired(slug, 'credentials_missing', 'a verdict needs an API key (Authorization: Bearer) or a payment (X-Payment)');
    },

    async getPaymentInfo(): Promise<MessageInitShape<typeof GetPaymentInfoResponseSchema>> {
      return {
        paymentProtocol: 'x402',
        wallet: wallet ?? undefined,
        amount: PRICE.amount,
        currency: PRICE.currency,
        chain: PRICE.chain,
        chainId: PRICE.chainId,
        asset: BASE_USDC,
        endpointTemplate: `${base}/agent-query/{server_slug}`,
        instructions: paymentInstructions({ wallet, resource: `${base}/agent-query/{server_slug}`, baseUrl: base }),
        paymentsEnabled: wallet !== null,
        x402Version: X402_VERSION,
        volumePricing: `The price above is per verdict. A free key (POST ${base}/agent/auth) covers ${TRIAL_LIMIT} checks; higher-volume terms are arranged with the operator of ${base} (see docs/access.md, "Higher volume").`,
      };
    },
  };
}

export type AccessService = ReturnType<typeof createAccessService>;
