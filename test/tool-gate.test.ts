import { describe, expect, it } from 'vitest';
import { decodeMcpHeaderValue, decideTool, parseToolRules, readMcpHeaders, toolDriftOf, toolFindingJson, toolRuleMatches, type GateToolPolicy } from '../src/domain/tool-gate.js';
import { loadConfig, ConfigError } from '../src/config.js';

// The per-tool gate decision (src/domain/tool-gate.ts): pure, every clock fixed.

const UP = 'https://weather.example.com/mcp';
const OTHER = 'https://search.example.com/mcp';
const T0 = new Date('2026-09-01T12:00:00.000Z');
const HOUR = 3_600_000;
const WEEK = 168 * HOUR;
const none: GateToolPolicy = { deny: [], exempt: [], driftWindowMs: WEEK };
const pass = { allow: true, reason: 'verdict_pass' };
const clean = { drift: null, evidence: { verdict: 'PASS' as const, trustScore: 72.5, reports: 30 } };

describe('readMcpHeaders', () => {
  it('reads nothing from a request without Mcp-Method (clients before 2026-07-28)', () => {
    expect(readMcpHeaders({})).toEqual({ ok: true, call: { method: null, tool: null } });
    expect(readMcpHeaders({ 'mcp-name': 'get_forecast' })).toEqual({ ok: true, call: { method: null, tool: null } });
  });

  it('names the tool of tools/call only', () => {
    expect(readMcpHeaders({ 'mcp-method': 'tools/call', 'mcp-name': 'get_forecast' })).toEqual({ ok: true, call: { method: 'tools/call', tool: 'get_forecast' } });
    expect(readMcpHeaders({ 'mcp-method': 'tools/list' })).toEqual({ ok: true, call: { method: 'tools/list', tool: null } });
    // resources/read carries the URI in Mcp-Name: not a tool.
    expect(readMcpHeaders({ 'mcp-method': 'resources/read', 'mcp-name': 'file:///x' })).toEqual({ ok: true, call: { method: 'resources/read', tool: null } });
  });

  it('decodes the =?base64?...?= sentinel the 2026-07-28 clients use for non-ASCII names', () => {
    const b64 = (s: string) => `=?base64?${Buffer.from(s, 'utf8').toString('base64')}?=`;
    expect(readMcpHeaders({ 'mcp-method': 'tools/call', 'mcp-name': b64('wetter_für_köln') })).toEqual({ ok: true, call: { method: 'tools/call', tool: 'wetter_für_köln' } });
    expect(decodeMcpHeaderValue(b64('get_radar'))).toBe('get_radar');
    expect(decodeMcpHeaderValue('=?base64?!!!?=')).toBeNull();
    expect(decodeMcpHeaderValue('=?base64?/w==?=')).toBeNull(); // 0xff: not UTF-8
    expect(decodeMcpHeaderValue(b64('a\nb'))).toBeNull();
    expect(decodeMcpHeaderValue('tab\there')).toBe('tab\there');
    expect(decodeMcpHeaderValue('caf\u00e9')).toBeNull();
  });

  it('refuses tools/call without Mcp-Name, and malformed or oversized values', () => {
    expect(readMcpHeaders({ 'mcp-method': 'tools/call' })).toMatchObject({ ok: false, reason: 'tool_name_missing' });
    expect(readMcpHeaders({ 'mcp-method': 'tools/call', 'mcp-name': '  ' })).toMatchObject({ ok: false, reason: 'tool_name_missing' });
    expect(readMcpHeaders({ 'mcp-method': 'tools/call', 'mcp-name': '=?base64?%%?=' })).toMatchObject({ ok: false, reason: 'mcp_headers_invalid' });
    expect(readMcpHeaders({ 'mcp-method': 'tools/call', 'mcp-name': 'x'.repeat(513) })).toMatchObject({ ok: false, reason: 'mcp_headers_invalid' });
    expect(readMcpHeaders({ 'mcp-method': 'tools/call', 'mcp-name': 'x'.repeat(100_000) })).toMatchObject({ ok: false, reason: 'mcp_headers_invalid' });
    expect(readMcpHeaders({ 'mcp-method': '' })).toMatchObject({ ok: false, reason: 'mcp_headers_invalid' });
    expect(readMcpHeaders({ 'mcp-method': 'm'.repeat(600) })).toMatchObject({ ok: false, reason: 'mcp_headers_invalid' });
    expect(readMcpHeaders({ 'mcp-method': 'tools/\u0001call' })).toMatchObject({ ok: false, reason: 'mcp_headers_invalid', method: null });
    expect(readMcpHeaders({ 'mcp-method': 'tools/call\u0000' })).toMatchObject({ ok: false, reason: 'mcp_headers_invalid', method: null });
    // A valid method is kept for the record; the tool name is not.
    expect(readMcpHeaders({ 'mcp-method': 'tools/call', 'mcp-name': 'a\u0000b' })).toMatchObject({ ok: false, reason: 'mcp_headers_invalid', method: 'tools/call' });
    expect(readMcpHeaders({ 'mcp-method': 'tools/call', 'mcp-name': `=?base64?${Buffer.from('a\u0000b').toString('base64')}?=` })).toMatchObject({ ok: false, method: 'tools/call' });
  });
});

