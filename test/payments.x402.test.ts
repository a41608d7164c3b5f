import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from '@x402/fetch';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { ExactEvmSchemeV1 } from '@x402/evm/v1';
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import { AccessService } from '../gen/observatory/v1/access_pb.js';
import { migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/postgres.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { startFacilitator, type FacilitatorStandIn } from './support/facilitator.js';

// x402 v2 beside v1 (issue 19.3): stock clients of @x402/fetch and @x402/evm pay for a verdict;
// the observatory verifies and settles through a facilitator's /verify and /settle (a local
// stand-in that checks what it is sent), answers PAYMENT-RESPONSE, and honours each signed
// payment (its EIP-3009 nonce) once across instances.

const WALLET = '0x5555555555555555555555555555555555555555';
const USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';
const BASE_EXPECT = { network: 'eip155:8453', v1Network: 'base', asset: USDC, payTo: WALLET, amount: '1000' };
const SLUG = 'search-example-org-mcp';

/** fetch that remembers the payment headers it sent, so a test can replay them. */
function recordingFetch() {
  const sent: Headers[] = [];
  const f: typeof fetch = async (input, init) => {
    const req = new Request(input, init);
    sent.push(new Headers(req.headers));
    return fetch(req);
  };
  return { fetch: f, sent };
}

function v2Client(account = privateKeyToAccount(generatePrivateKey()), network: `${string}:${string}` = 'eip155:8453') {
  return new x402Client().register(network, new ExactEvmScheme(account));
}

async function seed(app: TestApp) {
  await postJson(`${app.base}/api/report`, { server_url: 'https://search.example.org/mcp', success: true, latency_ms: 80, tool_name: 'web_search' });
}

describe(`x402 v2 and v1 clients pay through the facilitator (${backend})`, () => {
  let t: TestApp;
  let fac: FacilitatorStandIn;
  beforeAll(async () => {
    fac = await startFacilitator(BASE_EXPECT);
    t = await startTestApp({ PAYMENT_WALLET: WALLET, FACILITATOR_URL: fac.url, PUBLIC_BASE_URL: 'https://obs.example' });
    await seed(t);
  });
  afterAll(async () => {
    await t?.close();
    await fac?.close();
  });
  const target = () => `${t.base}/agent-query/${SLUG}`;

  it('a stock v2 client (@x402/fetch + @x402/evm exact) gets the verdict and PAYMENT-RESPONSE; the facilitator saw our exact terms', async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const rec = recordingFetch();
    const pay = wrapFetchWithPayment(rec.fetch, v2Client(account));
    const res = await pay(target());
    expect(res.status).toBe(200);
    const v = await json(res);
    expect(v).toMatchObject({ payment_method: 'x402', server_url: 'https://search.example.org/mcp', receipt_id: expect.stringMatching(/^[0-9a-f]{16}$/) });
    const settle = decodePaymentResponseHeader(res.headers.get('payment-response')!);
    expect(settle).toMatchObject({ success: true, network: 'eip155:8453', payer: account.address, transaction: fac.settled.at(-1)!.transaction });

    // The client sent PAYMENT-SIGNATURE (not X-Payment) on its second request.
    expect(rec.sent).toHaveLength(2);
    expect(rec.sent[1]!.get('payment-signature')).toBeTruthy();
    expect(rec.sent[1]!.get('x-payment')).toBeNull();

    const [verify, settleCall] = fac.calls.slice(-2);
    expect(verify!.path).toBe('/verify');
    expect(settleCall!.path).toBe('/settle');
    for (const c of [verify!, settleCall!]) {
      expect(c.problems).toEqual([]);
      expect(c.body).toMatchObject({
        x402Version: 2,
        paymentRequirements: { scheme: 'exact', network: 'eip155:8453', amount: '1000', asset: USDC, payTo: WALLET, extra: { name: 'USD Coin', version: '2' } },
        paymentPayload: { x402Version: 2, resource: { url: `https://obs.example/agent-query/${SLUG}` } },
      });
    }
    // Recorded: the authorization (with its settlement) and the settlement's transaction hash.
    const [auth] = await t.tdb.db.query<{ payer: string; settle_transaction: string; receipt_id: string }>('SELECT payer, settle_transaction, receipt_id FROM payment_authorizations WHERE receipt_id = $1', [v.receipt_id]);
    expect(auth).toEqual({ payer: account.address, settle_transaction: settle.transaction.toLowerCase(), receipt_id: v.receipt_id });
    const [tx] = await t.tdb.db.query<{ method: string }>('SELECT method FROM payments WHERE tx_hash = $1', [settle.transaction.toLowerCase()]);
    expect(tx).toEqual({ method: 'facilitator' });
  });

  it('a replayed PAYMENT-SIGNATURE is refused without asking the facilitator again', async () => {
    const rec = recordingFetch();
    expect((await wrapFetchWithPayment(rec.fetch, v2Client())(target())).status).toBe(200);
    const signature = rec.sent[1]!.get('payment-signature')!;
    const before = fac.calls.length;
    const res = await fetch(target(), { headers: { 'payment-signature': signature } });
    const p = await expectProblem(res, 402, 'payment_required');
    expect(p.reason).toBe('payment_replayed');
    // The 402 carries the v2 requirements with the refusal as its error.
    expect(decodePaymentRequiredHeader(res.headers.get('payment-required')!)).toMatchObject({ x402Version: 2, error: p.detail });
    expect(fac.calls.length).toBe(before);
  });

  it('terms that are not ours, a Permit2 payload and junk are refused before the facilitator is asked', async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const required = decodePaymentRequiredHeader((await fetch(target())).headers.get('payment-required')!);
    const before = fac.calls.length;
    const cheap: PaymentRequirements = { ...required.accepts[0]!, amount: '1' };
    const underpaid = await new ExactEvmScheme(account).createPaymentPayload(2, cheap);
    const payload: PaymentPayload = { x402Version: 2, resource: required.resource, accepted: cheap, payload: underpaid.payload };
    const a = await expectProblem(await fetch(target(), { headers: { 'payment-signature': encodePaymentSignatureHeader(payload) } }), 402, 'payment_required');
    expect(a.reason).toBe('payment_mismatch');
    const permit2: PaymentPayload = { ...payload, accepted: required.accepts[0]!, payload: { signature: `0x${'11'.repeat(65)}`, permit2Authorization: { from: account.address } } };
    const b = await expectProblem(await fetch(target(), { headers: { 'payment-signature': encodePaymentSignatureHeader(permit2) } }), 402, 'payment_required');
    expect(b.reason).toBe('payment_unsupported');
    for (const junk of ['not-base64!', Buffer.from('{"x402Version":2}').toString('base64')]) {
      const c = await expectProblem(await fetch(target(), { headers: { 'payment-signature': junk } }), 402, 'payment_required');
      expect(c.reason).toBe('payment_malformed');
    }
    expect(fac.calls.length).toBe(before);
  });

  it('the facilitator\'s refusals: invalid is 402, a failed settlement is 402 and frees the authorization to be paid again', async () => {
    fac.refuseVerifyWith = 'insufficient_funds';
    const refused = await wrapFetchWithPayment(fetch, v2Client())(target());
    fac.refuseVerifyWith = null;
    const p = await expectProblem(refused, 402, 'payment_required');
    expect(p).toMatchObject({ reason: 'payment_invalid', detail: expect.stringContaining('insufficient_funds') });

    const rec = recordingFetch();
    fac.failSettleWith = 'transaction_failed';
    const failed = await wrapFetchWithPayment(rec.fetch, v2Client())(target());
    fac.failSettleWith = null;
    expect((await expectProblem(failed, 402, 'payment_required')).reason).toBe('payment_settle_failed');
    // Nothing moved, so the same authorization may be presented again and now settles.
    const again = await fetch(target(), { headers: { 'payment-signature': rec.sent[1]!.get('payment-signature')! } });
    expect(again.status).toBe(200);
    expect(decodePaymentResponseHeader(again.headers.get('payment-response')!).success).toBe(true);
  });

  it('an x402 v1 client: reads the 402 body, pays with its v1 payload in X-Payment, gets X-PAYMENT-RESPONSE', async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const first = await fetch(target());
    const body = await json(first);
    expect(body).toMatchObject({ x402Version: 1, accepts: [{ scheme: 'exact', network: 'base', maxAmountRequired: '1000', payTo: WALLET, asset: USDC }] });
    // What a v1 client does with the body: sign the first requirement it supports.
    const partial = await new ExactEvmSchemeV1(account).createPaymentPayload(1, body.accepts[0]);
    const paid = await fetch(target(), { headers: { 'x-payment': encodePaymentSignatureHeader(partial as unknown as PaymentPayload) } });
    expect(paid.status).toBe(200);
    expect(await json(paid)).toMatchObject({ payment_method: 'x402' });
    const settle = decodePaymentResponseHeader(paid.headers.get('x-payment-response')!);
    expect(settle).toMatchObject({ success: true, network: 'base', payer: account.address });
    expect(paid.headers.get('payment-response')).toBe(paid.headers.get('x-payment-response'));
    const [verify, settleCall] = fac.calls.slice(-2);
    for (const c of [verify!, settleCall!]) {
      expect(c.problems).toEqual([]);
      expect(c.body).toMatchObject({ x402Version: 1, paymentPayload: { x402Version: 1, scheme: 'exact', network: 'base' }, paymentRequirements: { network: 'base', maxAmountRequired: '1000', payTo: WALLET } });
    }
    // The same v1 authorization is honoured once.
    const replay = await expectProblem(await fetch(target(), { headers: { 'x-payment': encodePaymentSignatureHeader(partial as unknown as PaymentPayload) } }), 402, 'payment_required');
    expect(replay.reason).toBe('payment_replayed');
  });

  it('over Connect: PAYMENT-SIGNATURE in, PAYMENT-RESPONSE in the response headers', async () => {
    const client = createClient(AccessService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' }));
    const required = decodePaymentRequiredHeader((await fetch(target())).headers.get('payment-required')!);
    const account = privateKeyToAccount(generatePrivateKey());
    const payload = await v2Client(account).createPaymentPayload(required);
    let headers: Headers | undefined;
    const v = await client.agentQuery({ serverSlug: SLUG }, { headers: { 'payment-signature': encodePaymentSignatureHeader(payload) }, onHeader: (h) => (headers = h) });
    expect(v.paymentMethod).toBe('x402');
    expect(decodePaymentResponseHeader(headers!.get('payment-response')!)).toMatchObject({ success: true, payer: account.address });
  });

  it('browsers may send PAYMENT-SIGNATURE and read PAYMENT-REQUIRED / PAYMENT-RESPONSE (CORS)', async () => {
    const pre = await fetch(target(), {
      method: 'OPTIONS',
      headers: { origin: 'https://agent.example', 'access-control-request-method': 'GET', 'access-control-request-headers': 'payment-signature,x-payment,access-control-expose-headers' },
    });
    expect(pre.status).toBeLessThan(300);
    const allowed = (pre.headers.get('access-control-allow-headers') ?? '').toLowerCase();
    for (const h of ['payment-signature', 'x-payment', 'access-control-expose-headers']) expect(allowed).toContain(h);
    const res = await fetch(target(), { headers: { origin: 'https://agent.example' } });
    const exposed = (res.headers.get('access-control-expose-headers') ?? '').toLowerCase();
    for (const h of ['payment-required', 'payment-response', 'x-payment-response']) expect(exposed).toContain(h);
  });

  it('payment-info says both versions can pay', async () => {
    const info = await json(fetch(`${t.base}/api/payment-info`));
    expect(info).toMatchObject({ x402_versions: [1, 2], network: 'eip155:8453' });
    expect(info.x402.map((x: { x402_version: number; enabled: boolean }) => [x.x402_version, x.enabled])).toEqual([
      [2, true],
      [1, true],
    ]);
    expect(info.instructions).toContain('PAYMENT-SIGNATURE');
  });
});

