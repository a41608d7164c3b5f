import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toJson } from '@bufbuild/protobuf';
import { FieldRulesSchema } from '@bufbuild/protovalidate/gen/buf/validate/validate_pb.js';
import { fieldRules } from '../src/domain/contract-rules.js';
import { restBindings } from '../src/http/openapi.js';
import { ReportStreamRequestSchema } from '../gen/observatory/v1/telemetry_pb.js';

// Polyglot clients see the rules: a Python program with only the protobuf runtime reads the
// buf.validate annotations from descriptors built from proto/ and finds exactly the rules this
// service enforces (docs/contract.md, "Polyglot clients"). Needs a Python 3 with the protobuf
// package (Debian: python3-protobuf).

const PYTHON = ['/usr/bin/python3', 'python3'].find((p) => {
  try {
    execFileSync(p, ['-c', 'import google.protobuf'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
});
if (!PYTHON) console.log('contract-python: skipped, no python3 with the protobuf package (apt-get install python3-protobuf)');

describe.skipIf(!PYTHON)('a Python client reads the validation rules from proto/', () => {
  let dir: string;
  let set: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'contract-python-'));
    set = join(dir, 'observatory.binpb');
    execFileSync(join(process.cwd(), 'node_modules/.bin/buf'), ['build', '--as-file-descriptor-set', '--exclude-source-info', '-o', set], { cwd: process.cwd() });
    expect(existsSync(set)).toBe(true);
  }, 120_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('finds, field by field, the rules every door enforces', () => {
    const messages = [...new Map([...restBindings().map((b) => b.rpc.input), ReportStreamRequestSchema].map((m) => [m.typeName, m])).values()];
    const out = execFileSync(PYTHON!, [join(process.cwd(), 'test/fixtures/read_rules.py'), set, ...messages.map((m) => m.typeName)], { encoding: 'utf8' });
    const python = JSON.parse(out) as Record<string, unknown>;
    const ours: Record<string, unknown> = {};
    for (const m of messages) {
      for (const f of m.fields) {
        const r = fieldRules(f);
        if (r) ours[`${m.name}.${f.name}`] = toJson(FieldRulesSchema, r);
      }
    }
    expect(Object.keys(ours).length).toBeGreaterThan(15);
    expect(python).toEqual(ours);
    expect(python['ReportRequest.tool_name']).toHaveProperty('string.maxLen');
  }, 120_000);
});
