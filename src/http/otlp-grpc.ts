import { createContextValues, type ConnectRouter } from '@connectrpc/connect';
import {
  compressionNegotiate,
  encodeEnvelope,
  pipe,
  readAllBytes,
  transformDecompressEnvelope,
  transformSplitEnvelope,
  type Compression,
  type UniversalHandler,
  type UniversalServerRequest,
} from '@connectrpc/connect/protocol';
import * as connect from '@connectrpc/connect/protocol-connect';
import * as grpc from '@connectrpc/connect/protocol-grpc';
import * as grpcWeb from '@connectrpc/connect/protocol-grpc-web';
import { compressionBrotli, compressionGzip } from '@connectrpc/connect-node';
import { MetricsService } from '../../gen/opentelemetry/proto/collector/metrics/v1/metrics_service_pb.js';
import { TraceService } from '../../gen/opentelemetry/proto/collector/trace/v1/trace_service_pb.js';
import type { OtlpFormat } from '../domain/otlp-export.js';
import { otlpExportKey } from '../services/otlp.js';

// OTLP/gRPC exports are not decoded by connect-es (docs/telemetry.md "What an export may cost").
// Its handlers decode a request message with fromBinary before any code of ours runs (interceptors
// see the message built): a 4 MiB export of 2,000,000 empty AnyValues cost 660 ms and 265 MB there
// whatever the service did next, and no descriptor avoids it (a stand-in request type whose
// resource_spans are `repeated bytes` parses the same bytes into a view per record: 450 ms and
// 230 MB for 2,000,000 empty ResourceSpans). So the OTLP handlers are wrapped: the wrapper reads
// the export's bytes with the library's own framing and decompression (the transforms and
// negotiation its handlers use, with the same readMaxBytes), hands them to the service as a
// context value (otlpExportKey), and gives the library an empty request message in their place.
// The library still does everything else: protocol, headers, errors, the answer and its
// compression; the services and their descriptors stay the real OTLP ones (reflection, health).
// The service measures the bytes and decodes them a piece at a time (src/services/otlp.ts), as it
// does for OTLP/HTTP.

const OTLP_SERVICES: ReadonlySet<string> = new Set([TraceService.typeName, MetricsService.typeName]);

/** The request compressions the Connect plugin accepts (src/http/connect-adapter.ts's default). */
const ACCEPT_COMPRESSION: Compression[] = [compressionGzip, compressionBrotli];

const EMPTY_BINARY = new Uint8Array(0);
const EMPTY_JSON = new TextEncoder().encode('{}');

interface ReadOptions {
  /** The OTLP services' readMaxBytes (OTLP_MAX_EXPORT_BYTES), as received and decompressed. */
  readMaxBytes: number;
  acceptCompression?: Compression[];
}

/** Wraps, in place, the handlers of the OTLP services on the router (call after they are registered). */
export function otlpExportsReadAsBytes(router: ConnectRouter, opts: ReadOptions): void {
  const hs = router.handlers;
  let wrapped = 0;
  for (let i = 0; i < hs.length; i++) {
    if (!OTLP_SERVICES.has(hs[i]!.service.typeName)) continue;
    hs[i] = wrap(hs[i]!, { readMaxBytes: opts.readMaxBytes, acceptCompression: opts.acceptCompression ?? ACCEPT_COMPRESSION });
    wrapped++;
  }
  if (wrapped !== OTLP_SERVICES.size) throw new Error('otlpExportsReadAsBytes: register the OTLP services first');
}

function wrap(h: UniversalHandler, opts: Required<ReadOptions>): UniversalHandler {
  const wrapped = (req: UniversalServerRequest) => {
    // Requests the library refuses before it reads a body (a method or content type it does not
    // serve for a unary call: GET, gRPC-Web text, a Connect streaming type, none) pass as they are.
    if (req.method !== 'POST') return h(req);
    const type = req.header.get('content-type');
    const enveloped = grpc.parseContentType(type) ?? grpcWeb.parseContentType(type);
    if (enveloped !== undefined && !('text' in enveloped && enveloped.text)) return h(envelopedExport(req, enveloped.binary, opts));
    const unary = connect.parseContentType(type);
    if (unary !== undefined && !unary.stream) return h(unaryExport(req, unary.binary, opts));
    return h(req);
  };
  return Object.assign(wrapped, h) as UniversalHandler;
}

const formatOf = (binary: boolean): OtlpFormat => (binary ? 'protobuf' : 'proto3-json');

function bodyOf(req: UniversalServerRequest): AsyncIterable<Uint8Array> {
  const body = req.body;
  // src/http/connect-adapter.ts always passes the body as a stream of bytes.
  if (typeof body !== 'object' || body === null || !(Symbol.asyncIterator in body)) throw new Error('otlp-grpc: the request body is not a byte stream');
  return body as AsyncIterable<Uint8Array>;
}

/**
 * gRPC and gRPC-Web: the body is enveloped messages, each possibly compressed (grpc-encoding). The
 * first message's bytes, decompressed, go to the service; the library reads one empty, uncompressed
 * envelope per envelope sent (so a unary call sent none or two is refused by it as before). Errors
 * of the framing, the size or the compression end the call as the library's own would.
 */
function envelopedExport(req: UniversalServerRequest, binary: boolean, opts: Required<ReadOptions>): UniversalServerRequest {
  const values = req.contextValues ?? createContextValues();
  const compression = compressionNegotiate(opts.acceptCompression, req.header.get(grpc.headerEncoding), req.header.get(grpc.headerAcceptEncoding), grpc.headerAcceptEncoding);
  const source = bodyOf(req);
  async function* body(): AsyncGenerator<Uint8Array> {
    if (compression.error) throw compression.error;
    const messages = pipe(source, transformSplitEnvelope(opts.readMaxBytes), transformDecompressEnvelope(compression.request ?? null, opts.readMaxBytes));
    let first = true;
    for await (const { data } of messages) {
      if (first) values.set(otlpExportKey, { bytes: data, format: formatOf(binary) });
      first = false;
      yield encodeEnvelope(0, binary ? EMPTY_BINARY : EMPTY_JSON);
    }
  }
  return { ...req, body: body(), contextValues: values };
}

/**
 * Connect unary: the body is the message, compressed as Content-Encoding says. Its bytes,
 * decompressed, go to the service; the library reads an empty message, sent as is.
 */
function unaryExport(req: UniversalServerRequest, binary: boolean, opts: Required<ReadOptions>): UniversalServerRequest {
  const values = req.contextValues ?? createContextValues();
  const compression = compressionNegotiate(opts.acceptCompression, req.header.get(connect.headerUnaryEncoding), req.header.get(connect.headerUnaryAcceptEncoding), connect.headerUnaryAcceptEncoding);
  const source = bodyOf(req);
  const length = req.header.get(connect.headerUnaryContentLength);
  const header = new Headers(req.header);
  header.delete(connect.headerUnaryEncoding);
  header.delete(connect.headerUnaryContentLength);
  async function* body(): AsyncGenerator<Uint8Array> {
    if (compression.error) throw compression.error;
    let bytes = await readAllBytes(source, opts.readMaxBytes, length);
    if (compression.request) bytes = await compression.request.decompress(bytes, opts.readMaxBytes);
    values.set(otlpExportKey, { bytes, format: formatOf(binary) });
    yield binary ? EMPTY_BINARY : EMPTY_JSON;
  }
  return { ...req, header, body: body(), contextValues: values };
}
