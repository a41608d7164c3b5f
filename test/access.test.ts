import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { AccessService, PaymentRequiredSchema } from '../gen/observatory/v1/access_pb.js';
import { ReceiptService } from '../gen/observatory/v1/receipt_pb.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { randomAddress, randomHash, startBaseRpc, USDBC_BASE, type BaseRpcStandIn } from './support/base-rpc.js';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';

const WALLET = '0x1111111111111111111111111111111111111111';
let clock = new Date('2026-11-25T12:00:00Z');
const now = () => clock;
let t: TestApp;
let rpc: BaseRpcStandIn;
let ip = 0;
/** A distinct client address per registration burst (TRUST_PROXY=1 trusts X-Forwarded-For). */
const nextAddress = () => `203.0.113.${++ip}`;

async function register(address = nextAddress()): Promise<string> {
  const res = await postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': address });
  expect(res.status).toBe(200);
  return (await json(res)).api_key as string;
}
const query = (slug: string, headers: Record<string, string> = {}) => fetch(`${t.base}/agent-query/${encodeURIComponent(slug)}`, { headers });

beforeAll(async () => {
  rpc = await startBaseRpc({ now });
  t = await startTestApp({ PAYMENT_WALLET: WALLET, PAYMENT_RPC_URL: rpc.url, TRUST_PROXY: '1', PUBLIC_BASE_URL: 'https://obs.example' }, { now });
  for (let i = 0; i < 3; i++) await postJson(`${t.base}/api/report`, { server_url: 'https://weather.example.com/mcp', success: true, latency_ms: 120 + i, tool_name: 'get_forecast' });
  await postJson(`${t.base}/api/report`, { server_url: 'https://flaky.example.com/mcp', success: false, latency_ms: 900 });
});
afterAll(async () => {
  await t?.close();
  await rpc?.close();
});