describe(`signed authorizations cost the facilitator a call each: throttled like chain look-ups (${backend})`, () => {
  let t: TestApp;
  let fac: FacilitatorStandIn;
  beforeAll(async () => {
    fac = await startFacilitator(BASE_EXPECT);
    t = await startTestApp({ PAYMENT_WALLET: WALLET, FACILITATOR_URL: fac.url, PUBLIC_BASE_URL: 'https://obs.example', TRUST_PROXY: '1', PAYMENT_LOOKUPS_PER_MINUTE: '3' });
    await seed(t);
  });
  afterAll(async () => {
    await t?.close();
    await fac?.close();
  });

  it('fresh keys signing authorizations from one network reach /verify at most its allowance a minute; another network is not affected', async () => {
    const target = `${t.base}/agent-query/${SLUG}`;
    const required = decodePaymentRequiredHeader((await fetch(target)).headers.get('payment-required')!);
    // Authorizations anyone can make: a new key each, our exact terms; the facilitator says no funds.
    const signed = async () => {
      const made = await new ExactEvmScheme(privateKeyToAccount(generatePrivateKey())).createPaymentPayload(2, required.accepts[0]!);
      return encodePaymentSignatureHeader({ x402Version: 2, resource: required.resource, accepted: required.accepts[0]!, payload: made.payload });
    };
    const verifies = () => fac.calls.filter((c) => c.path.endsWith('/verify')).length;
    fac.refuseVerifyWith = 'insufficient_funds';
    try {
      const before = verifies();
      const outcomes: string[] = [];
      for (const address of ['2001:db8:5:6::1', '2001:db8:5:6::2', '2001:db8:5:6:7::3', '2001:db8:5:6::4', '2001:db8:5:6::5']) {
        const res = await fetch(target, { headers: { 'payment-signature': await signed(), 'x-forwarded-for': address } });
        const body = await json(res);
        outcomes.push(`${res.status} ${body.reason ?? body.code}`);
        if (res.status === 429) expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      }
      expect(outcomes).toEqual(['402 payment_invalid', '402 payment_invalid', '402 payment_invalid', '429 rate_limited', '429 rate_limited']);
      expect(verifies() - before).toBe(3);
      const other = await fetch(target, { headers: { 'payment-signature': await signed(), 'x-forwarded-for': '2001:db8:9:9::1' } });
      expect((await expectProblem(other, 402, 'payment_required')).reason).toBe('payment_invalid');
      expect(verifies() - before).toBe(4);
    } finally {
      fac.refuseVerifyWith = null;
    }
  });
});

