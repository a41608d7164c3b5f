import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { REGISTRY_MAX_IN_FLIGHT } from '../src/registry/clawhub.js';
import { cacheLimits, setCacheLimits } from '../src/store/cache-limits.js';
import { expectProblem, forwardedFor, startTestApp, type TestApp } from './support/app.js';
import { expectConfigRefusal } from './support/config.js';
import { backend } from './support/db.js';
import { recordedSkill } from './support/clawhub.js';

// Finding 2 (2026-11-28): GET /v1/trust (ClawHub skill trust) and its Connect GetSkillTrust had
// no rate limit and no bound on what they ask the registry at once: 500 concurrent distinct slugs
// were 500 simultaneous outbound sockets, and the 404s of made-up slugs, cached with the real
// answers, evicted them. A fake registry on 127.0.0.1 that can hold its answers counts what
// reaches it: requests in flight and sockets open.

interface HoldingRegistry {
  url: string;
  skills: Map<string, unknown>;
  hits: Map<string, number>;
  /** Requests being answered now, and the most at once. */
  inFlight: number;
  maxInFlight: number;
  /** Sockets open now, and the most at once. */
  sockets: number;
  maxSockets: number;
  /** While set, requests wait for release(). */
  hold: boolean;
  release(): void;
  close(): Promise<void>;
}

