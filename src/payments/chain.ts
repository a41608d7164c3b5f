import { createPublicClient, http, TransactionReceiptNotFoundError } from 'viem';
// viem/op-stack exports the same chain objects as viem/chains without loading its ~1,450 chain
// definitions at start (a burst of file opens that fails under a low open-file limit).
import { base, baseSepolia } from 'viem/op-stack';
import type { ChainReceipt } from '../domain/x402.js';

// The chain look-up behind an x402 payment by transaction hash, through the chain's JSON-RPC
// (PAYMENT_RPC_URL, else the chain's public endpoint): eth_chainId must be the configured chain,
// eth_getTransactionReceipt gives the transfer logs and eth_getBlockByNumber the time it was mined.
// What the logs must show is the domain's rule (src/domain/x402.ts evaluatePayment).

/** Public JSON-RPC endpoints, used when PAYMENT_RPC_URL is unset. */
export const DEFAULT_RPC: Record<number, string> = { 8453: 'https://mainnet.base.org', 84532: 'https://sepolia.base.org' };
/** Base's public JSON-RPC. */
export const DEFAULT_BASE_RPC = DEFAULT_RPC[8453]!;

export type ChainLookup =
  | { ok: true; receipt: ChainReceipt; minedAt: Date }
  | { ok: false; failure: 'payment_not_found' | 'payment_wrong_chain' }
  | { ok: false; failure: 'rpc_unavailable'; detail: string };

export interface PaymentVerifier {
  lookup(txHash: `0x${string}`): Promise<ChainLookup>;
}

export function createPaymentVerifier(rpcUrl: string | null, opts: { timeoutMs?: number; chainId?: number } = {}): PaymentVerifier {
  const chainId = opts.chainId ?? 8453;
  const client = createPublicClient({
    chain: chainId === baseSepolia.id ? baseSepolia : base,
    transport: http(rpcUrl ?? DEFAULT_RPC[chainId] ?? DEFAULT_BASE_RPC, { timeout: opts.timeoutMs ?? 8000, retryCount: 1 }),
  });
  let chainOk: Promise<boolean> | null = null;
  return {
    async lookup(txHash) {
      try {
        // The chain id of an endpoint does not change: ask once, but ask again after a failure.
        chainOk ??= client.getChainId().then((id) => id === chainId);
        let onChain: boolean;
        try {
          onChain = await chainOk;
        } catch (err) {
          chainOk = null;
          throw err;
        }
        if (!onChain) return { ok: false, failure: 'payment_wrong_chain' };
        let receipt;
        try {
          receipt = await client.getTransactionReceipt({ hash: txHash });
        } catch (err) {
          if (err instanceof TransactionReceiptNotFoundError) return { ok: false, failure: 'payment_not_found' };
          throw err;
        }
        const block = await client.getBlock({ blockNumber: receipt.blockNumber });
        return { ok: true, receipt, minedAt: new Date(Number(block.timestamp) * 1000) };
      } catch (err) {
        return { ok: false, failure: 'rpc_unavailable', detail: (err as Error).name || 'error' };
      }
    },
  };
}
