import type { FastifyBaseLogger, FastifyInstance, FastifyReply } from 'fastify';
import type { RouteDeps } from '../http/routes.js';
import { A2A_LIMITS, createA2aService, SkillRefused, type A2aService, type A2aSkillRunner } from '../services/a2a.js';
import { A2A_SKILLS, A2A_VERSIONS, a2aDescriptor } from './a2a-card.js';
import { isObject, RPC, RpcError, ServiceProblemError, type AnswerBudget, type MethodContext, type VersionBinding } from './a2a-rpc.js';
import { a2aV03, A2A_V03_VERSION } from './a2a-v03.js';
import { a2aV1, A2A_V1_VERSION } from './a2a-v1.js';
import { createAgentSkills, SkillError, type AgentSkills, type JsonObject } from './skills.js';
import { a2aSkillLimit, type RateLimitedRpcError } from './rate-limit.js';
import { unstorableJson } from '../domain/storable-text.js';
import { MAX_JSON_DEPTH, nestedDeeperThan } from '../domain/json-depth.js';
import { logFailure, problemFromError } from '../http/problem.js';
import { PROBLEMS } from '../errors.js';

// /a2a: A2A over JSON-RPC 2.0, protocol versions 1.0 and 0.3 on one endpoint (docs/agents.md).
// The A2A-Version header (or ?A2A-Version=) picks the version; none means 0.3 (A2A 1.0 section
// 3.6.2). Each version's methods read and write its own shapes (a2a-v1.ts, a2a-v03.ts) and call
// the one A2A service (src/services/a2a.ts). Streaming methods answer Server-Sent Events.

export { RPC } from './a2a-rpc.js';

type Id = string | number | null;
type RpcErrorObject = { code: number; message: string; data?: unknown };
type RpcResponse = { jsonrpc: '2.0'; id: Id; result: unknown } | { jsonrpc: '2.0'; id: Id; error: RpcErrorObject };
type Log = Pick<FastifyBaseLogger, 'error' | 'warn'>;
/** Counts one skill invocation (and the bytes of its params) against the caller's limits; the error when refused (src/agents/rate-limit.ts). */
type SkillLimit = { take(paramsBytes: number): RateLimitedRpcError | null; read(): RateLimitedRpcError | null };
/** Methods that read stored tasks: each call takes one token of the caller's `a2a_reads` limit. */
const READ_METHODS: ReadonlySet<string> = new Set(['GetTask', 'ListTasks', 'CancelTask', 'SubscribeToTask', 'tasks/get', 'tasks/cancel', 'tasks/resubscribe']);
/**
 * What a batch keeps free for each call it runs: a call starts only while this much of the HTTP
 * answer is left (a task without its history is a few KB), so no call does work whose answer
 * cannot be sent.
 */
const MIN_CALL_ANSWER_BYTES = 16 * 1024;
/** Methods that run a skill (and store a task): each call takes one token of the caller's limit. */
const SKILL_METHODS: ReadonlySet<string> = new Set(['SendMessage', 'SendStreamingMessage', 'message/send', 'message/stream']);

/** Both versions' method names, to tell a client that used the other version's name. */
const BINDINGS: readonly VersionBinding<A2aService>[] = [a2aV1, a2aV03];
const V03_TO_V1: Record<string, string> = {
  'message/send': 'SendMessage',
  'message/stream': 'SendStreamingMessage',
  'tasks/get': 'GetTask',
  'tasks/cancel': 'CancelTask',
  'tasks/resubscribe': 'SubscribeToTask',
  'tasks/pushNotificationConfig/set': 'CreateTaskPushNotificationConfig',
  'tasks/pushNotificationConfig/get': 'GetTaskPushNotificationConfig',
  'tasks/pushNotificationConfig/list': 'ListTaskPushNotificationConfigs',
  'tasks/pushNotificationConfig/delete': 'DeleteTaskPushNotificationConfig',
  'agent/getAuthenticatedExtendedCard': 'GetExtendedAgentCard',
};
const V1_TO_V03 = Object.fromEntries(Object.entries(V03_TO_V1).map(([a, b]) => [b, a]));

