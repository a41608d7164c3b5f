import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerToken, registrationDecision, hashApiKey, addressHash } from '../src/domain/access.js';
import {
  acceptsOurTerms,
  authorizationId,
  eip3009Authorization,
  evaluatePayment,
  parsePaymentSignature,
  parseXPayment,
  paymentChain,
  proofFresh,
  proofMessage,
  proofSigner,
  transferFresh,
  x402Accepts,
  x402PaymentRequired,
  x402V2Requirements,
  type ChainReceipt,
} from '../src/domain/x402.js';
import { createPaymentVerifier } from '../src/payments/chain.js';
import { startBaseRpc, type BaseRpcStandIn } from './support/base-rpc.js';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { encodeAbiParameters, pad, type Log } from 'viem';
import { PaymentRequiredV1Schema, PaymentRequiredV2Schema } from '@x402/core/schemas';
import { encodePaymentSignatureHeader } from '@x402/core/http';
import type { PaymentPayload } from '@x402/core/types';

const H = `0x${'ab'.repeat(32)}`;
const SIG = `0x${'11'.repeat(65)}`;
const BASE = paymentChain('eip155:8453');
const WALLET = '0x2222222222222222222222222222222222222222';

describe('X-Payment formats', () => {
  it('takes a bare hash or JSON / base64 JSON with tx_hash; the proof members when present', () => {
    const bare = { kind: 'tx', txHash: H, proof: null };
    expect(parseXPayment(H)).toEqual(bare);
    expect(parseXPayment(` ${H.toUpperCase().replace('0X', '0x')} `)).toEqual(bare);
    expect(parseXPayment(JSON.stringify({ tx_hash: H }))).toEqual(bare);
    expect(parseXPayment(Buffer.from(JSON.stringify({ tx_hash: H })).toString('base64'))).toEqual(bare);
    expect(parseXPayment(Buffer.from(JSON.stringify({ tx_hash: H })).toString('base64url'))).toEqual(bare);
    expect(parseXPayment(Buffer.from(JSON.stringify({ x402Version: 1, payload: { txHash: H } })).toString('base64'))).toEqual(bare);
    const withProof = { tx_hash: H, resource: 'https://obs.example/agent-query/x', issued_at: 1764072000, signature: SIG };
    expect(parseXPayment(JSON.stringify(withProof))).toEqual({ kind: 'tx', txHash: H, proof: { resource: withProof.resource, issuedAt: 1764072000, signature: SIG } });
    expect(parseXPayment(JSON.stringify({ ...withProof, issued_at: '1764072000' }))).toMatchObject({ proof: { issuedAt: 1764072000 } });
    // A proof with a missing or mistyped member is a proof that cannot verify, not "no proof".
    for (const broken of [{ ...withProof, signature: '0x12' }, { ...withProof, issued_at: 1.5 }, { tx_hash: H, signature: SIG }]) {
      expect(parseXPayment(JSON.stringify(broken))).toMatchObject({ kind: 'tx', proof: { signature: '0x' } });
    }
  });
  it('takes a standard x402 v1 payment payload', () => {
    const v1 = { x402Version: 1, scheme: 'exact', network: 'base', payload: { signature: SIG, authorization: { from: WALLET, to: WALLET, value: '1000', validAfter: '0', validBefore: '9', nonce: H } } };
    expect(parseXPayment(Buffer.from(JSON.stringify(v1)).toString('base64'))).toMatchObject({ kind: 'x402v1', payload: { x402Version: 1, network: 'base' } });
  });
  it('refuses everything else', () => {
    for (const v of ['', '0x12', `${H}00`, '{"tx_hash":1}', '[1]', 'zz!!', 'x'.repeat(10_000), Buffer.from('{"a":1}').toString('base64')]) expect(parseXPayment(v), v).toBeNull();
  });
});

