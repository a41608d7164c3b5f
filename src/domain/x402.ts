import { TRIAL_LIMIT } from './access.js';
import { erc20Abi, getAddress, isAddress, isAddressEqual, parseEventLogs, recoverMessageAddress, type Log } from 'viem';
import { getDefaultAsset } from '@x402/evm';
import { EVM_NETWORK_CHAIN_ID_MAP } from '@x402/evm/v1';
import { PaymentPayloadV1Schema, PaymentPayloadV2Schema } from '@x402/core/schemas';
import type { PaymentPayload, PaymentRequired, PaymentRequirements, PaymentRequirementsV1 } from '@x402/core/types';

/** The chains paid verdicts can settle on (CAIP-2). */
export const PAYMENT_NETWORKS = ['eip155:8453', 'eip155:84532'] as const;
export type PaymentNetworkId = (typeof PAYMENT_NETWORKS)[number];

// x402 micro-payments (DECISIONS.md "Access and payment"): the price, the chain, the x402 v1 and v2
// payment requirements, the X-Payment / PAYMENT-SIGNATURE formats, the payer's proof for a
// transaction hash, and the on-chain evidence rule. Pure: no I/O (signature recovery is local
// arithmetic). Wire shapes are the @x402/core types and schemas; the asset and its EIP-712 domain
// come from @x402/evm's table of default assets, so they match what x402 clients sign against.

export const PRICE = { amount: '0.001', units: 1000n, currency: 'USDC', decimals: 6 } as const;
/** Native USDC on Base mainnet (Circle). */
export const BASE_USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' as const;
/** The x402 version of the 402 body (v1); v2 travels in the PAYMENT-REQUIRED header. */
export const X402_VERSION = 1;
export const X402_VERSIONS = [1, 2] as const;
/** How long a signed v2 authorization may take to settle (x402 `maxTimeoutSeconds`). */
export const V2_MAX_TIMEOUT_SECONDS = 300;
/** How far in the future a payer's proof may be dated (clock skew). */
export const PROOF_FUTURE_SKEW_SECONDS = 60;
/**
 * Cache-Control of every payment-required answer, on every door (REST 402, the Connect error's
 * headers): what @x402/core's own server sends with a 402 (its PAYMENT_REQUIRED_CACHE_CONTROL).
 * The terms and the refusal's reason belong to one request; a cache must never answer another
 * with them, nor keep a payer's refusal.
 */
export const PAYMENT_REQUIRED_CACHE_CONTROL = 'no-store';
/**
 * Cache-Control of a paid answer (the one carrying PAYMENT-RESPONSE). @x402/core merges `private`
 * into it so shared caches do not keep settlement metadata; a paid verdict is one payer's, with its
 * own receipt, so no cache keeps it at all (what REST's /agent-query already answered).
 */
export const PAID_ANSWER_CACHE_CONTROL = 'no-store';
const DESCRIPTION = 'Full trust verdict with a signed receipt for one MCP server';

/** One chain paid verdicts settle on: CAIP-2 id (v2), v1 network name, chain id and USDC. */
export interface PaymentChain {
  network: PaymentNetworkId;
  v1Network: string;
  chainId: number;
  asset: `0x${string}`;
  /** EIP-712 domain of the USDC contract (what an EIP-3009 authorization is signed against). */
  eip712: { name: string; version: string };
}

export function paymentChain(network: PaymentNetworkId): PaymentChain {
  const chainId = Number(network.split(':')[1]);
  const v1Network = Object.entries(EVM_NETWORK_CHAIN_ID_MAP).find(([, id]) => id === chainId)?.[0];
  const usdc = getDefaultAsset(network);
  if (!v1Network || usdc.symbol !== 'USDC' || usdc.decimals !== PRICE.decimals) throw new Error(`no USDC known for ${network}`);
  return { network, v1Network, chainId, asset: getAddress(usdc.asset), eip712: { name: usdc.name, version: usdc.version } };
}

