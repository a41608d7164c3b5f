import { ScalarType, type DescEnum, type DescField, type DescMessage } from '@bufbuild/protobuf';
import { fieldRules } from '../domain/contract-rules.js';

// JSON Schema of the REST JSON of proto messages (the shape src/domain/message-json.ts writes and
// the REST adapters read: proto field names, int64 as numbers, enums by name), generated from the
// descriptors. Two uses:
//  - `restBodySchema`: the JSON types of a REST request body for fastify (types only, unknown
//    members dropped); the value rules are protovalidate's, checked on the message afterwards so
//    REST answers what Connect answers.
//  - `SchemaBook`: /openapi.json components, with the buf.validate rules as JSON Schema keywords.

export type JsonSchema = Record<string, unknown>;

const WKT: Record<string, JsonSchema> = {
  'google.protobuf.Struct': { type: 'object' },
  'google.protobuf.Value': {},
  'google.protobuf.ListValue': { type: 'array' },
};

function scalarSchema(t: ScalarType): JsonSchema {
  switch (t) {
    case ScalarType.STRING:
      return { type: 'string' };
    case ScalarType.BOOL:
      return { type: 'boolean' };
    case ScalarType.BYTES:
      return { type: 'string', contentEncoding: 'base64' };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return { type: 'number' };
    default:
      return { type: 'integer' };
  }
}

const enumSchema = (e: DescEnum): JsonSchema => ({ type: 'string', enum: e.values.map((v) => v.name) });

/** JSON Schema keywords for the buf.validate rules of a field (the ones JSON Schema can say). */
export function ruleKeywords(field: DescField): JsonSchema {
  const rules = fieldRules(field);
  const t = rules?.type;
  const out: JsonSchema = {};
  if (!t || t.case === undefined) return out;
  if (t.case === 'string') {
    const s = t.value;
    if (s.minLen) out.minLength = Number(s.minLen);
    if (s.maxLen) out.maxLength = Number(s.maxLen);
    if (s.len) out.minLength = out.maxLength = Number(s.len);
    if (s.pattern) out.pattern = s.pattern;
    if (s.in.length) out.enum = [...s.in];
    if (s.const) out.const = s.const;
    if (s.wellKnown.case === 'uri') out.format = 'uri';
    if (s.wellKnown.case === 'email') out.format = 'email';
    if (s.wellKnown.case === 'uuid') out.format = 'uuid';
    if (s.wellKnown.case === 'hostname') out.format = 'hostname';
  } else if (t.case === 'enum') {
    // Enum values travel by name; `in` / `not_in` are numbers in the rule.
  } else if (t.case !== 'bool' && t.case !== 'bytes' && t.case !== 'repeated' && t.case !== 'map' && t.case !== 'any' && t.case !== 'duration' && t.case !== 'timestamp' && t.case !== 'fieldMask') {
    const r = t.value as { lessThan: { case?: string; value?: number | bigint }; greaterThan: { case?: string; value?: number | bigint }; in: (number | bigint)[] };
    if (r.greaterThan.case === 'gte') out.minimum = Number(r.greaterThan.value);
    if (r.greaterThan.case === 'gt') out.exclusiveMinimum = Number(r.greaterThan.value);
    if (r.lessThan.case === 'lte') out.maximum = Number(r.lessThan.value);
    if (r.lessThan.case === 'lt') out.exclusiveMaximum = Number(r.lessThan.value);
    if (r.in.length) out.enum = r.in.map(Number);
  }
  return out;
}

/** Whether the contract requires the field (buf.validate `required`). */
export const isRequired = (field: DescField) => fieldRules(field)?.required === true;

const nullable = (s: JsonSchema): JsonSchema =>
  typeof s.type === 'string' ? { ...s, type: [s.type, 'null'] } : s.$ref || s.type === undefined ? { anyOf: [s, { type: 'null' }] } : s;

/** The JSON types a REST request body may carry for `desc` (fastify body schema; no value rules). */
export function restBodySchema(desc: DescMessage): JsonSchema {
  const properties: Record<string, JsonSchema> = {};
  for (const f of desc.fields) {
    let s: JsonSchema;
    switch (f.fieldKind) {
      case 'scalar':
        s = scalarSchema(f.scalar);
        break;
      case 'enum':
        s = enumSchema(f.enum);
        break;
      case 'message':
        s = WKT[f.message.typeName] ?? restBodySchema(f.message);
        break;
      case 'list':
        s = { type: 'array', items: f.listKind === 'scalar' ? scalarSchema(f.scalar) : f.listKind === 'enum' ? enumSchema(f.enum) : restBodySchema(f.message) };
        break;
      case 'map':
        s = { type: 'object' };
        break;
    }
    // A member left out or sent as null is an unset field (the rules decide whether that is allowed).
    properties[f.name] = nullable(s);
  }
  return { type: 'object', additionalProperties: false, properties };
}

