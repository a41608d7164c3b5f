import { randomUUID } from 'node:crypto';

// The request id every answer carries (X-Request-Id, and `request_id` in problem+json): the
// caller's own when it sent a usable one, so a trace can follow a request through a gateway,
// otherwise a new UUID. One definition for fastify's genReqId and the fast paths (fast-paths.ts).

const USABLE = /^[\w.-]{1,64}$/;

export function requestIdOf(req: { headers: Record<string, string | string[] | undefined> }): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && USABLE.test(given) ? given : randomUUID();
}