describe(`POST /agent/auth (${backend})`, () => {
  it('issues a trial key and stores only its hash', async () => {
    const res = await postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': nextAddress() });
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body).toMatchObject({ credential_type: 'api_key', scopes: ['trust:read'], trial_limit: 50, credential_expires: null });
    expect(body.api_key).toMatch(/^tobs_[A-Za-z0-9_-]{43}$/);
    const rows = await t.tdb.db.query<{ key_hash: string }>('SELECT key_hash FROM api_keys');
    const dump = JSON.stringify(await t.tdb.db.query('SELECT * FROM api_keys'));
    expect(dump).not.toContain(body.api_key);
    expect(rows.some((r) => /^[0-9a-f]{64}$/.test(r.key_hash))).toBe(true);
  });

  it('takes the body SPEC 4.6 shows: a missing member takes the only value offered', async () => {
    for (const body of [{ type: 'anonymous' }, { requested_credential_type: 'api_key' }, {}]) {
      const res = await postJson(`${t.base}/agent/auth`, body, { 'x-forwarded-for': nextAddress() });
      expect(res.status, JSON.stringify(body)).toBe(200);
      expect(await json(res)).toMatchObject({ credential_type: 'api_key', scopes: ['trust:read'], trial_limit: 50 });
    }
    // No body at all, as `curl -X POST` sends it.
    const bare = await fetch(`${t.base}/agent/auth`, { method: 'POST', headers: { 'x-forwarded-for': nextAddress() } });
    expect(bare.status).toBe(200);
    expect((await json(bare)).api_key).toMatch(/^tobs_/);
  });

  it('refuses anything but anonymous + api_key with 400', async () => {
    for (const body of [
      { type: 'oauth', requested_credential_type: 'api_key' },
      { type: 'anonymous', requested_credential_type: 'jwt' },
      { type: 'oauth' },
      { requested_credential_type: 'jwt' },
      { type: 5, requested_credential_type: 'api_key' },
      { type: 'anonymous', requested_credential_type: 'api_key'.repeat(20) },
    ]) {
      await expectProblem(await postJson(`${t.base}/agent/auth`, body, { 'x-forwarded-for': nextAddress() }), 400, 'invalid_argument');
    }
    await expectProblem(await fetch(`${t.base}/agent/auth`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': nextAddress() }, body: '{nope' }), 400);
    await expectProblem(await fetch(`${t.base}/agent/auth`), 405, 'method_not_allowed');
  });

  it('allows 5 registrations per hour per address, the 6th is 429 with Retry-After; the window slides', async () => {
    const addr = nextAddress();
    const start = clock;
    for (let i = 0; i < 5; i++) {
      clock = new Date(start.getTime() + i * 60_000);
      await register(addr);
    }
    clock = new Date(start.getTime() + 10 * 60_000);
    const res = await postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': addr });
    const p = await expectProblem(res, 429, 'rate_limited');
    // The oldest registration leaves the window 50 minutes from now.
    expect(res.headers.get('retry-after')).toBe(String(50 * 60));
    expect(p.retry_after_seconds).toBe(3000);
    // Another address is not affected.
    await register(nextAddress());
    // After the oldest leaves the window, one more is allowed.
    clock = new Date(start.getTime() + 60 * 60_000 + 1000);
    await register(addr);
    // No raw address is stored anywhere.
    const dump = JSON.stringify(await t.tdb.db.query('SELECT * FROM registration_events'));
    expect(dump).not.toContain(addr);
    clock = start;
  });

  it('over Connect, with the client address taken from the request', async () => {
    const client = createClient(AccessService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' }));
    const addr = nextAddress();
    for (let i = 0; i < 5; i++) {
      const cred = await client.registerAgent({ type: 'anonymous', requestedCredentialType: 'api_key' }, { headers: { 'x-forwarded-for': addr } });
      expect(cred.trialLimit).toBe(50);
    }
    const err = await client.registerAgent({ type: 'anonymous', requestedCredentialType: 'api_key' }, { headers: { 'x-forwarded-for': addr } }).catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.ResourceExhausted);
    await expect(client.registerAgent({ type: 'x', requestedCredentialType: 'api_key' })).rejects.toMatchObject({ code: Code.InvalidArgument });
  });
});

describe(`GET /agent-query/{server_slug} (${backend})`, () => {
  it('answers a verdict with a signed receipt for a key, by slug, name or URL', async () => {
    const key = await register();
    for (const slug of ['weather-example-com-mcp', 'weather.example.com/mcp', 'https://weather.example.com/mcp']) {
      const res = await query(slug, { authorization: `Bearer ${key}` });
      expect(res.status).toBe(200);
      const v = await json(res);
      expect(v).toMatchObject({ server_url: 'https://weather.example.com/mcp', payment_method: 'api_key', verdict: expect.stringMatching(/^(PASS|UNCERTAIN|FAIL)$/) });
      expect(v.receipt_id).toMatch(/^[0-9a-f]{16}$/);
      expect(v.trust_score).toBeTypeOf('number');
      expect(v.avg_latency_ms).toBe(121);
      // p95 is the number the evidence endpoints give for the same reports.
      expect(v.p95_latency_ms).toBeTypeOf('number');
      expect(v.diligence_receipt.split('.')).toHaveLength(3);
    }
    const last = await json(query('weather-example-com-mcp', { authorization: `Bearer ${key}` }));
    expect(last.trial_remaining).toBe(46);
    const evidence = await json(fetch(`${t.base}/v1/behavioral-evidence?url=${encodeURIComponent('https://weather.example.com/mcp')}`));
    expect(last.p95_latency_ms).toBe(evidence.behavioral_summary.p95_latency_ms);
    expect(last.p95_latency_ms).toBe((await json(fetch(`${t.base}/benchmark/weather-example-com-mcp`))).latency.p95_ms);
    const check = await json(fetch(`${t.base}/v1/verify-receipt?id=${last.receipt_id}`));
    expect(check).toMatchObject({ receipt_id: last.receipt_id, found: true, valid: true, kind: 'agent_query', jws: last.diligence_receipt });
    expect(check.claim).toMatchObject({ kind: 'agent_query', sub: 'https://weather.example.com/mcp', verdict: last.verdict, trust_score: last.trust_score, jti: last.receipt_id });
  });

  it('100 parallel requests with a fresh key: exactly 50 verdicts and 50 payment-required answers', async () => {
    const key = await register();
    const results = await Promise.all(Array.from({ length: 100 }, () => query('weather-example-com-mcp', { authorization: `Bearer ${key}` })));
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(50);
    expect(statuses.filter((s) => s === 402)).toHaveLength(50);
    const bodies = await Promise.all(results.map((r) => json(r)));
    const remaining = bodies.filter((b) => b.trial_remaining !== undefined).map((b) => b.trial_remaining as number);
    expect(new Set(remaining).size).toBe(50);
    expect(bodies.find((b) => b.status === 402)).toMatchObject({ code: 'payment_required', reason: 'trial_exhausted' });
    const [row] = await t.tdb.db.query<{ n: number }>('SELECT max(trial_used)::int8 AS n FROM api_keys');
    expect(row!.n).toBe(50);
  });

  it('no credentials: 402 with the x402 body and headers', async () => {
    const res = await query('weather-example-com-mcp');
    const p = await expectProblem(res, 402, 'payment_required');
    expect(res.headers.get('x-payment-required')).toBe('USDC:0.001:base');
    expect(res.headers.get('x-payment-wallet')).toBe(WALLET);
    expect(p).toMatchObject({
      wallet: WALLET,
      to: WALLET,
      amount: '0.001',
      currency: 'USDC',
      chain: 'base',
      chain_id: 8453,
      x402_version: 1,
      x402Version: 1,
      payments_enabled: true,
      reason: 'credentials_missing',
    });
    expect(p.accepts).toEqual([
      expect.objectContaining({
        scheme: 'exact',
        network: 'base',
        maxAmountRequired: '1000',
        asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
        payTo: WALLET,
        resource: 'https://obs.example/agent-query/weather-example-com-mcp',
      }),
    ]);
    expect(p.instructions).toContain(WALLET);
    expect(p.instructions).toContain('X-Payment');
    // x402 v2 beside v1: the PAYMENT-REQUIRED header, read by @x402/core and valid by its schema.
    const v2 = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(PaymentRequiredV2Schema.safeParse(v2).success).toBe(true);
    expect(v2).toMatchObject({
      x402Version: 2,
      resource: { url: 'https://obs.example/agent-query/weather-example-com-mcp' },
      accepts: [
        {
          scheme: 'exact',
          network: 'eip155:8453',
          amount: '1000',
          asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
          payTo: WALLET,
          maxTimeoutSeconds: expect.any(Number),
          extra: { name: 'USD Coin', version: '2' },
        },
      ],
    });
  });

  it('unknown or malformed key: 401 with the RFC 9728 challenge', async () => {
    for (const auth of ['Bearer tobs_unknownunknownunknown', 'Basic dXNlcjpwdw==', 'Bearer a b', `Bearer ${'x'.repeat(5000)}`]) {
      const res = await query('weather-example-com-mcp', { authorization: auth });
      await expectProblem(res, 401, 'unauthenticated');
      expect(res.headers.get('www-authenticate')).toBe('Bearer resource_metadata="https://obs.example/.well-known/oauth-protected-resource"');
    }
  });

  it('unknown server: 404 and nothing is spent', async () => {
    const key = await register();
    await expectProblem(await query('no-such-server', { authorization: `Bearer ${key}` }), 404);
    await expectProblem(await query('no-such-server'), 404);
    await expectProblem(await query('x'.repeat(3000)), 400);
    const ok = await json(query('flaky-example-com-mcp', { authorization: `Bearer ${key}` }));
    expect(ok.trial_remaining).toBe(49);
    expect(ok.verdict).toMatch(/^(PASS|UNCERTAIN|FAIL)$/);
  });

  it('over Connect: verdict by key from the Authorization header, PaymentRequired as the error detail', async () => {
    const key = await register();
    const client = createClient(AccessService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' }));
    const v = await client.agentQuery({ serverSlug: 'weather-example-com-mcp' }, { headers: { authorization: `Bearer ${key}` } });
    expect(v.paymentMethod).toBe('api_key');
    expect(v.trialRemaining).toBe(49);
    const err = ConnectError.from(await client.agentQuery({ serverSlug: 'weather-example-com-mcp' }).catch((e: unknown) => e));
    expect(err.code).toBe(Code.FailedPrecondition);
    const [detail] = err.findDetails(PaymentRequiredSchema);
    expect(detail).toMatchObject({ wallet: WALLET, amount: '0.001', chainId: 8453, x402Version: 1 });
    await expect(client.agentQuery({ serverSlug: 'weather-example-com-mcp' }, { headers: { authorization: 'Bearer nope' } })).rejects.toMatchObject({ code: Code.Unauthenticated });
    const receipt = await createClient(ReceiptService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' })).verifyReceipt({ id: v.receiptId });
    expect(receipt).toMatchObject({ found: true, valid: true, kind: 'agent_query' });
  });
});

describe(`x402 payments (${backend})`, () => {
  const payer = privateKeyToAccount(generatePrivateKey());
  /** The documented X-Payment JSON: the hash with the payer's EIP-191 proof. */
  async function proof(txHash: string, slug = 'weather-example-com-mcp') {
    const resource = `https://obs.example/agent-query/${slug}`;
    const issuedAt = Math.floor(clock.getTime() / 1000);
    const signature = await payer.signMessage({ message: `x402 payment proof\ntx_hash: ${txHash.toLowerCase()}\nresource: ${resource}\nissued_at: ${issuedAt}` });
    return JSON.stringify({ tx_hash: txHash, resource, issued_at: issuedAt, signature });
  }
  const pay = async (txHash: string, slug = 'weather-example-com-mcp') => query(slug, { 'x-payment': await proof(txHash, slug) });
  const from = payer.address;

  it('a USDC transfer of at least 1000 units to the wallet buys one verdict, once', async () => {
    const tx = rpc.addTransaction({ transfers: [{ from, to: WALLET, units: 1000n }] });
    const res = await pay(tx);
    expect(res.status).toBe(200);
    const v = await json(res);
    expect(v).toMatchObject({ payment_method: 'x402', trial_remaining: null, server_url: 'https://weather.example.com/mcp' });
    // PAYMENT-RESPONSE: the x402 SettleResponse of the transfer that paid.
    const settled = JSON.parse(Buffer.from(res.headers.get('payment-response')!, 'base64').toString('utf8'));
    expect(settled).toMatchObject({ success: true, transaction: tx, network: 'eip155:8453', payer: from, amount: '1000' });
    const again = await expectProblem(await pay(tx), 402, 'payment_required');
    expect(again).toMatchObject({ reason: 'payment_replayed' });
    expect(String(again.detail)).toMatch(/already/);
    const [row] = await t.tdb.db.query<{ receipt_id: string; amount_units: number }>('SELECT receipt_id, amount_units FROM payments WHERE tx_hash = $1', [tx]);
    expect(row).toEqual({ receipt_id: v.receipt_id, amount_units: 1000 });
  });

  it('accepts the proof as JSON and as base64 JSON, and an exhausted key falls back to payment', async () => {
    const a = rpc.addTransaction({ transfers: [{ from, to: WALLET, units: 2500n }] });
    expect((await pay(a)).status).toBe(200);
    const b = rpc.addTransaction({ transfers: [{ from, to: WALLET, units: 1000n }] });
    expect((await query('weather-example-com-mcp', { 'x-payment': Buffer.from(await proof(b)).toString('base64') })).status).toBe(200);
    const c = rpc.addTransaction({ transfers: [{ from, to: WALLET, units: 1000n }] });
    const key = await register();
    await t.tdb.db.query('UPDATE api_keys SET trial_used = trial_limit WHERE trial_used = 0');
    const res = await query('weather-example-com-mcp', { authorization: `Bearer ${key}`, 'x-payment': await proof(c) });
    expect(res.status).toBe(200);
    expect((await json(res)).payment_method).toBe('x402');
  });

  it('refuses wrong token, wrong recipient, too small, failed, unknown and malformed payments with the reason', async () => {
    const cases: [string, string][] = [
      [await proof(rpc.addTransaction({ transfers: [{ from, token: USDBC_BASE, to: WALLET, units: 5000n }] })), 'payment_no_transfer'],
      [await proof(rpc.addTransaction({ transfers: [{ from, to: randomAddress(), units: 5000n }] })), 'payment_no_transfer'],
      [await proof(rpc.addTransaction({ transfers: [{ from, to: WALLET, units: 999n }] })), 'payment_too_small'],
      [await proof(rpc.addTransaction({ transfers: [{ from, to: WALLET, units: 1000n }], status: 'reverted' })), 'payment_failed'],
      [await proof(randomHash()), 'payment_not_found'],
      ['0x1234', 'payment_malformed'],
      ['{"tx":"0xabc"}', 'payment_malformed'],
      ['not base64 !!', 'payment_malformed'],
    ];
    for (const [header, reason] of cases) {
      const res = await query('weather-example-com-mcp', { 'x-payment': header });
      const p = await expectProblem(res, 402, 'payment_required');
      expect(p.reason, header).toBe(reason);
      expect(p.accepts).toHaveLength(1);
      // Every 402 also carries the x402 v2 PAYMENT-REQUIRED header, its error the refusal.
      const v2 = JSON.parse(Buffer.from(res.headers.get('payment-required')!, 'base64').toString('utf8'));
      expect(v2).toMatchObject({ x402Version: 2, error: p.detail, accepts: [{ network: 'eip155:8453', amount: '1000', payTo: WALLET }] });
    }
    // A refused payment is not burnt: nothing was recorded for it.
    const tooSmall = JSON.parse(cases[2]![0]).tx_hash;
    expect((await t.tdb.db.query('SELECT tx_hash FROM payments WHERE tx_hash = $1', [tooSmall])).length).toBe(0);
  });

  it('the same hash sent 10 times in parallel buys exactly one verdict', async () => {
    const tx = rpc.addTransaction({ transfers: [{ from, to: WALLET, units: 1000n }] });
    const header = await proof(tx);
    const statuses = (await Promise.all(Array.from({ length: 10 }, () => query('weather-example-com-mcp', { 'x-payment': header })))).map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s === 402)).toHaveLength(9);
  });
});

describe(`GET /api/payment-info and /v1/verify-receipt (${backend})`, () => {
  it('payment-info carries the DECISIONS.md shape', async () => {
    const res = await fetch(`${t.base}/api/payment-info`);
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body).toMatchObject({
      payment_protocol: 'x402',
      wallet: WALLET,
      amount: '0.001',
      currency: 'USDC',
      chain: 'base',
      chain_id: 8453,
      asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      endpoint_template: 'https://obs.example/agent-query/{server_slug}',
      payments_enabled: true,
    });
    expect(body.instructions).toContain(WALLET);
    expect(body.volume_pricing).toMatch(/higher-volume/i);
    // Both x402 versions, and how a client of each pays (no FACILITATOR_URL here: v2 cannot settle).
    expect(body).toMatchObject({ x402_version: 1, x402_versions: [1, 2], network: 'eip155:8453', max_payment_age_seconds: 600 });
    expect(body.x402).toEqual([
      expect.objectContaining({ x402_version: 2, network: 'eip155:8453', amount: '1000', payment_header: 'PAYMENT-SIGNATURE', response_header: 'PAYMENT-RESPONSE', enabled: false }),
      expect.objectContaining({ x402_version: 1, network: 'base', amount: '1000', payment_header: 'X-Payment', enabled: true }),
    ]);
  });

  it('verify-receipt: 400 missing or malformed, found:false for an unknown id, valid:false when the stored token is damaged', async () => {
    await expectProblem(await fetch(`${t.base}/v1/verify-receipt`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/verify-receipt?id=XYZ`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/verify-receipt?id=${'a'.repeat(5000)}`), 400);
    expect(await json(fetch(`${t.base}/v1/verify-receipt?id=0123456789abcdef`))).toMatchObject({ found: false, valid: false, claim: null, reason: expect.any(String) });
    const key = await register();
    const v = await json(query('weather-example-com-mcp', { authorization: `Bearer ${key}` }));
    const [h, p] = (v.diligence_receipt as string).split('.');
    await t.tdb.db.query('UPDATE receipts SET jws = $2 WHERE receipt_id = $1', [v.receipt_id, `${h}.${p}.${'A'.repeat(86)}`]);
    expect(await json(fetch(`${t.base}/v1/verify-receipt?id=${v.receipt_id}`))).toMatchObject({ found: true, valid: false, reason: expect.any(String) });
  });

  it('valid:true stands beside the signed claim, never beside a stored copy that differs from it', async () => {
    // A second later: not the receipt the test before damaged (checks share a claim's receipt for a second).
    const was = clock;
    clock = new Date(clock.getTime() + 5000);
    const key = await register();
    const v = await json(query('weather-example-com-mcp', { authorization: `Bearer ${key}` }));
    const signed = JSON.parse(Buffer.from((v.diligence_receipt as string).split('.')[1]!, 'base64url').toString());
    // The stored copy of the claim is changed (the token itself is intact).
    await t.tdb.db.query(`UPDATE receipts SET claim = claim || '{"verdict": "PASS", "trust_score": 99}'::jsonb WHERE receipt_id = $1`, [v.receipt_id]);
    const check = await json(fetch(`${t.base}/v1/verify-receipt?id=${v.receipt_id}`));
    expect(check).toMatchObject({ found: true, valid: true });
    expect(check.claim).toEqual(signed);
    const lookup = await json(fetch(`${t.base}/v1/receipt/${v.receipt_id}`));
    expect(lookup.verification.valid).toBe(true);
    expect(lookup.claim).toEqual(signed);
    clock = was;
  });
});

describe(`without PAYMENT_WALLET (${backend})`, () => {
  let off: TestApp;
  beforeAll(async () => {
    off = await startTestApp({});
    await postJson(`${off.base}/api/report`, { server_url: 'https://weather.example.com/mcp', success: true, latency_ms: 100 });
  });
  afterAll(async () => {
    await off?.close();
  });

  it('says wallet null and paid verdicts off; trial keys keep working; X-Forwarded-For is ignored without TRUST_PROXY', async () => {
    const res = await fetch(`${off.base}/agent-query/weather-example-com-mcp`, { headers: { 'x-payment': randomHash() } });
    const p = await expectProblem(res, 402, 'payment_required');
    expect(p).toMatchObject({ wallet: null, to: null, payments_enabled: false, accepts: [], reason: 'payments_disabled' });
    expect(res.headers.get('x-payment-wallet')).toBeNull();
    // Nothing to accept, so no v2 requirements either (PaymentRequired needs at least one).
    expect(res.headers.get('payment-required')).toBeNull();
    expect(String(p.instructions)).toMatch(/off/);
    expect(await json(fetch(`${off.base}/api/payment-info`))).toMatchObject({ wallet: null, payments_enabled: false });
    const keys: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await postJson(`${off.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': `198.51.100.${i}` });
      expect(r.status).toBe(200);
      keys.push((await json(r)).api_key);
    }
    // All five came from the socket address 127.0.0.1: the forged header did not help.
    await expectProblem(await postJson(`${off.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': '198.51.100.99' }), 429, 'rate_limited');
    const v = await json(fetch(`${off.base}/agent-query/weather-example-com-mcp`, { headers: { authorization: `Bearer ${keys[0]}` } }));
    expect(v).toMatchObject({ payment_method: 'api_key', trial_remaining: 49 });
  });
});
