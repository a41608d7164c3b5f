import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { decideGate, gatewayAssertedHeaders, matchRoute, mergedRepeats, parseGateRoutes, parseTrustedHeaders, resolveUpstream, type GateRoute } from '../src/domain/gate.js';
import { expectConfigRefusal } from './support/config.js';

const DEFAULT = { allowUncertain: true, allowUnrated: false };

describe('decideGate', () => {
  it('allows PASS and denies FAIL under every policy', () => {
    for (const allowUncertain of [true, false]) {
      for (const allowUnrated of [true, false]) {
        expect(decideGate('PASS', { allowUncertain, allowUnrated })).toEqual({ allow: true, reason: 'verdict_pass' });
        expect(decideGate('FAIL', { allowUncertain, allowUnrated })).toEqual({ allow: false, reason: 'verdict_fail' });
      }
    }
  });

  it('follows the policy for UNCERTAIN and UNRATED (default: allow UNCERTAIN, deny UNRATED)', () => {
    expect(decideGate('UNCERTAIN', DEFAULT)).toEqual({ allow: true, reason: 'policy_allows_uncertain' });
    expect(decideGate('UNRATED', DEFAULT)).toEqual({ allow: false, reason: 'policy_denies_unrated' });
    expect(decideGate('UNCERTAIN', { allowUncertain: false, allowUnrated: true })).toEqual({ allow: false, reason: 'policy_denies_uncertain' });
    expect(decideGate('UNRATED', { allowUncertain: false, allowUnrated: true })).toEqual({ allow: true, reason: 'policy_allows_unrated' });
  });
});

