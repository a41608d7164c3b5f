import type { DescField, DescMessage } from '@bufbuild/protobuf';
import { ScalarType } from '@bufbuild/protobuf';
import { scalarZeroValue } from '@bufbuild/protobuf/reflect';

// Proto messages -> the JSON documents of SPEC.md. Proto field names ARE the REST keys (see the
// conventions in proto/observatory/v1/common.proto), so one generic converter serves every
// adapter, and services that sign a document (behavioral evidence, x402 payment requirements)
// sign exactly the JSON clients get: unset optional scalars and unset messages become null,
// Struct/Value fields are already plain JSON in protobuf-es, int64 becomes a number, enums
// their names. Pure (no transport): adapters re-export it as `restJson` (http/rest-json.ts).

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Convert = (v: unknown) => Json;

const plans = new WeakMap<DescMessage, (msg: Record<string, unknown>) => Record<string, Json>>();

const WKT_JSON = new Set(['google.protobuf.Struct', 'google.protobuf.Value', 'google.protobuf.ListValue']);

function scalar(type: ScalarType): Convert {
  switch (type) {
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return (v) => (typeof v === 'bigint' ? Number(v) : (v as number));
    case ScalarType.BYTES:
      return (v) => Buffer.from(v as Uint8Array).toString('base64');
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (v) => (Number.isFinite(v as number) ? (v as number) : null);
    default:
      return (v) => v as Json;
  }
}

function messageConverter(desc: DescMessage): Convert {
  if (WKT_JSON.has(desc.typeName)) return (v) => (v === undefined ? null : (v as Json));
  const plan = compile(desc);
  return (v) => plan(v as Record<string, unknown>);
}

function fieldConverter(field: DescField): Convert {
  switch (field.fieldKind) {
    case 'scalar':
      return scalar(field.scalar);
    case 'enum': {
      const names = new Map(field.enum.values.map((e) => [e.number, e.name]));
      return (v) => names.get(v as number) ?? (v as number);
    }
    case 'message':
      return messageConverter(field.message);
    case 'list': {
      const item: Convert =
        field.listKind === 'message' ? messageConverter(field.message) : field.listKind === 'enum' ? (v) => v as Json : scalar(field.scalar);
      return (v) => (v as unknown[]).map(item);
    }
    case 'map': {
      const item: Convert = field.mapKind === 'message' ? messageConverter(field.message) : field.mapKind === 'enum' ? (v) => v as Json : scalar(field.scalar);
      return (v) => {
        const out: Record<string, Json> = {};
        for (const [k, x] of Object.entries(v as Record<string, unknown>)) out[k] = item(x);
        return out;
      };
    }
  }
}

// Plain init objects may leave implicit-presence fields out; REST still shows their zero value.
function unsetValue(field: DescField): Json {
  if (field.fieldKind === 'list') return [];
  if (field.fieldKind === 'map') return {};
  if (field.fieldKind === 'message' || field.proto.proto3Optional) return null;
  if (field.fieldKind === 'enum') return field.enum.values[0]?.name ?? null;
  const zero = scalarZeroValue(field.scalar, false);
  if (typeof zero === 'bigint') return Number(zero);
  if (zero instanceof Uint8Array) return '';
  return zero as Json;
}

function compile(desc: DescMessage): (msg: Record<string, unknown>) => Record<string, Json> {
  const cached = plans.get(desc);
  if (cached) return cached;
  // Placeholder guards recursive message types while the plan is being built.
  let plan: (msg: Record<string, unknown>) => Record<string, Json> = (m) => plan(m);
  plans.set(desc, (m) => plan(m));
  // [local name, REST key, converter, value when unset: null for explicit presence, else the zero value]
  const steps: [local: string, name: string, convert: Convert, unset: Json][] = [];
  const oneofs: [local: string, cases: Map<string, [string, Convert]>][] = [];
  for (const member of desc.members) {
    if (member.kind === 'oneof') {
      oneofs.push([member.localName, new Map(member.fields.map((f) => [f.localName, [f.name, fieldConverter(f)]]))]);
    } else {
      steps.push([member.localName, member.name, fieldConverter(member), unsetValue(member)]);
    }
  }
  plan = (msg) => {
    const out: Record<string, Json> = {};
    for (const [local, name, convert, unset] of steps) {
      const v = msg[local];
      out[name] = v === undefined || v === null ? unset : convert(v);
    }
    for (const [local, cases] of oneofs) {
      const sel = msg[local] as { case?: string; value?: unknown } | undefined;
      if (sel?.case) {
        const c = cases.get(sel.case);
        if (c) out[c[0]] = c[1](sel.value);
      }
    }
    return out;
  };
  plans.set(desc, plan);
  return plan;
}

/** The JSON document (the REST body) for a message of the given schema. */
export function messageJson(desc: DescMessage, msg: object): Record<string, Json> {
  return compile(desc)(msg as Record<string, unknown>);
}
