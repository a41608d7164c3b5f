import type { MessageInitShape } from '@bufbuild/protobuf';
import {
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
import { ObservatoryError, invalidArgument } from '../errors.js';
import type { PaymentVerifier } from '../payments/chain.js';
import type { Facilitator } from '../payments/facilitator.js';
import { PRICE, X402_VERSION, X402_VERSIONS } from '../domain/x402.js';
import { apiKeyStore } from '../store/api-keys.js';
import { addressSecretStore, registrationStore } from '../store/address-hashes.js';
import { serverStore } from '../store/servers.js';
import { clientAddressKey, type CallContext, type ServiceDeps } from './context.js';
import { networkHasher } from './report-source.js';
import type { TrustService } from './trust.js';
import type { PreflightService } from './preflight.js';
import { createPaymentService } from './payments.js';

type AgentQueryResult = MessageInitShape<typeof AgentQueryResponseSchema>;

export interface AccessServiceOptions {
  /** The trust read the latency figures come from, and the benchmark's p95 (public TrustService methods). */
  trust: Pick<TrustService, 'getTrust' | 'getBenchmark'>;
  /** The shared pre-flight: verdict, score, signed receipt (kind agent_query) and demand signal. */
  preflight: Pick<PreflightService, 'preflight'>;
  /** On-chain payment check; defaults to viem over PAYMENT_RPC_URL. */
  paymentVerifier?: PaymentVerifier;
  /** Facilitator for signed x402 payments; defaults to FACILITATOR_URL. */
  facilitator?: Facilitator | null;
}

/** AccessService: THE implementation of /agent/auth, /agent-query/{slug} and /api/payment-info. */
export function createAccessService(deps: ServiceDeps, opts: AccessServiceOptions) {
  const { db, config, now } = deps;
  const keys = apiKeyStore(db);
  const secrets = addressSecretStore(db);
  const registrations = registrationStore(db);
  const servers = serverStore(db);
  const payments = createPaymentService(deps, { paymentVerifier: opts.paymentVerifier, facilitator: opts.facilitator });
  const hashNetwork = networkHasher(db);
  const base = config.publicBaseUrl;
  const wallet = config.paymentWallet;
  const challenge = `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource"`;

  /**
   * The verdict for one server, signed. Kept in one place so it can later be pointed at the shared
   * pre-flight service: resolve, trust read, verdict band, receipt of kind agent_query.
   */
  async function signedVerdict(serverUrl: string, slug: string, paymentMethod: 'api_key' | 'x402', trialRemaining: number | null): Promise<AgentQueryResult> {
    const t = await opts.trust.getTrust({ url: serverUrl });
    const total = Number(t.metrics?.totalInteractions ?? 0);
    // p95 is the evidence endpoints' one definition: the benchmark's, from the latency histograms.
    const p95 = total > 0 ? ((await opts.trust.getBenchmark({ serverSlug: serverUrl })).latency?.p95Ms ?? null) : null;
    const metrics = {
      avg_latency_ms: total > 0 ? (t.metrics?.avgLatencyMs ?? null) : null,
      p95_latency_ms: p95,
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
      p95LatencyMs: metrics.p95_latency_ms ?? undefined,
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
      // SPEC 4.6: both members name the only choice offered, so a missing one takes it; any other
      // value was refused by the contract (the `in` rules of RegisterAgentRequest) before this runs.
      void req;
      const address = ctx?.values.get(clientAddressKey);
      await registrationAllowed(address ?? 'unknown');
      const apiKey = newApiKey();
      const issuedAt = now();
      // Where the key was registered (that day's keyed hash of the network), kept as its record; its
      // reports weigh as the network they come from (src/services/report-source.ts).
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
      const server = await servers.resolve(slug);
      if (!server) throw new ObservatoryError('not_tracked', `${slug} is not tracked by this observatory; nothing was charged`);

      const headers = ctx?.requestHeader ?? new Headers();
      const token = bearerToken(headers.get('authorization'));
      let exhausted = false;
      if (token !== null && token !== 'malformed') {
        const keyHash = hashApiKey(token);
        // A made-up key costs one read shared with its event-loop turn (api-keys.ts), not a write.
        if ((await keys.byHash(keyHash)) !== null) {
          const spent = await keys.spendTrial(keyHash, now());
          if (spent) {
            try {
              return await signedVerdict(server.url, slug, 'api_key', spent.remaining);
            } catch (err) {
              await keys.refundTrial(spent.id).catch(() => {});
              throw err;
            }
          }
          exhausted = true;
        }
      }
      if (payments.carriesPayment(headers)) return payments.pay(slug, server.url, ctx, () => signedVerdict(server.url, slug, 'x402', null));
      if (token !== null && !exhausted) {
        throw new ObservatoryError('unauthenticated', 'unknown API key; register one with POST /agent/auth or pay (x402: PAYMENT-SIGNATURE or X-Payment)', {
          headers: { 'www-authenticate': challenge },
        });
      }
      if (exhausted) throw payments.paymentRequired(slug, 'trial_exhausted', `this key has used its ${TRIAL_LIMIT} free checks; pay per verdict with x402 (PAYMENT-SIGNATURE or X-Payment)`);
      throw payments.paymentRequired(slug, 'credentials_missing', 'a verdict needs an API key (Authorization: Bearer) or an x402 payment (PAYMENT-SIGNATURE or X-Payment)');
    },

    async getPaymentInfo(): Promise<MessageInitShape<typeof GetPaymentInfoResponseSchema>> {
      const { terms, instructions, facilitator } = payments.info();
      const { chain } = terms;
      return {
        paymentProtocol: 'x402',
        wallet: wallet ?? undefined,
        amount: PRICE.amount,
        currency: PRICE.currency,
        chain: chain.v1Network,
        chainId: chain.chainId,
        asset: chain.asset,
        endpointTemplate: `${base}/agent-query/{server_slug}`,
        instructions,
        paymentsEnabled: wallet !== null,
        x402Version: X402_VERSION,
        volumePricing: `The price above is per verdict. A free key (POST ${base}/agent/auth) covers ${TRIAL_LIMIT} checks; higher-volume terms are arranged with the operator of ${base} (see docs/access.md, "Higher volume").`,
        x402Versions: [...X402_VERSIONS],
        network: chain.network,
        maxPaymentAgeSeconds: terms.maxAgeSeconds,
        x402: [
          {
            x402Version: 2,
            network: chain.network,
            amount: PRICE.units.toString(),
            requirementsIn: 'PAYMENT-REQUIRED response header of every 402 (base64 JSON PaymentRequired)',
            paymentHeader: 'PAYMENT-SIGNATURE',
            responseHeader: 'PAYMENT-RESPONSE',
            settlement: 'EIP-3009 authorization (exact scheme), verified and settled through the facilitator',
            enabled: wallet !== null && facilitator,
          },
          {
            x402Version: 1,
            network: chain.v1Network,
            amount: PRICE.units.toString(),
            requirementsIn: '402 body: x402Version 1 and accepts',
            paymentHeader: 'X-Payment',
            responseHeader: 'PAYMENT-RESPONSE (and X-PAYMENT-RESPONSE for v1 payloads)',
            settlement: facilitator
              ? 'an x402 v1 payment payload (settled through the facilitator), or a mined transaction hash with the payer proof, checked on chain'
              : 'a mined transaction hash with the payer proof, checked on chain',
            enabled: wallet !== null,
          },
        ],
      };
    },
  };
}

export type AccessService = ReturnType<typeof createAccessService>;
