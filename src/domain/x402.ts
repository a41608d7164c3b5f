import { TRIAL_LIMIT } from './access.js';
import { erc20Abi, getAddress, isAddress, parseEventLogs, type Log } from 'viem';

// x402 micro-payments (DECISIONS.md "Access and payment"): the price, the x402 v1 payment
// requirements, the X-Payment header formats, and the on-chain evidence rule. Pure: no I/O.

export const PRICE = { amount: '0.001', units: 1000n, currency: 'USDC', chain: 'base', chainId: 8453, decimals: 6 } as const;
/** Native USDC on Base mainnet (Circle). */
export const BASE_USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' as const;
export const X402_VERSION = 1;
export const PAYMENT_REQUIRED_HEADER = `${PRICE.currency}:${PRICE.amount}:${PRICE.chain}`;

export type PaymentFailure =
  | 'payments_disabled'
  | 'payment_malformed'
  | 'payment_not_found'
  | 'payment_failed'
  | 'payment_wrong_chain'
  | 'payment_no_transfer'
  | 'payment_too_small'
  | 'payment_replayed';

export const PAYMENT_FAILURE_TEXT: Record<PaymentFailure, string> = {
  payments_disabled: 'paid verdicts are off on this observatory (no receiving wallet is configured)',
  payment_malformed: 'X-Payment must be a transaction hash (0x + 64 hex), or JSON / base64 JSON with a tx_hash member',
  payment_not_found: 'the transaction was not found on the chain (not mined yet, or not a Base transaction); retry once it is mined',
  payment_failed: 'the transaction failed on chain (receipt status reverted)',
  payment_wrong_chain: `the payment RPC is not on chain id ${PRICE.chainId} (Base)`,
  payment_no_transfer: `the transaction holds no USDC (${BASE_USDC}) Transfer to the observatory's wallet`,
  payment_too_small: `the USDC transfer to the observatory's wallet is below ${PRICE.units} units (${PRICE.amount} USDC)`,
  payment_replayed: 'this transaction hash has already paid for a verdict; each payment is honoured once',
};

/** Extracts the transaction hash from an X-Payment value: bare hash, JSON, or base64(url) JSON. */
export function parseXPayment(value: string): `0x${string}` | null {
  const v = value.trim();
  if (v.length === 0 || v.length > 8192) return null;
  const bare = (s: unknown): `0x${string}` | null =>
    typeof s === 'string' && /^0x[0-9a-fA-F]{64}$/.test(s.trim()) ? (s.trim().toLowerCase() as `0x${string}`) : null;
  if (bare(v)) return bare(v);
  const fromJson = (text: string): `0x${string}` | null => {
    try {
      const o = JSON.parse(text) as unknown;
      if (o && typeof o === 'object' && !Array.isArray(o)) {
        const r = o as Record<string, unknown>;
        const payload = r.payload && typeof r.payload === 'object' ? (r.payload as Record<string, unknown>) : {};
        return bare(r.tx_hash) ?? bare(r.txHash) ?? bare(r.transaction) ?? bare(payload.tx_hash) ?? bare(payload.txHash) ?? bare(payload.transaction);
      }
    } catch {
      /* not JSON */
    }
    return null;
  };
  if (v.startsWith('{')) return fromJson(v);
  if (/^[A-Za-z0-9+/_-]+={0,2}$/.test(v)) return fromJson(Buffer.from(v, 'base64').toString('utf8'));
  return null;
}

export interface ChainReceipt {
  status: 'success' | 'reverted';
  blockNumber: bigint | null;
  logs: readonly Log[];
}

/**
 * The on-chain rule: successful receipt and a USDC Transfer log to `wallet` of at least the
 * price. Several transfers to the wallet in one transaction add up.
 */
export function evaluatePayment(receipt: ChainReceipt, wallet: string): { ok: true; units: bigint; payer: string | null } | { ok: false; failure: PaymentFailure } {
  if (receipt.status !== 'success') return { ok: false, failure: 'payment_failed' };
  const to = getAddress(wallet);
  const usdc = BASE_USDC.toLowerCase();
  const transfers = parseEventLogs({ abi: erc20Abi, eventName: 'Transfer', logs: receipt.logs as Log[], strict: true }).filter(
    (l) => l.address.toLowerCase() === usdc && getAddress(l.args.to) === to,
  );
  if (transfers.length === 0) return { ok: false, failure: 'payment_no_transfer' };
  const units = transfers.reduce((sum, l) => sum + l.args.value, 0n);
  if (units < PRICE.units) return { ok: false, failure: 'payment_too_small' };
  return { ok: true, units, payer: transfers[0]!.args.from };
}

export interface PaymentTerms {
  wallet: string | null;
  resource: string;
  baseUrl: string;
}

/** The x402 v1 `accepts` array: empty when paid verdicts are off. */
export function x402Accepts({ wallet, resource }: PaymentTerms): Record<string, unknown>[] {
  if (wallet === null || !isAddress(wallet)) return [];
  return [
    {
      scheme: 'exact',
      network: PRICE.chain,
      maxAmountRequired: PRICE.units.toString(),
      resource,
      description: 'Full trust verdict with a signed receipt for one MCP server',
      mimeType: 'application/json',
      payTo: wallet,
      maxTimeoutSeconds: 600,
      asset: BASE_USDC,
      outputSchema: null,
      extra: { name: 'USD Coin', version: '2', chainId: PRICE.chainId, decimals: PRICE.decimals, settlement: 'transaction hash in X-Payment' },
    },
  ];
}

/** Step-by-step instructions a client can follow without reading any documentation. */
export function paymentInstructions({ wallet, baseUrl }: PaymentTerms): string {
  const trial = `Or register a free trial key: POST ${baseUrl}/agent/auth with JSON {"type":"anonymous","requested_credential_type":"api_key"}, then send "Authorization: Bearer <api_key>" (${TRIAL_LIMIT} free checks per key).`;
  if (wallet === null) return `Paid verdicts are off on this observatory (no receiving wallet configured). ${trial}`;
  return (
    `Send ${PRICE.amount} ${PRICE.currency} (${PRICE.units} units of the USDC contract ${BASE_USDC}) on ${PRICE.chain} (chain id ${PRICE.chainId}) to ${wallet}. ` +
    `When the transaction is mined, repeat this request with the header "X-Payment: <transaction hash>" (bare 0x hash, or JSON / base64 JSON {"tx_hash":"0x..."}). ` +
    `Each transaction pays for one verdict. ${trial}`
  );
}