describe('resolveUpstream', () => {
  const ok = (upstream: string, source: string) => ({ ok: true, upstream, source, route: false });

  it('takes X-Mcp-Server first, canonical and with its query', () => {
    expect(
      resolveUpstream({ gatewayHeaders: { 'x-mcp-server': 'HTTPS://Weather.Example.com:443/mcp/?k=1', 'x-original-url': 'https://other.example/mcp' } }),
    ).toEqual(ok('https://weather.example.com/mcp?k=1', 'x-mcp-server'));
  });

  it('then X-Original-URL, dropping the per-request query and fragment', () => {
    expect(resolveUpstream({ gatewayHeaders: { 'x-original-url': 'http://gw.example:8080/mcp?sessionId=abc#x' } })).toEqual(
      ok('http://gw.example:8080/mcp', 'x-original-url'),
    );
  });

  it('then X-Forwarded-Proto + X-Forwarded-Host + X-Original-URI, one value each', () => {
    expect(resolveUpstream({ gatewayHeaders: { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'mcp.example.com', 'x-original-uri': '/tools/mcp/?a=b' } })).toEqual(
      ok('https://mcp.example.com/tools/mcp', 'x-forwarded'),
    );
  });

  it('refuses an X-Forwarded-Proto or X-Forwarded-Host list: its first entry is the one a client wrote when a proxy appends', () => {
    for (const headers of [
      { 'x-forwarded-proto': 'https, http', 'x-forwarded-host': 'mcp.example.com, proxy.local', 'x-original-uri': '/mcp' },
      { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'pass.example.com,fail.example.com', 'x-original-uri': '/mcp' },
      { 'x-forwarded-proto': 'https,http', 'x-forwarded-host': 'pass.example.com', 'x-original-uri': '/mcp' },
    ]) {
      const r = resolveUpstream({ gatewayHeaders: headers });
      expect(r.ok, JSON.stringify(headers)).toBe(false);
      if (!r.ok) expect(r.problem).toMatch(/one value, not a comma-separated list/);
    }
  });

  it('refuses an upstream header or Host sent more than once (info.repeated), whatever its value reads as', () => {
    const cases: [Parameters<typeof resolveUpstream>[0], RegExp][] = [
      [{ gatewayHeaders: { 'x-mcp-server': 'https://pass.example/mcp' }, repeated: ['x-mcp-server'] }, /X-Mcp-Server was sent more than once/],
      [{ gatewayHeaders: { 'x-original-url': 'https://pass.example/mcp' }, repeated: ['x-original-url'] }, /X-Original-URL was sent more than once/],
      // Present but not the one read (X-Mcp-Server wins): still refused, the gateway did not set it alone.
      [{ gatewayHeaders: { 'x-mcp-server': 'https://pass.example/mcp', 'x-original-uri': '/mcp' }, repeated: ['x-original-uri'] }, /X-Original-URI was sent more than once/],
      [{ gatewayHeaders: {}, fallback: { host: 'gw.example', path: '/w/mcp', routeOnly: true }, repeated: ['host'] }, /Host was sent more than once/],
      [{ gatewayHeaders: {}, fallback: { host: 'gw.example,fail.example', path: '/w/mcp', routeOnly: false } }, /comma-separated/],
    ];
    const routes = parseGateRoutes('[{"host":"gw.example","path_prefix":"/w","upstream":"https://w.internal/mcp"}]');
    for (const [info, problem] of cases) {
      const r = resolveUpstream(info, routes);
      expect(r.ok, JSON.stringify(info)).toBe(false);
      if (!r.ok) expect(r.problem).toMatch(problem);
    }
    // A repeat of a header not read (Host beside X-Mcp-Server; an MCP header) changes nothing here.
    expect(resolveUpstream({ gatewayHeaders: { 'x-mcp-server': 'https://pass.example/mcp' }, fallback: { host: 'h', path: '/', routeOnly: true }, repeated: ['host', 'mcp-method'] })).toEqual(
      ok('https://pass.example/mcp', 'x-mcp-server'),
    );
    // The context extension reads no header.
    expect(resolveUpstream({ gatewayHeaders: { 'x-mcp-server': 'https://b.example/mcp' }, configured: 'https://a.example/mcp', repeated: ['x-mcp-server'] })).toEqual(
      ok('https://a.example/mcp', 'context_extension'),
    );
  });

  it('with GATE_ROUTES, judges no request URL that no route matches as itself (its host is the client\'s)', () => {
    const routes = parseGateRoutes('[{"host":"gw.example","path_prefix":"/weather","upstream":"https://weather.internal/mcp"}]');
    for (const info of [
      { gatewayHeaders: { 'x-original-url': 'https://attacker.example/mcp' } },
      { gatewayHeaders: { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'attacker.example', 'x-original-uri': '/weather/mcp' } },
      { gatewayHeaders: {}, fallback: { scheme: 'https', host: 'attacker.example', path: '/weather/mcp', routeOnly: false } },
      { gatewayHeaders: {}, fallback: { scheme: 'https', host: 'gw.example', path: '/other/mcp', routeOnly: false } },
    ]) {
      const r = resolveUpstream(info, routes);
      expect(r.ok, JSON.stringify(info)).toBe(false);
      if (!r.ok) expect(r.problem).toMatch(/matches no GATE_ROUTES entry/);
    }
    // The routed URL and an explicit upstream are unchanged; without a route table the request URL is the upstream.
    expect(resolveUpstream({ gatewayHeaders: {}, fallback: { scheme: 'https', host: 'gw.example', path: '/weather/mcp', routeOnly: false } }, routes)).toMatchObject({
      ok: true,
      upstream: 'https://weather.internal/mcp',
      source: 'route',
    });
    expect(resolveUpstream({ gatewayHeaders: { 'x-mcp-server': 'https://attacker.example/mcp' } }, routes)).toEqual(ok('https://attacker.example/mcp', 'x-mcp-server'));
    expect(resolveUpstream({ gatewayHeaders: {}, fallback: { scheme: 'https', host: 'attacker.example', path: '/mcp', routeOnly: false } })).toEqual(
      ok('https://attacker.example/mcp', 'request'),
    );
  });

  it('fails without any upstream header, or with only part of the forwarded triple', () => {
    for (const headers of [{}, { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'a.example' }, { 'x-original-uri': '/mcp' }, { 'x-mcp-server': '  ' }]) {
      const r = resolveUpstream({ gatewayHeaders: headers });
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.problem).toMatch(/no upstream/);
    }
  });

  it('refuses malformed, non-http, credential-bearing and oversized values with a reason', () => {
    const bad: [Record<string, string>, RegExp][] = [
      [{ 'x-mcp-server': 'not a url' }, /X-Mcp-Server: not an absolute URL/],
      [{ 'x-mcp-server': 'ftp://files.example' }, /only http and https/],
      [{ 'x-original-url': 'https://user:pw@mcp.example/mcp' }, /credentials/],
      [{ 'x-mcp-server': `https://a.example/${'x'.repeat(3000)}` }, /longer than 2048/],
      [{ 'x-forwarded-proto': 'https', 'x-forwarded-host': 'a.example', 'x-original-uri': 'mcp' }, /must start with \//],
      [{ 'x-forwarded-proto': 'gopher', 'x-forwarded-host': 'a.example', 'x-original-uri': '/mcp' }, /only http and https/],
    ];
    for (const [headers, problem] of bad) {
      const r = resolveUpstream({ gatewayHeaders: headers });
      expect(r.ok, JSON.stringify(headers)).toBe(false);
      if (!r.ok) expect(r.problem).toMatch(problem);
    }
  });

  it('prefers a configured upstream (Envoy context extension) over any request header', () => {
    expect(resolveUpstream({ gatewayHeaders: {}, configured: 'https://a.example/mcp' })).toEqual(ok('https://a.example/mcp', 'context_extension'));
    expect(resolveUpstream({ gatewayHeaders: { 'x-mcp-server': 'https://b.example/mcp' }, configured: 'https://a.example/mcp' })).toEqual(
      ok('https://a.example/mcp', 'context_extension'),
    );
  });

  it("uses Envoy's own request URL as the upstream, but a bare Host + path only through a route", () => {
    expect(resolveUpstream({ gatewayHeaders: {}, fallback: { scheme: 'https', host: 'mcp.example.com', path: '/mcp?x=1', routeOnly: false } })).toEqual(
      ok('https://mcp.example.com/mcp', 'request'),
    );
    const r = resolveUpstream({ gatewayHeaders: {}, fallback: { host: 'mcp.example.com', path: '/mcp', routeOnly: true } });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.problem).toMatch(/GATE_ROUTES/);
  });

  it('maps request URLs through GATE_ROUTES, never X-Mcp-Server', () => {
    const routes = parseGateRoutes(
      JSON.stringify([
        { host: 'gw.example.com', path_prefix: '/weather', upstream: 'https://weather.internal/mcp' },
        { host: '*', path_prefix: '/', upstream: 'https://fallback.internal/mcp' },
      ]),
    );
    expect(resolveUpstream({ gatewayHeaders: { 'x-original-url': 'https://gw.example.com/weather/mcp?s=1' } }, routes)).toEqual({
      ok: true,
      upstream: 'https://weather.internal/mcp',
      source: 'route',
      route: true,
    });
    expect(resolveUpstream({ gatewayHeaders: {}, fallback: { host: 'other.example', path: '/x', routeOnly: true } }, routes)).toMatchObject({
      ok: true,
      upstream: 'https://fallback.internal/mcp',
    });
    expect(resolveUpstream({ gatewayHeaders: { 'x-mcp-server': 'https://direct.example/mcp' } }, routes)).toEqual(ok('https://direct.example/mcp', 'x-mcp-server'));
  });
});

