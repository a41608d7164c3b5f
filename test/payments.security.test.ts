import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { randomHash, startBaseRpc, type BaseRpcStandIn } from './support/base-rpc.js';

// x402 v1 payments by transaction hash (issue 17, finding 8). A transaction hash is public on
// chain, so a hash alone proves nothing about who is presenting it: the payer proves it with an
// EIP-191 signature by the transfer's `from` address over the message docs/access.md documents.
// The message is built here from the documentation, not from the service's code.

const WALLET = '0x2222222222222222222222222222222222222222';
const BASE = 'https://obs.example';
const RESOURCE = `${BASE}/agent-query/weather-example-com-mcp`;
const start = new Date('2026-11-25T12:00:00Z');
let clock = start;
const now = () => clock;

/** The documented proof: personal_sign over four lines, sent as JSON in X-Payment. */
async function proof(account: PrivateKeyAccount, txHash: string, opts: { resource?: string; issuedAt?: Date } = {}): Promise<string> {
  const resource = opts.resource ?? RESOURCE;
  const issuedAt = Math.floor((opts.issuedAt ?? clock).getTime() / 1000);
  const message = `x402 payment proof\ntx_hash: ${txHash.toLowerCase()}\nresource: ${resource}\nissued_at: ${issuedAt}`;
  const signature = await account.signMessage({ message });
  return JSON.stringify({ tx_hash: txHash, resource, issued_at: issuedAt, signature });
}

/** The service with payments on, over a Base RPC stand-in, on this file's clock, with one tracked server. */
async function startPayingApp(env: Record<string, string>): Promise<{ t: TestApp; rpc: BaseRpcStandIn }> {
  const rpc = await startBaseRpc({ now });
  const t = await startTestApp({ PAYMENT_WALLET: WALLET, PAYMENT_RPC_URL: rpc.url, PUBLIC_BASE_URL: BASE, TRUST_PROXY: '1', ...env }, { now });
  await postJson(`${t.base}/api/report`, { server_url: 'https://weather.example.com/mcp', success: true, latency_ms: 120 });
  return { t, rpc };
}

const query = (app: TestApp, headers: Record<string, string>) => fetch(`${app.base}/agent-query/weather-example-com-mcp`, { headers });