describe('readMcpHeaders: each header once, with one value', () => {
  it('refuses Mcp-Method sent twice or as a list: read as one value it was a method other than tools/call, skipping the per-tool checks', () => {
    for (const [headers, repeated] of [
      [{ 'mcp-method': 'tools/call, tools/call', 'mcp-name': 'delete_everything' }, []],
      [{ 'mcp-method': 'tools/list,tools/call', 'mcp-name': 'delete_everything' }, []],
      [{ 'mcp-method': 'tools/list' }, ['mcp-method']],
      [{ 'mcp-method': 'tools/call', 'mcp-name': 'delete_everything' }, ['mcp-method']],
    ] as [Record<string, string>, string[]][]) {
      expect(readMcpHeaders(headers, repeated), JSON.stringify([headers, repeated])).toMatchObject({ ok: false, reason: 'mcp_headers_invalid', method: null });
    }
  });

  it('refuses Mcp-Name of a tools/call sent twice or as a list, keeping the method for the record', () => {
    for (const [headers, repeated] of [
      [{ 'mcp-method': 'tools/call', 'mcp-name': 'delete_everything, get_forecast' }, []],
      [{ 'mcp-method': 'tools/call', 'mcp-name': 'delete_everything,delete_everything' }, []],
      [{ 'mcp-method': 'tools/call', 'mcp-name': 'get_forecast' }, ['mcp-name']],
    ] as [Record<string, string>, string[]][]) {
      const r = readMcpHeaders(headers, repeated);
      expect(r, JSON.stringify([headers, repeated])).toMatchObject({ ok: false, reason: 'mcp_headers_invalid', method: 'tools/call' });
      if (!r.ok) expect(r.problem).toMatch(/Mcp-Name must be sent once with one value/);
    }
  });

  it('reads Mcp-Name only on tools/call: a URI with a comma on resources/read is no repeat', () => {
    expect(readMcpHeaders({ 'mcp-method': 'resources/read', 'mcp-name': 'file:///a,b' })).toEqual({ ok: true, call: { method: 'resources/read', tool: null } });
    expect(readMcpHeaders({ 'mcp-method': 'resources/read', 'mcp-name': 'file:///a' }, ['mcp-name'])).toEqual({ ok: true, call: { method: 'resources/read', tool: null } });
    // Other headers' repeats are not its concern.
    expect(readMcpHeaders({ 'mcp-method': 'tools/call', 'mcp-name': 'get_forecast' }, ['host', 'x-mcp-server'])).toEqual({ ok: true, call: { method: 'tools/call', tool: 'get_forecast' } });
  });
});

