// Text no field of the contract may hold (src/domain/contract-rules.ts unstorableText): NUL, which
// PostgreSQL cannot store, and a lone UTF-16 surrogate, which has no UTF-8 form (drivers store
// U+FFFD instead, and PostgreSQL refuses its JSON escape in jsonb). Binary protobuf and Connect's
// JSON decoding cannot carry a lone surrogate; the doors that read JSON themselves can: an MCP
// `preflight_check` with target "\ud800" reached the receipt's jsonb claim and answered
// "internal error; retry later", and an A2A message holding one failed storing its task ("Internal
// error"). Now the contract refuses such text in every request, at every depth, for every door,
// before any work, and the A2A door refuses it anywhere in a call's params (invalid params).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ScalarType, type DescField, type DescMessage } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { file_observatory_v1_access } from '../gen/observatory/v1/access_pb.js';
import { file_observatory_v1_compliance } from '../gen/observatory/v1/compliance_pb.js';
import { file_observatory_v1_receipt } from '../gen/observatory/v1/receipt_pb.js';
import { file_observatory_v1_telemetry } from '../gen/observatory/v1/telemetry_pb.js';
import { file_observatory_v1_trust } from '../gen/observatory/v1/trust_pb.js';
import { ruleViolations, STORABLE_TEXT_RULE } from '../src/domain/contract-rules.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

const files = [file_observatory_v1_access, file_observatory_v1_compliance, file_observatory_v1_receipt, file_observatory_v1_telemetry, file_observatory_v1_trust];
const requests: DescMessage[] = files.flatMap((f) => f.services.flatMap((s) => s.methods.map((m) => m.input)));
const BAD = ['\u0000', 'a\u0000b', '\ud800', 'x\udfff', 'end\udbff'];

/** An init shape setting only `f` (a string field, a oneof member, or a list or map of strings) to `v`. */
function setting(f: DescField, v: string): Record<string, unknown> {
  const value = f.fieldKind === 'list' ? ['ok', v] : f.fieldKind === 'map' ? { k: v } : v;
  return f.oneof ? { [f.oneof.localName]: { case: f.localName, value } } : { [f.localName]: value };
}

const textFields = (m: DescMessage) =>
  m.fields.filter((f) => (f.fieldKind === 'scalar' || (f.fieldKind === 'list' && f.listKind === 'scalar') || (f.fieldKind === 'map' && f.mapKind === 'scalar')) && f.scalar === ScalarType.STRING);

describe('the contract refuses text that cannot be stored as given', () => {
  it('every text field of every request message of every service, for NUL and each kind of lone surrogate', () => {
    let checked = 0;
    for (const m of new Set(requests)) {
      for (const f of textFields(m)) {
        for (const v of BAD) {
          const got = ruleViolations(m, setting(f, v) as never).filter((x) => x.rule === STORABLE_TEXT_RULE);
          expect(got.length, `${m.typeName}.${f.name} = ${JSON.stringify(v)}`).toBe(1);
          expect(got[0]!.field.startsWith(f.name), `${m.typeName}.${f.name}: ${got[0]!.field}`).toBe(true);
          checked++;
        }
        // Well-formed text is no business of this rule (an astral character is a valid surrogate pair).
        expect(ruleViolations(m, setting(f, 'plain 😀 é') as never).filter((x) => x.rule === STORABLE_TEXT_RULE)).toEqual([]);
      }
    }
    // The contract has dozens of text fields; a walk that found none would prove nothing.
    expect(checked).toBeGreaterThan(100);
  });
});

describe(`doors that read JSON themselves (${backend})`, () => {
  let app: TestApp;
  let mcp: Client;
  beforeAll(async () => {
    app = await startTestApp();
    mcp = new Client({ name: 'unstorable-text', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${app.base}/mcp`)));
  }, 120_000);
  afterAll(async () => {
    await mcp?.close();
    await app?.close();
  });

  it('MCP preflight_check (official SDK client): a target with a lone surrogate or NUL is an invalid argument, not an internal error', async () => {
    for (const target of ['\ud800', 'https://x.example.com/\udfff', 'name\u0000']) {
      const r = (await mcp.callTool({ name: 'preflight_check', arguments: { target } })) as { isError?: boolean; content: { text: string }[] };
      expect(r.isError, JSON.stringify(target)).toBe(true);
      expect(r.content[0]!.text).not.toMatch(/internal error/);
      expect(r.content[0]!.text).toMatch(/surrogate|NUL|control characters/);
    }
    // The door still answers a good target.
    const ok = (await mcp.callTool({ name: 'preflight_check', arguments: { target: 'https://fine.example.com/mcp' } })) as { isError?: boolean };
    expect(ok.isError).not.toBe(true);
  });

  it('REST JSON bodies: a report whose tool name holds a lone surrogate is refused with its field named', async () => {
    const res = await postJson(`${app.base}/api/report`, { server_url: 'https://fine.example.com/mcp', success: true, latency_ms: 5, tool_name: 'a\ud800' });
    expect(res.status).toBe(400);
    const body = await json(res);
    expect(body.violations).toEqual([expect.objectContaining({ field: 'tool_name', rule: STORABLE_TEXT_RULE })]);
  });

  it('A2A message/send (0.3) and SendMessage (1.0): a message with NUL or a lone surrogate is invalid params naming where, not an internal error', async () => {
    for (const text of ['trust score for \ud800', 'preflight https://x.example.com/\udfff', 'trust score for https://x.example.com/mcp\u0000']) {
      const v03 = await json(postJson(`${app.base}/a2a`, { jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text }], messageId: 'm1', kind: 'message' } } }));
      expect(v03.error, JSON.stringify(text)).toEqual({ code: -32602, message: expect.stringMatching(/^params\.message\.parts\[0\]\.text .*(surrogate|NUL)/) });
      const v1 = await json(postJson(`${app.base}/a2a`, { jsonrpc: '2.0', id: 2, method: 'SendMessage', params: { message: { role: 'ROLE_USER', parts: [{ text }], messageId: 'm2' } } }, { 'A2A-Version': '1.0' }));
      expect(v1.error?.code, JSON.stringify(text)).toBe(-32602);
    }
    // A member name counts too (metadata is kept with the task).
    const named = await json(postJson(`${app.base}/a2a`, { jsonrpc: '2.0', id: 3, method: 'message/send', params: { message: { role: 'user', parts: [{ kind: 'text', text: 'trust score for https://x.example.com/mcp' }], messageId: 'm3', kind: 'message', metadata: { ['k\u0000']: 1 } } } }));
    expect(named.error?.code).toBe(-32602);
  });
});