describe(`x402 v1 transaction hashes are bound to their payer and to a recent window (${backend})`, () => {
  let t: TestApp;
  let rpc: BaseRpcStandIn;
  const payer = privateKeyToAccount(generatePrivateKey());
  const thief = privateKeyToAccount(generatePrivateKey());

  beforeAll(async () => {
    ({ t, rpc } = await startPayingApp({}));
  });
  afterAll(async () => {
    await t?.close();
    await rpc?.close();
  });

  it('a stolen hash without the payer\'s proof is refused, and the payer can still use it', async () => {
    clock = start;
    const tx = rpc.addTransaction({ transfers: [{ from: payer.address, to: WALLET, units: 1000n }] });
    // Whoever reads the chain knows the hash: bare, as JSON, or with a proof signed by someone else.
    for (const header of [tx, JSON.stringify({ tx_hash: tx }), Buffer.from(JSON.stringify({ tx_hash: tx })).toString('base64')]) {
      const p = await expectProblem(await query(t, { 'x-payment': header, 'x-forwarded-for': '198.51.100.7' }), 402, 'payment_required');
      expect(p.reason, header).toBe('payment_proof_missing');
    }
    const forged = await expectProblem(await query(t, { 'x-payment': await proof(thief, tx), 'x-forwarded-for': '198.51.100.7' }), 402, 'payment_required');
    expect(forged.reason).toBe('payment_proof_invalid');
    // A proof by the payer for another resource does not transfer to this one.
    const elsewhere = await expectProblem(
      await query(t, { 'x-payment': await proof(payer, tx, { resource: `${BASE}/agent-query/other` }), 'x-forwarded-for': '198.51.100.7' }),
      402,
      'payment_required',
    );
    expect(elsewhere.reason).toBe('payment_proof_invalid');
    // None of the refusals burnt the payment: the payer's own proof buys the verdict, once.
    const paid = await query(t, { 'x-payment': await proof(payer, tx), 'x-forwarded-for': '203.0.113.5' });
    expect(paid.status).toBe(200);
    expect(await json(paid)).toMatchObject({ payment_method: 'x402', server_url: 'https://weather.example.com/mcp' });
    const again = await expectProblem(await query(t, { 'x-payment': await proof(payer, tx), 'x-forwarded-for': '203.0.113.5' }), 402, 'payment_required');
    expect(again.reason).toBe('payment_replayed');
    // Anyone else learns nothing of its use from it: a proof by someone else is just invalid
    // (it used to answer payment_replayed before checking the proof against the payer).
    const probe = await expectProblem(await query(t, { 'x-payment': await proof(thief, tx), 'x-forwarded-for': '198.51.100.7' }), 402, 'payment_required');
    expect(probe.reason).toBe('payment_proof_invalid');
    // The proof's base64 form works too.
    const tx2 = rpc.addTransaction({ transfers: [{ from: payer.address, to: WALLET, units: 1000n }] });
    expect((await query(t, { 'x-payment': Buffer.from(await proof(payer, tx2)).toString('base64'), 'x-forwarded-for': '203.0.113.5' })).status).toBe(200);
  });

  it('a transfer older than the window (10 minutes by default) is refused, and so is an old proof', async () => {
    clock = start;
    const old = rpc.addTransaction({ transfers: [{ from: payer.address, to: WALLET, units: 1000n }], minedAt: new Date(start.getTime() - 11 * 60_000) });
    const p = await expectProblem(await query(t, { 'x-payment': await proof(payer, old), 'x-forwarded-for': '203.0.113.6' }), 402, 'payment_required');
    expect(p.reason).toBe('payment_expired');
    expect((await t.tdb.db.query('SELECT 1 FROM payments WHERE tx_hash = $1', [old])).length).toBe(0);

    const recent = rpc.addTransaction({ transfers: [{ from: payer.address, to: WALLET, units: 1000n }], minedAt: new Date(start.getTime() - 9 * 60_000) });
    const stale = await expectProblem(
      await query(t, { 'x-payment': await proof(payer, recent, { issuedAt: new Date(start.getTime() - 11 * 60_000) }), 'x-forwarded-for': '203.0.113.6' }),
      402,
      'payment_required',
    );
    expect(stale.reason).toBe('payment_proof_expired');
    const future = await expectProblem(
      await query(t, { 'x-payment': await proof(payer, recent, { issuedAt: new Date(start.getTime() + 10 * 60_000) }), 'x-forwarded-for': '203.0.113.6' }),
      402,
      'payment_required',
    );
    expect(future.reason).toBe('payment_proof_expired');
    expect((await query(t, { 'x-payment': await proof(payer, recent), 'x-forwarded-for': '203.0.113.6' })).status).toBe(200);
  });
});