/** The version a request asks for: its A2A-Version (header first, then query), 0.3 when empty. */
export function negotiateVersion(raw: string | undefined): VersionBinding<A2aService> | RpcError {
  const given = (raw ?? '').trim();
  if (given === '') return a2aV03;
  // Major.Minor decides; a patch number is ignored (A2A 1.0 section 3.6).
  const m = /^(\d{1,4})(?:\.(\d{1,4}))?(?:\.\d{1,4})?$/.exec(given);
  const version = m ? `${Number(m[1])}.${Number(m[2] ?? 0)}` : null;
  const binding = BINDINGS.find((b) => b.version === version);
  if (binding) return binding;
  return new RpcError(RPC.versionNotSupported, `A2A version ${JSON.stringify(given.slice(0, 40))} is not supported; this agent speaks ${A2A_VERSIONS.join(' and ')} (A2A-Version header)`, {
    requestedVersion: given.slice(0, 40),
    supportedVersions: A2A_VERSIONS.join(', '),
  });
}

/** One-line summary of a skill's answer (the text part of the artifact and the status message). */
function summary(skillId: string, answer: JsonObject): string {
  if (skillId === 'preflight') {
    const score = answer.trust_score === null || answer.trust_score === undefined ? 'no score' : `score ${String(answer.trust_score)}`;
    return `Pre-flight for ${String(answer.server_url ?? answer.target)}: ${String(answer.verdict)} (${score}); ${String(answer.recommendation)}. Receipt ${String(answer.receipt_id)}.`;
  }
  if (answer.found === false) return `${String(answer.target)} is not tracked: verdict UNRATED (no runtime evidence yet).`;
  const server = answer.server as JsonObject;
  const metrics = answer.metrics as JsonObject;
  return `Trust score for ${String(server.url)}: ${String(server.trust_score)} (${String(answer.verdict)}) over ${String(metrics.total_interactions)} interactions.`;
}

/**
 * A call's failure that is not a refusal of its input, as the other doors answer it (REST's
 * problemFromError, the MCP tools): a database that is unavailable is REST's 503 `unavailable`
 * with its detail ("the database is unavailable; retry shortly") and Retry-After, logged as one
 * warning a second (logFailure); a bug is "Internal error", logged each time. Text the database
 * refused (NUL) is the caller's input.
 */
export function unservedError(err: unknown, log: Log, fields: Record<string, unknown> = {}): RpcError {
  const p = problemFromError(err);
  logFailure(log, err, p.code, fields);
  if (PROBLEMS[p.code].status < 500) return new RpcError(RPC.invalidParams, p.detail);
  if (p.code === 'internal') return new RpcError(RPC.internal, 'Internal error');
  const retryAfter = Number(p.headers?.['retry-after']);
  return new ServiceProblemError(p.code, p.detail, Number.isInteger(retryAfter) && retryAfter >= 0 ? retryAfter : undefined);
}

/** The skills the A2A service runs: the same functions the MCP tools call. */
export function a2aSkillRunner(skills: AgentSkills, log: Log): A2aSkillRunner {
  return {
    failed(err, skill) {
      // The task ends failed saying what REST would have said; the problem rides in the status
      // message's metadata (retry guidance for a task that was already stored as working).
      const rpc = unservedError(err, log, { skill });
      return { text: rpc instanceof ServiceProblemError ? rpc.message : 'internal error; retry later', ...(rpc instanceof ServiceProblemError ? { metadata: { problem: rpc.detail } } : {}) };
    },
    async run(skill, server) {
      const def = A2A_SKILLS.find((s) => s.id === skill)!;
      try {
        const answer = skill === 'preflight' ? await skills.preflight(server) : await skills.checkTrust(server);
        return { data: answer, text: summary(skill, answer), name: skill === 'preflight' ? 'preflight-verdict' : 'trust-record', description: def.name };
      } catch (err) {
        if (err instanceof SkillError) throw new SkillRefused(err.message);
        throw err;
      }
    },
  };
}

/** What the calls of one HTTP request share besides the method context. */
type CallContext = MethodContext & {
  limit?: SkillLimit;
  /** The calls the service could not serve (database unavailable): the HTTP status and Retry-After say so. */
  unserved: ServiceProblemError[];
};