describe('GATE_TOOLS_DENY / GATE_TOOLS_EXEMPT rules', () => {
  it('parses names for every upstream and <upstream URL>#name for one (canonical URL)', () => {
    const rules = parseToolRules(' delete_everything , HTTPS://Weather.Example.com:443/mcp#get_radar,');
    expect(rules).toEqual([
      { upstream: null, name: 'delete_everything' },
      { upstream: UP, name: 'get_radar' },
    ]);
    expect(toolRuleMatches(rules, OTHER, 'delete_everything')).toBe(true);
    expect(toolRuleMatches(rules, UP, 'get_radar')).toBe(true);
    expect(toolRuleMatches(rules, OTHER, 'get_radar')).toBe(false);
    expect(toolRuleMatches(rules, UP, 'get_forecast')).toBe(false);
    expect(toolRuleMatches(rules, UP, 'Get_Radar')).toBe(false);
    expect(parseToolRules('')).toEqual([]);
  });

  it('refuses a bad URL or an empty name; loadConfig names the variable', () => {
    expect(() => parseToolRules('ftp://x/mcp#tool')).toThrow(/ftp/);
    expect(() => parseToolRules(`${UP}#`)).toThrow(/tool name/);
    expect(() => loadConfig({ GATE_TOOLS_DENY: 'not a url#tool' })).toThrow(ConfigError);
    expect(() => loadConfig({ GATE_TOOLS_EXEMPT: `${UP}#` })).toThrow(/GATE_TOOLS_EXEMPT/);
    expect(() => loadConfig({ GATE_TOOL_DRIFT_HOURS: '-1' })).toThrow(/GATE_TOOL_DRIFT_HOURS/);
    expect(() => loadConfig({ GATE_TOOL_DRIFT_HOURS: '9000' })).toThrow(/GATE_TOOL_DRIFT_HOURS/);
    const c = loadConfig({ GATE_TOOLS_DENY: 'a,b', GATE_TOOLS_EXEMPT: `${UP}#c`, GATE_TOOL_DRIFT_HOURS: '24', GATE_REQUIRE_MCP_METHOD: '1' });
    expect(c.gate.tools).toEqual({ deny: [{ upstream: null, name: 'a' }, { upstream: null, name: 'b' }], exempt: [{ upstream: UP, name: 'c' }], driftWindowMs: 24 * HOUR, requireMcpMethod: true, unlistedTools: 'deny', instructionsDrift: 'deny' });
    expect(loadConfig({}).gate.tools).toEqual({ deny: [], exempt: [], driftWindowMs: WEEK, requireMcpMethod: false, unlistedTools: 'deny', instructionsDrift: 'deny' });
    expect(() => loadConfig({ GATE_REQUIRE_MCP_METHOD: 'sometimes' })).toThrow(/GATE_REQUIRE_MCP_METHOD/);
    expect(loadConfig({ GATE_UNLISTED_TOOLS: 'allow' }).gate.tools.unlistedTools).toBe('allow');
    expect(loadConfig({ GATE_INSTRUCTIONS_DRIFT: 'ALLOW' }).gate.tools.instructionsDrift).toBe('allow');
    expect(() => loadConfig({ GATE_UNLISTED_TOOLS: 'warn' })).toThrow(/GATE_UNLISTED_TOOLS: must be deny or allow, got "warn"/);
  });
});

describe('toolDriftOf (fixed clock)', () => {
  // One tool's drifts each, as drift_tool_changes holds them.
  const radar = [
    { recorded_at: new Date(T0.getTime() - 2 * HOUR), change: 'changed' as const, parts: ['input_schema' as const] },
    { recorded_at: new Date(T0.getTime() - 50 * HOUR), change: 'changed' as const, parts: ['description' as const] },
  ];
  const deleteEverything = [{ recorded_at: new Date(T0.getTime() - 50 * HOUR), change: 'added' as const, parts: [] }];
  const alerts = [{ recorded_at: new Date(T0.getTime() - 200 * HOUR), change: 'changed' as const, parts: ['description' as const] }];

  it('finds the newest drift of the tool within the window', () => {
    expect(toolDriftOf(radar, T0, WEEK)).toEqual({ change: 'changed', parts: ['input_schema'], detectedAt: radar[0]!.recorded_at });
    expect(toolDriftOf(deleteEverything, T0, WEEK)).toEqual({ change: 'added', parts: [], detectedAt: deleteEverything[0]!.recorded_at });
    expect(toolDriftOf([], T0, WEEK)).toBeNull();
  });

  it('forgets a drift older than the window, and never denies with a window of 0', () => {
    expect(toolDriftOf(alerts, T0, WEEK)).toBeNull();
    expect(toolDriftOf(alerts, T0, 201 * HOUR)).toMatchObject({ change: 'changed' });
    // Added 50 h before T0: still within a 168 h window 118 h after T0, not a millisecond later.
    expect(toolDriftOf(deleteEverything, new Date(T0.getTime() + 118 * HOUR), WEEK)).toMatchObject({ change: 'added' });
    expect(toolDriftOf(deleteEverything, new Date(T0.getTime() + 118 * HOUR + 1), WEEK)).toBeNull();
    expect(toolDriftOf(radar, T0, 0)).toBeNull();
  });

  it('does not care in which order the drifts come', () => {
    expect(toolDriftOf([...radar].reverse(), T0, WEEK)).toMatchObject({ parts: ['input_schema'] });
  });
});

