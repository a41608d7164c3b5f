// Issue 17 finding 6: one IPv6 /64 must not turn a FAIL server into a PASS. Every per-address
// limit counts the network of a client address as report sources do (IPv4 /32, IPv6 /64,
// IPv4-mapped IPv6 as IPv4), and a key's reports are one source family with the network they come
// from that day, whatever keys it holds and whenever it registered them (docs/integrity.md). Clients are simulated with X-Forwarded-For behind TRUST_PROXY=1.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

const T0 = new Date('2026-04-07T01:00:00Z');
let clock = T0;
let t: TestApp;
let limited: TestApp;

const register = (address: string) => postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': address });
const trust = (url: string) => json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(url)}`));

/** One reporter sending `n` reports in one gRPC client stream. */
async function flood(url: string, n: number, success: boolean, address: string, headers: Record<string, string> = {}) {
  const client = createClient(TelemetryService, createGrpcTransport({ baseUrl: t.base }));
  async function* items() {
    for (let i = 0; i < n; i++) yield { report: { serverUrl: url, success, latencyMs: 50, httpStatus: success ? 200 : 503 } };
  }
  const res = await client.reportStream(items(), { headers: { 'x-forwarded-for': address, ...headers } });
  expect(res.accepted).toBe(n);
}

beforeAll(async () => {
  t = await startTestApp({ TRUST_PROXY: '1', RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0' }, { now: () => clock });
  limited = await startTestApp({ TRUST_PROXY: '1', RATE_LIMIT_PREFLIGHT_PER_MINUTE: '3' });
}, 120_000);
afterAll(async () => {
  await t?.close();
  await limited?.close();
});

describe(`per-network limits and key families (${backend})`, () => {
  it('registration: 5 per hour per /64, whichever addresses of the /64 ask', async () => {
    for (let i = 1; i <= 5; i++) expect((await register(`2001:db8:aa:1::${i}`)).status).toBe(200);
    await expectProblem(await register('2001:db8:aa:1:ffff:ffff:ffff:ffff'), 429, 'rate_limited');
    await expectProblem(await register('2001:DB8:AA:1:0:0:0:77'), 429, 'rate_limited');
    // The neighbouring /64 is another network.
    expect((await register('2001:db8:aa:2::1')).status).toBe(200);
  });

  it('registration: an IPv4-mapped IPv6 address is its IPv4 address', async () => {
    for (let i = 0; i < 3; i++) expect((await register('192.0.2.44')).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await register('::ffff:192.0.2.44')).status).toBe(200);
    await expectProblem(await register('::ffff:c000:22c'), 429, 'rate_limited');
    await expectProblem(await register('192.0.2.44'), 429, 'rate_limited');
  });

  it('rate-limit buckets: one bucket per /64', async () => {
    const url = `${limited.base}/v1/preflight?target=https://rl64.example.com/mcp`;
    const from = (a: string) => fetch(url, { headers: { 'x-forwarded-for': a } });
    for (const a of ['2001:db8:bb:1::1', '2001:db8:bb:1::2', '2001:db8:bb:1:abcd::9']) expect((await from(a)).status).toBe(200);
    await expectProblem(await from('2001:db8:bb:1::4'), 429, 'rate_limited');
    expect((await from('2001:db8:bb:2::1')).status).toBe(200);
    // IPv4-mapped and plain IPv4 share one bucket.
    for (let i = 0; i < 3; i++) expect((await from(i % 2 ? '::ffff:198.51.100.9' : '198.51.100.9')).status).toBe(200);
    await expectProblem(await from('::ffff:198.51.100.9'), 429, 'rate_limited');
  });

  it('12 keys registered from one /64 and flooding from it are one source family: they cannot turn a FAIL server into a PASS', async () => {
    const url = 'https://contested.example.com/mcp';
    // Five honest sources report failures.
    await Promise.all(Array.from({ length: 5 }, (_, s) => flood(url, 4, false, `10.77.0.${s + 1}`)));
    const before = await trust(url);
    expect(before.verdict).toBe('FAIL');
    // The attacker registers 12 keys from one /64 over three hours of the same UTC day...
    const keys: string[] = [];
    for (let batch = 0; batch < 3; batch++) {
      clock = new Date(T0.getTime() + batch * 61 * 60_000);
      for (let i = 0; i < 5 && keys.length < 12; i++) {
        const res = await register(`2001:db8:cc:1::${batch * 10 + i + 1}`);
        expect(res.status).toBe(200);
        keys.push((await json(res)).api_key as string);
      }
    }
    // ...and floods successes through each key, from addresses all over its /64.
    await Promise.all(keys.map((k, i) => flood(url, 60, true, `2001:db8:cc:1::${(i + 100).toString(16)}`, { authorization: `Bearer ${k}` })));
    const after = await trust(url);
    expect(after.metrics.total_interactions).toBe(20 + 12 * 60);
    // Five honest sources plus one family.
    expect(after.score_breakdown.independent_sources).toBe(6);
    expect(after.score_breakdown.keyed_sources).toBe(1);
    expect(after.verdict).toBe('FAIL');
    // No better than one key against the five (docs/integrity.md table: 23.4 at saturation).
    expect(after.server.trust_score).toBeLessThan(40);
    clock = T0;
  }, 120_000);

  it('keys used from other networks count as those networks, as their addresses would: keys add no source', async () => {
    const url = 'https://elsewhere.example.com/mcp';
    const keys: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await register(`2001:db8:ee:1::${i + 1}`);
      expect(res.status).toBe(200);
      keys.push((await json(res)).api_key as string);
    }
    // Three keys of one /64, each used from its own network, plus those networks' own address reports.
    await Promise.all(keys.map((k, i) => flood(url, 10, true, `198.51.100.${i + 1}`, { authorization: `Bearer ${k}` })));
    await Promise.all(keys.map((_, i) => flood(url, 10, true, `198.51.100.${i + 1}`)));
    const rec = await trust(url);
    expect(rec.score_breakdown).toMatchObject({ independent_sources: 3, keyed_sources: 3 });
  }, 120_000);

  it('a family of keys alone stays within the one-source bound (keyed: 82.1, grade B)', async () => {
    const url = 'https://family-only.example.com/mcp';
    const start = new Date(T0.getTime() + 4 * 3_600_000);
    const keys: string[] = [];
    for (let batch = 0; batch < 2; batch++) {
      clock = new Date(start.getTime() + batch * 61 * 60_000);
      for (let i = 0; i < 5; i++) {
        const res = await register(`2001:db8:dd:7::${batch * 10 + i + 1}`);
        expect(res.status).toBe(200);
        keys.push((await json(res)).api_key as string);
      }
    }
    await Promise.all(keys.map((k, i) => flood(url, 40, true, `2001:db8:dd:7::${(100 + i).toString(16)}`, { authorization: `Bearer ${k}` })));
    const rec = await trust(url);
    expect(rec.score_breakdown).toMatchObject({ independent_sources: 1, keyed_sources: 1, evidence_weight: 18 });
    expect(rec.server.trust_score).toBeCloseTo(82.1, 1);
    clock = T0;
  }, 120_000);

  it('keys registered on 14 different days from one address are one source with that address on the day they report', async () => {
    // Before: a key's family was the network and day of its registration, for good, so one address
    // registering a key a day had 14 families after two weeks, each at the keyed cap: 14 x 18
    // against five honest sources (the audit of 2026-11-28: 30.0 -> 84.4, PASS, with 7 keys).
    const url = 'https://patient.example.com/mcp';
    const attacker = '198.51.100.77';
    const start = new Date(T0.getTime() + 30 * 86_400_000);
    const keys: string[] = [];
    for (let day = 0; day < 14; day++) {
      clock = new Date(start.getTime() + day * 86_400_000);
      const res = await register(attacker);
      expect(res.status).toBe(200);
      keys.push((await json(res)).api_key as string);
    }
    clock = new Date(start.getTime() + 14 * 86_400_000);
    await Promise.all(Array.from({ length: 5 }, (_, s) => flood(url, 4, false, `10.78.0.${s + 1}`)));
    expect((await trust(url)).verdict).toBe('FAIL');
    await Promise.all(keys.map((k) => flood(url, 60, true, attacker, { authorization: `Bearer ${k}` })));
    const after = await trust(url);
    expect(after.metrics.total_interactions).toBe(20 + 14 * 60);
    expect(after.score_breakdown).toMatchObject({ independent_sources: 6, keyed_sources: 1 });
    expect(after.verdict).toBe('FAIL');
    expect(after.server.trust_score).toBeLessThan(40);
    clock = T0;
  }, 120_000);

  it('the registering network is stored only as a keyed hash with the key, never as an address', async () => {
    const rows = await t.obs.db.query<Record<string, unknown>>('SELECT * FROM api_keys');
    expect(rows.length).toBeGreaterThan(0);
    const dump = JSON.stringify(rows);
    for (const needle of ['2001:db8', '192.0.2.44', 'c000:22c']) expect(dump).not.toContain(needle);
    expect(rows.every((r) => typeof r.network_family === 'string' && /^[0-9a-f]{32}$/.test(r.network_family as string))).toBe(true);
  });
});
