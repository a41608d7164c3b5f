// Security audit finding (look-alike URLs): a look-alike URL reported BEFORE the real server took
// the real server's name and slug, so name and slug look-ups (pre-flight, /benchmark, the paid
// /agent-query verdict, and the A2A/MCP name look-ups, all one resolver) answered with the
// impostor's score. Reproduced: 15 successes for `https://alpha.example./mcp` from one address,
// then failures for `https://alpha.example/mcp` from five: pre-flight of the URL said FAIL, of
// `alpha.example/mcp` and `alpha-example-mcp` PASS for the impostor; the real server was renamed
// `alpha.example/mcp (2)`. Fixed as a class (docs/scoring.md "Server identity"):
// (a) spellings of one address are one URL (host's trailing dots, RFC 3986 percent-encoding);
// (b) a host/path target is the URL it spells (https, then http), not a handle;
// (c) a handle that is the slug of several tracked URLs is answered by what it spells exactly
//     (or the catalogue), never by whichever came first, else by nobody ("ask by URL").
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalServerUrl, chooseByHandle, InvalidServerUrl, urlSlug, urlsSpelledBy, type HandleCandidate } from '../src/domain/server-identity.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

let t: TestApp;
let net = 0;
/** A client address in a network of its own (each is its own source family). */
const freshAddress = () => `198.${18 + Math.floor(++net / 250)}.${net % 250}.7`;

async function report(url: string, success: boolean, address: string, n = 1) {
  for (let i = 0; i < n; i++) {
    const res = await postJson(`${t.base}/api/report`, { server_url: url, success, latency_ms: success ? 40 : 900, http_status: success ? 200 : 500 }, { 'x-forwarded-for': address });
    expect(res.status, await res.clone().text()).toBe(200);
  }
}
/** The real server: failures from five independent networks. */
const honestFailures = async (url: string) => {
  for (let s = 0; s < 5; s++) await report(url, false, freshAddress(), 4);
};
const preflight = (target: string) => json(fetch(`${t.base}/v1/preflight?target=${encodeURIComponent(target)}`));
const benchmark = (slug: string) => fetch(`${t.base}/benchmark/${encodeURIComponent(slug)}`);
let apiKey = '';
const agentQuery = (slug: string) => fetch(`${t.base}/agent-query/${encodeURIComponent(slug)}`, { headers: { authorization: `Bearer ${apiKey}` } });

beforeAll(async () => {
  t = await startTestApp({ TRUST_PROXY: '1', RATE_LIMIT_PREFLIGHT_PER_MINUTE: '0' });
  const reg = await postJson(`${t.base}/agent/auth`, { type: 'anonymous', requested_credential_type: 'api_key' }, { 'x-forwarded-for': freshAddress() });
  apiKey = (await json(reg)).api_key as string;
}, 60_000);
afterAll(async () => {
  await t?.close();
});