describe('the payer proof of a transaction hash', () => {
  const at = new Date('2026-11-25T12:00:00Z');
  const t = at.getTime() / 1000;
  it('is four documented lines, the hash in lower case', () => {
    expect(proofMessage(H.toUpperCase().replace('0X', '0x'), 'https://obs.example/agent-query/a', 1764072000)).toBe(
      `x402 payment proof\ntx_hash: ${H}\nresource: https://obs.example/agent-query/a\nissued_at: 1764072000`,
    );
  });
  it('recovers the signer locally; any change of hash, resource or time changes the signer', async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const proof = { resource: 'https://obs.example/agent-query/a', issuedAt: t, signature: await account.signMessage({ message: proofMessage(H, 'https://obs.example/agent-query/a', t) }) };
    expect(await proofSigner(H, proof)).toBe(account.address);
    expect(await proofSigner(`0x${'cd'.repeat(32)}`, proof)).not.toBe(account.address);
    expect(await proofSigner(H, { ...proof, issuedAt: t + 1 })).not.toBe(account.address);
    expect(await proofSigner(H, { ...proof, resource: 'https://obs.example/agent-query/b' })).not.toBe(account.address);
    expect(await proofSigner(H, { ...proof, signature: `0x${'00'.repeat(65)}` })).toBeNull();
  });
  it('windows: a proof at most maxAge old and 60 s ahead; a transfer at most maxAge old', () => {
    expect(proofFresh(t, at, 600)).toBe(true);
    expect(proofFresh(t - 600, at, 600)).toBe(true);
    expect(proofFresh(t - 601, at, 600)).toBe(false);
    expect(proofFresh(t + 60, at, 600)).toBe(true);
    expect(proofFresh(t + 61, at, 600)).toBe(false);
    expect(transferFresh(new Date(at.getTime() - 600_000), at, 600)).toBe(true);
    expect(transferFresh(new Date(at.getTime() - 600_001), at, 600)).toBe(false);
  });
  it('counts only the signer\'s USDC transfers to the wallet', () => {
    const payer = privateKeyToAccount(generatePrivateKey()).address;
    const other = privateKeyToAccount(generatePrivateKey()).address;
    const transfer = (from: string, units: bigint, token: string = BASE.asset, to = WALLET): Log =>
      ({
        address: token,
        topics: ['0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef', pad(from as `0x${string}`), pad(to as `0x${string}`)],
        data: encodeAbiParameters([{ type: 'uint256' }], [units]),
        blockNumber: 1n, transactionHash: H, transactionIndex: 0, blockHash: H, logIndex: 0, removed: false,
      }) as unknown as Log;
    const r = (logs: Log[], status: ChainReceipt['status'] = 'success'): ChainReceipt => ({ status, blockNumber: 1n, logs });
    expect(evaluatePayment(r([transfer(payer, 600n), transfer(payer, 400n)]), WALLET, BASE.asset, payer)).toEqual({ ok: true, units: 1000n, payer });
    expect(evaluatePayment(r([transfer(other, 5000n)]), WALLET, BASE.asset, payer)).toEqual({ ok: false, failure: 'payment_proof_invalid' });
    expect(evaluatePayment(r([transfer(payer, 999n), transfer(other, 5000n)]), WALLET, BASE.asset, payer)).toEqual({ ok: false, failure: 'payment_too_small' });
    expect(evaluatePayment(r([transfer(payer, 5000n, '0xd9aaec86b65d86f6a7b5b1b0c42ffa531710b6ca')]), WALLET, BASE.asset, payer)).toEqual({ ok: false, failure: 'payment_no_transfer' });
    expect(evaluatePayment(r([transfer(payer, 5000n)], 'reverted'), WALLET, BASE.asset, payer)).toEqual({ ok: false, failure: 'payment_failed' });
  });
});

