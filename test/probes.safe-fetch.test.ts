import dns from 'node:dns';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { readToolManifest } from '../src/probes/mcp-manifest.js';
import { createSafeFetcher, DNS_LIMITS, dnsLookups, parseHosts, ProbeFailed, TargetRefused, type Resolver } from '../src/probes/safe-fetch.js';

// Every packet here goes to 127.0.0.1. Names are resolved by an injected resolver, so DNS
// behaviour (several answers, a private answer) is simulated without any query leaving the host.

let server: http.Server;
let base: string;
let port: number;
const seen: { url: string; headers: http.IncomingHttpHeaders }[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    seen.push({ url: req.url ?? '', headers: req.headers });
    const u = new URL(req.url ?? '/', 'http://x');
    if (u.pathname === '/ok') {
      res.setHeader('set-cookie', 'session=abc');
      res.end('hello');
    } else if (u.pathname === '/redirect') {
      const n = Number(u.searchParams.get('n') ?? '0');
      res.writeHead(302, { location: n > 0 ? `/redirect?n=${n - 1}` : '/ok' }).end();
    } else if (u.pathname === '/to-metadata') {
      res.writeHead(301, { location: 'http://169.254.169.254/latest/meta-data/' }).end();
    } else if (u.pathname === '/to-file') {
      res.writeHead(301, { location: 'file:///etc/passwd' }).end();
    } else if (u.pathname === '/big') {
      res.write(Buffer.alloc(64 * 1024, 97));
      res.end(Buffer.alloc(64 * 1024, 97));
    } else if (u.pathname === '/slow') {
      res.writeHead(200);
      res.write('partial');
      // never ends: the total timeout must cut it
    } else if (u.pathname === '/post-then-303') {
      res.writeHead(303, { location: '/ok' }).end();
    } else if (u.pathname === '/echo') {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => res.end(`${req.method} ${body}`));
    } else if (u.pathname === '/to') {
      // Redirects with the status and Location the query names (another origin: the other server).
      res.writeHead(Number(u.searchParams.get('status')), { location: u.searchParams.get('location')! }).end();
    } else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
});
// Another origin (another port on loopback) that records whatever reaches it.
let other: http.Server;
let otherBase: string;
const reachedOther: { method: string; body: string }[] = [];
beforeAll(async () => {
  other = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      reachedOther.push({ method: req.method ?? '', body });
      res.end('other');
    });
  });
  await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
  otherBase = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  other.closeAllConnections();
  await new Promise((r) => other.close(r));
});

const strict = createSafeFetcher({ allowPrivate: false });
const dev = createSafeFetcher({ allowPrivate: true });