describe('(a) canonical form: spellings of one address are one URL', () => {
  it.each([
    ['https://alpha.example./mcp', 'https://alpha.example/mcp'],
    ['https://ALPHA.example..:443/mcp/', 'https://alpha.example/mcp'],
    ['https://alpha.example.:8443/mcp', 'https://alpha.example:8443/mcp'],
    ['https://alpha.example/%6Dcp', 'https://alpha.example/mcp'],
    ['https://alpha.example/%6d%63%70', 'https://alpha.example/mcp'],
    ['https://alpha.example/a%2fb%7e', 'https://alpha.example/a%2Fb~'],
    ['https://alpha.example/a|b^c', 'https://alpha.example/a%7Cb%5Ec'],
    ['https://alpha.example/100%', 'https://alpha.example/100%25'],
    ['https://alpha.example/mcp?tenant=%61cme&x=%2f', 'https://alpha.example/mcp?tenant=acme&x=%2F'],
    ['https://127.0.0.1./mcp', 'https://127.0.0.1/mcp'],
    ['https://[::1]:8080/mcp/', 'https://[::1]:8080/mcp'],
  ])('%s is %s', (input, want) => {
    expect(canonicalServerUrl(input)).toBe(want);
  });

  it.each(['https://alpha..example/mcp', 'https://.alpha.example/mcp', 'https://./mcp', 'https://../mcp'])('refuses %s (no such host)', (input) => {
    expect(() => canonicalServerUrl(input)).toThrow(InvalidServerUrl);
  });

  it('is idempotent, and every escape spelling of a URL is that URL (property)', () => {
    const segment = fc.stringMatching(/^[A-Za-z0-9._~!$&'()*+,;=:@|^%-]{0,12}$/);
    fc.assert(
      fc.property(fc.array(segment, { maxLength: 4 }), fc.constantFrom('', '.', '..'), (segments, dots) => {
        const url = `https://prop.example${dots}/${segments.join('/')}`;
        let c: string;
        try {
          c = canonicalServerUrl(url);
        } catch {
          return;
        }
        expect(canonicalServerUrl(c)).toBe(c);
        // Escaping any unreserved character, with lower- or upper-case hex, changes nothing.
        const head = 'https://prop.example';
        let k = 0;
        const escaped =
          head +
          c.slice(head.length).replace(/%[0-9A-F]{2}|[A-Za-z0-9._~-]/g, (tok) => {
            if (tok.startsWith('%')) return k++ % 2 === 0 ? tok.toLowerCase() : tok;
            const hex = tok.charCodeAt(0).toString(16);
            return k++ % 2 === 0 ? `%${hex}` : `%${hex.toUpperCase()}`;
          });
        if (!/\/\.{1,2}(\/|$)/.test(c)) expect(canonicalServerUrl(escaped)).toBe(c);
      }),
      { numRuns: 300 },
    );
  });

  it('the database computes the same URL slug as the code (migration 1650 server_url_slug)', async () => {
    const urls = ['https://alpha.example/mcp', 'http://alpha.example:8080/A/B', 'https://x.example/sse?tenant=acme', 'https://[::1]:8080/x', 'https://alpha.example/%C3%A9', 'https://a.example'];
    const rows = await t.obs.db.query<{ u: string; s: string }>('SELECT u, server_url_slug(u) AS s FROM unnest($1::text[]) u', [urls]);
    expect(rows.map((r) => r.s)).toEqual(urls.map(urlSlug));
  });
});

describe('(b, c) which server a name or slug means (pure)', () => {
  it('a host/path target spells https://, then http://; a slug or a suffixed name spells no URL', () => {
    expect(urlsSpelledBy('alpha.example/mcp')).toEqual(['https://alpha.example/mcp', 'http://alpha.example/mcp']);
    expect(urlsSpelledBy('ALPHA.EXAMPLE./MCP')).toEqual(['https://alpha.example/MCP', 'http://alpha.example/MCP']);
    expect(urlsSpelledBy('localhost:8080')).toEqual(['https://localhost:8080', 'http://localhost:8080']);
    for (const t of ['alpha-example-mcp', 'alpha.example/mcp (2)', 'weather', 'https://alpha.example/mcp', ' ', 'a b/c']) expect(urlsSpelledBy(t), t).toEqual([]);
  });

  it('the answer for an ambiguous handle never depends on the order servers are listed in, and which came first only between equally exact spellings (property)', () => {
    const pool = [
      'https://alpha.example/mcp',
      'http://alpha.example/mcp',
      'https://alpha.example/MCP',
      'https://alpha.example/mcp;',
      'https://alpha-example-mcp',
      'https://alpha-example.mcp',
      'http://alpha-example.mcp',
      'https://alpha.example//mcp',
    ];
    fc.assert(
      fc.property(fc.subarray(pool, { minLength: 2 }), fc.subarray(pool, { maxLength: 2 }), fc.nat(), (urls, catalogued, seed) => {
        const cands = urls.map((url, i): HandleCandidate => ({ id: i + 1, url, catalogued: catalogued.includes(url), kind: null }));
        const answer = (holder: number, order: HandleCandidate[]) => {
          const c = chooseByHandle('alpha-example-mcp', [...order.map((x) => ({ ...x })), { ...cands[holder]!, kind: 'slug' }]);
          return c === null ? null : 'chosen' in c ? c.chosen.url : 'ambiguous';
        };
        const holder = seed % cands.length;
        const first = answer(holder, cands);
        const shuffled = [...cands].sort((a, b) => ((a.id * 7919 + seed) % 13) - ((b.id * 7919 + seed) % 13));
        expect(answer(holder, shuffled)).toBe(first);
        // The exact https spelling wins whoever holds the handle, unless another spells it as exactly.
        if (urls.includes('https://alpha.example/mcp') && !urls.includes('https://alpha-example.mcp')) {
          for (let h = 0; h < cands.length; h++) expect(answer(h, cands)).toBe('https://alpha.example/mcp');
        }
        // Two equally exact spellings: the catalogue's, else the holder's, else nobody.
        const tied = ['https://alpha.example/mcp', 'https://alpha-example.mcp'];
        if (tied.every((u) => urls.includes(u))) {
          const inCatalogue = tied.filter((u) => catalogued.includes(u));
          const expected = inCatalogue.length === 1 ? inCatalogue[0] : tied.includes(urls[holder]!) ? urls[holder] : 'ambiguous';
          expect(first).toBe(expected);
        }
      }),
      { numRuns: 500 },
    );
  });
});

describe(`look-alikes reported before the real server do not take its name or slug (${backend})`, () => {
  it('the audit: https://alpha.example./mcp and https://alpha.example/%6Dcp are https://alpha.example/mcp', async () => {
    const REAL = 'https://alpha.example/mcp';
    const attacker = freshAddress();
    await report('https://alpha.example./mcp', true, attacker, 15);
    await report('https://alpha.example/%6Dcp', true, attacker, 5);
    await honestFailures(REAL);
    for (const target of [REAL, 'alpha.example/mcp', 'alpha-example-mcp', 'https://alpha.example./mcp', 'alpha.example./mcp']) {
      const p = await preflight(target);
      expect([p.server_url, p.verdict], target).toEqual([REAL, 'FAIL']);
    }
    const b = await json(benchmark('alpha-example-mcp'));
    expect([b.server_url, b.verdict]).toEqual([REAL, 'FAIL']);
    const rows = await t.obs.db.query<{ url: string; name: string }>("SELECT url, name FROM servers WHERE url LIKE 'https://alpha.example%'");
    expect(rows).toEqual([{ url: REAL, name: 'alpha.example/mcp' }]);
  });

  it('distinct look-alikes (http://, /MCP, /mcp;, a single-word host) do not answer for the name, the slug or the paid verdict', async () => {
    const REAL = 'https://beta.example/mcp';
    const attacker = freshAddress();
    for (const fake of ['http://beta.example/mcp', 'https://beta.example/MCP', 'https://beta.example/mcp;', 'https://beta-example-mcp']) await report(fake, true, attacker, 15);
    await honestFailures(REAL);
    // The first look-alike holds the natural name and slug; the real server was suffixed.
    expect((await t.obs.db.query<{ slug: string }>('SELECT slug FROM servers WHERE url = $1', [REAL]))[0]!.slug).not.toBe('beta-example-mcp');
    for (const target of [REAL, 'beta.example/mcp', 'beta-example-mcp', 'Beta-Example-MCP', ' beta example mcp ']) {
      const p = await preflight(target);
      expect([p.server_url, p.verdict], target).toEqual([REAL, 'FAIL']);
    }
    const b = await json(benchmark('beta-example-mcp'));
    expect([b.server_url, b.verdict]).toEqual([REAL, 'FAIL']);
    const v = await json(agentQuery('beta-example-mcp'));
    expect([v.server_url, v.verdict]).toEqual([REAL, 'FAIL']);
    // Each look-alike is still tracked, under its own URL (and the host/path it spells).
    expect((await preflight('http://beta.example/mcp')).server_url).toBe('http://beta.example/mcp');
    expect((await preflight('beta.example/MCP')).server_url).toBe('https://beta.example/MCP');
  });

  it('a look-alike reported later that spells an established server\'s slug as exactly cannot make it answer nobody', async () => {
    const REAL = 'https://epsilon.example/mcp';
    await honestFailures(REAL);
    await report('https://epsilon-example.mcp', true, freshAddress(), 15);
    for (const target of ['epsilon-example-mcp', 'epsilon.example/mcp']) expect((await preflight(target)).server_url, target).toBe(REAL);
    expect((await json(benchmark('epsilon-example-mcp'))).server_url).toBe(REAL);
    expect((await preflight('epsilon-example.mcp')).server_url).toBe('https://epsilon-example.mcp');
  });

  it('one reported first that spells it as exactly holds the slug (the URL and host/path still name the real server)', async () => {
    const REAL = 'https://zeta.example/mcp';
    const FAKE = 'https://zeta-example.mcp';
    await report(FAKE, true, freshAddress(), 15);
    await honestFailures(REAL);
    expect((await preflight('zeta-example-mcp')).server_url).toBe(FAKE);
    for (const target of [REAL, 'zeta.example/mcp']) expect((await preflight(target)).server_url, target).toBe(REAL);
  });

  it('a slug two tracked URLs spell equally well, held by neither, names neither: no verdict, 404 naming both, nothing charged', async () => {
    const REAL = 'https://gamma.example/mcp';
    const FAKE = 'https://gamma-example.mcp';
    // A third, less exact spelling came first and holds the slug.
    await report('http://gamma.example/mcp', true, freshAddress(), 1);
    await report(FAKE, true, freshAddress(), 15);
    await honestFailures(REAL);
    const p = await preflight('gamma-example-mcp');
    expect([p.server_url ?? null, p.verdict]).toEqual([null, 'UNRATED']);
    const b = await benchmark('gamma-example-mcp');
    expect(b.status).toBe(404);
    const problem = (await b.json()) as { detail: string };
    expect(problem.detail).toContain(REAL);
    expect(problem.detail).toContain(FAKE);
    const before = (await json(agentQuery('gamma.example/mcp'))).trial_remaining;
    const v = await agentQuery('gamma-example-mcp');
    expect(v.status).toBe(404);
    expect((await json(agentQuery('gamma.example/mcp'))).trial_remaining).toBe(before - 1);
    // Each URL, and the host/path each spells, still answers for its own server.
    expect((await preflight('gamma.example/mcp')).server_url).toBe(REAL);
    expect((await preflight('gamma-example.mcp')).server_url).toBe(FAKE);
  });

  it('between URLs a slug spells equally well, the catalogue server answers', async () => {
    const REAL = 'https://delta.example/mcp';
    const FAKE = 'https://delta-example.mcp';
    await report(FAKE, true, freshAddress(), 15);
    const s = await t.obs.services.catalogue.importDocument({
      servers: [{ server: { name: 'io.github.delta/tool', version: '1.0.0', remotes: [{ type: 'streamable-http', url: REAL }] }, _meta: { 'io.modelcontextprotocol.registry/official': { status: 'active', isLatest: true } } }],
      metadata: { count: 1 },
    });
    expect(s.added).toBe(1);
    await honestFailures(REAL);
    for (const target of ['delta-example-mcp', 'delta.example/mcp', 'io.github.delta/tool']) expect((await preflight(target)).server_url, target).toBe(REAL);
  });
});
