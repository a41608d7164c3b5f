import { create, createRegistry, toBinary, toJsonString, type DescMessage, type MessageInitShape } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { gunzip } from 'node:zlib';
import { RetryInfoSchema } from '../../gen/google/rpc/error_details_pb.js';
import { StatusSchema } from '../../gen/google/rpc/status_pb.js';

// OTLP/HTTP bodies (the OTLP specification, "OTLP/HTTP"): binary protobuf or OTLP's JSON (the
// proto3 JSON mapping, except that trace and span ids are hex, not base64), optionally gzip. Every
// failure is an OtlpHttpError with the status OTLP wants (400 bad data, 413 too large, 415
// unsupported), never a 5xx, and its message never quotes the body. The body itself is measured
// and decoded by the OTLP service (src/domain/otlp-export.ts), as OTLP/gRPC's.

export type OtlpEncoding = 'protobuf' | 'json';

export class OtlpHttpError extends Error {
  constructor(
    readonly status: 400 | 413 | 415,
    message: string,
  ) {
    super(message);
  }
}

/** The OTLP/HTTP receivers' paths (src/http/routes/otlp.ts). */
export const OTLP_HTTP_PATHS = { traces: '/v1/traces', metrics: '/v1/metrics' } as const;
const OTLP_PATH_SET: ReadonlySet<string> = new Set(Object.values(OTLP_HTTP_PATHS));

/**
 * For the first bytes of an HTTP/1.1 connection (a refusal made before any parser ran: the
 * connection cap): the encoding of the OTLP/HTTP export they start (protobuf unless the head that
 * arrived says application/json), or null when they start no export.
 */
export function otlpExportEncoding(head: Uint8Array): OtlpEncoding | null {
  const text = Buffer.from(head.buffer, head.byteOffset, Math.min(head.byteLength, 16 * 1024)).toString('latin1');
  const line = /^POST ([^ ?\r\n]+)(?:\?[^ \r\n]*)? HTTP\/1\.[01]\r\n/.exec(text);
  if (line === null || !OTLP_PATH_SET.has(line[1]!)) return null;
  const end = text.indexOf('\r\n\r\n');
  const type = /\r\ncontent-type:[ \t]*([^\r\n]*)/i.exec(end === -1 ? text : text.slice(0, end));
  return otlpEncoding(type?.[1]) ?? 'protobuf';
}

/** The encoding a Content-Type names, or null when it is neither of OTLP's two. */
export function otlpEncoding(contentType: string | undefined): OtlpEncoding | null {
  const essence = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (essence === 'application/x-protobuf') return 'protobuf';
  if (essence === 'application/json') return 'json';
  return null;
}

/** The body as sent, decompressed when Content-Encoding is gzip; at most `maxBytes` either way. */
export function decompress(body: Buffer, contentEncoding: string | undefined, maxBytes: number): Promise<Buffer> {
  const enc = (contentEncoding ?? '').trim().toLowerCase();
  if (enc === '' || enc === 'identity') return Promise.resolve(body);
  if (enc !== 'gzip') return Promise.reject(new OtlpHttpError(415, 'unsupported Content-Encoding; OTLP/HTTP bodies are sent as is or gzip'));
  return new Promise((resolve, reject) => {
    // maxOutputLength stops inflating at the limit: a small "zip bomb" cannot expand in memory.
    gunzip(body, { maxOutputLength: maxBytes }, (err, out) => {
      if (!err) return resolve(out);
      if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' || err instanceof RangeError) {
        reject(new OtlpHttpError(413, `the export is larger than ${maxBytes} bytes after decompression`));
      } else reject(new OtlpHttpError(400, 'the body is not valid gzip'));
    });
  });
}

/** The types a Status's details may hold (OTLP/JSON writes an Any with its fields). */
const DETAIL_TYPES = createRegistry(RetryInfoSchema);

/** A response message in the request's encoding. */
export function encodeMessage<Desc extends DescMessage>(schema: Desc, init: MessageInitShape<Desc>, encoding: OtlpEncoding): Buffer | string {
  const msg = create(schema, init);
  return encoding === 'protobuf' ? Buffer.from(toBinary(schema, msg)) : toJsonString(schema, msg, { registry: DETAIL_TYPES });
}

/**
 * The body of every OTLP/HTTP 4xx/5xx: a google.rpc.Status (code is the matching gRPC code). A
 * refusal that says when to retry (`retryAfterSeconds`, its Retry-After) carries the same delay as
 * a google.rpc.RetryInfo detail, as on OTLP/gRPC.
 */
export function encodeStatus(grpcCode: number, message: string, encoding: OtlpEncoding, retryAfterSeconds: number | null = null): Buffer | string {
  const details = retryAfterSeconds === null ? [] : [anyPack(RetryInfoSchema, create(RetryInfoSchema, { retryDelay: { seconds: BigInt(retryAfterSeconds), nanos: 0 } }))];
  return encodeMessage(StatusSchema, { code: grpcCode, message, details }, encoding);
}

export const CONTENT_TYPE: Record<OtlpEncoding, string> = { protobuf: 'application/x-protobuf', json: 'application/json' };
