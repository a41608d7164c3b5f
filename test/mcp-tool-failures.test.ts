import { describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/client';
import { InMemoryTransport } from '@modelcontextprotocol/server';
import { buildMcpServer, PROBLEM_META_KEY } from '../src/agents/mcp-server.js';
import type { AgentSkills } from '../src/agents/skills.js';

// A tool call the service could not serve reads as REST's answer would: a lost database is
// `unavailable` (503, retry), not "internal error", and an outage is not an error line per call.

function serverWith(fail: () => never) {
  const lines: { level: 'error' | 'warn'; msg: string }[] = [];
  const log = { error: (_o: unknown, msg?: string) => lines.push({ level: 'error', msg: msg ?? '' }), warn: (_o: unknown, msg?: string) => lines.push({ level: 'warn', msg: msg ?? '' }) };
  const skills: AgentSkills = { checkTrust: async () => fail(), preflight: async () => fail(), verifyAttestation: async () => fail() };
  return { server: buildMcpServer(skills, log as never), lines };
}

async function connected(fail: () => never) {
  const { server, lines } = serverWith(fail);
  const [a, b] = InMemoryTransport.createLinkedPair();
  await server.connect(a);
  const client = new Client({ name: 'mcp-client', version: '1.0.0' });
  await client.connect(b);
  return { client, lines, close: () => client.close() };
}

describe('MCP tool calls the service cannot serve', () => {
  it('a lost database is unavailable (503) and logged once a second, not an internal error per call', async () => {
    const c = await connected(() => {
      throw Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
    });
    for (let i = 0; i < 50; i++) {
      const r = await c.client.callTool({ name: 'preflight_check', arguments: { target: 'https://x.example.com/mcp' } });
      expect(r.isError).toBe(true);
      expect((r.content as { text: string }[])[0]!.text).toMatch(/database is unavailable; retry/);
      expect(r._meta?.[PROBLEM_META_KEY]).toEqual({ code: 'unavailable', status: 503 });
    }
    expect(c.lines.filter((l) => l.level === 'error')).toEqual([]);
    expect(c.lines.filter((l) => l.level === 'warn').length).toBeLessThan(50);
    await c.close();
  });

  it('anything else stays an internal error, logged each time', async () => {
    const c = await connected(() => {
      throw new Error('a bug');
    });
    const r = await c.client.callTool({ name: 'check_trust', arguments: { server: 'https://x.example.com/mcp' } });
    expect((r.content as { text: string }[])[0]!.text).toBe('internal error; retry later');
    expect(c.lines.filter((l) => l.level === 'error')).toHaveLength(1);
    await c.close();
  });
});
