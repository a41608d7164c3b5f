import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import { migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/postgres.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend, createTestDatabase, type TestDatabase } from './support/db.js';
import { startBaseRpc, type BaseRpcStandIn } from './support/base-rpc.js';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';

const WALLET = '0x4444444444444444444444444444444444444444';

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe(`a client follows only the instructions in the responses (${backend})`, () => {
  let t: TestApp;
  let rpc: BaseRpcStandIn;
  beforeAll(async () => {
    rpc = await startBaseRpc();
    const port = await freePort();
    t = await startTestApp({ PORT: String(port), PUBLIC_BASE_URL: `http://127.0.0.1:${port}`, PAYMENT_WALLET: WALLET, PAYMENT_RPC_URL: rpc.url });
    await postJson(`${t.base}/api/report`, { server_url: 'https://search.example.org/mcp', success: true, latency_ms: 80, tool_name: 'web_search' });
  });
  afterAll(async () => {
    await t?.close();
    await rpc?.close();
  });

  it('from no credentials to a verdict by key', async () => {
    const target = `${t.base}/agent-query/search-example-org-mcp`;
    const first = await fetch(target);
    expect(first.status).toBe(402);
    const { instructions } = await json(first);
    const [, url, body] = /POST (\S+) with JSON (\{[^}]*\})/.exec(instructions)!;
    const cred = await json(postJson(url!, JSON.parse(body!)));
    const [, headerName, template] = /"([\w-]+): (Bearer <api_key>)"/.exec(instructions)!;
    const verdict = await fetch(target, { headers: { [headerName!]: template!.replace('<api_key>', cred.api_key) } });
    expect(verdict.status).toBe(200);
    expect(await json(verdict)).toMatchObject({ server_url: 'https://search.example.org/mcp', payment_method: 'api_key', receipt_id: expect.stringMatching(/^[0-9a-f]{16}$/) });
  });

  it('from a 402 to a verdict by payment', async () => {
    const target = `${t.base}/agent-query/search-example-org-mcp`;
    const challenge = await json(fetch(target));
    const [req] = challenge.accepts;
    expect(req.network).toBe(challenge.chain);
    // The payer's wallet sends what the requirement asks: asset, amount, recipient.
    const payer = privateKeyToAccount(generatePrivateKey());
    const tx = rpc.addTransaction({ transfers: [{ from: payer.address, token: req.asset, to: req.payTo, units: BigInt(req.maxAmountRequired) }] });
    // Then the proof, exactly as the instructions spell it.
    const text: string = challenge.instructions;
    const [, headerName] = /"([\w-]+): <proof JSON>"/.exec(text)!;
    const [, template] = /the proof JSON being (\{.*?\}) where/.exec(text)!;
    const lines = /the four lines "(.+?)", "(.+?)", "(.+?)", "(.+?)" joined by "\\n"/.exec(text)!.slice(1);
    const issuedAt = String(Math.floor(Date.now() / 1000));
    const fill = (s: string) => s.replace('<transaction hash in lower case>', tx.toLowerCase()).replace('<transaction hash>', tx).replace('<unix seconds>', issuedAt);
    const signature = await payer.signMessage({ message: lines.map(fill).join('\n') });
    const header = fill(template!).replace('<signature>', signature);
    const paid = await fetch(target, { headers: { [headerName!]: header } });
    expect(paid.status).toBe(200);
    const v = await json(paid);
    expect(v).toMatchObject({ payment_method: 'x402', verdict: expect.any(String) });
    expect(await json(fetch(`${t.base}/v1/verify-receipt?id=${v.receipt_id}`))).toMatchObject({ valid: true, claim: { payment_method: 'x402' } });
  });
});

describe.skipIf(backend !== 'postgres')('two instances on one PostgreSQL database', () => {
  let tdb: TestDatabase;
  let a: TestApp;
  let b: TestApp;
  let rpc: BaseRpcStandIn;
  beforeAll(async () => {
    rpc = await startBaseRpc();
    tdb = await createTestDatabase();
    // Each instance has its own connection pool, exactly like two processes would.
    const own = async () => {
      const db = openPostgres(tdb.url!);
      await migrate(db);
      return { db, url: tdb.url, drop: async () => {} };
    };
    const env = { TRUST_PROXY: '1', PAYMENT_WALLET: WALLET, PAYMENT_RPC_URL: rpc.url };
    a = await startTestApp(env, { tdb: await own() });
    b = await startTestApp(env, { tdb: await own() });
    await postJson(`${a.base}/api/report`, { server_url: 'https://search.example.org/mcp', success: true, latency_ms: 80 });
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await tdb?.drop();
    await rpc?.close();
  });

  const reg = (app: TestApp, addr: string) => postJson(`${app.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': addr });

  it('share the registration limit', async () => {
    const statuses = await Promise.all([a, b, a, b, a, b, a, b].map((app) => reg(app, '192.0.2.77').then((r) => r.status)));
    expect(statuses.filter((s) => s === 200)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(3);
  });

  it('share the trial allowance: 100 parallel requests over both give exactly 50 verdicts', async () => {
    const key = (await json(reg(a, '192.0.2.78'))).api_key;
    const res = await Promise.all(
      Array.from({ length: 100 }, (_, i) => fetch(`${(i % 2 ? a : b).base}/agent-query/search-example-org-mcp`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.status)),
    );
    expect(res.filter((s) => s === 200)).toHaveLength(50);
    expect(res.filter((s) => s === 402)).toHaveLength(50);
  });

  it('honour each payment once across instances', async () => {
    const payer = privateKeyToAccount(generatePrivateKey());
    const tx = rpc.addTransaction({ transfers: [{ from: payer.address, to: WALLET, units: 1000n }] });
    // Both instances have the same PUBLIC_BASE_URL default (http://localhost:$PORT with PORT 0).
    const resource = `${a.config.publicBaseUrl}/agent-query/search-example-org-mcp`;
    const issuedAt = Math.floor(Date.now() / 1000);
    const signature = await payer.signMessage({ message: `x402 payment proof\ntx_hash: ${tx}\nresource: ${resource}\nissued_at: ${issuedAt}` });
    const header = JSON.stringify({ tx_hash: tx, resource, issued_at: issuedAt, signature });
    const res = await Promise.all(Array.from({ length: 8 }, (_, i) => fetch(`${(i % 2 ? a : b).base}/agent-query/search-example-org-mcp`, { headers: { 'x-payment': header } }).then((r) => r.status)));
    expect(res.filter((s) => s === 200)).toHaveLength(1);
    expect(res.filter((s) => s === 402)).toHaveLength(7);
  });
});

if (backend !== 'postgres') console.log('SKIP two-instance access test: needs PostgreSQL (set DATABASE_URL); PGlite is single-process');