/** `text`: the body already serialised (a batch's, measured call by call), sent as it is. */
type Answer = { kind: 'json'; body: RpcResponse | RpcResponse[]; text?: string } | { kind: 'none' } | { kind: 'stream'; id: Id; binding: VersionBinding<A2aService>; events: AsyncIterable<unknown> };

export function createA2aHandler(a2a: A2aService) {
  const errorOf = (binding: VersionBinding<A2aService>, err: RpcError) => binding.errorObject(err);
  const fail = (id: Id, binding: VersionBinding<A2aService>, err: RpcError): RpcResponse => ({ jsonrpc: '2.0', id, error: errorOf(binding, err) });
  const plain = (id: Id, code: number, message: string): RpcResponse => ({ jsonrpc: '2.0', id, error: { code, message } });

  function unknownMethod(binding: VersionBinding<A2aService>, method: string): RpcError {
    const shown = method.slice(0, 100);
    const names = binding.version === A2A_V1_VERSION ? V03_TO_V1 : V1_TO_V03;
    const other = Object.hasOwn(names, method) ? names[method] : undefined;
    if (other) {
      const otherVersion = binding.version === A2A_V1_VERSION ? A2A_V03_VERSION : A2A_V1_VERSION;
      return new RpcError(RPC.methodNotFound, `Method not found: ${shown} is an A2A ${otherVersion} method; under A2A-Version ${binding.version} call ${other} (or send A2A-Version: ${otherVersion})`);
    }
    return new RpcError(RPC.methodNotFound, `Method not found: ${shown}`);
  }

  /** One JSON-RPC element. */
  async function one(req: unknown, version: VersionBinding<A2aService> | RpcError, ctx: CallContext & { inBatch: boolean }, log: Log): Promise<Answer> {
    if (!isObject(req)) return { kind: 'json', body: plain(null, RPC.invalidRequest, 'Invalid Request: not a JSON-RPC request object') };
    const hasId = 'id' in req;
    const idOk = !hasId || req.id === null || typeof req.id === 'string' || (typeof req.id === 'number' && Number.isFinite(req.id));
    if (!idOk) return { kind: 'json', body: plain(null, RPC.invalidRequest, 'Invalid Request: id must be a string, a number or null') };
    const id: Id = hasId ? (req.id as Id) : null;
    if (req.jsonrpc !== '2.0') return { kind: 'json', body: plain(id, RPC.invalidRequest, 'Invalid Request: jsonrpc must be exactly "2.0"') };
    if (typeof req.method !== 'string') return { kind: 'json', body: plain(id, RPC.invalidRequest, 'Invalid Request: method must be a string') };
    if ('params' in req && req.params !== undefined && !isObject(req.params) && !Array.isArray(req.params)) {
      return { kind: 'json', body: plain(id, RPC.invalidRequest, 'Invalid Request: params must be an object or an array') };
    }
    const done = (body: RpcResponse): Answer => (hasId ? { kind: 'json', body } : { kind: 'none' });
    if (version instanceof RpcError) return done(fail(id, a2aV1, version));
    const binding = version;
    try {
      const handler = binding.methods.get(req.method);
      if (!handler) throw unknownMethod(binding, req.method);
      if (Array.isArray(req.params)) throw new RpcError(RPC.invalidParams, 'params must be an object (A2A methods take named parameters)');
      // Tasks keep their messages in jsonb: text PostgreSQL cannot store is refused before any work.
      const unstorable = unstorableJson(req.params, 'params');
      if (unstorable) throw new RpcError(RPC.invalidParams, `${unstorable.path.slice(0, 200)} ${unstorable.why}`);
      // What the task will keep of this call is its params (the message, in its history): counted as their JSON.
      const refused = !ctx.limit
        ? null
        : SKILL_METHODS.has(req.method)
          ? ctx.limit.take(Buffer.byteLength(JSON.stringify(req.params ?? null)))
          : READ_METHODS.has(req.method)
            ? ctx.limit.read()
            : null;
      if (refused) throw new RpcError(refused.code, refused.message, refused.data);
      const params = req.params as Record<string, unknown> | undefined;
      if (!handler.stream) return done({ jsonrpc: '2.0', id, result: await handler.run(params, a2a, ctx) });
      if (ctx.inBatch) throw new RpcError(RPC.unsupportedOperation, `${req.method} streams Server-Sent Events and cannot be part of a batch; send it alone`);
      const events = await handler.open(params, a2a, ctx);
      if (!hasId) {
        // A notification gets no answer; the work (e.g. a streamed message's task) still happens.
        for await (const _ of events) if (ctx.signal.aborted) break;
        return { kind: 'none' };
      }
      return { kind: 'stream', id, binding, events };
    } catch (err) {
      const rpc = err instanceof RpcError ? err : unservedError(err, log, { method: req.method });
      if (rpc instanceof ServiceProblemError) ctx.unserved.push(rpc);
      return done(fail(id, binding, rpc));
    }
  }

  /** A parsed body: one request or a batch (JSON-RPC 2.0 section 6). */
  async function handle(body: unknown, versionHeader: string | undefined, ctx: CallContext, log: Log): Promise<Answer> {
    const version = negotiateVersion(versionHeader);
    // One HTTP answer carries at most A2A_LIMITS.maxAnswerBytes of JSON: the methods that return
    // tasks cut them to what is left (ListTasks pages, task histories), and a batch stops running
    // calls once too little is left for another answer.
    const budget: AnswerBudget = { left: A2A_LIMITS.maxAnswerBytes };
    if (!Array.isArray(body)) return one(body, version, { ...ctx, inBatch: false, budget }, log);
    if (body.length === 0) return { kind: 'json', body: plain(null, RPC.invalidRequest, 'Invalid Request: empty batch') };
    if (body.length > 50) return { kind: 'json', body: plain(null, RPC.invalidRequest, 'Invalid Request: a batch holds at most 50 requests') };
    const answers: RpcResponse[] = [];
    // Each answer's JSON, measured against the budget once and sent as measured.
    const texts: string[] = [];
    const add = (answer: RpcResponse, text = JSON.stringify(answer)) => {
      answers.push(answer);
      texts.push(text);
    };
    // `ran`: the call ran but its answer does not fit (a read: what a write answers is cut to fit).
    const tooLarge = (r: unknown, ran: boolean): RpcResponse => {
      const id = isObject(r) && (typeof r.id === 'string' || typeof r.id === 'number') ? r.id : null;
      const binding = version instanceof RpcError ? a2aV1 : version;
      const used = A2A_LIMITS.maxAnswerBytes - budget.left;
      const what = ran ? 'its answer does not fit' : 'not run';
      return fail(id, binding, new RpcError(RPC.answerTooLarge, `${what}: the answers before it in this batch hold ${used} bytes and one HTTP answer holds at most ${A2A_LIMITS.maxAnswerBytes}; send this call again in another request`));
    };
    for (const r of body) {
      // A notification is answered with nothing, so it runs whatever is left.
      if (answers.length > 0 && budget.left < MIN_CALL_ANSWER_BYTES && isObject(r) && 'id' in r) {
        add(tooLarge(r, false));
        continue;
      }
      const a = await one(r, version, { ...ctx, inBatch: true, budget }, log);
      if (a.kind !== 'json' || Array.isArray(a.body)) continue;
      const text = JSON.stringify(a.body);
      const size = Buffer.byteLength(text) + 1;
      if (answers.length > 0 && size > budget.left) {
        add(tooLarge(r, true));
        budget.left = 0;
        continue;
      }
      budget.left -= size;
      add(a.body, text);
    }
    return answers.length > 0 ? { kind: 'json', body: answers, text: `[${texts.join(',')}]` } : { kind: 'none' };
  }

  return { handle };
}

