import { create, getOption, hasOption, isFieldSet, isMessage, ScalarType, type DescField, type DescMessage, type Message, type MessageInitShape } from '@bufbuild/protobuf';
import { FeatureSet_FieldPresence } from '@bufbuild/protobuf/wkt';
import { createValidator, violationToProto, type Validator, type Violation } from '@bufbuild/protovalidate';
import { withoutStackTraces } from './stack-traces.js';
import { unstorableText } from './storable-text.js';
import {
  DoubleRulesSchema,
  field as fieldRulesExt,
  FieldRulesSchema,
  Int32RulesSchema,
  message as messageRulesExt,
  StringRulesSchema,
  type FieldRules,
} from '@bufbuild/protovalidate/gen/buf/validate/validate_pb.js';

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

/**
 * A check that accepts a message only when protovalidate certainly would; false means "ask
 * protovalidate", never "invalid". Reads the message's own fields (a message, or its init shape).
 */
export type Acceptor = (msg: Readonly<Record<string, unknown>>) => boolean;

/** Whether `msg` (of `schema`) sets no field but those named (proto names), and carries no unknown fields (extensions). */
function onlySet(schema: DescMessage, msg: Message, allowed: readonly string[]): boolean {
  if ((msg as { $unknown?: unknown[] }).$unknown?.length) return false;
  return schema.fields.every((f) => allowed.includes(f.name) || !isFieldSet(msg as never, f));
}

/** Numeric bounds of a rule message with lt/lte/gt/gte (and `finite`), read as numbers. */
function bounds(r: { lessThan: { case?: string; value?: unknown }; greaterThan: { case?: string; value?: unknown }; finite?: boolean }) {
  const n = (v: unknown) => Number(v);
  return {
    lt: r.lessThan.case === 'lt' ? n(r.lessThan.value) : undefined,
    lte: r.lessThan.case === 'lte' ? n(r.lessThan.value) : undefined,
    gt: r.greaterThan.case === 'gt' ? n(r.greaterThan.value) : undefined,
    gte: r.greaterThan.case === 'gte' ? n(r.greaterThan.value) : undefined,
    finite: r.finite === true,
  };
}

/**
 * One field's acceptor, or null when its rules are outside the few kinds compiled here: a scalar
 * string, bool, double or int32 field outside any oneof, whose rules are at most `required`,
 * string `max_len`, and the numeric `gt`/`gte`/`lt`/`lte` (double also `finite`). Every check is
 * as strict as protovalidate's or stricter: `max_len` counts code points, and a string's UTF-16
 * length is never fewer; an int32 must be an integer in range; a pair of bounds must both hold
 * (protovalidate also reads an inverted pair as "outside"); a zero value of a required field,
 * even -0, is left to protovalidate.
 */