describe(`without FACILITATOR_URL a v2 payment is refused clearly (${backend})`, () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ PAYMENT_WALLET: WALLET });
    await seed(t);
  });
  afterAll(async () => {
    await t?.close();
  });

  it('the 402 still carries PAYMENT-REQUIRED; the signed retry is 402 payment_needs_facilitator', async () => {
    const res = await wrapFetchWithPayment(fetch, v2Client())(`${t.base}/agent-query/${SLUG}`);
    const p = await expectProblem(res, 402, 'payment_required');
    expect(p.reason).toBe('payment_needs_facilitator');
    expect(String(p.detail)).toContain('FACILITATOR_URL');
    expect(decodePaymentRequiredHeader(res.headers.get('payment-required')!)).toMatchObject({ x402Version: 2, error: p.detail });
  });
});

describe(`PAYMENT_NETWORK=eip155:84532 serves Base Sepolia to both versions (${backend})`, () => {
  let t: TestApp;
  let fac: FacilitatorStandIn;
  const SEPOLIA_USDC = '0x036CbD53842c5426634e7929541eC2318f3dCF7e';
  beforeAll(async () => {
    fac = await startFacilitator({ network: 'eip155:84532', v1Network: 'base-sepolia', asset: SEPOLIA_USDC, payTo: WALLET, amount: '1000' });
    t = await startTestApp({ PAYMENT_WALLET: WALLET, FACILITATOR_URL: fac.url, PAYMENT_NETWORK: 'eip155:84532' });
    await seed(t);
  });
  afterAll(async () => {
    await t?.close();
    await fac?.close();
  });

  it('advertises the testnet in both versions and a testnet client pays', async () => {
    const first = await fetch(`${t.base}/agent-query/${SLUG}`);
    const body = await json(first);
    expect(body).toMatchObject({ chain: 'base-sepolia', chain_id: 84532, accepts: [{ network: 'base-sepolia', asset: SEPOLIA_USDC }] });
    expect(first.headers.get('x-payment-required')).toBe('USDC:0.001:base-sepolia');
    expect(decodePaymentRequiredHeader(first.headers.get('payment-required')!).accepts[0]).toMatchObject({ network: 'eip155:84532', asset: SEPOLIA_USDC, extra: { name: 'USDC', version: '2' } });
    const res = await wrapFetchWithPayment(fetch, v2Client(undefined, 'eip155:84532'))(`${t.base}/agent-query/${SLUG}`);
    expect(res.status).toBe(200);
    expect(fac.calls.every((c) => c.problems.length === 0)).toBe(true);
  });
});

