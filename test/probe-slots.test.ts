import type http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, ConnectError, createClient, createContextValues } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { expectProblem, forwardedFor, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { eventually } from './support/connections.js';
import { startHttpStub } from './support/mcp-target.js';
import { clientAddressKey, type CallContext } from '../src/services/context.js';
import { createProbeSlots, probesPerClient } from '../src/services/probe-slots.js';

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
    expect(String((await expectProblem(third, 429, 'rate_limited')).detail)).toMatch(/already has 2 probes running/);
    const connect = createClient(TrustService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1', interceptors: [forwardedFor('203.0.113.1')] }));
    const err = await connect.getDrift({ server: silent.url }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
    const form = await fetch(`${t.base}/drift?server=${encodeURIComponent(silent.url)}`, from('203.0.113.1'));
    expect(form.status).toBe(429);
    expect(await form.text()).toContain('already has 2 probes running');
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