async function startHoldingRegistry(): Promise<HoldingRegistry> {
  let waiting: (() => void)[] = [];
  const open = new Set<Socket>();
  const state: HoldingRegistry = {
    url: '',
    skills: new Map(),
    hits: new Map(),
    inFlight: 0,
    maxInFlight: 0,
    sockets: 0,
    maxSockets: 0,
    hold: false,
    release() {
      const w = waiting;
      waiting = [];
      for (const go of w) go();
    },
    close: async () => {},
  };
  const server = http.createServer(async (req, res) => {
    state.inFlight++;
    state.maxInFlight = Math.max(state.maxInFlight, state.inFlight);
    try {
      if (state.hold) await new Promise<void>((r) => waiting.push(r));
      const slug = decodeURIComponent(/^\/api\/v1\/skills\/([^/?]+)$/.exec(req.url ?? '')?.[1] ?? '');
      state.hits.set(slug, (state.hits.get(slug) ?? 0) + 1);
      const skill = state.skills.get(slug);
      if (!skill) res.writeHead(404, { 'content-type': 'text/plain' }).end('Skill not found');
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(skill));
    } finally {
      state.inFlight--;
    }
  });
  server.on('connection', (s: Socket) => {
    open.add(s);
    state.sockets = open.size;
    state.maxSockets = Math.max(state.maxSockets, open.size);
    s.on('close', () => {
      open.delete(s);
      state.sockets = open.size;
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v1`;
  state.close = () =>
    new Promise<void>((r) => {
      state.release();
      for (const s of open) s.destroy();
      server.close(() => r());
    });
  return state;
}

let reg: HoldingRegistry;
let t: TestApp;
const trust = (skill: string, ip: string) => fetch(`${t.base}/v1/trust?registry=clawhub&skill=${skill}`, { headers: { 'x-forwarded-for': ip } });

beforeAll(async () => {
  reg = await startHoldingRegistry();
  reg.skills.set('gog', recordedSkill('gog', { now: new Date() }));
  reg.skills.set('weather', recordedSkill('weather', { now: new Date() }));
  t = await startTestApp({ CLAWHUB_API_URL: reg.url, TRUST_PROXY: '1', RATE_LIMIT_SKILL_TRUST_PER_MINUTE: '3' });
}, 60_000);
afterAll(async () => {
  await t?.close();
  await reg?.close();
});

describe('skill trust limit configuration', () => {
  it('defaults to 120 a minute per client network; refuses a bad value naming the variable', async () => {
    const { loadConfig } = await import('../src/config.js');
    expect(loadConfig({}).rateLimitSkillTrustPerMinute).toBe(120);
    expect(loadConfig({ RATE_LIMIT_SKILL_TRUST_PER_MINUTE: '0' }).rateLimitSkillTrustPerMinute).toBe(0);
    expectConfigRefusal('RATE_LIMIT_SKILL_TRUST_PER_MINUTE', '-1');
    expectConfigRefusal('RATE_LIMIT_SKILL_TRUST_PER_MINUTE', 'many');
  });
});

describe(`GET /v1/trust and GetSkillTrust are bounded (${backend})`, () => {
  it('are limited per client network, one bucket for REST and Connect: 429 problem+json / RESOURCE_EXHAUSTED with Retry-After', async () => {
    const ip = '203.0.113.40';
    for (let i = 0; i < 2; i++) {
      const r = await trust('gog', ip);
      expect(r.status).toBe(200);
      expect(r.headers.get('ratelimit-policy')).toBe('"skill_trust";q=3;w=60');
      await r.arrayBuffer();
    }
    const client = createClient(TrustService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', interceptors: [forwardedFor(ip)] }));
    expect((await client.getSkillTrust({ registry: 'clawhub', skill: 'gog' })).badge).toBe('PASS');
    const refused = await trust('made-up-slug', ip);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect((await expectProblem(refused, 429, 'rate_limited')).detail).toMatch(/at most 3 skill trust requests per minute/);
    const err = await client.getSkillTrust({ registry: 'clawhub', skill: 'gog' }).then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.ResourceExhausted);
    expect(Number(err?.metadata.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // Another network has its own bucket.
    expect((await trust('gog', '203.0.113.41')).status).toBe(200);
  });

  it(`ask the registry at most ${REGISTRY_MAX_IN_FLIGHT} things at once; beyond, 503 unavailable with Retry-After before anything is sent`, async () => {
    expect(REGISTRY_MAX_IN_FLIGHT).toBeLessThanOrEqual(16);
    reg.hold = true;
    const hitsBefore = [...reg.hits.values()].reduce((a, b) => a + b, 0);
    // 60 distinct made-up slugs at once, from 60 networks (one each: within their limit and share).
    const answers = Array.from({ length: 60 }, (_, i) => trust(`flood-${i}`, `198.51.100.${i + 1}`));
    // The first ones reach the registry and wait there; the others are answered at once.
    const deadline = Date.now() + 10_000;
    while (reg.inFlight < REGISTRY_MAX_IN_FLIGHT && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 300));
    expect(reg.inFlight).toBe(REGISTRY_MAX_IN_FLIGHT);
    // Connect while the registry is full: UNAVAILABLE with Retry-After.
    const client = createClient(TrustService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', interceptors: [forwardedFor('198.51.100.200')] }));
    const err = await client.getSkillTrust({ registry: 'clawhub', skill: 'flood-connect' }).then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.Unavailable);
    expect(Number(err?.metadata.get('retry-after'))).toBeGreaterThanOrEqual(1);
    reg.hold = false;
    reg.release();
    const settled = await Promise.all(answers);
    const statuses = settled.map((r) => r.status);
    expect(statuses.filter((s) => s === 404)).toHaveLength(REGISTRY_MAX_IN_FLIGHT);
    expect(statuses.filter((s) => s === 503)).toHaveLength(60 - REGISTRY_MAX_IN_FLIGHT);
    const busy = settled.find((r) => r.status === 503)!;
    expect(Number(busy.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const p = await expectProblem(busy, 503, 'unavailable');
    expect(p.detail).toMatch(/registry/);
    for (const r of settled) if (!r.bodyUsed) await r.arrayBuffer();
    expect([...reg.hits.values()].reduce((a, b) => a + b, 0) - hitsBefore).toBe(REGISTRY_MAX_IN_FLIGHT);
    expect(reg.maxInFlight).toBeLessThanOrEqual(REGISTRY_MAX_IN_FLIGHT);
    expect(reg.maxSockets).toBeLessThanOrEqual(REGISTRY_MAX_IN_FLIGHT);
    // Once the registry has answered, the slots are free again.
    expect((await trust('weather', '198.51.100.201')).status).toBe(200);
  });

  it('one client network holds at most its share of the requests in flight (429); others still get theirs', async () => {
    // Before, one network asking slow slugs held all 8 and every other client got 503 meanwhile.
    reg.hold = true;
    const ip = '203.0.113.77';
    const mine = Array.from({ length: 3 }, (_, i) => trust(`share-${i}`, ip));
    const deadline = Date.now() + 10_000;
    while (reg.inFlight < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 300));
    expect(reg.inFlight).toBe(2);
    const other = trust('share-other', '203.0.113.78');
    while (reg.inFlight < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(reg.inFlight).toBe(3);
    reg.hold = false;
    reg.release();
    const statuses = (await Promise.all(mine)).map((r) => r.status).sort();
    expect(statuses).toEqual([404, 404, 429]);
    expect((await other).status).toBe(404);
  });

  it('keep the misses (404s of made-up slugs) in their own smaller cache: they never evict a real answer', async () => {
    const before = cacheLimits().maxEntries;
    try {
      setCacheLimits({ maxEntries: 8 });
      expect((await trust('gog', '198.51.100.210')).status).toBe(200);
      const gogHits = reg.hits.get('gog') ?? 0;
      // 40 made-up slugs, from 14 networks.
      for (let i = 0; i < 40; i++) expect((await trust(`made-up-${i}`, `198.51.100.${220 + Math.floor(i / 3)}`)).status).toBe(404);
      // The real answer is still cached: the registry is not asked again.
      expect((await trust('gog', '198.51.100.211')).status).toBe(200);
      expect(reg.hits.get('gog') ?? 0).toBe(gogHits);
      // The last misses are cached too (a repeated made-up slug is not asked again), the oldest dropped.
      const last = reg.hits.get('made-up-39') ?? 0;
      expect((await trust('made-up-39', '198.51.100.212')).status).toBe(404);
      expect(reg.hits.get('made-up-39')).toBe(last);
      const first = reg.hits.get('made-up-0') ?? 0;
      expect((await trust('made-up-0', '198.51.100.212')).status).toBe(404);
      expect(reg.hits.get('made-up-0')).toBe(first + 1);
    } finally {
      setCacheLimits({ maxEntries: before });
    }
  });
});