describe('safe client over loopback', () => {
  it('refuses loopback by default, before any connection, saying why', async () => {
    const before = seen.length;
    const err = await strict.request(`${base}/ok`).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TargetRefused);
    expect((err as TargetRefused).reason).toMatch(/loopback.*ALLOW_PRIVATE_TARGETS/);
    expect(seen.length).toBe(before);
    await expect(strict.request(`http://[::1]:${port}/ok`)).rejects.toThrow(/loopback/);
    await expect(strict.request(`http://[::ffff:127.0.0.1]:${port}/ok`)).rejects.toThrow(/IPv4-mapped/);
  });

  it('reaches loopback with ALLOW_PRIVATE_TARGETS, sends no cookies or credentials, keeps no Set-Cookie', async () => {
    const res = await dev.request(`${base}/ok`, { headers: { cookie: 'a=b', authorization: 'Bearer x', 'x-probe': '1' } });
    expect(res.status).toBe(200);
    expect(res.text()).toBe('hello');
    expect(res.address).toBe('127.0.0.1');
    expect(res.tls).toBeNull();
    expect(res.headers.get('set-cookie')).toBeNull();
    const last = seen.at(-1)!;
    expect(last.headers.cookie).toBeUndefined();
    expect(last.headers.authorization).toBeUndefined();
    expect(last.headers['x-probe']).toBe('1');
  });

  it('refuses non-http schemes and URLs with credentials', async () => {
    await expect(dev.request('ftp://127.0.0.1/')).rejects.toBeInstanceOf(TargetRefused);
    await expect(dev.request('file:///etc/passwd')).rejects.toBeInstanceOf(TargetRefused);
    await expect(dev.request(`http://u:p@127.0.0.1:${port}/ok`)).rejects.toThrow(/credentials/);
    await expect(dev.request('not a url')).rejects.toBeInstanceOf(TargetRefused);
  });

  it('checks every DNS answer and connects pinned to the checked address', async () => {
    const mixed: Resolver = async () => ['93.184.216.34', '127.0.0.1'];
    const f1 = createSafeFetcher({ allowPrivate: false }, mixed);
    const err = await f1.request(`http://mixed.test:${port}/ok`).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TargetRefused);
    expect((err as TargetRefused).reason).toMatch(/mixed\.test resolves to 127\.0\.0\.1/);

    // A resolver that answers differently on each call (rebinding): the connection still goes
    // to the address that was checked, and the Host header keeps the name.
    let calls = 0;
    const rebinding: Resolver = async () => (calls++ === 0 ? ['127.0.0.1'] : ['169.254.169.254']);
    const f2 = createSafeFetcher({ allowPrivate: true }, rebinding);
    const res = await f2.request(`http://rebind.test:${port}/ok`);
    expect(res.status).toBe(200);
    expect(res.address).toBe('127.0.0.1');
    expect(calls).toBe(1);
    expect(seen.at(-1)!.headers.host).toBe(`rebind.test:${port}`);

    const failing: Resolver = async () => {
      throw Object.assign(new Error('nope'), { code: 'ENOTFOUND' });
    };
    await expect(createSafeFetcher({ allowPrivate: true }, failing).request('http://nx.test/')).rejects.toMatchObject({ kind: 'dns' });
  });

  it('follows at most 3 redirects by hand and re-checks every hop', async () => {
    const ok = await dev.request(`${base}/redirect?n=2`);
    expect(ok.status).toBe(200);
    expect(ok.redirects).toHaveLength(3);
    const tooMany = await dev.request(`${base}/redirect?n=3`).catch((e: unknown) => e);
    expect(tooMany).toBeInstanceOf(ProbeFailed);
    expect((tooMany as ProbeFailed).kind).toBe('too_many_redirects');
    await expect(dev.request(`${base}/to-metadata`)).rejects.toThrow(/metadata/);
    await expect(dev.request(`${base}/to-file`)).rejects.toThrow(/only http and https/);
    const after303 = await dev.request(`${base}/post-then-303`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
    expect(after303.status).toBe(200);
    expect(seen.at(-1)!.headers['content-length']).toBeUndefined();
  });

  it('never re-sends a request body to another origin: a 307/308 of a POST there is refused', async () => {
    const to = (status: number, location: string) => `${base}/to?status=${status}&location=${encodeURIComponent(location)}`;
    for (const status of [307, 308]) {
      const err = await dev.request(to(status, `${otherBase}/steal`), { method: 'POST', body: '{"secret":1}', headers: { 'content-type': 'application/json' } }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ProbeFailed);
      expect((err as ProbeFailed).kind).toBe('redirect');
      expect((err as ProbeFailed).message).toMatch(/another origin/);
      const viaFetch = await dev.fetch(to(status, `${otherBase}/steal`), { method: 'POST', body: '{"secret":1}' }).catch((e: unknown) => e);
      expect((viaFetch as ProbeFailed).kind).toBe('redirect');
    }
    expect(reachedOther).toEqual([]);
    // Within the origin the body follows the 307; a 303 elsewhere drops it and is followed as a GET.
    expect((await dev.request(to(307, '/echo'), { method: 'POST', body: 'kept' })).text()).toBe('POST kept');
    expect((await dev.request(to(303, `${otherBase}/x`), { method: 'POST', body: 'dropped' })).text()).toBe('other');
    expect(reachedOther).toEqual([{ method: 'GET', body: '' }]);
    reachedOther.length = 0;
  });

  it("with redirects 'same-origin', no redirect to another origin is followed, whatever the method", async () => {
    const to = (status: number, location: string) => `${base}/to?status=${status}&location=${encodeURIComponent(location)}`;
    for (const [status, method] of [
      [302, 'GET'],
      [303, 'POST'],
      [301, 'DELETE'],
    ] as const) {
      const err = await dev.request(to(status, `${otherBase}/x`), { method, redirects: 'same-origin' }).catch((e: unknown) => e);
      expect((err as ProbeFailed).kind, `${status} ${method}`).toBe('redirect');
      const viaFetch = await dev.fetch(to(status, `${otherBase}/x`), { method }, { redirects: 'same-origin' }).catch((e: unknown) => e);
      expect((viaFetch as ProbeFailed).kind).toBe('redirect');
    }
    expect(reachedOther).toEqual([]);
    expect((await dev.request(to(308, '/echo'), { method: 'POST', body: 'same', redirects: 'same-origin' })).text()).toBe('POST same');
  });

  it('caps the response size and enforces the total timeout', async () => {
    const big = await dev.request(`${base}/big`, { maxBytes: 100_000 }).catch((e: unknown) => e);
    expect((big as ProbeFailed).kind).toBe('too_large');
    expect((await dev.request(`${base}/big`, { maxBytes: 200_000 })).body.length).toBe(128 * 1024);
    const slow = await dev.request(`${base}/slow`, { totalTimeoutMs: 300 }).catch((e: unknown) => e);
    expect((slow as ProbeFailed).kind).toBe('timeout');
  });

  it('offers a fetch-compatible function with the same rules', async () => {
    const res = await dev.fetch(`${base}/ok`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('hello');
    await expect(strict.fetch(`${base}/ok`)).rejects.toBeInstanceOf(TargetRefused);
  });

  it('reports a refused connection as a probe failure, not a refusal', async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const p = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    const err = await dev.request(`http://127.0.0.1:${p}/`).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProbeFailed);
    expect((err as ProbeFailed).kind).toBe('connect');
  });
});