export type PaymentFailure =
  | 'payments_disabled'
  | 'payment_malformed'
  | 'payment_proof_missing'
  | 'payment_proof_invalid'
  | 'payment_proof_expired'
  | 'payment_not_found'
  | 'payment_expired'
  | 'payment_failed'
  | 'payment_wrong_chain'
  | 'payment_no_transfer'
  | 'payment_too_small'
  | 'payment_replayed'
  | 'payment_needs_facilitator'
  | 'payment_mismatch'
  | 'payment_unsupported'
  | 'payment_invalid'
  | 'payment_settle_failed';

export function paymentFailureText(f: PaymentFailure, chain: PaymentChain, maxAgeSeconds: number): string {
  switch (f) {
    case 'payments_disabled':
      return 'paid verdicts are off on this observatory (no receiving wallet is configured)';
    case 'payment_malformed':
      return 'X-Payment must be JSON (or base64 JSON) {"tx_hash","resource","issued_at","signature"}, or an x402 v1 payment payload; PAYMENT-SIGNATURE must be a base64 x402 v2 payment payload';
    case 'payment_proof_missing':
      return 'a transaction hash is public on chain, so it pays only with proof from the paying address: send JSON {"tx_hash","resource","issued_at","signature"} as the instructions say';
    case 'payment_proof_invalid':
      return "the proof is not the paying address's signature over this transaction hash, this resource and its issued_at";
    case 'payment_proof_expired':
      return `the proof's issued_at must lie within the last ${maxAgeSeconds} s (and not in the future); sign a fresh one`;
    case 'payment_not_found':
      return `the transaction was not found on ${chain.v1Network} (not mined yet, or another chain); retry once it is mined`;
    case 'payment_expired':
      return `the transaction was mined more than ${maxAgeSeconds} s ago; only recent transfers pay for verdicts`;
    case 'payment_failed':
      return 'the transaction failed on chain (receipt status reverted)';
    case 'payment_wrong_chain':
      return `the payment RPC is not on chain id ${chain.chainId} (${chain.v1Network})`;
    case 'payment_no_transfer':
      return `the transaction holds no USDC (${chain.asset}) Transfer to the observatory's wallet`;
    case 'payment_too_small':
      return `the paying address's USDC transfers to the observatory's wallet are below ${PRICE.units} units (${PRICE.amount} USDC)`;
    case 'payment_replayed':
      return 'this payment has already paid for a verdict; each payment is honoured once';
    case 'payment_needs_facilitator':
      return 'signed x402 payments (PAYMENT-SIGNATURE, or an x402 v1 payload in X-Payment) are settled through a facilitator, and this observatory has none configured (FACILITATOR_URL); pay on chain and send the transaction hash with proof, or use a trial key';
    case 'payment_mismatch':
      return 'the payment does not accept what this resource requires (scheme, network, asset, amount, payTo); use the requirements of the PAYMENT-REQUIRED header';
    case 'payment_unsupported':
      return 'only EIP-3009 transferWithAuthorization payments are accepted (the exact scheme with USDC)';
    case 'payment_invalid':
      return 'the facilitator found the payment invalid';
    case 'payment_settle_failed':
      return 'the facilitator could not settle the payment; nothing was charged by this request';
  }
}

// ---- the payer's proof for a transaction hash ------------------------------------------------

export interface TxProof {
  resource: string;
  /** Unix seconds. */
  issuedAt: number;
  signature: `0x${string}`;
}

export type XPayment =
  | { kind: 'tx'; txHash: `0x${string}`; proof: TxProof | null }
  | { kind: 'x402v1'; payload: PaymentPayload };

/**
 * The EIP-191 message the paying address signs to present a transaction hash (docs/access.md):
 * four lines, the hash in lower case, the resource exactly as the 402 names it.
 */
export function proofMessage(txHash: string, resource: string, issuedAt: number): string {
  return `x402 payment proof\ntx_hash: ${txHash.toLowerCase()}\nresource: ${resource}\nissued_at: ${issuedAt}`;
}

/** Whether a proof's issued_at lies inside the window: not older than maxAgeSeconds, not in the future beyond skew. */
export function proofFresh(issuedAt: number, now: Date, maxAgeSeconds: number): boolean {
  const t = Math.floor(now.getTime() / 1000);
  return issuedAt <= t + PROOF_FUTURE_SKEW_SECONDS && issuedAt >= t - maxAgeSeconds;
}

