import { describe, expect, it } from 'vitest';
import { buildCatalog, buildServerCard, cardDescribes, compareServerCard, parseServerCard, reservedCardUrl, reverseDnsName, SERVER_CARD_MEDIA_TYPE, SERVER_CARD_SCHEMA, type RuntimeFacts } from '../src/domain/server-card.js';

// Server Cards against runtime (src/domain/server-card.ts): what a card claims, read from the
// current SEP-2127 draft and the earlier shapes still served, and every claim runtime contradicts.

const URL_ = 'https://mcp.example.com/mcp';
const modern: RuntimeFacts = {
  url: URL_,
  transport: 'streamable-http',
  protocol_version: '2026-07-28',
  era: 'modern',
  server_info: { name: 'weather', version: '1.2.0', title: 'Weather' },
  supported_versions: ['2026-07-28'],
  tools: ['get_forecast', 'get_alerts'],
};
const legacy: RuntimeFacts = { ...modern, protocol_version: '2025-06-18', era: 'legacy', supported_versions: null };
const card = (extra: Record<string, unknown> = {}) => ({
  $schema: SERVER_CARD_SCHEMA,
  name: 'com.example/weather',
  version: '1.2.0',
  description: 'Weather',
  remotes: [{ type: 'streamable-http', url: 'https://MCP.example.com:443/mcp/', supportedProtocolVersions: ['2026-07-28'] }],
  ...extra,
});
const claims = (doc: unknown) => {
  const c = parseServerCard(doc);
  if (!c) throw new Error('not a card');
  return c;
};

describe('parseServerCard', () => {
  it('reads the current draft, and null for what is not a card', () => {
    expect(claims(card())).toMatchObject({ name: 'com.example/weather', version: '1.2.0', tools: null, remotes: [{ type: 'streamable-http', supportedProtocolVersions: ['2026-07-28'] }] });
    for (const junk of [null, 'card', [], {}, { description: 'only prose' }]) expect(parseServerCard(junk)).toBeNull();
  });

  it('reads the earlier shapes: serverInfo, transport, protocolVersion and tools (names or objects)', () => {
    const c = claims({ version: '1.0', serverInfo: { name: 'weather', version: '0.9.0' }, transport: { type: 'streamable-http', endpoint: URL_ }, protocolVersion: '2025-06-18', capabilities: { tools: [{ name: 'get_forecast' }, 'get_alerts', 7] } });
    expect(c).toMatchObject({ name: 'weather', version: '0.9.0', protocolVersions: ['2025-06-18'], tools: ['get_forecast', 'get_alerts'], remotes: [{ url: URL_ }] });
  });
});

