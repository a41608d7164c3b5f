import dns from 'node:dns';
import type http from 'node:http';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Code, ConnectError, createClient, createContextValues } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { ComplianceService } from '../gen/observatory/v1/compliance_pb.js';
import { expectProblem, forwardedFor, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { eventually } from './support/connections.js';
import { startHttpStub } from './support/mcp-target.js';
import { clientAddressKey, type CallContext } from '../src/services/context.js';
import { createProbeSlots, probesPerClient } from '../src/services/probe-slots.js';
import { DNS_LIMITS } from '../src/probes/safe-fetch.js';

// On-demand probes running at once (PROBE_CONCURRENCY). Before this bound, a target that never
// answered held every probe any client started for its whole deadline (20 s): the per-minute
// rate limit bounds starts per client network, not probes in flight, and every network has its
// own. Here a silent target holds each probe until the test lets it go.

const ctxFrom = (address: string): CallContext => ({ requestHeader: new Headers(), values: createContextValues().set(clientAddressKey, address) });

describe('probe slots (pure)', () => {
  it('admit a client network its share and the process its total, refuse beyond with 429 / 503, and free a slot whatever the probe did', async () => {
    expect(probesPerClient(32)).toBe(4);
    expect(probesPerClient(4)).toBe(2);
    const slots = createProbeSlots(3, 2);
    const gates: (() => void)[] = [];
    const hold = () => new Promise<string>((resolve) => gates.push(() => resolve('done')));
    const a1 = slots.run(ctxFrom('192.0.2.1'), hold);
    const a2 = slots.run(ctxFrom('192.0.2.1'), hold);
    await expect(slots.run(ctxFrom('192.0.2.1'), hold)).rejects.toMatchObject({ problem: 'rate_limited', headers: { 'retry-after': '5' } });
    const b1 = slots.run(ctxFrom('2001:db8::1'), hold);
    // Same IPv6 /64: the same client network; the process is full anyway.
    await expect(slots.run(ctxFrom('2001:db8::2'), hold)).rejects.toMatchObject({ problem: 'unavailable' });
    expect(slots.running()).toBe(3);
    gates.forEach((g) => g());
    expect(await Promise.all([a1, a2, b1])).toEqual(['done', 'done', 'done']);
    await expect(slots.run(ctxFrom('192.0.2.1'), () => Promise.reject(new Error('target reset')))).rejects.toThrow('target reset');
    expect(slots.running()).toBe(0);
  });
});

let t: TestApp;
let silent: Awaited<ReturnType<typeof startHttpStub>>;
const held: http.ServerResponse[] = [];
let answer = false;
beforeAll(async () => {
  silent = await startHttpStub((_req, res) => {
    if (answer) return void res.writeHead(404).end();
    held.push(res);
  });
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1', TRUST_PROXY: '1', PROBE_CONCURRENCY: '4', RATE_LIMIT_PROBES_PER_MINUTE: '1000' });
  expect((await postJson(`${t.base}/api/report`, { server_url: silent.url, success: true, latency_ms: 5 })).status).toBe(200);
}, 60_000);
afterAll(async () => {
  for (const r of held) r.destroy();
  await silent?.close();
  await t?.close();
});

const from = (ip: string) => ({ headers: { 'x-forwarded-for': ip } });
const drift = (ip: string) => fetch(`${t.base}/api/drift?server=${encodeURIComponent(silent.url)}`, from(ip));

describe(`PROBE_CONCURRENCY: probes running at once (${backend})`, () => {
  it('a client network runs its share, the process its total; beyond, 429 / 503 with Retry-After at once, on every door', async () => {
    // Client A starts two drift checks the silent target holds.
    const a = [drift('203.0.113.1'), drift('203.0.113.1')];
    expect(await eventually(() => held.length === 2, 10_000)).toBe(true);
    // A third from A: its share is 2, over REST, Connect, the /drift form and agent-readiness alike.
    const third = await drift('203.0.113.1');
    expect(third.headers.get('retry-after')).toBe('5');
    expect(String((await expectProblem(third, 429, 'rate_limited')).detail)).toMatch(/already runs its share of PROBE_CONCURRENCY \(probes: 2 at once\)/);
    const connect = createClient(TrustService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', interceptors: [forwardedFor('203.0.113.1')] }));
    const err = await connect.getDrift({ server: silent.url }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
    const form = await fetch(`${t.base}/drift?server=${encodeURIComponent(silent.url)}`, from('203.0.113.1'));
    expect(form.status).toBe(429);
    expect(await form.text()).toContain('already runs its share of PROBE_CONCURRENCY (probes: 2 at once)');
    await expectProblem(await fetch(`${t.base}/api/agent-readiness?url=${encodeURIComponent(silent.url)}`, from('203.0.113.1')), 429, 'rate_limited');
    await expectProblem(await fetch(`${t.base}/api/agency-checklist?url=${encodeURIComponent(silent.url)}`, from('203.0.113.1')), 429, 'rate_limited');
    await expectProblem(await fetch(`${t.base}/v1/compliance?server=${encodeURIComponent(silent.url)}`, from('203.0.113.1')), 429, 'rate_limited');
    // Client B fills the process (4).
    const b = [drift('198.51.100.1'), drift('198.51.100.1')];
    expect(await eventually(() => held.length === 4, 10_000)).toBe(true);
    expect(t.obs.services.probeSlots.running()).toBe(4);
    const full = await drift('192.0.2.77');
    expect(full.headers.get('retry-after')).toBe('5');
    await expectProblem(full, 503, 'unavailable');
    // The target lets go: the held probes end (502) and free their slots.
    answer = true;
    for (const r of held.splice(0)) r.destroy();
    for (const res of await Promise.all([...a, ...b])) await expectProblem(res, 502, 'upstream_error');
    expect(t.obs.services.probeSlots.running()).toBe(0);
    await expectProblem(await drift('192.0.2.77'), 502, 'upstream_error');
  }, 60_000);
});

// A name whose name servers never answer (stubbed here: no query leaves the host). Before, the
// agent-readiness probe resolved its target before it took a slot, with getaddrinfo and no
// deadline: such lookups were bounded by nothing and held libuv's threadpool.
describe(`a target whose name never resolves (${backend})`, () => {
  // The agency checklist and the compliance attestation checked their target before they took a
  // slot, the same way (found after the readiness probe was mended).
  it.each([
    ['/api/agent-readiness?url=', '203.0.113.40'],
    ['/api/agency-checklist?url=', '203.0.113.41'],
    ['/v1/compliance?server=', '203.0.113.42'],
  ])('%s is looked up inside the probe slot and fails at the lookup deadline (502), not holding anything for longer', async (route, client) => {
    const never = () => new Promise<never>(() => {});
    const spies = [
      vi.spyOn(dns.promises, 'lookup').mockImplementation(never),
      vi.spyOn(dns.promises.Resolver.prototype, 'resolve4').mockImplementation(never),
      vi.spyOn(dns.promises.Resolver.prototype, 'resolve6').mockImplementation(never),
    ];
    try {
      const readiness = () => fetch(`${t.base}${route}${encodeURIComponent('https://stalled-dns.example.com/')}`, from(client));
      const started = performance.now();
      const held = [readiness(), readiness()];
      expect(await eventually(() => t.obs.services.probeSlots.running() === 2, 10_000)).toBe(true);
      // Its share (2) holds the two lookups: a third is refused at once.
      await expectProblem(await readiness(), 429, 'rate_limited');
      for (const res of await Promise.all(held)) expect(String((await expectProblem(res, 502, 'upstream_error')).detail)).toMatch(new RegExp(`could not resolve stalled-dns\\.example\\.com within ${DNS_LIMITS.timeoutMs} ms`));
      expect(performance.now() - started).toBeLessThan(DNS_LIMITS.timeoutMs + 3000);
      expect(t.obs.services.probeSlots.running()).toBe(0);
    } finally {
      for (const s of spies) s.mockRestore();
    }
  }, 60_000);
});

// Compliance exports running at once (EXPORT_CONCURRENCY). An export reads every raw telemetry row
// of a server over its period (up to ten years): measured on PostgreSQL with 3 million rows, 0.9 s
// each, and twelve at once from one client made reports take 1.2-2.5 s and trust reads 2.5-3.6 s
// (8-240 ms and 14-75 ms with the bound). Here the export's telemetry reads wait until released.
describe(`EXPORT_CONCURRENCY: compliance exports running at once (${backend})`, () => {
  it('one per client network, two per instance by default; beyond, 429 / 503 at once on REST and Connect; other requests go on', async () => {
    const app = await startTestApp({ TRUST_PROXY: '1', RATE_LIMIT_PROBES_PER_MINUTE: '1000' });
    const db = app.obs.db;
    const query = db.query;
    const waiting: (() => void)[] = [];
    db.query = function (this: typeof db, sql: string, ...rest: unknown[]) {
      const call = () => (query as (...a: unknown[]) => ReturnType<typeof query>).call(this, sql, ...rest);
      if (!sql.includes('FROM telemetry WHERE server_id = $1 AND received_at >= $2')) return call();
      return new Promise<void>((resolve) => waiting.push(resolve)).then(call) as ReturnType<typeof query>;
    } as typeof query;
    const server = 'https://exported.example.com/mcp';
    const exportFrom = (ip: string) => fetch(`${app.base}/api/compliance?server_url=${encodeURIComponent(server)}`, from(ip));
    try {
      expect((await postJson(`${app.base}/api/report`, { server_url: server, success: true, latency_ms: 5 })).status).toBe(200);
      const a = exportFrom('203.0.113.10');
      expect(await eventually(() => waiting.length === 1, 10_000)).toBe(true);
      // The same network again: its share (1) is taken.
      const again = await exportFrom('203.0.113.10');
      expect(again.headers.get('retry-after')).toBe('5');
      expect(String((await expectProblem(again, 429, 'rate_limited')).detail)).toMatch(/its share of EXPORT_CONCURRENCY \(compliance exports: 1 at once\)/);
      const connect = createClient(ComplianceService, createConnectTransport({ baseUrl: app.base, httpVersion: '1.1', interceptors: [forwardedFor('203.0.113.10')] }));
      const err = await connect.getComplianceExport({ serverUrl: server }).catch((e: unknown) => e);
      expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
      // Another network takes the second slot; a third finds the instance full.
      const b = exportFrom('198.51.100.10');
      expect(await eventually(() => waiting.length === 2, 10_000)).toBe(true);
      await expectProblem(await exportFrom('192.0.2.10'), 503, 'unavailable');
      // Everything else goes on meanwhile.
      expect((await postJson(`${app.base}/api/report`, { server_url: server, success: false, latency_ms: 9 })).status).toBe(200);
      expect((await fetch(`${app.base}/api/trust?url=${encodeURIComponent(server)}`)).status).toBe(200);
      // Released: both exports answer, and the slots are free again.
      const release = () => waiting.splice(0).forEach((go) => go());
      const releasing = setInterval(release, 5);
      try {
        for (const res of await Promise.all([a, b])) expect(res.status).toBe(200);
        expect((await exportFrom('192.0.2.10')).status).toBe(200);
      } finally {
        clearInterval(releasing);
        release();
      }
    } finally {
      db.query = query;
      await app.close();
    }
  }, 60_000);
});