/** The REST JSON of a body validated by `restBodySchema` as the message's init shape. */
export function restBodyInit(desc: DescMessage, body: Record<string, unknown> | null | undefined): Record<string, unknown> {
  const init: Record<string, unknown> = {};
  for (const f of desc.fields) {
    const v = body?.[f.name];
    if (v !== undefined && v !== null) init[f.localName] = v;
  }
  return init;
}

/**
 * Component schemas of /openapi.json, one per message, named by the message name (package
 * prefix dropped for observatory.v1). `response` schemas describe what message-json writes: every
 * field present, unset optional scalars and unset messages as null; `request` schemas carry the
 * buf.validate rules (required, lengths, ranges, patterns, enums, formats).
 */
export class SchemaBook {
  readonly schemas: Record<string, JsonSchema> = {};

  static nameOf(desc: DescMessage): string {
    return desc.typeName.startsWith('observatory.v1.') ? desc.typeName.slice('observatory.v1.'.length).replace(/\./g, '_') : desc.typeName.replace(/\./g, '_');
  }

  ref(desc: DescMessage, mode: 'request' | 'response'): JsonSchema {
    const wkt = WKT[desc.typeName];
    if (wkt) return wkt;
    const name = SchemaBook.nameOf(desc);
    if (!(name in this.schemas)) {
      this.schemas[name] = {}; // placeholder for recursive messages
      this.schemas[name] = mode === 'request' ? this.requestSchema(desc) : this.responseSchema(desc);
    }
    return { $ref: `#/components/schemas/${name}` };
  }

  private valueSchema(f: DescField, mode: 'request' | 'response'): JsonSchema {
    switch (f.fieldKind) {
      case 'scalar':
        return scalarSchema(f.scalar);
      case 'enum':
        return enumSchema(f.enum);
      case 'message':
        return this.ref(f.message, mode);
      case 'list':
        return { type: 'array', items: f.listKind === 'scalar' ? scalarSchema(f.scalar) : f.listKind === 'enum' ? enumSchema(f.enum) : this.ref(f.message, mode) };
      case 'map':
        return {
          type: 'object',
          additionalProperties: f.mapKind === 'scalar' ? scalarSchema(f.scalar) : f.mapKind === 'enum' ? enumSchema(f.enum) : this.ref(f.message, mode),
        };
    }
  }

  /** Schema of one field as a query or path parameter, or a request body member: type plus rules. */
  fieldSchema(f: DescField): JsonSchema {
    return { ...this.valueSchema(f, 'request'), ...ruleKeywords(f) };
  }

  private requestSchema(desc: DescMessage): JsonSchema {
    const properties: Record<string, JsonSchema> = {};
    const required: string[] = [];
    for (const f of desc.fields) {
      const s = this.fieldSchema(f);
      properties[f.name] = f.fieldKind === 'scalar' && !isRequired(f) && f.proto.proto3Optional ? nullable(s) : s;
      if (isRequired(f)) required.push(f.name);
    }
    return { type: 'object', properties, ...(required.length ? { required } : {}), additionalProperties: false };
  }

  private responseSchema(desc: DescMessage): JsonSchema {
    const properties: Record<string, JsonSchema> = {};
    const required: string[] = [];
    for (const f of desc.fields) {
      let s = this.valueSchema(f, 'response');
      // message-json: unset explicit-presence scalars and unset messages are null.
      if ((f.fieldKind === 'scalar' || f.fieldKind === 'enum') && f.proto.proto3Optional) s = nullable(s);
      if (f.fieldKind === 'message') s = nullable(s);
      properties[f.name] = s;
      // Members of a oneof are written only when chosen; every other field always.
      if (!f.oneof || f.proto.proto3Optional) required.push(f.name);
    }
    return { type: 'object', properties, ...(required.length ? { required } : {}) };
  }
}

/**
 * The query string fastify accepts for a GET bound by google.api.http: one string member per
 * field of the request message (query values are text; each adapter passes them on and the
 * contract's rules decide, so REST and Connect refuse the same inputs), plus `extra` members a
 * hand-written adapter adds (e.g. `format`).
 */
export function restQuerySchema(desc: DescMessage, ...extra: string[]): JsonSchema {
  const names = [...desc.fields.filter((f) => f.fieldKind === 'scalar' || f.fieldKind === 'enum').map((f) => f.name), ...extra];
  return { type: 'object', properties: Object.fromEntries(names.map((n) => [n, { type: 'string' }])) };
}