describe('mergedRepeats (the gRPC Check headers map, where Envoy joins repeats with ",")', () => {
  it('finds a comma in the headers that never hold one, and before the query in the URL headers', () => {
    expect(
      mergedRepeats({
        'mcp-method': 'tools/list,tools/call',
        'mcp-name': 'a,b',
        'x-forwarded-host': 'a.example,b.example',
        'x-forwarded-proto': 'https,http',
        'x-mcp-server': 'https://a.example/mcp,https://b.example/mcp',
        'x-original-url': 'https://a.example/x,https://b.example/y',
        'x-original-uri': '/mcp,/other',
      }).sort(),
    ).toEqual(['mcp-method', 'mcp-name', 'x-forwarded-host', 'x-forwarded-proto', 'x-mcp-server', 'x-original-uri', 'x-original-url']);
    expect(mergedRepeats({ 'mcp-method': 'tools/call', 'x-original-uri': '/mcp?fields=a,b', 'x-original-url': 'https://a.example/mcp?x=1,2', host: 'a,b', other: 'x,y' })).toEqual([]);
  });
});

describe('gateway-asserted headers (the gRPC Check)', () => {
  const client = { 'x-mcp-server': 'https://pass.example/mcp', 'x-original-url': 'https://pass.example/mcp', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'pass.example', 'x-original-uri': '/mcp', host: 'h' };
  const own = { scheme: 'https', host: 'fail.example', path: '/mcp', routeOnly: false };

  it('keeps only the upstream headers configured as gateway-set', () => {
    expect(gatewayAssertedHeaders(client, [])).toEqual({});
    expect(gatewayAssertedHeaders(client, ['x-original-url'])).toEqual({ 'x-original-url': 'https://pass.example/mcp' });
  });

  it("resolves the checked request's own URL when no header is gateway-set, whatever the client sent", () => {
    expect(resolveUpstream({ gatewayHeaders: gatewayAssertedHeaders(client, []), fallback: own, via: 'envoy_grpc' })).toEqual({
      ok: true,
      upstream: 'https://fail.example/mcp',
      source: 'request',
      route: false,
    });
    expect(resolveUpstream({ gatewayHeaders: gatewayAssertedHeaders(client, ['x-mcp-server']), fallback: own })).toMatchObject({
      upstream: 'https://pass.example/mcp',
      source: 'x-mcp-server',
    });
    const none = resolveUpstream({ gatewayHeaders: gatewayAssertedHeaders(client, []), via: 'envoy_grpc' });
    expect(none.ok).toBe(false);
    if (!none.ok) expect(none.problem).toMatch(/context extension mcp_server/);
  });

  it('parses GATE_TRUSTED_HEADERS case-insensitively; the forwarded triple only as a whole', () => {
    expect(parseTrustedHeaders(' X-Mcp-Server , x-original-url,x-mcp-server')).toEqual(['x-mcp-server', 'x-original-url']);
    expect(parseTrustedHeaders('x-forwarded-proto,x-forwarded-host,x-original-uri')).toEqual(['x-forwarded-proto', 'x-forwarded-host', 'x-original-uri']);
    expect(parseTrustedHeaders('')).toEqual([]);
    expect(() => parseTrustedHeaders('x-forwarded-host')).toThrow(/all three or none/);
    expect(() => parseTrustedHeaders('authorization')).toThrow(/not an upstream header/);
  });
});

