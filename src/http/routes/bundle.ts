import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../routes.js';
import type { BundleEncoding } from '../../services/bundle.js';
import { sharedAnswer } from '../answer-budget.js';

// GET /v1/bundle (docs/bundles.md): the signed offline bundle, compressed by Accept-Encoding,
// with a strong ETag (the token's jti) answered 304 on If-None-Match.

/** The encoding to answer in: br, else gzip, else none, by the client's q-values (RFC 9110 12.5.3). */
export function negotiateEncoding(header: string | undefined): BundleEncoding {
  if (!header) return 'identity';
  const q = new Map<string, number>();
  for (const part of header.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    const qp = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const v = qp ? Number(qp.slice(2)) : 1;
    q.set(name, Number.isFinite(v) ? v : 0);
  }
  const of = (n: string) => q.get(n) ?? q.get('*') ?? 0;
  if (of('br') > 0 && of('br') >= of('gzip')) return 'br';
  if (of('gzip') > 0) return 'gzip';
  return 'identity';
}

/** Whether If-None-Match names this strong ETag (weak comparison, RFC 9110 13.1.2). */
function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  if (ifNoneMatch.trim() === '*') return true;
  return ifNoneMatch.split(',').some((t) => t.trim().replace(/^W\//, '') === etag);
}

export function bundleRoutes(app: FastifyInstance, { services }: RouteDeps) {
  app.get<{ Querystring: { category?: string; verdict?: string; since?: string } }>(
    '/v1/bundle',
    {
      schema: {
        querystring: {
          type: 'object',
          properties: { category: { type: 'string', maxLength: 64 }, verdict: { type: 'string', maxLength: 64 }, since: { type: 'string', maxLength: 64 } },
        },
      },
    },
    async (req, reply) => {
      const b = await services.bundle.get(req.query);
      const encoding = negotiateEncoding(req.headers['accept-encoding']);
      // One strong ETag per content coding (RFC 9110 8.8.3): a cache that revalidates its stored
      // variants picks the one a 304 names by its ETag, so a gzip and an identity variant sharing
      // one could hand a client the coding it did not accept.
      const etag = encoding === 'identity' ? b.etag : `${b.etag.slice(0, -1)}-${encoding}"`;
      const headers = {
        etag,
        // Revalidate each time (cheap: 304); the document itself says until when it is valid.
        'cache-control': 'no-cache',
        vary: 'accept-encoding',
        'x-bundle-id': b.bundleId,
        'x-bundle-expires': b.expiresAt.toISOString(),
        'last-modified': b.issuedAt.toUTCString(),
      };
      if (matches(req.headers['if-none-match'], etag)) return reply.code(304).headers(headers).send();
      const body = await b.encoded(encoding);
      // One cached Buffer per filter set and coding, written to every reader by reference.
      sharedAnswer(reply.raw);
      reply.code(200).headers(headers).header('content-type', 'application/json; charset=utf-8');
      if (encoding !== 'identity') reply.header('content-encoding', encoding);
      return reply.send(body);
    },
  );
}