/** Whether a transfer mined at `minedAt` is recent enough to pay. */
export function transferFresh(minedAt: Date, now: Date, maxAgeSeconds: number): boolean {
  return now.getTime() - minedAt.getTime() <= maxAgeSeconds * 1000;
}

/** The address that signed the proof (ECDSA recovery, no network); null for a signature that does not recover. */
export async function proofSigner(txHash: string, proof: TxProof): Promise<`0x${string}` | null> {
  try {
    return await recoverMessageAddress({ message: proofMessage(txHash, proof.resource, proof.issuedAt), signature: proof.signature });
  } catch {
    return null;
  }
}

const HASH = /^0x[0-9a-fA-F]{64}$/;
const SIGNATURE = /^0x[0-9a-fA-F]{130}$/;

function jsonObject(text: string): Record<string, unknown> | null {
  try {
    const o = JSON.parse(text) as unknown;
    return o && typeof o === 'object' && !Array.isArray(o) ? (o as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

function decodeJsonOrBase64(v: string): Record<string, unknown> | null {
  if (v.startsWith('{')) return jsonObject(v);
  if (/^[A-Za-z0-9+/_-]+={0,2}$/.test(v)) return jsonObject(Buffer.from(v, 'base64').toString('utf8'));
  return null;
}

function txFrom(o: Record<string, unknown>): XPayment | null {
  const hash = [o.tx_hash, o.txHash, o.transaction].find((h): h is string => typeof h === 'string' && HASH.test(h.trim()));
  if (!hash) return null;
  const txHash = hash.trim().toLowerCase() as `0x${string}`;
  const issuedAt = typeof o.issued_at === 'string' && /^\d{1,12}$/.test(o.issued_at) ? Number(o.issued_at) : o.issued_at;
  const hasProof = o.signature !== undefined || o.resource !== undefined || o.issued_at !== undefined;
  if (!hasProof) return { kind: 'tx', txHash, proof: null };
  if (typeof o.resource !== 'string' || o.resource.length > 4096 || typeof issuedAt !== 'number' || !Number.isSafeInteger(issuedAt) || typeof o.signature !== 'string' || !SIGNATURE.test(o.signature)) {
    return { kind: 'tx', txHash, proof: { resource: '', issuedAt: 0, signature: '0x' } };
  }
  return { kind: 'tx', txHash, proof: { resource: o.resource, issuedAt, signature: o.signature as `0x${string}` } };
}

/**
 * Reads X-Payment: a bare transaction hash (no proof), JSON or base64(url) JSON with `tx_hash`
 * and the proof members (top level or under `payload`), or a standard x402 v1 payment payload.
 * A proof with missing or mistyped members parses as a proof that cannot verify.
 */
export function parseXPayment(value: string): XPayment | null {
  const v = value.trim();
  if (v.length === 0 || v.length > 8192) return null;
  if (HASH.test(v)) return { kind: 'tx', txHash: v.toLowerCase() as `0x${string}`, proof: null };
  const o = decodeJsonOrBase64(v);
  if (!o) return null;
  const nested = o.payload && typeof o.payload === 'object' && !Array.isArray(o.payload) ? (o.payload as Record<string, unknown>) : null;
  const tx = txFrom(o) ?? (nested ? txFrom(nested) : null);
  if (tx) return tx;
  const v1 = PaymentPayloadV1Schema.safeParse(o);
  if (v1.success) return { kind: 'x402v1', payload: v1.data as unknown as PaymentPayload };
  return null;
}

/** Reads PAYMENT-SIGNATURE: base64 JSON of an x402 v2 PaymentPayload (validated by @x402/core's schema). */
export function parsePaymentSignature(value: string): PaymentPayload | null {
  const v = value.trim();
  if (v.length === 0 || v.length > 16_384 || !/^[A-Za-z0-9+/_-]+={0,2}$/.test(v)) return null;
  const o = jsonObject(Buffer.from(v, 'base64').toString('utf8'));
  const parsed = o ? PaymentPayloadV2Schema.safeParse(o) : null;
  return parsed?.success ? (parsed.data as PaymentPayload) : null;
}

// ---- signed (EIP-3009) payments -----------------------------------------------------------------

export interface Eip3009Authorization {
  from: `0x${string}`;
  to: `0x${string}`;
  value: bigint;
  nonce: `0x${string}`;
}

/** The EIP-3009 authorization inside an exact-scheme payload; null for anything else (Permit2, junk). */
export function eip3009Authorization(payload: PaymentPayload): Eip3009Authorization | null {
  const a = (payload.payload as { authorization?: Record<string, unknown> }).authorization;
  if (!a || typeof a !== 'object') return null;
  const { from, to, value, nonce } = a;
  if (typeof from !== 'string' || !isAddress(from, { strict: false }) || typeof to !== 'string' || !isAddress(to, { strict: false })) return null;
  if (typeof value !== 'string' || !/^\d{1,78}$/.test(value) || typeof nonce !== 'string' || !HASH.test(nonce)) return null;
  return { from: getAddress(from), to: getAddress(to), value: BigInt(value), nonce: nonce.toLowerCase() as `0x${string}` };
}

/**
 * The identity of a signed payment, honoured once across all instances: chain, token, payer and
 * EIP-3009 nonce (the same nonce can move funds only once on chain, whatever x402 version carried it).
 */
export function authorizationId(chain: PaymentChain, auth: Eip3009Authorization): string {
  return `${chain.network}:${chain.asset}:${auth.from}:${auth.nonce}`.toLowerCase();
}

/** Whether a client's x402 payment says it pays what we ask: same scheme, network, asset, amount, payTo. */
export function acceptsOurTerms(payload: PaymentPayload, required: PaymentRequirements | PaymentRequirementsV1): boolean {
  if (payload.x402Version === 2) {
    const a = payload.accepted;
    const r = required as PaymentRequirements;
    return (
      a.scheme === r.scheme && a.network === r.network && a.amount === r.amount && a.maxTimeoutSeconds === r.maxTimeoutSeconds &&
      isAddress(a.asset, { strict: false }) && isAddressEqual(a.asset, r.asset as `0x${string}`) && isAddress(a.payTo, { strict: false }) && isAddressEqual(a.payTo, r.payTo as `0x${string}`)
    );
  }
  const p = payload as unknown as { scheme: string; network: string };
  const r = required as PaymentRequirementsV1;
  return p.scheme === r.scheme && p.network === r.network;
}

// ---- the on-chain rule for a transaction hash ----------------------------------------------------

export interface ChainReceipt {
  status: 'success' | 'reverted';
  blockNumber: bigint | null;
  logs: readonly Log[];
}

/**
 * The on-chain rule: a successful receipt with USDC Transfer logs to `wallet` whose sender is the
 * proof's signer, adding up to at least the price. Transfers from anyone else do not count: the
 * proof binds the hash to the address that paid.
 */
export function evaluatePayment(
  receipt: ChainReceipt,
  wallet: string,
  asset: string,
  signer: `0x${string}`,
): { ok: true; units: bigint; payer: `0x${string}` } | { ok: false; failure: PaymentFailure } {
  if (receipt.status !== 'success') return { ok: false, failure: 'payment_failed' };
  const to = getAddress(wallet);
  const transfers = parseEventLogs({ abi: erc20Abi, eventName: 'Transfer', logs: receipt.logs as Log[], strict: true }).filter(
    (l) => isAddressEqual(l.address, asset as `0x${string}`) && getAddress(l.args.to) === to,
  );
  if (transfers.length === 0) return { ok: false, failure: 'payment_no_transfer' };
  const mine = transfers.filter((l) => isAddressEqual(l.args.from, signer));
  if (mine.length === 0) return { ok: false, failure: 'payment_proof_invalid' };
  const units = mine.reduce((sum, l) => sum + l.args.value, 0n);
  if (units < PRICE.units) return { ok: false, failure: 'payment_too_small' };
  return { ok: true, units, payer: getAddress(signer) };
}

// ---- what the 402 offers ---------------------------------------------------------------------

export interface PaymentTerms {
  wallet: string | null;
  resource: string;
  baseUrl: string;
  chain: PaymentChain;
  /** Whether signed payments can be settled (FACILITATOR_URL is set). */
  facilitator: boolean;
  maxAgeSeconds: number;
}

/** The x402 v1 `accepts` array (402 body): empty when paid verdicts are off. */
export function x402Accepts({ wallet, resource, chain, facilitator }: PaymentTerms): PaymentRequirementsV1[] {
  if (wallet === null || !isAddress(wallet, { strict: false })) return [];
  return [
    {
      scheme: 'exact',
      network: chain.v1Network as PaymentRequirementsV1['network'],
      maxAmountRequired: PRICE.units.toString(),
      resource,
      description: DESCRIPTION,
      mimeType: 'application/json',
      payTo: wallet,
      maxTimeoutSeconds: 600,
      asset: chain.asset,
      outputSchema: null as never,
      extra: {
        name: chain.eip712.name,
        version: chain.eip712.version,
        chainId: chain.chainId,
        decimals: PRICE.decimals,
        settlement: facilitator
          ? 'x402 v1 payment payload in X-Payment (settled by our facilitator), or a transaction hash with the payer proof (see instructions)'
          : 'a transaction hash with the payer proof in X-Payment (see instructions)',
      },
    },
  ];
}

/** The x402 v2 requirements: exact scheme, USDC atomic units, EIP-712 domain in `extra`. */
export function x402V2Requirements({ wallet, chain }: Pick<PaymentTerms, 'wallet' | 'chain'>): PaymentRequirements[] {
  if (wallet === null || !isAddress(wallet, { strict: false })) return [];
  return [
    {
      scheme: 'exact',
      network: chain.network,
      amount: PRICE.units.toString(),
      asset: chain.asset,
      payTo: wallet,
      maxTimeoutSeconds: V2_MAX_TIMEOUT_SECONDS,
      extra: { name: chain.eip712.name, version: chain.eip712.version },
    },
  ];
}

/** The v2 PaymentRequired of the PAYMENT-REQUIRED header; null when paid verdicts are off (nothing to accept). */
export function x402PaymentRequired(terms: PaymentTerms, error: string): PaymentRequired | null {
  const accepts = x402V2Requirements(terms);
  if (accepts.length === 0) return null;
  return { x402Version: 2, error, resource: { url: terms.resource, description: DESCRIPTION, mimeType: 'application/json' }, accepts };
}

/** The X-Payment-Required summary header, e.g. `USDC:0.001:base`. */
export function paymentSummaryHeader(chain: PaymentChain): string {
  return `${PRICE.currency}:${PRICE.amount}:${chain.v1Network}`;
}

/** Step-by-step instructions a client can follow without reading any documentation. */
export function paymentInstructions({ wallet, baseUrl, resource, chain, facilitator, maxAgeSeconds }: PaymentTerms): string {
  const trial = `Or register a free trial key: POST ${baseUrl}/agent/auth with JSON {"type":"anonymous","requested_credential_type":"api_key"}, then send "Authorization: Bearer <api_key>" (${TRIAL_LIMIT} free checks per key).`;
  if (wallet === null) return `Paid verdicts are off on this observatory (no receiving wallet configured). ${trial}`;
  const v2 = facilitator
    ? 'x402 v2 clients: pay with the PAYMENT-SIGNATURE header as the PAYMENT-REQUIRED header describes (an EIP-3009 authorization, settled by our facilitator); x402 v1 clients may send their v1 payment payload in X-Payment. '
    : 'Signed x402 payments (PAYMENT-SIGNATURE) need a facilitator, which this observatory has not configured. ';
  return (
    `${v2}` +
    `Or pay on chain: send ${PRICE.amount} ${PRICE.currency} (${PRICE.units} units of the USDC contract ${chain.asset}) on ${chain.v1Network} (chain id ${chain.chainId}) to ${wallet} from an address whose key you hold. ` +
    `Within ${maxAgeSeconds} seconds of the transaction being mined, repeat this request with the header "X-Payment: <proof JSON>", the proof JSON being {"tx_hash":"<transaction hash>","resource":"${resource}","issued_at":<unix seconds>,"signature":"<signature>"} ` +
    `where <signature> is the paying address's EIP-191 personal_sign of the four lines "x402 payment proof", "tx_hash: <transaction hash in lower case>", "resource: ${resource}", "issued_at: <unix seconds>" joined by "\\n". ` +
    `Each payment buys one verdict. ${trial}`
  );
}
