import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { getAddress, isAddressEqual, verifyTypedData } from 'viem';
import { authorizationTypes } from '@x402/evm';
import { EVM_NETWORK_CHAIN_ID_MAP } from '@x402/evm/v1';
import { randomHash } from './base-rpc.js';

// A local stand-in for an x402 facilitator (127.0.0.1 only) with the standard endpoints:
// GET /supported, POST /verify and POST /settle, taking {x402Version, paymentPayload,
// paymentRequirements}. It checks what it is sent as a real facilitator would, and more strictly
// than one need (the terms must be exactly the observatory's): the requirements name the expected
// network, asset, amount ("1000") and payTo; a v2 payload's `accepted` equals the requirements;
// the EIP-3009 authorization pays payTo at least the amount, is valid now, and its EIP-712
// signature by `from` verifies against the USDC domain of `extra`. Every request and every
// problem found is recorded for the test to assert on. Settlement returns a fresh transaction hash.

export interface FacilitatorExpectations {
  network: string; // CAIP-2, e.g. eip155:8453
  v1Network: string; // e.g. base
  asset: string;
  payTo: string;
  amount: string;
}

export interface FacilitatorCall {
  path: string;
  body: Record<string, unknown>;
  problems: string[];
}

export interface FacilitatorStandIn {
  url: string;
  calls: FacilitatorCall[];
  /** Makes the next settlements fail with this errorReason (null: settle normally). */
  failSettleWith: string | null;
  /** Makes the next verifications answer isValid:false with this reason (null: check normally). */
  refuseVerifyWith: string | null;
  settled: { transaction: string; payer: string; nonce: string }[];
  close(): Promise<void>;
}

type Json = Record<string, unknown>;

export async function startFacilitator(expect: FacilitatorExpectations): Promise<FacilitatorStandIn> {
  const calls: FacilitatorCall[] = [];
  const settled: FacilitatorStandIn['settled'] = [];
  const state = { failSettleWith: null as string | null, refuseVerifyWith: null as string | null };

  async function check(body: Json): Promise<{ problems: string[]; payer?: string; nonce?: string }> {
    const problems: string[] = [];
    const version = body.x402Version;
    const payload = (body.paymentPayload ?? {}) as Json;
    const req = (body.paymentRequirements ?? {}) as Json;
    if (version !== 1 && version !== 2) problems.push(`x402Version ${String(version)}`);
    if (payload.x402Version !== version) problems.push('paymentPayload.x402Version differs');
    const network = version === 2 ? expect.network : expect.v1Network;
    if (req.network !== network) problems.push(`network ${String(req.network)} != ${network}`);
    if (req.scheme !== 'exact') problems.push(`scheme ${String(req.scheme)}`);
    const amount = version === 2 ? req.amount : req.maxAmountRequired;
    if (amount !== expect.amount) problems.push(`amount ${String(amount)} != ${expect.amount}`);
    if (typeof req.payTo !== 'string' || !isAddressEqual(req.payTo as `0x${string}`, expect.payTo as `0x${string}`)) problems.push(`payTo ${String(req.payTo)}`);
    if (typeof req.asset !== 'string' || !isAddressEqual(req.asset as `0x${string}`, expect.asset as `0x${string}`)) problems.push(`asset ${String(req.asset)}`);
    if (version === 2 && JSON.stringify(payload.accepted) !== JSON.stringify(req)) problems.push('accepted differs from the requirements');
    if (version === 1 && (payload.network !== network || payload.scheme !== 'exact')) problems.push('v1 payload scheme/network');
    const inner = (payload.payload ?? {}) as { signature?: `0x${string}`; authorization?: Record<string, string> };
    const a = inner.authorization;
    if (!a || !inner.signature) return { problems: [...problems, 'no EIP-3009 authorization'] };
    if (!isAddressEqual(a.to as `0x${string}`, expect.payTo as `0x${string}`)) problems.push('authorization.to is not payTo');
    if (BigInt(a.value!) < BigInt(expect.amount)) problems.push('authorization.value below the amount');
    const now = Math.floor(Date.now() / 1000);
    if (Number(a.validBefore) <= now || Number(a.validAfter) > now) problems.push('authorization not valid now');
    const extra = (req.extra ?? {}) as { name?: string; version?: string };
    const chainId = Number(network.startsWith('eip155:') ? network.split(':')[1] : (EVM_NETWORK_CHAIN_ID_MAP as Record<string, number>)[network]);
    const ok = await verifyTypedData({
      address: getAddress(a.from!),
      domain: { name: extra.name, version: extra.version, chainId, verifyingContract: getAddress(req.asset as string) },
      types: authorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message: { from: getAddress(a.from!), to: getAddress(a.to!), value: BigInt(a.value!), validAfter: BigInt(a.validAfter!), validBefore: BigInt(a.validBefore!), nonce: a.nonce as `0x${string}` },
      signature: inner.signature,
    }).catch(() => false);
    if (!ok) problems.push('EIP-712 signature does not verify');
    return { problems, payer: getAddress(a.from!), nonce: a.nonce };
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const send = (status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      const path = (req.url ?? '').split('?')[0]!;
      if (req.method === 'GET' && path === '/supported') {
        return send(200, {
          kinds: [
            { x402Version: 2, scheme: 'exact', network: expect.network },
            { x402Version: 1, scheme: 'exact', network: expect.v1Network },
          ],
          extensions: [],
          signers: {},
        });
      }
      let body: Json;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Json;
      } catch {
        return send(400, { error: 'invalid JSON' });
      }
      const network = body.x402Version === 1 ? expect.v1Network : expect.network;
      if (req.method === 'POST' && path === '/verify') {
        const c = await check(body);
        calls.push({ path, body, problems: c.problems });
        if (state.refuseVerifyWith) return send(200, { isValid: false, invalidReason: state.refuseVerifyWith, payer: c.payer });
        return send(200, c.problems.length === 0 ? { isValid: true, payer: c.payer } : { isValid: false, invalidReason: 'invalid_payload', invalidMessage: c.problems.join('; '), payer: c.payer });
      }
      if (req.method === 'POST' && path === '/settle') {
        const c = await check(body);
        calls.push({ path, body, problems: c.problems });
        if (state.failSettleWith) return send(200, { success: false, errorReason: state.failSettleWith, transaction: '', network, payer: c.payer });
        if (c.problems.length > 0) return send(200, { success: false, errorReason: 'invalid_payload', errorMessage: c.problems.join('; '), transaction: '', network, payer: c.payer });
        const transaction = randomHash();
        settled.push({ transaction, payer: c.payer!, nonce: c.nonce! });
        return send(200, { success: true, transaction, network, payer: c.payer });
      }
      send(404, { error: 'not found' });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    settled,
    get failSettleWith() {
      return state.failSettleWith;
    },
    set failSettleWith(v) {
      state.failSettleWith = v;
    },
    get refuseVerifyWith() {
      return state.refuseVerifyWith;
    },
    set refuseVerifyWith(v) {
      state.refuseVerifyWith = v;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
