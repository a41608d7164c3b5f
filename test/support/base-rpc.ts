import http from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';

// A local stand-in for a Base mainnet JSON-RPC endpoint (127.0.0.1 only). It answers eth_chainId,
// eth_getTransactionReceipt (receipts shaped exactly like Base's, OP-stack fields l1Fee, l1GasUsed,
// ... included, built from real-looking USDC transfers) and eth_getBlockByNumber (the block each
// transaction was mined in, with its timestamp).

export const USDC_BASE = '0x833589fcd6edb6e08f4c7c32d4f71b54bda02913';
/** USDbC (bridged USDC) on Base: a real token that is not the accepted asset. */
export const USDBC_BASE = '0xd9aaec86b65d86f6a7b5b1b0c42ffa531710b6ca';
const TRANSFER_TOPIC = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef';

const hex = (n: number | bigint) => `0x${n.toString(16)}`;
const pad32 = (addr: string) => `0x${addr.toLowerCase().replace(/^0x/, '').padStart(64, '0')}`;
export const randomHash = () => `0x${randomBytes(32).toString('hex')}`;
export const randomAddress = () => `0x${randomBytes(20).toString('hex')}`;

export interface TransferSpec {
  token?: string;
  from?: string;
  to: string;
  units: bigint;
}

export interface BaseRpcStandIn {
  url: string;
  chainId: number;
  calls: { method: string }[];
  /**
   * Records a mined transaction; returns its hash. `minedAt` is the block's time (default: the
   * stand-in's clock, so "just mined").
   */
  addTransaction(spec: { transfers: TransferSpec[]; status?: 'success' | 'reverted'; hash?: string; minedAt?: Date }): string;
  close(): Promise<void>;
}

export async function startBaseRpc(opts: { chainId?: number; now?: () => Date } = {}): Promise<BaseRpcStandIn> {
  const receipts = new Map<string, Record<string, unknown>>();
  const blocks = new Map<string, Record<string, unknown>>();
  const now = opts.now ?? (() => new Date());
  const calls: { method: string }[] = [];
  let block = 24_310_000;
  const state = { chainId: opts.chainId ?? 8453 };

  function answer(req: { id?: unknown; method?: string; params?: unknown[] }) {
    calls.push({ method: String(req.method) });
    const ok = (result: unknown) => ({ jsonrpc: '2.0', id: req.id ?? null, result });
    switch (req.method) {
      case 'eth_chainId':
        return ok(hex(state.chainId));
      case 'eth_getTransactionReceipt':
        return ok(receipts.get(String(req.params?.[0]).toLowerCase()) ?? null);
      case 'eth_getBlockByNumber':
        return ok(blocks.get(String(req.params?.[0]).toLowerCase()) ?? null);
      default:
        return { jsonrpc: '2.0', id: req.id ?? null, error: { code: -32601, message: 'the method does not exist/is not available' } };
    }
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.writeHead(400).end();
        return;
      }
      const out = Array.isArray(body) ? body.map(answer) : answer(body as never);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(out));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    get chainId() {
      return state.chainId;
    },
    calls,
    addTransaction({ transfers, status = 'success', hash = randomHash(), minedAt = now() }) {
      const blockNumber = hex(++block);
      const blockHash = randomHash();
      blocks.set(blockNumber, {
        baseFeePerGas: '0x4c4b40',
        difficulty: '0x0',
        extraData: '0x',
        gasLimit: '0x8f0d180',
        gasUsed: '0x1f4c2a',
        hash: blockHash,
        logsBloom: `0x${'0'.repeat(512)}`,
        miner: '0x4200000000000000000000000000000000000011',
        mixHash: randomHash(),
        nonce: '0x0000000000000000',
        number: blockNumber,
        parentHash: randomHash(),
        receiptsRoot: randomHash(),
        sha3Uncles: '0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347',
        size: '0x1a2b',
        stateRoot: randomHash(),
        timestamp: hex(Math.floor(minedAt.getTime() / 1000)),
        totalDifficulty: '0x0',
        transactions: [hash],
        transactionsRoot: randomHash(),
        uncles: [],
      });
      const from = transfers[0]?.from ?? randomAddress();
      const txIndex = hex(7);
      const logs = transfers.map((t, i) => ({
        address: (t.token ?? USDC_BASE).toLowerCase(),
        topics: [TRANSFER_TOPIC, pad32(t.from ?? from), pad32(t.to)],
        data: pad32(t.units.toString(16)),
        blockNumber,
        transactionHash: hash,
        transactionIndex: txIndex,
        blockHash,
        logIndex: hex(20 + i),
        removed: false,
      }));
      receipts.set(hash.toLowerCase(), {
        blockHash,
        blockNumber,
        contractAddress: null,
        cumulativeGasUsed: '0x1f4c2a',
        effectiveGasPrice: '0x4c4b40',
        from: from.toLowerCase(),
        gasUsed: status === 'success' ? '0xdc1c' : '0x8fa4',
        l1BaseFeeScalar: '0x8dd',
        l1BlobBaseFee: '0x1',
        l1BlobBaseFeeScalar: '0x101c12',
        l1Fee: '0x1b5e3c3a4',
        l1GasPrice: '0x3b9aca00',
        l1GasUsed: '0x640',
        logs: status === 'success' ? logs : [],
        logsBloom: `0x${'0'.repeat(512)}`,
        status: status === 'success' ? '0x1' : '0x0',
        to: (transfers[0]?.token ?? USDC_BASE).toLowerCase(),
        transactionHash: hash,
        transactionIndex: txIndex,
        type: '0x2',
      });
      return hash;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
