import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { AGENT_CARD_PATH, AgentCard } from '@a2a-js/sdk';
import { AGENT_CARD_PATH as V03_AGENT_CARD_PATH, type AgentCard as V03AgentCard } from '@a2a-js/sdk-v03';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentEndpoint, scoreReadiness } from '../src/domain/readiness.js';
import { SERVER_CARD_SCHEMA } from '../src/domain/server-card.js';
import { json, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// Agent-readiness reads A2A agent cards where the A2A SDKs publish them and in the shapes they
// publish: @a2a-js/sdk 1.x (AGENT_CARD_PATH, an A2A 1.0 card: no top-level url, the endpoints in
// supportedInterfaces[].url) and @a2a-js/sdk 0.3 (the same path, a card with a top-level url), with
// /.well-known/agent.json as the older fallback; and the MCP Server Card at
// /.well-known/mcp/server-card.json when there is no /.well-known/mcp.json.

let docs: Record<string, unknown> = {};
let requested: string[] = [];
let site: http.Server;
let siteBase: string;
let t: TestApp; // ALLOW_PRIVATE_TARGETS=1: the site is on 127.0.0.1

beforeAll(async () => {
  site = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    requested.push(path);
    if (!(path in docs)) return void res.writeHead(404, { 'content-type': 'text/html' }).end('<html>not found</html>');
    // What both SDKs' card handlers do: the card as JSON (res.json / JSON.stringify).
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(docs[path]));
  });
  await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
  siteBase = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  t = await startTestApp({ ALLOW_PRIVATE_TARGETS: '1' });
});
afterAll(async () => {
  site.closeAllConnections();
  await new Promise((r) => site.close(r));
  await t?.close();
});