describe('compareServerCard', () => {
  it('a card that matches runtime has no differences (reverse-DNS name against serverInfo name, URL forms)', () => {
    expect(compareServerCard(claims(card()), modern)).toEqual([]);
    expect(compareServerCard(claims(card({ tools: ['get_alerts', 'get_forecast'] })), modern)).toEqual([]);
    expect(compareServerCard(claims(card({ remotes: [{ type: 'streamable-http', url: URL_, supportedProtocolVersions: ['2026-07-28', '2025-06-18'] }] })), legacy).map((d) => d.field)).toEqual(['protocol_versions']);
  });

  it('a tool the card lists and the server lacks, and one the server has and the card omits', () => {
    const d = compareServerCard(claims(card({ tools: [{ name: 'get_forecast' }, { name: 'transfer_funds' }] })), modern);
    expect(d).toEqual([
      { field: 'tools', claimed: 'transfer_funds', observed: 'not in tools/list', detail: 'the card lists transfer_funds, which the server does not have' },
      { field: 'tools', claimed: 'not listed', observed: 'get_alerts', detail: 'the server has get_alerts, which the card does not list' },
    ]);
  });

  it('names at most 20 tools in a difference, each cut at 200 characters, and counts the rest (the server chooses them)', () => {
    const many = Array.from({ length: 2000 }, (_, i) => `tool_${i}_${'x'.repeat(300)}`);
    const [d] = compareServerCard(claims(card({ tools: [] })), { ...modern, tools: many });
    expect(d!.observed.length).toBeLessThan(20 * 215 + 40);
    expect(d!.observed).toMatch(/ and 1980 more$/);
    expect(d!.observed.startsWith(`${many[0]!.slice(0, 200)}…, `)).toBe(true);
    expect(d!.detail.length).toBeLessThan(20 * 215 + 100);
  });

  it('name, version, title, endpoint and transport', () => {
    const d = compareServerCard(claims(card({ name: 'com.example/rain', version: '2.0.0', title: 'Rain', remotes: [{ type: 'sse', url: 'https://other.example.com/mcp' }] })), modern);
    expect(d.map((x) => [x.field, x.claimed, x.observed])).toEqual([
      ['name', 'com.example/rain', 'weather'],
      ['version', '2.0.0', '1.2.0'],
      ['title', 'Rain', 'Weather'],
      ['endpoint', 'https://other.example.com/mcp', URL_],
    ]);
    const t = compareServerCard(claims(card({ remotes: [{ type: 'sse', url: URL_ }] })), modern);
    expect(t).toEqual([{ field: 'transport', claimed: 'sse', observed: 'streamable-http', detail: `the card says ${URL_} speaks sse, the server answered over streamable-http` }]);
  });

  it('protocol versions: the version spoken must be claimed; a claimed 2026 revision needs server/discover to offer it', () => {
    const overclaim = compareServerCard(claims(card({ remotes: [{ type: 'streamable-http', url: URL_, supportedProtocolVersions: ['2026-07-28', '2099-01-01'] }] })), modern);
    expect(overclaim).toHaveLength(1);
    expect(overclaim[0]!.detail).toContain('server/discover does not offer 2099-01-01');
    const legacyOnly = compareServerCard(claims(card()), legacy);
    expect(legacyOnly[0]!.detail).toBe('the card claims 2026-07-28: the server spoke 2025-06-18, which the card does not list; the card claims 2026-07-28 but the server does not answer server/discover');
    // Top-level versions of earlier drafts count when the remote lists none.
    expect(compareServerCard(claims({ name: 'weather', protocolVersion: '2025-06-18' }), legacy)).toEqual([]);
  });

  it('skips what runtime did not say (no serverInfo, tools not read)', () => {
    expect(compareServerCard(claims(card({ tools: ['x'] })), { ...modern, server_info: null, tools: null })).toEqual([]);
  });
});

describe('card locations and our own card', () => {
  it('the reserved location is <mcp-url>/server-card; other locations count only when they list the URL', () => {
    expect(reservedCardUrl('https://h.example/mcp/?x=1')).toBe('https://h.example/mcp/server-card');
    expect(reservedCardUrl('https://h.example')).toBe('https://h.example/server-card');
    const c = claims(card());
    expect(cardDescribes(c, 'https://mcp.example.com/other', 'reserved')).toBe(true);
    expect(cardDescribes(c, 'https://mcp.example.com/other', 'well-known')).toBe(false);
    expect(cardDescribes(c, URL_, 'catalog')).toBe(true);
  });

  it('our card and catalog follow the draft and agree with the runtime they describe', () => {
    const ours = buildServerCard({ publicBaseUrl: 'https://observatory.example.com', name: 'trust-observatory', title: 'Trust Observatory', version: '1.3.0', description: 'x'.repeat(150), protocolVersions: ['2026-07-28', '2025-11-25'] });
    expect(ours).toMatchObject({ $schema: SERVER_CARD_SCHEMA, name: 'com.example.observatory/trust-observatory', version: '1.3.0', remotes: [{ type: 'streamable-http', url: 'https://observatory.example.com/mcp' }] });
    expect(ours.description).toHaveLength(100);
    expect(ours.name).toMatch(/^[a-zA-Z0-9.-]+\/[a-zA-Z0-9._-]+$/);
    expect(compareServerCard(claims(ours), { ...modern, url: 'https://observatory.example.com/mcp', server_info: { name: 'trust-observatory', version: '1.3.0', title: 'Trust Observatory' }, supported_versions: ['2026-07-28'] })).toEqual([]);
    expect(buildCatalog({ publicBaseUrl: 'https://observatory.example.com', cardName: ours.name, displayName: 'Trust Observatory' })).toEqual({
      specVersion: 'draft',
      entries: [{ identifier: 'urn:air:observatory.example.com:trust-observatory', displayName: 'Trust Observatory', type: SERVER_CARD_MEDIA_TYPE, url: 'https://observatory.example.com/mcp/server-card' }],
    });
    expect(reverseDnsName('[::1]', 'x')).toBe('local/x');
    expect(reverseDnsName('127.0.0.1', 'x')).toBe('local/x');
    expect(reverseDnsName('localhost', 'x y')).toBe('localhost/x-y');
  });
});
