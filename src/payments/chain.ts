import { createPublicClient, http, TransactionReceiptNotFoundError } from 'viem';
import { base } from 'viem/chains';
import { PRICE, evaluatePayment, type PaymentFailure } from '../domain/x402.js';

// The on-chain check of an x402 payment through the chain's JSON-RPC (PAYMENT_RPC_URL, else
// Base's public endpoint): eth_chainId must be 8453, eth_getTransactionReceipt must show a
// successful transaction with a USDC Transfer of at least the price to our wallet.

/** Base's public JSON-RPC, used when PAYMENT_RPC_URL is unset. */
export const DEFAULT_BASE_RPC = 'https://mainnet.base.org';

export type PaymentCheck =
  | { ok: true; units: bigint; payer: string | null; blockNumber: bigint | null }
  | { ok: false; failure: PaymentFailure }
  | { ok: false; failure: 'rpc_unavailable'; detail: string };

export interface PaymentVerifier {
  verify(txHash: `0x${string}`, wallet: string): Promise<PaymentCheck>;
}

export function createPaymentVerifier(rpcUrl: string | null, opts: { timeoutMs?: number } = {}): PaymentVerifier {
  const client = createPublicClient({
    chain: base,
    transport: http(rpcUrl ?? DEFAULT_BASE_RPC, { timeout: opts.timeoutMs ?? 8000, retryCount: 1 }),
  });
  let chainOk: Promise<boolean> | null = null;
  return {
    async verify(txHash, wallet) {
      try {
        // The chain id of an endpoint does not change: ask once, but ask again after a failure.
        chainOk ??= client.getChainId().then((id) => id === PRICE.chainId);
        let onBase: boolean;
        try {
          onBase = await chainOk;
        } catch (err) {
          chainOk = null;
          throw err;
        }
        if (!onBase) return { ok: false, failure: 'payment_wrong_chain' };
        let receipt;
        try {
          receipt = await client.getTransactionReceipt({ hash: txHash });
        } catch (err) {
          if (err instanceof TransactionReceiptNotFoundError) return { ok: false, failure: 'payment_not_found' };
          throw err;
        }
        const verdict = evaluatePayment(receipt, wallet);
        return verdict.ok ? { ...verdict, blockNumber: receipt.blockNumber ?? null } : verdict;
      } catch (err) {
        return { ok: false, failure: 'rpc_unavailable', detail: (err as Error).name || 'error' };
      }
    },
  };
}