describe('decideTool', () => {
  const drifted = { drift: { change: 'changed' as const, parts: ['description' as const], detectedAt: T0 }, evidence: clean.evidence };
  const failing = { drift: null, evidence: { verdict: 'FAIL' as const, trustScore: 28.2, reports: 10 } };

  it("keeps the server's allow for a clean tool, denies a drifted tool and a tool whose own evidence is FAIL", () => {
    expect(decideTool(pass, UP, 'get_forecast', clean, none).decision).toEqual(pass);
    expect(decideTool(pass, UP, 'get_radar', drifted, none).decision).toEqual({ allow: false, reason: 'tool_drift' });
    expect(decideTool(pass, UP, 'flaky', failing, none).decision).toEqual({ allow: false, reason: 'tool_verdict_fail' });
    // UNCERTAIN and UNRATED tool evidence never deny by themselves.
    for (const verdict of ['UNCERTAIN', 'UNRATED'] as const) {
      expect(decideTool(pass, UP, 't', { drift: null, evidence: { verdict, trustScore: null, reports: 0 } }, none).decision).toEqual(pass);
    }
  });

  it('never widens a server-level denial', () => {
    const fail = { allow: false, reason: 'verdict_fail' };
    expect(decideTool(fail, UP, 'get_forecast', clean, { ...none, exempt: [{ upstream: null, name: 'get_forecast' }] }).decision).toEqual(fail);
  });

  it('applies GATE_TOOLS_DENY first, then GATE_TOOLS_EXEMPT (which skips drift and evidence)', () => {
    const policy: GateToolPolicy = { deny: [{ upstream: UP, name: 'get_forecast' }], exempt: [{ upstream: null, name: 'get_radar' }, { upstream: null, name: 'flaky' }, { upstream: null, name: 'get_forecast' }], driftWindowMs: WEEK };
    const denied = decideTool(pass, UP, 'get_forecast', clean, policy);
    expect(denied.decision).toEqual({ allow: false, reason: 'policy_denies_tool' });
    expect(denied.finding).toMatchObject({ denied_by_policy: true, exempt: false });
    // The deny rule names one upstream only.
    expect(decideTool(pass, OTHER, 'get_forecast', clean, policy).decision).toEqual(pass);
    const exempt = decideTool(pass, UP, 'get_radar', drifted, policy);
    expect(exempt.decision).toEqual(pass);
    expect(exempt.finding).toMatchObject({ exempt: true, name: 'get_radar' });
    expect(decideTool(pass, UP, 'flaky', failing, policy).decision).toEqual(pass);
  });

  it('describes the finding in snake_case JSON for the body and the receipt', () => {
    expect(toolFindingJson(decideTool(pass, UP, 'get_radar', drifted, none).finding)).toEqual({
      name: 'get_radar',
      listed: null,
      drift: { change: 'changed', parts: ['description'], detected_at: T0.toISOString() },
      verdict: 'PASS',
      trust_score: 72.5,
      reports: 30,
      denied_by_policy: false,
      exempt: false,
    });
  });
});