describe('matchRoute', () => {
  const routes: GateRoute[] = [
    { host: '*', pathPrefix: '/', upstream: 'https://any.internal' },
    { host: 'gw.example', pathPrefix: '/', upstream: 'https://gw-root.internal' },
    { host: 'gw.example', pathPrefix: '/a', upstream: 'https://a.internal' },
    { host: 'gw.example', pathPrefix: '/a/b', upstream: 'https://ab.internal' },
    { host: 'gw.example:8443', pathPrefix: '/a', upstream: 'https://port.internal' },
  ];
  it('prefers an exact host, then the longest whole-segment prefix', () => {
    expect(matchRoute('https://gw.example/a/b/c', routes)?.upstream).toBe('https://ab.internal');
    expect(matchRoute('https://gw.example/a', routes)?.upstream).toBe('https://a.internal');
    expect(matchRoute('https://gw.example/ab', routes)?.upstream).toBe('https://gw-root.internal');
    expect(matchRoute('https://gw.example:8443/a/x', routes)?.upstream).toBe('https://port.internal');
    expect(matchRoute('https://elsewhere.example/a', routes)?.upstream).toBe('https://any.internal');
    expect(matchRoute('https://elsewhere.example/a', routes.slice(1))).toBeNull();
  });
});

describe('gate configuration', () => {
  it('defaults: allow UNCERTAIN, deny UNRATED, 5 s cache, no routes', () => {
    expect(loadConfig({}).gate).toEqual({
      allowUncertain: true,
      allowUnrated: false,
      cacheSeconds: 5,
      routes: [],
      trustedHeaders: [],
      tools: { deny: [], exempt: [], driftWindowMs: 168 * 3_600_000, requireMcpMethod: false, unlistedTools: 'deny', instructionsDrift: 'deny' },
    });
  });

  it('reads every variable', () => {
    const g = loadConfig({
      GATE_ALLOW_UNCERTAIN: '0',
      GATE_ALLOW_UNRATED: 'true',
      GATE_CACHE_SECONDS: '0',
      GATE_ROUTES: '[{"host":"GW.example","path_prefix":"/w/","upstream":"https://W.internal/mcp/"}]',
      GATE_TRUSTED_HEADERS: 'x-mcp-server',
      GATE_TOOL_DRIFT_HOURS: '2',
      GATE_REQUIRE_MCP_METHOD: '1',
      GATE_UNLISTED_TOOLS: 'Allow',
      GATE_INSTRUCTIONS_DRIFT: 'allow',
    }).gate;
    expect(g).toEqual({
      allowUncertain: false,
      allowUnrated: true,
      cacheSeconds: 0,
      routes: [{ host: 'gw.example', pathPrefix: '/w', upstream: 'https://w.internal/mcp' }],
      trustedHeaders: ['x-mcp-server'],
      tools: { deny: [], exempt: [], driftWindowMs: 2 * 3_600_000, requireMcpMethod: true, unlistedTools: 'allow', instructionsDrift: 'allow' },
    });
  });

  it.each([
    ['GATE_ALLOW_UNCERTAIN', 'sometimes'],
    ['GATE_ALLOW_UNRATED', '2'],
    ['GATE_CACHE_SECONDS', '-1'],
    ['GATE_CACHE_SECONDS', '99999'],
    ['GATE_ROUTES', 'not json'],
    ['GATE_ROUTES', '{"host":"a"}'],
    ['GATE_ROUTES', '[{"host":"a b","upstream":"https://x"}]'],
    ['GATE_ROUTES', '[{"host":"a.example","path_prefix":"x","upstream":"https://x"}]'],
    ['GATE_ROUTES', '[{"host":"a.example","upstream":"ftp://x"}]'],
    ['GATE_ROUTES', '[{"host":"a.example"}]'],
    ['GATE_TRUSTED_HEADERS', 'x-mcp-server,cookie'],
    ['GATE_TRUSTED_HEADERS', 'x-forwarded-proto,x-forwarded-host'],
  ])('refuses %s=%s with an error naming the variable', (name, value) => {
    expectConfigRefusal(name, value);
  });
});
