import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFileRegistry, fromBinary, toJson, type DescMessage, type DescService } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema, FileDescriptorSetSchema, type FileDescriptorProto } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, createClient, createRouterTransport, type Transport } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { ViolationsSchema, file_buf_validate_validate } from '@bufbuild/protovalidate/gen/buf/validate/validate_pb.js';
import { TelemetryService, ReportRequestSchema } from '../gen/observatory/v1/telemetry_pb.js';
import { TrustService, GetLeaderboardRequestSchema, PreflightRequestSchema } from '../gen/observatory/v1/trust_pb.js';
import { ReceiptService, GetReceiptRequestSchema } from '../gen/observatory/v1/receipt_pb.js';
import { contractField, fieldRules, maxLength, numericBounds, ruleViolations } from '../src/domain/contract-rules.js';
import { REPORT_LIMITS } from '../src/domain/telemetry.js';
import { contractValidationInterceptor } from '../src/http/contract-validation.js';
import { openApiDocument } from '../src/http/openapi.js';
import { problemFromError } from '../src/http/problem.js';
import { enforceContract } from '../src/services/contract.js';
import { expectProblem, json, postJson, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';

// Issue 25, "done when": a rule lives once, in proto/, and every door answers it. Part one reads
// the rules from the generated descriptors and shows REST, Connect, gRPC, gRPC-Web and
// /openapi.json all apply exactly those values. Part two changes a rule in a copy of proto/, builds
// it with buf, and shows the validator, the Connect interceptor, the service guard REST uses and
// the OpenAPI generator all follow the new descriptor with no other edit.

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ TRUST_PROXY: '1' });
}, 120_000);
afterAll(async () => t?.close());

const SERVER = 'https://rules.example.com/mcp';
const toolMax = maxLength(contractField(ReportRequestSchema, 'tool_name'))!;
const latencyMax = numericBounds(contractField(ReportRequestSchema, 'latency_ms')).max!;
const limitMax = numericBounds(contractField(GetLeaderboardRequestSchema, 'limit')).max!;
const receiptPattern = (() => {
  const t = fieldRules(contractField(GetReceiptRequestSchema, 'receipt_id'))?.type;
  return t?.case === 'string' ? t.value.pattern : '';
})();

let ip = 1;
const from = () => ({ 'x-forwarded-for': `203.0.113.${ip++}` });