describe.skipIf(backend !== 'postgres')('a signed payment is honoured once across two instances on one PostgreSQL database', () => {
  let tdb: TestDatabase;
  let a: TestApp;
  let b: TestApp;
  let fac: FacilitatorStandIn;
  beforeAll(async () => {
    fac = await startFacilitator(BASE_EXPECT);
    tdb = await createTestDatabase();
    const own = async () => {
      const db = openPostgres(tdb.url!);
      await migrate(db);
      return { db, url: tdb.url, drop: async () => {} };
    };
    const env = { PAYMENT_WALLET: WALLET, FACILITATOR_URL: fac.url, PUBLIC_BASE_URL: 'https://obs.example' };
    a = await startTestApp(env, { tdb: await own() });
    b = await startTestApp(env, { tdb: await own() });
    await seed(a);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await tdb?.drop();
    await fac?.close();
  });

  it('the same PAYMENT-SIGNATURE sent 8 times over both instances buys one verdict and is settled once', async () => {
    const required = decodePaymentRequiredHeader((await fetch(`${a.base}/agent-query/${SLUG}`)).headers.get('payment-required')!);
    const header = encodePaymentSignatureHeader(await v2Client().createPaymentPayload(required));
    const statuses = await Promise.all(
      Array.from({ length: 8 }, (_, i) => fetch(`${(i % 2 ? a : b).base}/agent-query/${SLUG}`, { headers: { 'payment-signature': header } }).then((r) => r.status)),
    );
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s === 402)).toHaveLength(7);
    expect(fac.calls.filter((c) => c.path === '/settle')).toHaveLength(1);
  });
});

if (backend !== 'postgres') console.log('SKIP two-instance x402 v2 replay test: needs PostgreSQL (set DATABASE_URL); PGlite is single-process');