/** How often an idle event stream sends an SSE comment, so proxies keep the connection open. */
const SSE_HEARTBEAT_MS = 15_000;

async function sendEventStream(reply: FastifyReply, answer: Extract<Answer, { kind: 'stream' }>, log: Log): Promise<void> {
  reply.hijack();
  const raw = reply.raw;
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(reply.getHeaders())) if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : String(v);
  raw.writeHead(200, { ...headers, 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
  // Each write waits until the socket took the one before (a client that reads slowly holds
  // one event in memory, not every event and heartbeat since); the connection's own deadlines
  // end a client that stops reading.
  const write = async (text: string): Promise<void> => {
    if (raw.write(text) || raw.destroyed) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        raw.off('drain', done);
        raw.off('close', done);
        resolve();
      };
      raw.on('drain', done);
      raw.on('close', done);
    });
  };
  const event = (payload: RpcResponse) => write(`data: ${JSON.stringify(payload)}\n\n`);
  const it = answer.events[Symbol.asyncIterator]();
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const next = it.next();
      let step: IteratorResult<unknown> | 'tick';
      do {
        step = await Promise.race([next, new Promise<'tick'>((r) => (timer = setTimeout(() => r('tick'), SSE_HEARTBEAT_MS)))]);
        clearTimeout(timer);
        if (step === 'tick') await write(': keep-alive\n\n');
      } while (step === 'tick');
      if (step.done || raw.destroyed) break;
      await event({ jsonrpc: '2.0', id: answer.id, result: step.value });
    }
  } catch (err) {
    const rpc = err instanceof RpcError ? err : unservedError(err, log, { stream: true });
    if (!raw.destroyed) await event({ jsonrpc: '2.0', id: answer.id, error: answer.binding.errorObject(rpc) });
  } finally {
    await it.return?.();
    raw.end();
  }
}

