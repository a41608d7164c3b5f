import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

describe(`telemetry and trust over plain HTTP/1.1 (${backend})`, () => {
  it('tracks a server with its first report and answers the full trust record', async () => {
    const r = await postJson(`${t.base}/api/report`, {
      server_url: 'HTTPS://Weather.Example.com:443/mcp/',
      success: true,
      latency_ms: 120,
      tool_name: 'get_forecast',
      http_status: 200,
    });
    expect(r.status).toBe(200);
    expect(await json(r)).toEqual({ recorded: true, server_url: 'https://weather.example.com/mcp' });

    await postJson(`${t.base}/api/report`, { server_url: 'https://weather.example.com/mcp', success: false, latency_ms: 300 });

    const res = await fetch(`${t.base}/api/trust?url=${encodeURIComponent('https://weather.example.com/mcp/')}`);
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body.server).toMatchObject({ name: 'weather.example.com/mcp', url: 'https://weather.example.com/mcp', category: 'weather' });
    expect(typeof body.server.trust_score).toBe('number');
    expect(body.server.trust_score).toBeGreaterThanOrEqual(0);
    expect(body.server.trust_score).toBeLessThanOrEqual(100);
    expect(new Date(body.server.registered_at).toString()).not.toBe('Invalid Date');
    expect(body.metrics).toEqual({ total_interactions: 2, avg_latency_ms: 210, success_rate: 0.5 });
    expect(body.category_baseline).toMatchObject({ category: 'weather', server_count: 1 });
    expect(body.anomaly).toEqual({ is_anomalous: false, anomaly_flags: [] });
    expect(body.score_breakdown).toBeTypeOf('object');
  });

  it('drops unknown fields before anything is stored', async () => {
    const r = await postJson(`${t.base}/api/report`, {
      server_url: 'https://privacy.example.com/mcp',
      success: true,
      latency_ms: 10,
      prompt: 'my secret prompt',
      arguments: { ssn: '123-45-6789' },
      user_id: 'alice@example.com',
    });
    expect(r.status).toBe(200);
    const rows = await t.obs.db.query<Record<string, unknown>>(
      "SELECT t.* FROM telemetry t JOIN servers s ON s.id = t.server_id WHERE s.url = 'https://privacy.example.com/mcp'",
    );
    expect(rows).toHaveLength(1);
    const dump = JSON.stringify(rows);
    // Whole values: a fragment such as '6789' also turns up, now and then, inside the row's
    // random hex source hash (a CI run failed on exactly that).
    expect(dump).not.toContain('my secret prompt');
    expect(dump).not.toContain('123-45-6789');
    expect(dump).not.toContain('ssn');
    expect(dump).not.toContain('alice@example.com');
  });

  it('refuses invalid reports with 400 problem+json and stores nothing', async () => {
    const bad: unknown[] = [
      {},
      { server_url: 'https://x.example.com', latency_ms: 1 },
      { server_url: 'https://x.example.com', success: 'true', latency_ms: 1 },
      { server_url: 'https://x.example.com', success: true, latency_ms: -1 },
      { server_url: 'https://x.example.com', success: true, latency_ms: '5' },
      { server_url: 'https://x.example.com', success: true },
      { server_url: 'ftp://x.example.com', success: true, latency_ms: 1 },
      { server_url: 'not a url', success: true, latency_ms: 1 },
      { server_url: 'https://user:pw@x.example.com', success: true, latency_ms: 1 },
      { server_url: 'https://x.example.com', success: true, latency_ms: 1, http_status: 99 },
      { server_url: 'https://x.example.com', success: true, latency_ms: 1, http_status: 600 },
      { server_url: 'https://x.example.com', success: true, latency_ms: 1, http_status: 200.5 },
      { server_url: 'https://x.example.com', success: true, latency_ms: 1, tool_name: 'x'.repeat(201) },
      { server_url: 'https://x.example.com', success: true, latency_ms: 1e999 },
      [1, 2, 3],
      'a string',
    ];
    for (const b of bad) await expectProblem(await postJson(`${t.base}/api/report`, b), 400, 'invalid_argument');
    const rows = await t.obs.db.query("SELECT 1 FROM servers WHERE url LIKE '%x.example.com%'");
    expect(rows).toHaveLength(0);
  });

  it('answers malformed JSON, wrong content types and huge bodies with problems, never 500', async () => {
    await expectProblem(await fetch(`${t.base}/api/report`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"server_url":' }), 400);
    await expectProblem(await fetch(`${t.base}/api/report`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'hello' }), 415);
    const huge = JSON.stringify({ server_url: 'https://big.example.com', success: true, latency_ms: 1, tool_name: 'x'.repeat(2_000_000) });
    await expectProblem(await fetch(`${t.base}/api/report`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: huge }), 413);
  });

  it('400 without url or with an invalid one, 404 for an untracked server', async () => {
    await expectProblem(await fetch(`${t.base}/api/trust`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/api/trust?url=`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/api/trust?url=javascript:alert(1)`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/api/trust?url=https://never.example.com`), 404, 'not_tracked');
  });

  it('unknown paths are 404, wrong methods 405 with Allow, and no spec path is left at 501', async () => {
    await expectProblem(await fetch(`${t.base}/no/such/path`), 404, 'not_found');
    const r = await fetch(`${t.base}/api/report`);
    await expectProblem(r, 405, 'method_not_allowed');
    expect(r.headers.get('allow')).toContain('POST');
    await expectProblem(await fetch(`${t.base}/api/trust`, { method: 'DELETE' }), 405);
    await expectProblem(await fetch(`${t.base}/v1/receipt/0123456789abcdef`, { method: 'POST' }), 405);
    // The last pending paths (the compliance endpoints) are built: bad input is a 400, not a 501.
    await expectProblem(await fetch(`${t.base}/v1/compliance`), 400, 'invalid_argument');
    await expectProblem(await fetch(`${t.base}/v1/compliance?server=http://10.0.0.1/mcp`), 400, 'target_refused');
  });

  it('serves health, readiness, CORS, request ids and the interface version', async () => {
    expect((await fetch(`${t.base}/healthz`)).status).toBe(200);
    const ready = await fetch(`${t.base}/readyz`);
    expect(ready.status).toBe(200);
    expect(ready.headers.get('x-interface-version')).toBe('1.3.0');
    expect(ready.headers.get('x-request-id')).toBeTruthy();
    const pre = await fetch(`${t.base}/api/report`, {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    expect(pre.status).toBeLessThan(300);
    expect(pre.headers.get('access-control-allow-origin')).toBe('*');
    const get = await fetch(`${t.base}/healthz`, { headers: { origin: 'https://app.example.com' } });
    expect(get.headers.get('access-control-allow-origin')).toBe('*');
  });

  it('exposes Prometheus metrics labelled by route pattern, without client data', async () => {
    await fetch(`${t.base}/api/trust?url=https://never.example.com`);
    const res = await fetch(`${t.base}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    expect(text).toMatch(/observatory_http_requests_total\{method="POST",route="\/api\/report",status="200"\} \d+/);
    expect(text).toMatch(/observatory_http_requests_total\{method="GET",route="\/api\/trust",status="404"\} \d+/);
    expect(text).toContain('observatory_http_request_duration_seconds_bucket');
    expect(text).not.toContain('never.example.com');
  });

  it('counts every request once under its route pattern: HEAD routes, unmatched paths, and a histogram that adds up', async () => {
    const scrape = async () => (await fetch(`${t.base}/metrics`)).text();
    const value = (text: string, line: string) => Number(text.split('\n').find((l) => l.startsWith(`${line} `))?.slice(line.length + 1) ?? 0);
    const before = await scrape();
    for (let i = 0; i < 3; i++) await fetch(`${t.base}/healthz`);
    await fetch(`${t.base}/healthz`, { method: 'HEAD' });
    await fetch(`${t.base}/no/such/${'x'.repeat(10)}`);
    await fetch(`${t.base}/api/trust/extra`, { method: 'DELETE' });
    const after = await scrape();
    const delta = (line: string) => value(after, line) - value(before, line);
    expect(delta('observatory_http_requests_total{method="GET",route="/healthz",status="200"}')).toBe(3);
    expect(delta('observatory_http_requests_total{method="HEAD",route="/healthz",status="200"}')).toBe(1);
    expect(delta('observatory_http_requests_total{method="GET",route="unmatched",status="404"}')).toBe(1);
    expect(delta('observatory_http_requests_total{method="DELETE",route="unmatched",status="404"}')).toBe(1);
    expect(after).not.toContain('xxxxxxxxxx');
    // Buckets are cumulative, +Inf equals the count, and the count equals the requests counted.
    const h = 'observatory_http_request_duration_seconds';
    const buckets = after.split('\n').filter((l) => l.startsWith(`${h}_bucket{le=`) && l.includes('method="GET",route="/healthz"}')).map((l) => Number(l.split(' ').pop()));
    expect(buckets.length).toBe(14);
    for (let i = 1; i < buckets.length; i++) expect(buckets[i]).toBeGreaterThanOrEqual(buckets[i - 1]!);
    expect(buckets.at(-1)).toBe(value(after, `${h}_count{method="GET",route="/healthz"}`));
    expect(value(after, `${h}_count{method="GET",route="/healthz"}`)).toBe(value(after, 'observatory_http_requests_total{method="GET",route="/healthz",status="200"}'));
    expect(value(after, `${h}_sum{method="GET",route="/healthz"}`)).toBeGreaterThan(0);
    expect(after).toMatch(new RegExp(`${h}_bucket\\{le="\\+Inf",method="GET",route="/healthz"\\} \\d+`));
  });
});
