import type { ConnectRouter } from '@connectrpc/connect';
import type { UniversalHandler, UniversalServerResponse } from '@connectrpc/connect/protocol';

// connect-es answers a request body that is not valid binary protobuf with Code.Internal ("parse
// binary: ..."): a gRPC status 13 and, on the Connect protocol, HTTP 500. The house rule is that
// malformed input is the client's error, never a 5xx, and OTLP wants INVALID_ARGUMENT (not to be
// retried) for an export that cannot be decoded. This wraps every handler of the router so that
// exactly that error becomes InvalidArgument (gRPC status 3; Connect HTTP 400 invalid_argument).
// Errors of our own code are untouched (they never say "parse binary").

const PARSE_ERROR = /^(\[internal\] )?parse binary: /;

async function rewriteConnectBody(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  if (res.status !== 500 || !res.body || res.header?.get('content-encoding')) return res;
  const chunks: Uint8Array[] = [];
  for await (const c of res.body) chunks.push(c);
  const bytes = Buffer.concat(chunks);
  const same = { ...res, body: (async function* () { yield bytes; })() };
  let err: { code?: string; message?: string };
  try {
    err = JSON.parse(bytes.toString('utf8')) as { code?: string; message?: string };
  } catch {
    return same;
  }
  if (err.code !== 'internal' || !PARSE_ERROR.test(err.message ?? '')) return same;
  const body = Buffer.from(JSON.stringify({ code: 'invalid_argument', message: 'the request message is not valid binary protobuf' }));
  res.header?.set('content-length', String(body.byteLength));
  return { ...res, status: 400, body: (async function* () { yield body; })() };
}

function wrap(h: UniversalHandler): UniversalHandler {
  const wrapped = async (req: Parameters<UniversalHandler>[0]) => {
    const res = await h(req);
    // gRPC: the status travels in trailers, already set when a parse error ends the call.
    const status = res.trailer?.get('grpc-status');
    if (status === '13' && PARSE_ERROR.test(decodeURIComponent(res.trailer?.get('grpc-message') ?? ''))) {
      res.trailer!.set('grpc-status', '3');
      res.trailer!.set('grpc-message', encodeURIComponent('the request message is not valid binary protobuf'));
      return res;
    }
    if (h.protocolNames.includes('connect')) return rewriteConnectBody(res);
    return res;
  };
  return Object.assign(wrapped, h) as UniversalHandler;
}

/** Rewrites, in place, every handler the router holds (call after all services are registered). */
export function parseErrorsAreInvalidArgument(router: ConnectRouter): void {
  const hs = router.handlers;
  for (let i = 0; i < hs.length; i++) hs[i] = wrap(hs[i]!);
}