/** An A2A 1.0 card built with the 1.x SDK's types, as it goes on the wire (AgentCard.toJSON). */
function v1Card(endpoint: string): unknown {
  const card: AgentCard = {
    name: 'Weather agent',
    description: 'Forecasts',
    version: '1.0.0',
    supportedInterfaces: [{ url: endpoint, protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' }],
    provider: { organization: 'Example', url: 'https://example.com' },
    capabilities: { streaming: true, extensions: [] },
    securitySchemes: { bearer: { scheme: { $case: 'httpAuthSecurityScheme', value: { scheme: 'Bearer', description: '', bearerFormat: '' } } } },
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'forecast', name: 'forecast', description: 'Forecast for a city', tags: ['weather'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  };
  const wire = AgentCard.toJSON(card) as Record<string, unknown>;
  expect(wire).not.toHaveProperty('url'); // what the old check required
  return wire;
}

/** An A2A 0.3 card built with the 0.3 SDK's types. */
function v03Card(endpoint: string): V03AgentCard {
  return {
    name: 'Weather agent',
    description: 'Forecasts',
    version: '1.0.0',
    protocolVersion: '0.3.0',
    url: endpoint,
    preferredTransport: 'JSONRPC',
    provider: { organization: 'Example', url: 'https://example.com' },
    capabilities: { streaming: true },
    securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'forecast', name: 'forecast', description: 'Forecast for a city', tags: ['weather'] }],
  };
}

type Reason = { check: string; points: number; max_points: number; reason: string };
const readiness = () => json(fetch(`${t.base}/api/agent-readiness?${new URLSearchParams({ url: siteBase })}`));
const check = (b: Record<string, any>, dimension: string, name: string): Reason => b.reasons[dimension].find((r: Reason) => r.check === name);

/** The checks an invocable A2A card with skills, provider, security schemes and a version earns. */
function expectA2aPoints(b: Record<string, any>) {
  expect(check(b, 'discoverability', 'agent_json')).toMatchObject({ points: 25, max_points: 25 });
  expect(check(b, 'comprehension', 'agent_skills_described')).toMatchObject({ points: 20 });
  expect(check(b, 'usability', 'agent_invocable')).toMatchObject({ points: 25, max_points: 25 });
  expect(check(b, 'transactability', 'agent_protocol')).toMatchObject({ points: 25, max_points: 25 });
  expect(check(b, 'trustability', 'provider')).toMatchObject({ points: 20 });
  expect(check(b, 'trustability', 'auth_declared')).toMatchObject({ points: 25 });
  expect(check(b, 'trustability', 'versioned')).toMatchObject({ points: 20 });
  expect(check(b, 'transactability', 'machine_credentials')).toMatchObject({ points: 25 });
  expect(b.discoverability_score).toBe(25);
  expect(b.usability_score).toBe(25);
  expect(b.transactability_score).toBe(50);
}

describe(`agent-readiness reads current A2A agent cards (${backend})`, () => {
  it(`a site serving only the @a2a-js/sdk 1.x card at /${AGENT_CARD_PATH} (A2A 1.0: endpoints in supportedInterfaces) is seen and invocable`, async () => {
    docs = { [`/${AGENT_CARD_PATH}`]: v1Card(`${siteBase}/a2a`) };
    requested = [];
    const b = await readiness();
    expect(b.detected_surfaces).toEqual(['agent-card.json']);
    expect(b.missing_surfaces).toEqual(['robots.txt', 'llms.txt', 'openapi.json', 'mcp.json', 'mcp/server-card.json']);
    expectA2aPoints(b);
    expect(check(b, 'discoverability', 'agent_json').reason).toMatch(/agent-card\.json/);
    // Found at the current location: the older one is not asked for.
    expect(requested).not.toContain('/.well-known/agent.json');
    expect(b.probes).toContainEqual({ path: '/.well-known/agent-card.json', found: true, http_status: 200 });
  });

  it('an A2A 1.0 card at the older /.well-known/agent.json is read after agent-card.json is not found, and is invocable', async () => {
    docs = { '/.well-known/agent.json': v1Card(`${siteBase}/a2a`) };
    requested = [];
    const b = await readiness();
    expectA2aPoints(b);
    expect(b.detected_surfaces).toEqual(['agent.json']);
    expect(b.missing_surfaces).toContain('agent-card.json');
    expect(check(b, 'discoverability', 'agent_json').reason).toMatch(/\/\.well-known\/agent\.json/);
    expect(requested.indexOf('/.well-known/agent-card.json')).toBeLessThan(requested.indexOf('/.well-known/agent.json'));
  });

  it(`a site serving the @a2a-js/sdk 0.3 card at /${V03_AGENT_CARD_PATH} (top-level url) is seen and invocable`, async () => {
    docs = { [`/${V03_AGENT_CARD_PATH}`]: v03Card(`${siteBase}/a2a`) };
    const b = await readiness();
    expect(b.detected_surfaces).toEqual(['agent-card.json']);
    expectA2aPoints(b);
  });

  it('a card naming no endpoint (no url, no supportedInterfaces[].url, or empty ones) is published but not invocable', async () => {
    const wire = v1Card(`${siteBase}/a2a`) as Record<string, unknown>;
    for (const card of [
      { ...wire, supportedInterfaces: [] },
      { ...wire, supportedInterfaces: [{ url: '', protocolBinding: 'JSONRPC', protocolVersion: '1.0' }, 'x', null] },
      { ...wire, supportedInterfaces: { url: `${siteBase}/a2a` } },
      { ...wire, url: '  ', supportedInterfaces: undefined },
      { ...v03Card(''), url: 42 },
    ]) {
      docs = { '/.well-known/agent-card.json': card };
      const b = await readiness();
      expect(b.detected_surfaces, JSON.stringify(card)).toEqual(['agent-card.json']);
      expect(check(b, 'discoverability', 'agent_json').points).toBe(25);
      expect(check(b, 'usability', 'agent_invocable').points, JSON.stringify(card)).toBe(0);
      expect(check(b, 'transactability', 'agent_protocol').points).toBe(0);
    }
  });

  it('an invocable card without skills still loses agent_invocable (as before)', async () => {
    docs = { '/.well-known/agent-card.json': { ...(v1Card(`${siteBase}/a2a`) as object), skills: [] } };
    const b = await readiness();
    expect(check(b, 'usability', 'agent_invocable').points).toBe(0);
  });
});

describe('the rubric reads both A2A card shapes (pure)', () => {
  it('an A2A 1.0 card (SDK-built) and an A2A 0.3 card earn the same agent points', () => {
    const bare = { https: true, robots: null, llms: null, openapi: null, mcp: null };
    for (const agent of [v1Card('https://a.example/a2a') as Record<string, unknown>, v03Card('https://a.example/a2a') as unknown as Record<string, unknown>]) {
      expect(agentEndpoint(agent)).toBe('https://a.example/a2a');
      const s = scoreReadiness({ ...bare, agent });
      expect(s.reasons.usability.find((r) => r.check === 'agent_invocable')!.points).toBe(25);
      expect(s.reasons.transactability.find((r) => r.check === 'agent_protocol')!.points).toBe(25);
    }
  });

  it('the 0.3 url is preferred; otherwise the first 1.0 interface with a url', () => {
    expect(agentEndpoint({ url: 'https://a.example/v03', supportedInterfaces: [{ url: 'https://a.example/v1' }] })).toBe('https://a.example/v03');
    expect(agentEndpoint({ supportedInterfaces: [{ protocolBinding: 'GRPC' }, { url: 'https://a.example/v1' }] })).toBe('https://a.example/v1');
    expect(agentEndpoint({ url: '', supportedInterfaces: 'https://a.example' })).toBeNull();
    expect(agentEndpoint(null)).toBeNull();
  });
});

describe(`agent-readiness reads an MCP Server Card when there is no mcp.json (${backend})`, () => {
  it('a Server Card at /.well-known/mcp/server-card.json satisfies MCP discovery and names the endpoint', async () => {
    docs = { '/.well-known/mcp/server-card.json': { $schema: SERVER_CARD_SCHEMA, name: 'com.example/weather', version: '1.0.0', remotes: [{ type: 'streamable-http', url: `${siteBase}/mcp` }] } };
    const b = await readiness();
    expect(b.detected_surfaces).toEqual(['mcp/server-card.json']);
    expect(b.missing_surfaces).toContain('mcp.json');
    expect(check(b, 'discoverability', 'mcp_json')).toMatchObject({ points: 25 });
    expect(check(b, 'discoverability', 'mcp_json').reason).toMatch(/server-card\.json/);
    expect(check(b, 'usability', 'mcp_endpoint')).toMatchObject({ points: 25 });
    expect(check(b, 'transactability', 'agent_protocol')).toMatchObject({ points: 25 });
    // The one MCP probe goes to the endpoint the card names (nothing speaks MCP there: shown, not scored).
    expect(b.reasons.mcp_endpoint).toMatchObject({ url: `${siteBase}/mcp`, reached: false });
  });

  it('a JSON object there that is no Server Card does not count', async () => {
    docs = { '/.well-known/mcp/server-card.json': { hello: 'world' } };
    const b = await readiness();
    expect(b.detected_surfaces).toEqual([]);
    expect(check(b, 'discoverability', 'mcp_json').points).toBe(0);
    expect(b.reasons.probes).toContainEqual(expect.objectContaining({ surface: 'mcp/server-card.json', found: false, note: expect.stringMatching(/not a Server Card/) }));
  });

  it('mcp.json, when found, is the MCP document: the Server Card location is not asked for', async () => {
    docs = { '/.well-known/mcp.json': { endpoint: `${siteBase}/mcp` }, '/.well-known/mcp/server-card.json': { name: 'x', remotes: [{ url: `${siteBase}/other` }] } };
    requested = [];
    const b = await readiness();
    expect(b.detected_surfaces).toEqual(['mcp.json']);
    expect(requested).not.toContain('/.well-known/mcp/server-card.json');
    expect(b.reasons.mcp_endpoint.url).toBe(`${siteBase}/mcp`);
  });
});

describe(`agent-readiness stays bounded (${backend})`, () => {
  it('a bare site costs 7 document requests, each listed once in probes', async () => {
    docs = {};
    requested = [];
    const b = await readiness();
    const paths = ['/robots.txt', '/llms.txt', '/openapi.json', '/.well-known/mcp.json', '/.well-known/mcp/server-card.json', '/.well-known/agent-card.json', '/.well-known/agent.json'];
    expect([...requested].sort()).toEqual([...paths].sort());
    expect(b.probes.map((p: { path: string }) => p.path)).toEqual(paths);
    expect(b.missing_surfaces).toEqual(['robots.txt', 'llms.txt', 'openapi.json', 'mcp.json', 'mcp/server-card.json', 'agent-card.json', 'agent.json']);
    expect(b.score).toBe(0);
  });
});