/**
 * The HTTP side of calls the service could not serve: Retry-After (the longest any of them asks,
 * beside a rate limit's) and, when one such error is the whole answer, its status (503), as
 * REST answers; a batch stays 200 with each call's own answer. Both A2A SDK lines read the
 * JSON-RPC error of a non-2xx answer.
 */
function unservedStatus(reply: FastifyReply, unserved: readonly ServiceProblemError[], answer: Answer): void {
  if (unserved.length === 0) return;
  const retryAfter = Math.max(-1, ...unserved.map((e) => e.retryAfterSeconds ?? -1));
  const already = Number(reply.getHeader('retry-after') ?? -1);
  if (retryAfter >= 0 && retryAfter > already) reply.header('retry-after', String(retryAfter));
  if (answer.kind === 'json' && !Array.isArray(answer.body) && 'error' in answer.body) void reply.code(unserved[0]!.status);
}

export function a2aRoutes(app: FastifyInstance, { services, db, config, now }: RouteDeps) {
  const a2a = createA2aService({ db, now }, a2aSkillRunner(createAgentSkills(services), app.log));
  const handler = createA2aHandler(a2a);

  void app.register(async (scope) => {
    // Raw text in, so malformed JSON is a JSON-RPC parse error; body limit and Content-Type
    // are still enforced by fastify (problem+json 413 / 415).
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => done(null, body));

    scope.get('/a2a', async (_req, reply) => {
      reply.header('cache-control', 'public, max-age=300');
      return a2aDescriptor(config);
    });

    scope.post('/a2a', async (req, reply) => {
      let body: unknown;
      try {
        body = JSON.parse(String(req.body ?? ''));
      } catch {
        return reply.type('application/json').send({ jsonrpc: '2.0', id: null, error: { code: RPC.parseError, message: 'Parse error: the body is not valid JSON' } });
      }
      // What reads a call afterwards (its size, the stored task's JSON) recurses: refused before any of it.
      if (nestedDeeperThan(body, MAX_JSON_DEPTH)) {
        return reply.type('application/json').send({ jsonrpc: '2.0', id: null, error: { code: RPC.invalidRequest, message: `Invalid Request: the body nests deeper than ${MAX_JSON_DEPTH} levels` } });
      }
      const header = req.headers['a2a-version'];
      const query = (req.query as Record<string, unknown> | undefined)?.['A2A-Version'];
      const version = typeof header === 'string' ? header : Array.isArray(header) ? header.join(',') : typeof query === 'string' ? query : undefined;
      const aborted = new AbortController();
      reply.raw.once('close', () => aborted.abort());
      const limit = a2aSkillLimit(services.limits, req.ip);
      const unserved: ServiceProblemError[] = [];
      const answer = await handler.handle(body, version, { signal: aborted.signal, client: req.ip, limit, unserved }, req.log);
      limit.finish(reply, answer.kind === 'json' ? answer.body : undefined);
      unservedStatus(reply, unserved, answer);
      if (answer.kind === 'none') return reply.code(204).send();
      if (answer.kind === 'stream') return sendEventStream(reply, answer, req.log);
      return reply.type('application/json').send(answer.text ?? answer.body);
    });
  });
}