function transports(): [string, Transport][] {
  return [
    ['connect', createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' })],
    ['grpc', createGrpcTransport({ baseUrl: t.base })],
    ['grpc-web', createGrpcWebTransport({ baseUrl: t.base, httpVersion: '1.1' })],
  ];
}

/** The buf.validate.Violations detail of a Connect error, as [field path, rule id]. */
function violationsOf(err: unknown): [string, string][] {
  expect(err).toBeInstanceOf(ConnectError);
  const e = err as ConnectError;
  expect(e.code).toBe(Code.InvalidArgument);
  const [v] = e.findDetails(ViolationsSchema);
  expect(v, 'buf.validate.Violations detail').toBeDefined();
  return v!.violations.map((x) => [x.field!.elements.map((el) => el.fieldName).join('.'), x.ruleId]);
}

describe(`the rules of proto/ on every door (${backend})`, () => {
  it('reads the limits from the descriptor (REPORT_LIMITS restates nothing)', () => {
    expect(toolMax).toBeGreaterThan(0);
    expect(REPORT_LIMITS.toolNameMaxLength).toBe(toolMax);
    expect(REPORT_LIMITS.latencyMaxMs).toBe(latencyMax);
    expect(receiptPattern).toBe('^[0-9a-f]{16}$');
  });

  it('tool_name max_len: REST problem+json and Connect, gRPC, gRPC-Web Violations name the same field and rule; the limit itself is accepted', async () => {
    const tooLong = 'x'.repeat(toolMax + 1);
    const rest = await expectProblem(await postJson(`${t.base}/api/report`, { server_url: SERVER, success: true, latency_ms: 5, tool_name: tooLong }, from()), 400, 'invalid_argument');
    expect(rest.violations).toEqual([{ field: 'tool_name', rule: 'string.max_len', message: expect.stringContaining(String(toolMax)) }]);
    expect((await postJson(`${t.base}/api/report`, { server_url: SERVER, success: true, latency_ms: 5, tool_name: 'x'.repeat(toolMax) }, from())).status).toBe(200);
    for (const [name, transport] of transports()) {
      const client = createClient(TelemetryService, transport);
      const err = await client.report({ serverUrl: SERVER, success: true, latencyMs: 5, toolName: tooLong }, { headers: from() }).catch((e: unknown) => e);
      expect(violationsOf(err), name).toEqual([['tool_name', 'string.max_len']]);
      const ok = await client.report({ serverUrl: SERVER, success: true, latencyMs: 5, toolName: 'x'.repeat(toolMax) }, { headers: from() });
      expect(ok.recorded, name).toBe(true);
    }
    const oa = await json(fetch(`${t.base}/openapi.json`));
    expect(oa.components.schemas.ReportRequest.properties.tool_name.maxLength).toBe(toolMax);
  }, 120_000);

  it('latency_ms range and required members: the same fields on REST and gRPC; OpenAPI says required and maximum', async () => {
    const rest = await expectProblem(await postJson(`${t.base}/api/report`, { server_url: SERVER, latency_ms: latencyMax + 1 }, from()), 400, 'invalid_argument');
    const fields = (rest.violations as { field: string; rule: string }[]).map((v) => [v.field, v.rule]);
    expect(fields).toEqual([
      ['success', 'required'],
      ['latency_ms', 'double.gte_lte'],
    ]);
    const grpc = createClient(TelemetryService, createGrpcTransport({ baseUrl: t.base }));
    expect(violationsOf(await grpc.report({ serverUrl: SERVER, latencyMs: latencyMax + 1 }, { headers: from() }).catch((e: unknown) => e))).toEqual(fields);
    const oa = await json(fetch(`${t.base}/openapi.json`));
    expect(oa.components.schemas.ReportRequest.required).toEqual(['server_url', 'success', 'latency_ms']);
    expect(oa.components.schemas.ReportRequest.properties.latency_ms.maximum).toBe(latencyMax);
  }, 120_000);

  it('query and path parameters: leaderboard limit and the receipt id pattern, on REST, Connect and in the OpenAPI parameters', async () => {
    const rest = await expectProblem(await fetch(`${t.base}/api/leaderboard?limit=${limitMax + 1}`), 400, 'invalid_argument');
    expect(rest.violations).toEqual([{ field: 'limit', rule: 'int32.gte_lte', message: expect.any(String) }]);
    expect((await fetch(`${t.base}/api/leaderboard?limit=${limitMax}`)).status).toBe(200);
    const badId = await expectProblem(await fetch(`${t.base}/v1/receipt/NOT-A-RECEIPT`), 400, 'invalid_argument');
    expect(badId.violations).toEqual([{ field: 'receipt_id', rule: 'string.pattern', message: expect.any(String) }]);
    for (const [name, transport] of transports()) {
      expect(violationsOf(await createClient(TrustService, transport).getLeaderboard({ limit: limitMax + 1 }).catch((e: unknown) => e)), name).toEqual([['limit', 'int32.gte_lte']]);
      expect(violationsOf(await createClient(ReceiptService, transport).getReceipt({ receiptId: 'NOT-A-RECEIPT' }).catch((e: unknown) => e)), name).toEqual([['receipt_id', 'string.pattern']]);
    }
    const oa = await json(fetch(`${t.base}/openapi.json`));
    const limit = oa.paths['/api/leaderboard'].get.parameters.find((p: { name: string }) => p.name === 'limit');
    expect(limit.schema).toMatchObject({ type: 'integer', maximum: limitMax });
    const id = oa.paths['/v1/receipt/{receipt_id}'].get.parameters.find((p: { name: string }) => p.name === 'receipt_id');
    expect(id.schema.pattern).toBe(receiptPattern);
  }, 120_000);

  it("MCP: the preflight_check tool states the contract's max_len, and the service guard answers the same rule", async () => {
    const targetMax = maxLength(contractField(PreflightRequestSchema, 'target'))!;
    const headers = { accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
    const list = await json(postJson(`${t.base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, headers));
    const tool = list.result.tools.find((x: { name: string }) => x.name === 'preflight_check');
    expect(tool.inputSchema.properties.target.maxLength).toBe(targetMax);
    // The skill functions the MCP tools and A2A skills call are the guarded services.
    const err = await t.obs.services.preflight.preflight({ target: 'x'.repeat(targetMax + 1) }).catch((e: unknown) => e);
    expect(problemFromError(err).extra?.violations).toEqual([{ field: 'target', rule: 'string.max_len', message: expect.any(String) }]);
  }, 60_000);
});

describe('a rule changed in proto/ and nothing else', () => {
  let dir: string;
  let variant: { service: DescService; request: DescMessage };
  let vendored: FileDescriptorProto | undefined;

  beforeAll(() => {
    // A copy of proto/ where tool_name allows 7 characters instead of the shipped limit.
    dir = mkdtempSync(join(tmpdir(), 'proto-variant-'));
    cpSync(join(process.cwd(), 'proto'), join(dir, 'proto'), { recursive: true });
    cpSync(join(process.cwd(), 'buf.yaml'), join(dir, 'buf.yaml'));
    const file = join(dir, 'proto/observatory/v1/telemetry.proto');
    const src = readFileSync(file, 'utf8');
    const changed = src.replace(`(buf.validate.field).string.max_len = ${toolMax}`, '(buf.validate.field).string.max_len = 7');
    expect(changed).not.toBe(src);
    writeFileSync(file, changed);
    execFileSync(join(process.cwd(), 'node_modules/.bin/buf'), ['build', '-o', join(dir, 'image.binpb')], { cwd: dir });
    const set = fromBinary(FileDescriptorSetSchema, readFileSync(join(dir, 'image.binpb')));
    const registry = createFileRegistry(set);
    vendored = set.file.find((f) => f.name === 'buf/validate/validate.proto');
    variant = {
      service: registry.getService('observatory.v1.TelemetryService')!,
      request: registry.getMessage('observatory.v1.ReportRequest')!,
    };
  }, 120_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('the vendored buf/validate/validate.proto is the descriptor the validator ships (re-run scripts/vendor-validate-proto.ts after an upgrade)', () => {
    expect(vendored).toBeDefined();
    const strip = (f: FileDescriptorProto) => toJson(FileDescriptorProtoSchema, { ...f, sourceCodeInfo: undefined } as FileDescriptorProto);
    expect(strip(vendored!)).toEqual(strip(file_buf_validate_validate.proto));
  });

  const eight = { serverUrl: SERVER, success: true, latencyMs: 5, toolName: 'x'.repeat(8) };

  it('the validator, the Connect interceptor, the service guard and the OpenAPI generator all follow the new rule', async () => {
    // Validator: 7 passes, 8 breaks string.max_len (the shipped descriptor still takes 8).
    expect(ruleViolations(variant.request, { ...eight, toolName: 'x'.repeat(7) } as never)).toEqual([]);
    expect(ruleViolations(variant.request, eight as never).map((v) => [v.field, v.rule])).toEqual([['tool_name', 'string.max_len']]);
    expect(ruleViolations(ReportRequestSchema, eight)).toEqual([]);

    // Connect/gRPC: the interceptor the server installs, on a router serving the variant service.
    let calls = 0;
    const transport = createRouterTransport(
      ({ service }) => service(variant.service as typeof TelemetryService, { report: () => (calls++, { recorded: true, serverUrl: SERVER }), reportStream: async () => ({}) }),
      { router: { interceptors: [contractValidationInterceptor()] } },
    );
    const client = createClient(variant.service as typeof TelemetryService, transport);
    expect(violationsOf(await client.report(eight).catch((e: unknown) => e))).toEqual([['tool_name', 'string.max_len']]);
    expect(calls).toBe(0);
    expect((await client.report({ ...eight, toolName: 'x'.repeat(7) })).recorded).toBe(true);

    // REST (and MCP, A2A): the guard the services get, then the problem body REST answers.
    const guarded = enforceContract({ report: async (_req: unknown) => ({ recorded: true }) }, variant.service);
    const thrown = await guarded.report(eight).catch((e: unknown) => e);
    const problem = problemFromError(thrown);
    expect(problem.code).toBe('invalid_argument');
    expect(problem.extra?.violations).toEqual([{ field: 'tool_name', rule: 'string.max_len', message: expect.stringContaining('7') }]);

    // /openapi.json generated from the variant descriptors.
    const doc = openApiDocument(t.config, [variant.service]) as unknown as { components: { schemas: Record<string, { properties: Record<string, { maxLength?: number }> }> }; paths: Record<string, unknown> };
    expect(doc.components.schemas.ReportRequest!.properties.tool_name!.maxLength).toBe(7);
    expect(Object.keys(doc.paths)).toContain('/api/report');
  }, 120_000);
});