describe(`x402 v1 look-ups on the chain are throttled per client network (${backend})`, () => {
  let t: TestApp;
  let rpc: BaseRpcStandIn;
  const someone = privateKeyToAccount(generatePrivateKey());
  const lookups = () => rpc.calls.filter((c) => c.method === 'eth_getTransactionReceipt').length;

  beforeAll(async () => {
    ({ t, rpc } = await startPayingApp({ PAYMENT_LOOKUPS_PER_MINUTE: '3' }));
  });
  afterAll(async () => {
    await t?.close();
    await rpc?.close();
  });

  it('random hashes cost at most the per-network allowance of RPC calls; another network is not affected', async () => {
    clock = start;
    const before = lookups();
    // Two addresses of one IPv6 /64 are one client network.
    const sameNetwork = ['2001:db8:1:2::1', '2001:db8:1:2::99', '2001:db8:1:2:aaaa::5', '2001:db8:1:2::1', '2001:db8:1:2::77'];
    const statuses: number[] = [];
    const reasons: unknown[] = [];
    for (const address of sameNetwork) {
      const res = await query(t, { 'x-payment': await proof(someone, randomHash()), 'x-forwarded-for': address });
      statuses.push(res.status);
      const body = await json(res);
      reasons.push(body.reason ?? body.code);
      if (res.status === 429) expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    expect(statuses).toEqual([402, 402, 402, 429, 429]);
    expect(reasons.slice(0, 3)).toEqual(['payment_not_found', 'payment_not_found', 'payment_not_found']);
    expect(reasons[3]).toBe('rate_limited');
    expect(lookups() - before).toBe(3);

    const other = await expectProblem(await query(t, { 'x-payment': await proof(someone, randomHash()), 'x-forwarded-for': '2001:db8:9:9::1' }), 402, 'payment_required');
    expect(other.reason).toBe('payment_not_found');
    expect(lookups() - before).toBe(4);

    // Well-formed signatures that recover to no signer cost the allowance too: recovering one
    // costs about 1.5 ms of CPU (before, they were refused without taking a token, any number a second).
    const garbled = JSON.stringify({ tx_hash: randomHash(), resource: RESOURCE, issued_at: Math.floor(clock.getTime() / 1000), signature: `0x${'00'.repeat(32)}${'ab'.repeat(32)}1b` });
    const spent = await expectProblem(await query(t, { 'x-payment': garbled, 'x-forwarded-for': '2001:db8:1:2::5' }), 429, 'rate_limited');
    expect(spent.detail).toMatch(/payment look-ups/);
    expect(lookups() - before).toBe(4);

    // Refused without a look-up, so they cost the allowance nothing: no proof at all.
    const noProof = await expectProblem(await query(t, { 'x-payment': randomHash(), 'x-forwarded-for': '2001:db8:1:2::1' }), 402, 'payment_required');
    expect(noProof.reason).toBe('payment_proof_missing');
    expect(lookups() - before).toBe(4);

    // The allowance refills with time.
    clock = new Date(start.getTime() + 61_000);
    const later = await expectProblem(await query(t, { 'x-payment': await proof(someone, randomHash()), 'x-forwarded-for': '2001:db8:1:2::1' }), 402, 'payment_required');
    expect(later.reason).toBe('payment_not_found');
  });
});

describe(`x402 look-ups from every client network together are bounded per instance (${backend})`, () => {
  let t: TestApp;
  let rpc: BaseRpcStandIn;
  const someone = privateKeyToAccount(generatePrivateKey());
  const lookups = () => rpc.calls.filter((c) => c.method === 'eth_getTransactionReceipt').length;

  beforeAll(async () => {
    ({ t, rpc } = await startPayingApp({ PAYMENT_LOOKUPS_PER_MINUTE: '3', PAYMENT_LOOKUPS_TOTAL_PER_MINUTE: '5' }));
  });
  afterAll(async () => {
    await t?.close();
    await rpc?.close();
  });

  it('many networks, each within its allowance, cannot spend more than the instance\'s: 503 with Retry-After and no RPC call', async () => {
    clock = start;
    const before = lookups();
    // Five networks, one random hash each: the instance's five look-ups, then refusals.
    const reasons: unknown[] = [];
    for (const address of ['198.51.100.1', '198.51.100.2', '198.51.100.3', '198.51.100.4', '198.51.100.5']) {
      reasons.push((await expectProblem(await query(t, { 'x-payment': await proof(someone, randomHash()), 'x-forwarded-for': address }), 402, 'payment_required')).reason);
    }
    expect(reasons).toEqual(Array(5).fill('payment_not_found'));
    for (const address of ['198.51.100.6', '2001:db8:77::1']) {
      const res = await query(t, { 'x-payment': await proof(someone, randomHash()), 'x-forwarded-for': address });
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      expect((await expectProblem(res, 503, 'unavailable')).detail).toMatch(/PAYMENT_LOOKUPS_TOTAL_PER_MINUTE/);
    }
    expect(lookups() - before).toBe(5);
    // It refills with time, like the per-network allowance.
    clock = new Date(start.getTime() + 13_000); // 5 a minute: one token back every 12 s
    const later = await expectProblem(await query(t, { 'x-payment': await proof(someone, randomHash()), 'x-forwarded-for': '198.51.100.6' }), 402, 'payment_required');
    expect(later.reason).toBe('payment_not_found');
    expect(lookups() - before).toBe(6);
  });
});