function fieldAcceptor(f: DescField): Acceptor | null {
  if (f.fieldKind !== 'scalar' || f.oneof !== undefined) return null;
  const rules = fieldRules(f);
  if (rules && !onlySet(FieldRulesSchema, rules, ['required', 'string', 'int32', 'double'])) return null;
  const required = rules?.required === true;
  // Implicit presence (proto3 without `optional`): an absent value is the zero value, and rules apply to it.
  const implicit = f.presence === FeatureSet_FieldPresence.IMPLICIT;
  const type = rules?.type;
  const key = f.localName;
  switch (f.scalar) {
    case ScalarType.STRING: {
      if (type?.case !== undefined && type.case !== 'string') return null;
      if (type?.case === 'string' && !onlySet(StringRulesSchema, type.value, ['max_len'])) return null;
      const max = type?.case === 'string' && isFieldSet(type.value, StringRulesSchema.field.maxLen) ? Number(type.value.maxLen) : Infinity;
      return (m) => {
        const v = m[key];
        if (v === undefined) return !required;
        if (typeof v !== 'string' || (required && implicit && v === '')) return false;
        return v.length <= max;
      };
    }
    case ScalarType.BOOL:
      if (type?.case !== undefined) return null;
      return (m) => {
        const v = m[key];
        if (v === undefined) return !required;
        return typeof v === 'boolean' && !(required && implicit && v === false);
      };
    case ScalarType.DOUBLE:
    case ScalarType.INT32: {
      const integer = f.scalar === ScalarType.INT32;
      let b = { lt: undefined as number | undefined, lte: undefined as number | undefined, gt: undefined as number | undefined, gte: undefined as number | undefined, finite: false };
      if (type?.case !== undefined) {
        if (type.case === 'double' && !integer && onlySet(DoubleRulesSchema, type.value, ['lt', 'lte', 'gt', 'gte', 'finite'])) b = bounds(type.value);
        else if (type.case === 'int32' && integer && onlySet(Int32RulesSchema, type.value, ['lt', 'lte', 'gt', 'gte'])) b = bounds(type.value);
        else return null;
      }
      const { lt, lte, gt, gte, finite } = b;
      return (m) => {
        let v = m[key];
        if (v === undefined) {
          if (required) return false;
          if (!implicit) return true;
          v = 0;
        }
        if (typeof v !== 'number') return false;
        if (integer && !(Number.isInteger(v) && v >= -2147483648 && v <= 2147483647)) return false;
        if ((required && implicit && v === 0) || (finite && !Number.isFinite(v))) return false;
        return !((lt !== undefined && !(v < lt)) || (lte !== undefined && !(v <= lte)) || (gt !== undefined && !(v > gt)) || (gte !== undefined && !(v >= gte)));
      };
    }
    default:
      return null;
  }
}

/**
 * The acceptor of a message's rules, compiled from the same buf.validate annotations protovalidate
 * reads, or null when the message has a rule (or a field) of any kind `fieldAcceptor` leaves to
 * protovalidate, or message-level rules: then every request goes to protovalidate.
 */
export function compileAcceptor(desc: DescMessage): Acceptor | null {
  if (hasOption(desc, messageRulesExt)) return null;
  const checks: Acceptor[] = [];
  for (const f of desc.fields) {
    const c = fieldAcceptor(f);
    if (c === null) return null;
    checks.push(c);
  }
  return (msg) => {
    for (let i = 0; i < checks.length; i++) if (!checks[i]!(msg)) return false;
    return true;
  };
}

/**
 * protovalidate with a plain first check in front (issue 22): most requests are valid, and the
 * generic validator costs a request on the hot paths several microseconds of a 25-50 µs answer
 * (its reflection walks more code than the whole service call; measured in docs/performance.md
 * "Thirteenth pass"). A message whose rules compile (`compileAcceptor`) is first checked by that
 * acceptor; whatever it does not accept, protovalidate decides and explains, so a refusal, its
 * violations and every rule outside the compiled kinds are protovalidate's alone.
 * test/contract-acceptor.test.ts holds the acceptor to never accept what protovalidate refuses.
 */
export function withAcceptors(base: Validator): Validator & { acceptor(desc: DescMessage): Acceptor | null } {
  const acceptors = new WeakMap<DescMessage, Acceptor | null>();
  const acceptor = (desc: DescMessage): Acceptor | null => {
    let a = acceptors.get(desc);
    if (a === undefined) acceptors.set(desc, (a = compileAcceptor(desc)));
    return a;
  };
  return {
    acceptor,
    validate(schema, message) {
      const a = acceptor(schema);
      if (a !== null && a(message as never)) return { kind: 'valid', message: message as never, error: undefined, violations: undefined };
      // protovalidate reports broken rules by throwing and catching a ValidationError: made
      // without a stack, which nobody reads. A rule that cannot be evaluated is our bug: asked
      // again with stack traces on, so its error says where.
      const r = withoutStackTraces(() => base.validate(schema, message));
      return r.kind === 'error' ? base.validate(schema, message) : r;
    },
  };
}

/** The one validator of the process (protovalidate compiles each message's rules once and caches them). */
export const contractValidator = withAcceptors(createValidator());

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

/** The rule id of a text value no field of the contract may hold (unstorableText). */
export const STORABLE_TEXT_RULE = 'storable_text';

/** Per message type: its fields that hold text, directly or in a message below (null: none). */
const textFields = new WeakMap<DescMessage, readonly DescField[] | null>();