// DNS lookups (docs/probes.md "The safe client", rule 2): getaddrinfo ran on libuv's threadpool
// (4 threads, shared with receipt signing) before any deadline applied; a zone whose name server
// stalls made lookups hang past the request's deadline. The resolver is injected or stubbed here:
// no packet leaves the host.
describe('DNS lookups', () => {
  afterEach(() => vi.restoreAllMocks());
  /** Never answers, and records each lookup and whether its signal was aborted. */
  function stalled() {
    const calls: { host: string; signal: AbortSignal }[] = [];
    const resolver: Resolver = (host, signal) => {
      calls.push({ host, signal });
      return new Promise<string[]>(() => {});
    };
    return { resolver, calls };
  }
  /** Rejects when `p` has not settled within `ms` (so an unbounded lookup fails the test instead of hanging it). */
  const within = <T>(p: Promise<T>, ms: number) =>
    Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`still waiting after ${ms} ms`)), ms))]);

  it("a lookup that never answers fails at the request's deadline, and its resolver is told to stop", async () => {
    const { resolver, calls } = stalled();
    const f = createSafeFetcher({ allowPrivate: true }, resolver);
    const started = performance.now();
    const err = await within(f.request(`http://stalled.test:${port}/ok`, { totalTimeoutMs: 300 }), 3000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProbeFailed);
    expect((err as ProbeFailed).kind).toBe('timeout');
    expect(performance.now() - started).toBeLessThan(2000);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.signal.aborted).toBe(true);
    // The fetch-compatible function the MCP SDK uses, and a check alone (its own deadline).
    await expect(within(f.fetch(`http://stalled.test:${port}/ok`, { signal: AbortSignal.timeout(300) }), 3000)).rejects.toBeInstanceOf(ProbeFailed);
    const alone = await within(f.check('http://stalled.test/', { lookupTimeoutMs: 200 }), 3000).catch((e: unknown) => e);
    expect(alone).toMatchObject({ kind: 'dns' });
    expect((alone as Error).message).toMatch(/within 200 ms/);
    expect(dnsLookups.inUse()).toBe(0);
  });

  it('the MCP probe counts its lookup against its own deadline', async () => {
    const { resolver } = stalled();
    const err = await within(readToolManifest(createSafeFetcher({ allowPrivate: true }, resolver), 'http://stalled.test/mcp', { timeoutMs: 300 }), 3000).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'timeout' });
  });

  it(`at most ${DNS_LIMITS.inFlight} lookups run at once in the process; the rest wait within their deadline`, async () => {
    const { resolver, calls } = stalled();
    const f = createSafeFetcher({ allowPrivate: true }, resolver);
    const n = DNS_LIMITS.inFlight + 10;
    const all = Array.from({ length: n }, (_, i) => f.check(`http://n${i}.stalled.test/`, { lookupTimeoutMs: 400 }).catch((e: unknown) => e));
    await new Promise((r) => setTimeout(r, 100));
    expect(calls).toHaveLength(DNS_LIMITS.inFlight);
    expect(dnsLookups.inUse()).toBe(DNS_LIMITS.inFlight);
    const errs = await within(Promise.all(all), 3000);
    for (const e of errs) expect(e).toMatchObject({ kind: 'dns' });
    expect(dnsLookups.inUse()).toBe(0);
  });

  it("never uses getaddrinfo (the threadpool): the system resolver asks c-ares, and cancels a query that stalls", async () => {
    // Stubs, so no query leaves: getaddrinfo would answer, c-ares answers A with loopback.
    const gai = vi.spyOn(dns.promises, 'lookup').mockResolvedValue([{ address: '127.0.0.1', family: 4 }] as never);
    const gaiCb = vi.spyOn(dns, 'lookup').mockImplementation(((_h: string, _o: unknown, cb: (e: Error) => void) => cb(new Error('stubbed'))) as never);
    const a = vi.spyOn(dns.promises.Resolver.prototype, 'resolve4').mockResolvedValue(['127.0.0.1']);
    const aaaa = vi.spyOn(dns.promises.Resolver.prototype, 'resolve6').mockRejectedValue(Object.assign(new Error('queryAaaa ENODATA'), { code: 'ENODATA' }));
    const res = await dev.request(`http://named.test:${port}/ok`);
    expect(res.status).toBe(200);
    expect(res.address).toBe('127.0.0.1');
    expect(seen.at(-1)!.headers.host).toBe(`named.test:${port}`);
    expect(a).toHaveBeenCalledWith('named.test');
    expect(aaaa).toHaveBeenCalledWith('named.test');
    expect(gai).not.toHaveBeenCalled();
    expect(gaiCb).not.toHaveBeenCalled();

    // A name server that never answers: the request ends at its deadline, the queries are cancelled.
    a.mockImplementation(() => new Promise(() => {}));
    aaaa.mockImplementation(() => new Promise(() => {}));
    const cancel = vi.spyOn(dns.promises.Resolver.prototype, 'cancel');
    const err = await within(dev.request(`http://stalled.test:${port}/ok`, { totalTimeoutMs: 300 }), 3000).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'timeout' });
    expect(cancel).toHaveBeenCalled();
    expect(gai).not.toHaveBeenCalled();
  });

  it('localhost is loopback without any query, names in the hosts file are read from it, IP literals are never looked up', async () => {
    const a = vi.spyOn(dns.promises.Resolver.prototype, 'resolve4').mockRejectedValue(Object.assign(new Error('stubbed'), { code: 'ESERVFAIL' }));
    const aaaa = vi.spyOn(dns.promises.Resolver.prototype, 'resolve6').mockRejectedValue(Object.assign(new Error('stubbed'), { code: 'ESERVFAIL' }));
    const gai = vi.spyOn(dns.promises, 'lookup').mockRejectedValue(Object.assign(new Error('stubbed'), { code: 'ENOTFOUND' }));
    expect((await dev.request(`http://localhost:${port}/ok`)).address).toBe('127.0.0.1');
    expect((await dev.request(`http://api.localhost:${port}/ok`)).status).toBe(200);
    await expect(strict.request(`http://localhost:${port}/ok`)).rejects.toThrow(/localhost resolves to 127\.0\.0\.1.*loopback/);
    for (const literal of [`http://127.0.0.1:${port}/ok`, `http://[::1]:${port}/ok`]) await dev.check(literal);
    expect(a).not.toHaveBeenCalled();
    expect(aaaa).not.toHaveBeenCalled();
    expect(gai).not.toHaveBeenCalled();
    // A name the name servers fail for says why.
    await expect(dev.check('http://servfail.test/')).rejects.toThrow(/could not resolve servfail\.test: ESERVFAIL/);

    const hosts = parseHosts('# comment\n127.0.0.1 localhost\n10.0.0.5  db.internal DB2 # primary\n::1 ip6-localhost\nnot-an-ip name\n10.0.0.6 db.internal\n');
    expect(hosts.get('db.internal')).toEqual(['10.0.0.5', '10.0.0.6']);
    expect(hosts.get('db2')).toEqual(['10.0.0.5']);
    expect(hosts.get('ip6-localhost')).toEqual(['::1']);
    expect(hosts.has('name')).toBe(false);
  });
});