describe('x402 v2 terms (validated by @x402/core schemas)', () => {
  const terms = { wallet: WALLET, resource: 'https://obs.example/agent-query/a', baseUrl: 'https://obs.example', chain: BASE, facilitator: true, maxAgeSeconds: 600 };
  it('Base and Base Sepolia: CAIP-2 network, USDC, its EIP-712 domain', () => {
    expect(BASE).toEqual({ network: 'eip155:8453', v1Network: 'base', chainId: 8453, asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913', eip712: { name: 'USD Coin', version: '2' } });
    expect(paymentChain('eip155:84532')).toEqual({ network: 'eip155:84532', v1Network: 'base-sepolia', chainId: 84532, asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e', eip712: { name: 'USDC', version: '2' } });
  });
  it('the PAYMENT-REQUIRED object and the v1 body are valid for their versions; nothing to accept without a wallet', () => {
    const v2 = x402PaymentRequired(terms, 'payment required');
    expect(PaymentRequiredV2Schema.safeParse(v2).success).toBe(true);
    expect(v2).toMatchObject({ x402Version: 2, resource: { url: terms.resource }, accepts: [{ scheme: 'exact', network: 'eip155:8453', amount: '1000', payTo: WALLET, extra: { name: 'USD Coin', version: '2' } }] });
    expect(PaymentRequiredV1Schema.safeParse({ x402Version: 1, accepts: x402Accepts(terms) }).success).toBe(true);
    expect(x402PaymentRequired({ ...terms, wallet: null }, 'x')).toBeNull();
    expect(x402Accepts({ ...terms, wallet: null })).toEqual([]);
  });
  it('reads PAYMENT-SIGNATURE, the EIP-3009 identity, and whether the payment accepts our terms', () => {
    const [req] = x402V2Requirements(terms);
    const payload: PaymentPayload = {
      x402Version: 2,
      resource: { url: terms.resource },
      accepted: req!,
      payload: { signature: SIG, authorization: { from: WALLET.replace('22', 'AB'), to: WALLET, value: '1000', validAfter: '0', validBefore: '99', nonce: H } },
    };
    const header = encodePaymentSignatureHeader(payload);
    const parsed = parsePaymentSignature(header)!;
    expect(parsed).toMatchObject({ x402Version: 2, accepted: { amount: '1000' } });
    expect(acceptsOurTerms(parsed, req!)).toBe(true);
    expect(acceptsOurTerms({ ...parsed, accepted: { ...req!, amount: '1' } }, req!)).toBe(false);
    expect(acceptsOurTerms({ ...parsed, accepted: { ...req!, payTo: '0x3333333333333333333333333333333333333333' } }, req!)).toBe(false);
    expect(acceptsOurTerms({ ...parsed, accepted: { ...req!, network: 'eip155:1' } }, req!)).toBe(false);
    const auth = eip3009Authorization(parsed)!;
    expect(authorizationId(BASE, auth)).toBe(`eip155:8453:${BASE.asset}:${auth.from}:${H}`.toLowerCase());
    expect(eip3009Authorization({ ...parsed, payload: { permit2Authorization: {} } })).toBeNull();
    for (const junk of ['', 'not base64!', Buffer.from('{"x402Version":2}').toString('base64'), Buffer.from(JSON.stringify({ ...payload, x402Version: 1 })).toString('base64')]) {
      expect(parsePaymentSignature(junk), junk).toBeNull();
    }
  });
});

describe('keys, addresses and the registration window', () => {
  it('parses Bearer credentials strictly', () => {
    expect(bearerToken(null)).toBeNull();
    expect(bearerToken('Bearer tobs_abc')).toBe('tobs_abc');
    expect(bearerToken('bearer tobs_abc')).toBe('tobs_abc');
    expect(bearerToken('Basic abc')).toBe('malformed');
    expect(bearerToken('Bearer a b')).toBe('malformed');
  });
  it('hashes keys and addresses, keyed and stable', () => {
    expect(hashApiKey('k')).toMatch(/^[0-9a-f]{64}$/);
    expect(addressHash('s1', '203.0.113.1')).toBe(addressHash('s1', '203.0.113.1'));
    expect(addressHash('s1', '203.0.113.1')).not.toBe(addressHash('s2', '203.0.113.1'));
  });
  it('allows five per sliding hour and says when the next one is possible', () => {
    const now = new Date('2026-01-01T12:00:00Z');
    const ago = (min: number) => new Date(now.getTime() - min * 60_000);
    expect(registrationDecision([ago(50), ago(40), ago(30), ago(20)], now)).toEqual({ allowed: true });
    expect(registrationDecision([ago(50), ago(40), ago(30), ago(20), ago(10)], now)).toEqual({ allowed: false, retryAfterSeconds: 600 });
    expect(registrationDecision([ago(61), ago(40), ago(30), ago(20), ago(10)], now)).toEqual({ allowed: true });
  });
});

describe('on-chain payment check against a local Base JSON-RPC', () => {
  let rpc: BaseRpcStandIn;
  let wrongChain: BaseRpcStandIn;
  const wallet = '0x2222222222222222222222222222222222222222';
  beforeAll(async () => {
    rpc = await startBaseRpc();
    wrongChain = await startBaseRpc({ chainId: 1 });
  });
  afterAll(async () => {
    await rpc?.close();
    await wrongChain?.close();
  });

  it('reads the receipt and the time its block was mined; the rule over it finds the payer\'s transfers', async () => {
    const v = createPaymentVerifier(rpc.url);
    const payer = '0x3333333333333333333333333333333333333333';
    const minedAt = new Date('2026-11-25T11:58:20Z');
    const one = rpc.addTransaction({ transfers: [{ to: wallet, units: 1000n, from: payer }], minedAt });
    const look = await v.lookup(one as `0x${string}`);
    expect(look).toMatchObject({ ok: true, minedAt });
    if (!look.ok) throw new Error('unreachable');
    expect(evaluatePayment(look.receipt, wallet, BASE.asset, payer)).toEqual({ ok: true, units: 1000n, payer: '0x3333333333333333333333333333333333333333' });
    const split = rpc.addTransaction({ transfers: [{ to: wallet, units: 600n, from: payer }, { to: wallet, units: 400n, from: payer }] });
    const look2 = await v.lookup(split as `0x${string}`);
    expect(look2.ok && evaluatePayment(look2.receipt, wallet, BASE.asset, payer)).toMatchObject({ ok: true, units: 1000n });
    expect(await v.lookup(H as `0x${string}`)).toEqual({ ok: false, failure: 'payment_not_found' });
    expect(rpc.calls.filter((c) => c.method === 'eth_chainId')).toHaveLength(1);
  });

  it('refuses an endpoint on another chain, and reports an unreachable RPC', async () => {
    const tx = wrongChain.addTransaction({ transfers: [{ to: wallet, units: 1000n }] });
    expect(await createPaymentVerifier(wrongChain.url).lookup(tx as `0x${string}`)).toEqual({ ok: false, failure: 'payment_wrong_chain' });
    const dead = await startBaseRpc();
    const url = dead.url;
    await dead.close();
    expect(await createPaymentVerifier(url, { timeoutMs: 1000 }).lookup(H as `0x${string}`)).toMatchObject({ ok: false, failure: 'rpc_unavailable' });
  });
});