function textFieldsOf(desc: DescMessage): readonly DescField[] | null {
  const known = textFields.get(desc);
  return known !== undefined ? known : compileTextFields(desc, new Set());
}

function compileTextFields(desc: DescMessage, seen: Set<DescMessage>): readonly DescField[] | null {
  const known = textFields.get(desc);
  if (known !== undefined) return known;
  // A message type that holds itself (directly or below) is walked as if it held text.
  if (seen.has(desc)) return desc.fields;
  seen.add(desc);
  const out = desc.fields.filter((f) => {
    if (f.fieldKind === 'scalar') return f.scalar === ScalarType.STRING;
    if (f.fieldKind === 'list') return f.listKind === 'scalar' ? f.scalar === ScalarType.STRING : f.listKind === 'message' && compileTextFields(f.message, seen) !== null;
    if (f.fieldKind === 'map') return true;
    if (f.fieldKind === 'message') return compileTextFields(f.message, seen) !== null;
    return false;
  });
  const result = out.length > 0 ? out : null;
  textFields.set(desc, result);
  return result;
}

/** Adds a violation when `v` is text that cannot be stored as given. */
function checkText(v: unknown, at: string, out: RuleViolation[]): void {
  if (typeof v !== 'string') return;
  const why = unstorableText(v);
  if (why !== null) out.push({ field: at, rule: STORABLE_TEXT_RULE, message: why });
}

/** The value of a field in a message or its init shape (a oneof member under its oneof's name). */
function fieldValue(msg: Readonly<Record<string, unknown>>, f: DescField): unknown {
  if (f.oneof === undefined) return msg[f.localName];
  const o = msg[f.oneof.localName] as { case?: string; value?: unknown } | undefined;
  return o?.case === f.localName ? o.value : undefined;
}

/** Every text value of a request that cannot be stored as given (unstorableText), at any depth, added to `out`. */
function unstorableFields(desc: DescMessage, msg: Readonly<Record<string, unknown>>, path: string, out: RuleViolation[]): RuleViolation[] {
  const fields = textFieldsOf(desc);
  if (fields === null) return out;
  for (const f of fields) {
    const v = fieldValue(msg, f);
    if (v === undefined || v === null) continue;
    const at = path === '' ? f.name : `${path}.${f.name}`;
    if (f.fieldKind === 'scalar') checkText(v, at, out);
    else if (f.fieldKind === 'message') unstorableFields(f.message, v as Record<string, unknown>, at, out);
    else if (f.fieldKind === 'list' && Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        if (f.listKind === 'message') unstorableFields(f.message!, v[i] as Record<string, unknown>, `${at}[${i}]`, out);
        else checkText(v[i], `${at}[${i}]`, out);
      }
    } else if (f.fieldKind === 'map' && typeof v === 'object') {
      for (const [k, e] of Object.entries(v as Record<string, unknown>)) {
        const key = `${at}[${JSON.stringify(k)}]`;
        checkText(k, key, out);
        if (f.mapKind === 'message') unstorableFields(f.message, e as Record<string, unknown>, key, out);
        else checkText(e, key, out);
      }
    }
  }
  return out;
}

/**
 * The broken rules of a request, empty when it is valid. `msg` is a message or its init shape.
 * Beside the contract's own rules, no text field may hold what cannot be stored as given
 * (unstorableText): a refusal at the door, never a database error after the work.
 */
export function ruleViolations<Desc extends DescMessage>(desc: Desc, msg: MessageInitShape<Desc>): RuleViolation[] {
  const text = unstorableFields(desc, msg as Readonly<Record<string, unknown>>, '', []);
  // An init shape the acceptor takes needs no message built from it.
  if (contractValidator.acceptor(desc)?.(msg as never)) return text;
  const message = isMessage(msg, desc) ? msg : create(desc, msg);
  const result = contractValidator.validate(desc, message);
  if (result.kind === 'valid') return text;
  // A rule that cannot be evaluated is a contract bug, never the client's fault.
  if (result.kind === 'error') throw result.error;
  return [...text, ...result.violations.map((v) => ({ field: fieldPath(v), rule: v.ruleId, message: v.message }))];
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
