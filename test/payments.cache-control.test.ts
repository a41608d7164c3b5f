import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { wrapFetchWithPayment, x402Client } from '@x402/fetch';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import { PAYMENT_REQUIRED_CACHE_CONTROL as LIBRARY_PAYMENT_REQUIRED_CACHE_CONTROL } from '@x402/core/server';
import { AccessService } from '../gen/observatory/v1/access_pb.js';
import { PAYMENT_REQUIRED_CACHE_CONTROL } from '../src/domain/x402.js';
import { expectProblem, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { startFacilitator, type FacilitatorStandIn } from './support/facilitator.js';

// x402 hygiene: @x402/core's own server answers every 402 with `Cache-Control: no-store`
// (PAYMENT_REQUIRED_CACHE_CONTROL) and keeps shared caches from storing a paid answer's settlement
// metadata. Ours: every payment-required answer, on REST and on Connect, says no-store; so does
// every paid answer carrying PAYMENT-RESPONSE, on both doors.

const WALLET = '0x5555555555555555555555555555555555555555';
const USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';
const SLUG = 'search-example-org-mcp';
const v2Client = () => new x402Client().register('eip155:8453', new ExactEvmScheme(privateKeyToAccount(generatePrivateKey())));

async function seed(app: TestApp) {
  await postJson(`${app.base}/api/report`, { server_url: 'https://search.example.org/mcp', success: true, latency_ms: 80, tool_name: 'web_search' });
}

/** A Connect unary call of AgentQuery as raw HTTP, to read the error answer's own headers. */
const connectQuery = (base: string, headers: Record<string, string> = {}) =>
  fetch(`${base}/observatory.v1.AccessService/AgentQuery`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ serverSlug: SLUG }) });

it('our 402 Cache-Control is the one @x402/core sends', () => {
  expect(PAYMENT_REQUIRED_CACHE_CONTROL).toBe(LIBRARY_PAYMENT_REQUIRED_CACHE_CONTROL);
});

describe(`every payment-required answer says Cache-Control: no-store (${backend})`, () => {
  let t: TestApp;
  let fac: FacilitatorStandIn;
  beforeAll(async () => {
    fac = await startFacilitator({ network: 'eip155:8453', v1Network: 'base', asset: USDC, payTo: WALLET, amount: '1000' });
    t = await startTestApp({ PAYMENT_WALLET: WALLET, FACILITATOR_URL: fac.url, PUBLIC_BASE_URL: 'https://obs.example' });
    await seed(t);
  });
  afterAll(async () => {
    await t?.close();
    await fac?.close();
  });
  const target = () => `${t.base}/agent-query/${SLUG}`;

  it('REST: no credentials, a malformed payment (both headers), a refused and an unsettled payment', async () => {
    const answers: Response[] = [
      await fetch(target()),
      await fetch(target(), { headers: { 'payment-signature': 'not-base64!' } }),
      await fetch(target(), { headers: { 'x-payment': 'junk' } }),
    ];
    fac.refuseVerifyWith = 'insufficient_funds';
    answers.push(await wrapFetchWithPayment(fetch, v2Client())(target()));
    fac.refuseVerifyWith = null;
    fac.failSettleWith = 'transaction_failed';
    answers.push(await wrapFetchWithPayment(fetch, v2Client())(target()));
    fac.failSettleWith = null;
    const reasons = [];
    for (const res of answers) {
      expect(res.headers.get('cache-control')).toBe('no-store');
      expect(res.headers.get('payment-required')).toBeTruthy();
      reasons.push((await expectProblem(res, 402, 'payment_required')).reason);
    }
    expect(reasons).toEqual(['credentials_missing', 'payment_malformed', 'payment_malformed', 'payment_invalid', 'payment_settle_failed']);
  });

  it('Connect: the refusal carries the same headers, no-store among them', async () => {
    for (const headers of [{}, { 'payment-signature': 'not-base64!' }] as Record<string, string>[]) {
      const res = await connectQuery(t.base, headers);
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.headers.get('payment-required')).toBeTruthy();
      expect(res.headers.get('cache-control')).toBe('no-store');
      expect(await res.json()).toMatchObject({ code: 'failed_precondition' });
    }
  });

  it('gRPC and gRPC-Web: the refusal metadata says no-store', async () => {
    for (const transport of [createGrpcWebTransport({ baseUrl: t.base, httpVersion: '1.1' }), createGrpcTransport({ baseUrl: t.base })]) {
      const err = await createClient(AccessService, transport).agentQuery({ serverSlug: SLUG }).then(() => null, (e: unknown) => ConnectError.from(e));
      expect(err?.metadata.get('payment-required')).toBeTruthy();
      expect(err?.metadata.get('cache-control')).toBe('no-store');
    }
  });

  it('the paid answer (PAYMENT-RESPONSE) is no-store on REST and on Connect', async () => {
    const rest = await wrapFetchWithPayment(fetch, v2Client())(target());
    expect(rest.status).toBe(200);
    expect(rest.headers.get('payment-response')).toBeTruthy();
    expect(rest.headers.get('cache-control')).toBe('no-store');

    const required = decodePaymentRequiredHeader((await fetch(target())).headers.get('payment-required')!);
    const payload = await v2Client().createPaymentPayload(required);
    let headers: Headers | undefined;
    const client = createClient(AccessService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' }));
    const v = await client.agentQuery({ serverSlug: SLUG }, { headers: { 'payment-signature': encodePaymentSignatureHeader(payload) }, onHeader: (h) => (headers = h) });
    expect(v.paymentMethod).toBe('x402');
    expect(headers!.get('payment-response')).toBeTruthy();
    expect(headers!.get('cache-control')).toBe('no-store');
  });
});

describe(`with payments off, the 402 says no-store too (${backend})`, () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({});
    await seed(t);
  });
  afterAll(async () => {
    await t?.close();
  });

  it('REST and Connect', async () => {
    const rest = await fetch(`${t.base}/agent-query/${SLUG}`, { headers: { 'x-payment': 'junk' } });
    expect(rest.headers.get('cache-control')).toBe('no-store');
    expect((await expectProblem(rest, 402, 'payment_required')).reason).toBe('payments_disabled');
    const connect = await connectQuery(t.base);
    expect(connect.headers.get('cache-control')).toBe('no-store');
  });
});
