import { create, getOption, hasOption, isMessage, type DescField, type DescMessage, type MessageInitShape } from '@bufbuild/protobuf';
import { createValidator, violationToProto, type Violation } from '@bufbuild/protovalidate';
import { field as fieldRulesExt, type FieldRules } from '@bufbuild/protovalidate/gen/buf/validate/validate_pb.js';

// The validation rules of the contract: buf.validate annotations in proto/ (protovalidate), read
// and enforced here for every door. Connect, gRPC and gRPC-Web run the same validator in an
// interceptor (src/http/contract-validation.ts); REST adapters, MCP tools and A2A skills reach it
// through the services (src/services/contract.ts); /openapi.json shows the same rules as JSON
// Schema keywords (src/http/openapi.ts). A rule is changed in proto/ and nowhere else.

/** One broken rule, as the REST problem lists it and buf.validate.Violation carries it. */
export interface RuleViolation {
  /** Field path in proto (= REST JSON) names, e.g. `tool_name` or `report.latency_ms`. */
  field: string;
  /** The rule's id, e.g. `string.max_len`, `required`, `double.gte_lte`. */
  rule: string;
  /** Human-readable explanation from protovalidate. */
  message: string;
}

/** The one validator of the process (protovalidate compiles each message's rules once and caches them). */
export const contractValidator = createValidator();

function fieldPath(v: Violation): string {
  const [proto] = violationToProto(v);
  let out = '';
  for (const e of proto.field?.elements ?? []) {
    out += out ? `.${e.fieldName}` : e.fieldName;
    const s = e.subscript;
    if (s.case === 'index') out += `[${s.value}]`;
    else if (s.case !== undefined) out += `[${JSON.stringify(String(s.value))}]`;
  }
  return out;
}

/** The broken rules of a request, empty when it is valid. `msg` is a message or its init shape. */
export function ruleViolations<Desc extends DescMessage>(desc: Desc, msg: MessageInitShape<Desc>): RuleViolation[] {
  const message = isMessage(msg, desc) ? msg : create(desc, msg);
  const result = contractValidator.validate(desc, message);
  if (result.kind === 'valid') return [];
  // A rule that cannot be evaluated is a contract bug, never the client's fault.
  if (result.kind === 'error') throw result.error;
  return result.violations.map((v) => ({ field: fieldPath(v), rule: v.ruleId, message: v.message }));
}

/** One line for a problem's `detail`: every violation as `field: message`. */
export function violationsDetail(violations: readonly RuleViolation[]): string {
  return violations.map((v) => `${v.field || 'request'}: ${v.message}`).join('; ');
}

/** The buf.validate rules of a field (empty rules when it has none). */
export function fieldRules(field: DescField): FieldRules | undefined {
  return hasOption(field, fieldRulesExt) ? getOption(field, fieldRulesExt) : undefined;
}

/** The field of `desc` named `name` (proto name, = REST key); throws when the contract has none. */
export function contractField(desc: DescMessage, name: string): DescField {
  const f = desc.fields.find((x) => x.name === name);
  if (!f) throw new Error(`${desc.typeName} has no field ${name}`);
  return f;
}

/** Inclusive numeric bounds of a field's rule (gte/gt/lte/lt of its scalar rules), as numbers. */
export function numericBounds(field: DescField): { min?: number; max?: number; exclusiveMin?: number; exclusiveMax?: number } {
  const t = fieldRules(field)?.type;
  if (!t || t.case === undefined || !['double', 'float', 'int32', 'int64', 'uint32', 'uint64', 'sint32', 'sint64', 'fixed32', 'fixed64', 'sfixed32', 'sfixed64'].includes(t.case)) return {};
  const r = t.value as { lessThan: { case?: string; value?: number | bigint }; greaterThan: { case?: string; value?: number | bigint } };
  const out: { min?: number; max?: number; exclusiveMin?: number; exclusiveMax?: number } = {};
  if (r.greaterThan.case === 'gte') out.min = Number(r.greaterThan.value);
  if (r.greaterThan.case === 'gt') out.exclusiveMin = Number(r.greaterThan.value);
  if (r.lessThan.case === 'lte') out.max = Number(r.lessThan.value);
  if (r.lessThan.case === 'lt') out.exclusiveMax = Number(r.lessThan.value);
  return out;
}

/** max_len of a string field's rule (characters), or undefined. */
export function maxLength(field: DescField): number | undefined {
  const t = fieldRules(field)?.type;
  return t?.case === 'string' && t.value.maxLen !== undefined && t.value.maxLen !== 0n ? Number(t.value.maxLen) : undefined;
}
