import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerToken, registrationDecision, hashApiKey, addressHash } from '../src/domain/access.js';
import { parseXPayment } from '../src/domain/x402.js';
import { createPaymentVerifier } from '../src/payments/chain.js';
import { startBaseRpc, type BaseRpcStandIn } from './support/base-rpc.js';

const H = `0x${'ab'.repeat(32)}`;

describe('X-Payment formats', () => {
  it('takes a bare hash, JSON or base64 JSON with tx_hash', () => {
    expect(parseXPayment(H)).toBe(H);
    expect(parseXPayment(` ${H.toUpperCase().replace('0X', '0x')} `)).toBe(H);
    expect(parseXPayment(JSON.stringify({ tx_hash: H }))).toBe(H);
    expect(parseXPayment(Buffer.from(JSON.stringify({ tx_hash: H })).toString('base64'))).toBe(H);
    expect(parseXPayment(Buffer.from(JSON.stringify({ tx_hash: H })).toString('base64url'))).toBe(H);
    expect(parseXPayment(Buffer.from(JSON.stringify({ x402Version: 1, payload: { txHash: H } })).toString('base64'))).toBe(H);
  });
  it('refuses everything else', () => {
    for (const v of ['', '0x12', `${H}00`, '{"tx_hash":1}', '[1]', 'zz!!', 'x'.repeat(10_000), Buffer.from('{"a":1}').toString('base64')]) expect(parseXPayment(v), v).toBeNull();
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

  it('accepts a successful USDC transfer to the wallet and sums several transfers', async () => {
    const v = createPaymentVerifier(rpc.url);
    const one = rpc.addTransaction({ transfers: [{ to: wallet, units: 1000n, from: '0x3333333333333333333333333333333333333333' }] });
    expect(await v.verify(one as `0x${string}`, wallet)).toMatchObject({ ok: true, units: 1000n, payer: '0x3333333333333333333333333333333333333333' });
    const split = rpc.addTransaction({ transfers: [{ to: wallet, units: 600n }, { to: wallet, units: 400n }] });
    expect(await v.verify(split as `0x${string}`, wallet)).toMatchObject({ ok: true, units: 1000n });
    expect(rpc.calls.filter((c) => c.method === 'eth_chainId')).toHaveLength(1);
  });

  it('refuses an endpoint on another chain, and reports an unreachable RPC', async () => {
    const tx = wrongChain.addTransaction({ transfers: [{ to: wallet, units: 1000n }] });
    expect(await createPaymentVerifier(wrongChain.url).verify(tx as `0x${string}`, wallet)).toEqual({ ok: false, failure: 'payment_wrong_chain' });
    const dead = await startBaseRpc();
    const url = dead.url;
    await dead.close();
    expect(await createPaymentVerifier(url, { timeoutMs: 1000 }).verify(H as `0x${string}`, wallet)).toMatchObject({ ok: false, failure: 'rpc_unavailable' });
  });
});
