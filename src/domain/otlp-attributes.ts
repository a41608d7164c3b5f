// Reading OTLP attributes (KeyValue lists) without keeping them: the few keys the mapping needs
// as scalars, and one-way fingerprints of whole attribute sets that identify a resource or a
// metric stream in memory. Neither a value nor a fingerprint is ever stored or logged.

import { createHash } from 'node:crypto';
import type { AnyValue, KeyValue } from '../../gen/opentelemetry/proto/common/v1/common_pb.js';

export type Scalar = string | number | boolean;

function scalar(v: AnyValue | undefined): Scalar | undefined {
  switch (v?.value.case) {
    case 'stringValue':
    case 'boolValue':
    case 'doubleValue':
      return v.value.value;
    case 'intValue':
      return Number(v.value.value);
    default:
      return undefined;
  }
}

/** The scalar values of the wanted keys (the first occurrence of each); everything else is skipped. */
export function attributeMap(kvs: readonly KeyValue[], wanted: readonly string[]): Map<string, Scalar> {
  const out = new Map<string, Scalar>();
  for (const kv of kvs) {
    if (out.has(kv.key) || !wanted.includes(kv.key)) continue;
    const v = scalar(kv.value);
    if (v !== undefined) out.set(kv.key, v);
  }
  return out;
}

/** Nesting beyond this is not told apart (bounds the recursion on hostile input). */
const MAX_DEPTH = 16;

// A canonical text of an AnyValue: type-tagged, so "1" and 1 differ; key lists sorted.
function canonical(v: AnyValue | undefined, depth = 0): string {
  if (depth > MAX_DEPTH) return '…';
  const x = v?.value;
  switch (x?.case) {
    case undefined:
      return 'n';
    case 'stringValue':
      return `s${JSON.stringify(x.value)}`;
    case 'boolValue':
      return x.value ? 't' : 'f';
    case 'intValue':
      return `i${x.value}`;
    case 'doubleValue':
      return `d${x.value}`;
    case 'bytesValue':
      return `b${Buffer.from(x.value).toString('base64')}`;
    case 'arrayValue':
      return `[${x.value.values.map((e) => canonical(e, depth + 1)).join(',')}]`;
    case 'kvlistValue':
      return `{${canonicalList(x.value.values, depth + 1)}}`;
    default:
      return `?${String(x?.case)}`;
  }
}

function canonicalList(kvs: readonly KeyValue[], depth = 0): string {
  return kvs
    .map((kv) => `${JSON.stringify(kv.key)}=${canonical(kv.value, depth)}`)
    .sort()
    .join(',');
}

/**
 * The canonical text of an attribute list, made once per list: a resource's list is read again
 * for every point of its metric streams and for each piece of an export that carries it
 * (src/domain/otlp-export.ts shares one decoded resource between pieces); made anew each time, a
 * resource of thousands of attributes cost that much per tool-call point.
 */
const canonicalLists = new WeakMap<readonly KeyValue[], string>();

function canonicalOf(kvs: readonly KeyValue[]): string {
  let text = canonicalLists.get(kvs);
  if (text === undefined) {
    text = canonicalList(kvs);
    canonicalLists.set(kvs, text);
  }
  return text;
}

/** A one-way fingerprint of parts (attribute lists and plain strings), order of attributes ignored. */
export function fingerprint(...parts: (readonly KeyValue[] | string)[]): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(typeof p === 'string' ? JSON.stringify(p) : `{${canonicalOf(p)}}`).update('\u0000');
  return h.digest('base64url').slice(0, 32);
}

/** The fingerprint of a resource: spans and metrics of one SDK (one Resource) share it. */
export function resourceFingerprint(attributes: readonly KeyValue[]): string {
  return fingerprint(attributes);
}
