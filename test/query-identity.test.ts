// Issue 17 finding 9: one report must not make the observatory probe any URL, again and again.
// A query string is not part of a server's identity unless the catalogue lists that exact URL
// (docs/scoring.md "Server identity"); no query string from a report is ever stored; only
// catalogue servers and servers with evidence from several independent source families are
// observed; and each source family creates at most NEW_SERVERS_PER_SOURCE_PER_HOUR new servers
// per hour (over it: 429 problem+json). Every "server" here is a recording stub on 127.0.0.1.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

const T0 = new Date('2026-05-11T08:00:00Z');
let clock = T0;
let t: TestApp;
let stub: http.Server;
let base: string;
/** Every request the stub received: path with query. */
const hits: string[] = [];

const report = (app: TestApp, url: string, address: string, headers: Record<string, string> = {}) =>
  postJson(`${app.base}/api/report`, { server_url: url, success: true, latency_ms: 30, http_status: 200 }, { 'x-forwarded-for': address, ...headers });
const get = (path: string) => json(fetch(`${t.base}${path}`));

beforeAll(async () => {
  stub = http.createServer((req, res) => {
    hits.push(req.url ?? '');
    req.resume();
    res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":"stub"}');
  });
  await new Promise<void>((r) => stub.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(stub.address() as AddressInfo).port}`;
  t = await startTestApp(
    { TRUST_PROXY: '1', ALLOW_PRIVATE_TARGETS: '1', OBSERVE_INTERVAL_SECONDS: '60', OBSERVE_TIMEOUT_MS: '3000', OBSERVE_RATE_PER_MINUTE: '1000', RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0' },
    { now: () => clock },
  );
  // A catalogue server whose URL carries a query: that query is part of its identity.
  const s = await t.obs.services.catalogue.importDocument({
    servers: [{ server: { name: 'io.github.q/tenant', version: '1', remotes: [{ type: 'streamable-http', url: `${base}/t?tenant=acme` }] }, _meta: { 'io.modelcontextprotocol.registry/official': { status: 'active', isLatest: true } } }],
    metadata: { count: 1 },
  });
  expect(s.added).toBe(1);
}, 120_000);
afterAll(async () => {
  await t?.close();
  stub?.closeAllConnections();
  await new Promise((r) => stub?.close(r));
});

/** Every text value stored in any table of the public schema, as one string. */
async function databaseText(app: TestApp): Promise<string> {
  const tables = await app.obs.db.query<{ table_name: string }>("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'");
  const parts: string[] = [];
  for (const { table_name } of tables) {
    const rows = await app.obs.db.query<{ r: string }>(`SELECT t::text AS r FROM "${table_name}" t`);
    parts.push(...rows.map((x) => x.r));
  }
  return parts.join('\n');
}

describe(`query strings and server identity (${backend})`, () => {
  it('reports that differ only in their query are one server, and no query string is stored', async () => {
    for (let i = 0; i < 30; i++) {
      const res = await report(t, `${base}/mcp?token=secret-${i}&x=${i}`, '192.0.2.9');
      expect(res.status).toBe(200);
      expect((await json(res)).server_url).toBe(`${base}/mcp`);
    }
    const rows = await t.obs.db.query<{ url: string }>('SELECT url FROM servers WHERE url LIKE $1 ORDER BY id', [`${base}/mcp%`]);
    expect(rows.map((r) => r.url)).toEqual([`${base}/mcp`]);
    expect((await get(`/api/trust?url=${encodeURIComponent(`${base}/mcp`)}`)).metrics.total_interactions).toBe(30);
    expect(await databaseText(t)).not.toContain('secret-');
  });

  it('a lookup with a query resolves to the query-less server (trust, pre-flight, badge, evidence)', async () => {
    const withQuery = `${base}/mcp?anything=else`;
    expect((await get(`/api/trust?url=${encodeURIComponent(withQuery)}`)).server.url).toBe(`${base}/mcp`);
    const p = await get(`/v1/preflight?target=${encodeURIComponent(withQuery)}`);
    expect(p).toMatchObject({ server_url: `${base}/mcp`, verdict: 'PASS' });
    expect((await get(`/v1/behavioral-evidence?url=${encodeURIComponent(withQuery)}`)).found).toBe(true);
    expect(await (await fetch(`${t.base}/api/badge?url=${encodeURIComponent(withQuery)}`)).text()).not.toContain('unrated');
  });

  it('the catalogue decides when a query is identity: its exact URL is its own server, any other query is not', async () => {
    const res = await report(t, `${base}/t?tenant=acme`, '192.0.2.10');
    expect((await json(res)).server_url).toBe(`${base}/t?tenant=acme`);
    const other = await report(t, `${base}/t?tenant=evil&api_key=secret-k`, '192.0.2.10');
    expect((await json(other)).server_url).toBe(`${base}/t`);
    expect((await get(`/api/trust?url=${encodeURIComponent(`${base}/t?tenant=acme`)}`)).server.name).toBe('io.github.q/tenant');
    expect((await get(`/api/trust?url=${encodeURIComponent(`${base}/t?tenant=zzz`)}`)).server.url).toBe(`${base}/t`);
    expect((await get(`/v1/preflight?target=${encodeURIComponent(`${base}/t?tenant=acme`)}`)).server_url).toBe(`${base}/t?tenant=acme`);
    expect(await databaseText(t)).not.toContain('secret-');
  });

  it('observation probes catalogue servers and servers with evidence from 3 independent families, nothing else', async () => {
    // Three independent networks report on /multi: observed. Two on /pair: not. Three keys of one
    // /64 reporting from it on /family: one family, not observed.
    for (const a of ['198.51.100.1', '198.51.100.2', '2001:db8:5:1::1']) expect((await report(t, `${base}/multi`, a)).status).toBe(200);
    for (const a of ['198.51.100.1', '198.51.100.2']) expect((await report(t, `${base}/pair`, a)).status).toBe(200);
    for (let i = 1; i <= 3; i++) {
      const key = (await json(postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': `2001:db8:6:1::${i}` }))).api_key as string;
      expect((await report(t, `${base}/family`, `2001:db8:6:1::${i + 10}`, { authorization: `Bearer ${key}` })).status).toBe(200);
    }
    hits.length = 0;
    const round = await t.obs.services.observation.runRound();
    const probed = round.results.map((r) => r.url).sort();
    expect(probed).toEqual([`${base}/multi`, `${base}/t?tenant=acme`].sort());
    const paths = [...new Set(hits)].sort();
    expect(paths).toEqual(['/multi', '/t?tenant=acme']);
    // Later rounds: still only those two, however many more single-source reports arrive.
    for (let i = 0; i < 10; i++) await report(t, `${base}/mcp?again=${i}`, '192.0.2.9');
    clock = new Date(clock.getTime() + 61_000);
    hits.length = 0;
    await t.obs.services.observation.runRound();
    expect([...new Set(hits)].sort()).toEqual(['/multi', '/t?tenant=acme']);
  });
});

describe(`new servers per source and hour (${backend})`, () => {
  let small: TestApp;
  let at = new Date('2026-05-11T10:00:00Z');
  beforeAll(async () => {
    small = await startTestApp({ TRUST_PROXY: '1', NEW_SERVERS_PER_SOURCE_PER_HOUR: '3' }, { now: () => at });
  }, 120_000);
  afterAll(async () => {
    await small?.close();
  });

  it('the 4th new server from one network within an hour is refused with 429; known servers and other networks are not affected', async () => {
    for (let i = 1; i <= 3; i++) expect((await report(small, `https://new-${i}.example.com/mcp`, '2001:db8:9:1::1')).status).toBe(200);
    // Another address of the same /64 is the same network.
    const refused = await report(small, 'https://new-4.example.com/mcp', '2001:db8:9:1::2');
    const p = await expectProblem(refused, 429, 'rate_limited');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(String(p.detail)).toMatch(/new servers/);
    expect((await small.obs.db.query("SELECT 1 FROM servers WHERE url = 'https://new-4.example.com/mcp'")).length).toBe(0);
    // Reports on servers already tracked are accepted as before.
    expect((await report(small, 'https://new-1.example.com/mcp', '2001:db8:9:1::3')).status).toBe(200);
    // Query variants of a known server are that server, not new ones.
    expect((await report(small, 'https://new-2.example.com/mcp?k=1', '2001:db8:9:1::3')).status).toBe(200);
    // Another network may create servers.
    expect((await report(small, 'https://new-4.example.com/mcp', '2001:db8:9:2::1')).status).toBe(200);
    // Over gRPC the refused report is a rejected row; the stream's other rows are kept.
    const client = createClient(TelemetryService, createGrpcTransport({ baseUrl: small.base }));
    async function* rows() {
      yield { report: { serverUrl: 'https://new-1.example.com/mcp', success: true, latencyMs: 5 } };
      yield { report: { serverUrl: 'https://new-5.example.com/mcp', success: true, latencyMs: 5 } };
    }
    const streamed = await client.reportStream(rows(), { headers: { 'x-forwarded-for': '2001:db8:9:1::4' } });
    expect(streamed).toMatchObject({ accepted: 1, rejected: 1 });
    expect(streamed.rejections[0]).toMatchObject({ index: 1, code: 'rate_limited' });
    // A unary Report over gRPC: ResourceExhausted.
    const err = await client.report({ serverUrl: 'https://new-6.example.com/mcp', success: true, latencyMs: 5 }, { headers: { 'x-forwarded-for': '2001:db8:9:1::5' } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
    // An hour later the network may create servers again.
    at = new Date(at.getTime() + 61 * 60_000);
    expect((await report(small, 'https://new-5.example.com/mcp', '2001:db8:9:1::1')).status).toBe(200);
    // What is kept to count creations is a keyed hash, never an address.
    expect(await databaseText(small)).not.toContain('2001:db8');
  });
});
