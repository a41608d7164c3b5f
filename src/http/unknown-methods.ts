import http from 'node:http';
import type http2 from 'node:http2';
import { PROBLEM_CONTENT_TYPE, problemBody } from '../errors.js';
import { requestIdOf } from './request-id.js';

// Methods no route can have. Node's HTTP/1.1 parser refuses a method it does not know (400, in
// src/http/socket-answers.ts), but HTTP/2 carries any token in `:method`, and fastify's router
// answered such a request with a 500 `internal`, an error log with a stack trace, a warning that
// printed its route tree and no request metric: anyone could fill the logs and raise 5xx alerts
// (audit of 2026-11-28). They are answered here, before fastify, with 501 problem+json (RFC 9110
// section 15.6.2: a method the server does not recognise).

type Request = http.IncomingMessage | http2.Http2ServerRequest;
type Response = http.ServerResponse | http2.Http2ServerResponse;
type Handler = (req: Request, res: Response) => void;

const KNOWN: ReadonlySet<string> = new Set(http.METHODS);

/** `next` for requests whose method node knows; a 501 problem+json for any other. */
export function refuseUnknownMethods(next: Handler): Handler {
  return (req, res) => {
    if (KNOWN.has(req.method ?? '')) return next(req, res);
    const body = JSON.stringify(problemBody('unimplemented', `the method ${String(req.method).slice(0, 40)} is not supported here`, requestIdOf(req)));
    res.writeHead(501, { 'content-type': PROBLEM_CONTENT_TYPE, 'content-length': String(Buffer.byteLength(body)) });
    res.end(body);
  };
}
