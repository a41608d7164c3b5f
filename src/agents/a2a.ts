import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { Db } from '../db/index.js';
import type { RouteDeps } from '../http/routes.js';
import { a2aTaskStore, type StoredTask } from '../store/a2a-tasks.js';
import { A2A_METHODS, a2aDescriptor, matchSkill } from './a2a-card.js';
import { createAgentSkills, SkillError, type AgentSkills, type JsonObject } from './skills.js';

// /a2a: A2A protocol 0.3 over JSON-RPC 2.0 (message/send, tasks/get). Every message/send runs
// one skill synchronously and answers a Task in a terminal state, stored so tasks/get returns it.

type Id = string | number | null;
type RpcResponse = { jsonrpc: '2.0'; id: Id; result: unknown } | { jsonrpc: '2.0'; id: Id; error: { code: number; message: string; data?: unknown } };

export const RPC = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internal: -32603,
  taskNotFound: -32001,
  unsupportedOperation: -32004,
} as const;

class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

const MAX_TEXT = 4096;
const MAX_PARTS = 32;
const ID_MAX = 256;

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const error = (id: Id, code: number, message: string): RpcResponse => ({ jsonrpc: '2.0', id, error: { code, message } });

function historyLength(v: unknown, where: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new RpcError(RPC.invalidParams, `${where} must be a non-negative integer`);
  return v;
}

function trimHistory(task: StoredTask, n: number | undefined): StoredTask {
  if (n === undefined || !Array.isArray(task.history)) return task;
  return { ...task, history: n === 0 ? [] : task.history.slice(-n) };
}

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

export function createA2aHandler(skills: AgentSkills, db: Db, now: () => Date) {
  const tasks = a2aTaskStore(db);

  function agentMessage(text: string, taskId: string, contextId: string) {
    return { role: 'agent', parts: [{ kind: 'text', text }], messageId: randomUUID(), taskId, contextId, kind: 'message' };
  }

  async function messageSend(params: Record<string, unknown>): Promise<StoredTask> {
    const message = params.message;
    if (!isObject(message)) throw new RpcError(RPC.invalidParams, 'params.message must be a Message object');
    if (message.role !== 'user') throw new RpcError(RPC.invalidParams, 'params.message.role must be "user"');
    if (typeof message.messageId !== 'string' || message.messageId === '' || message.messageId.length > ID_MAX) {
      throw new RpcError(RPC.invalidParams, 'params.message.messageId must be a non-empty string');
    }
    if (message.kind !== undefined && message.kind !== 'message') throw new RpcError(RPC.invalidParams, 'params.message.kind must be "message"');
    const parts = message.parts;
    if (!Array.isArray(parts) || parts.length === 0 || parts.length > MAX_PARTS || !parts.every(isObject)) {
      throw new RpcError(RPC.invalidParams, `params.message.parts must be an array of 1 to ${MAX_PARTS} parts`);
    }
    for (const k of ['contextId', 'taskId'] as const) {
      const v = message[k];
      if (v !== undefined && (typeof v !== 'string' || v === '' || v.length > ID_MAX)) throw new RpcError(RPC.invalidParams, `params.message.${k} must be a string`);
    }
    const config = params.configuration;
    if (config !== undefined && !isObject(config)) throw new RpcError(RPC.invalidParams, 'params.configuration must be an object');
    const keep = historyLength(config?.historyLength, 'params.configuration.historyLength');
    if (typeof message.taskId === 'string') {
      // Every task we create ends in a terminal state, so it cannot take further messages.
      if (!(await tasks.get(message.taskId))) throw new RpcError(RPC.taskNotFound, `task ${message.taskId} not found`);
      throw new RpcError(RPC.unsupportedOperation, `task ${message.taskId} is in a terminal state and accepts no more messages; send a new message without taskId`);
    }
    const text = parts
      .filter((p) => p.kind === 'text')
      .map((p) => p.text)
      .filter((t): t is string => typeof t === 'string')
      .join('\n')
      .trim();
    if (text === '') throw new RpcError(RPC.invalidParams, 'params.message needs a text part, e.g. "trust score for <server>" or "preflight <server>"');
    if (text.length > MAX_TEXT) throw new RpcError(RPC.invalidParams, `the text is longer than ${MAX_TEXT} characters`);

    const id = randomUUID();
    const contextId = typeof message.contextId === 'string' ? message.contextId : randomUUID();
    const userMessage = { ...message, parts, taskId: id, contextId, kind: 'message' };
    const at = now();
    const status = (state: string, reply: string) => ({ state, timestamp: at.toISOString(), message: agentMessage(reply, id, contextId) });

    let task: StoredTask;
    const matched = matchSkill(text);
    if (!matched) {
      const reply = 'I answer "trust score for <server>" and "preflight <server>", where <server> is an MCP server URL, name or slug.';
      task = { id, contextId, status: status('rejected', reply), artifacts: [], history: [userMessage, agentMessage(reply, id, contextId)], kind: 'task' };
    } else {
      try {
        const answer = matched.skill.id === 'preflight' ? await skills.preflight(matched.server) : await skills.checkTrust(matched.server);
        const text = summary(matched.skill.id, answer);
        task = {
          id,
          contextId,
          status: status('completed', text),
          artifacts: [
            {
              artifactId: randomUUID(),
              name: matched.skill.id === 'preflight' ? 'preflight-verdict' : 'trust-record',
              description: matched.skill.name,
              parts: [
                { kind: 'data', data: answer },
                { kind: 'text', text },
              ],
            },
          ],
          history: [userMessage, agentMessage(text, id, contextId)],
          kind: 'task',
          metadata: { skill: matched.skill.id },
        };
      } catch (err) {
        if (!(err instanceof SkillError)) throw err;
        task = { id, contextId, status: status('failed', err.message), artifacts: [], history: [userMessage, agentMessage(err.message, id, contextId)], kind: 'task', metadata: { skill: matched.skill.id } };
      }
    }
    await tasks.insert(task, at);
    return trimHistory(task, keep);
  }

  async function tasksGet(params: Record<string, unknown>): Promise<StoredTask> {
    if (typeof params.id !== 'string' || params.id === '' || params.id.length > ID_MAX) throw new RpcError(RPC.invalidParams, 'params.id must be a task id string');
    const keep = historyLength(params.historyLength, 'params.historyLength');
    const task = await tasks.get(params.id);
    if (!task) throw new RpcError(RPC.taskNotFound, `task ${params.id} not found`);
    return trimHistory(task, keep);
  }

  /** One JSON-RPC element; undefined for a notification (no answer). */
  async function one(req: unknown, log: { error(o: object, m: string): void }): Promise<RpcResponse | undefined> {
    if (!isObject(req)) return error(null, RPC.invalidRequest, 'Invalid Request: not a JSON-RPC request object');
    const hasId = 'id' in req;
    const idOk = !hasId || req.id === null || typeof req.id === 'string' || (typeof req.id === 'number' && Number.isFinite(req.id));
    const id: Id = hasId && idOk ? (req.id as Id) : null;
    if (!idOk) return error(null, RPC.invalidRequest, 'Invalid Request: id must be a string, a number or null');
    if (req.jsonrpc !== '2.0') return error(id, RPC.invalidRequest, 'Invalid Request: jsonrpc must be exactly "2.0"');
    if (typeof req.method !== 'string') return error(id, RPC.invalidRequest, 'Invalid Request: method must be a string');
    if ('params' in req && !isObject(req.params) && !Array.isArray(req.params)) {
      return error(id, RPC.invalidRequest, 'Invalid Request: params must be an object or an array');
    }
    let result: unknown;
    try {
      if (!(A2A_METHODS as readonly string[]).includes(req.method)) throw new RpcError(RPC.methodNotFound, `Method not found: ${req.method.slice(0, 100)}`);
      if (!isObject(req.params)) throw new RpcError(RPC.invalidParams, 'params must be an object');
      result = req.method === 'message/send' ? await messageSend(req.params) : await tasksGet(req.params);
    } catch (err) {
      if (!hasId) return undefined;
      if (err instanceof RpcError) return error(id, err.code, err.message);
      log.error({ err }, 'a2a request failed');
      return error(id, RPC.internal, 'Internal error');
    }
    return hasId ? { jsonrpc: '2.0', id, result } : undefined;
  }

  /** A parsed body: one request or a batch (JSON-RPC 2.0 section 6). undefined means "no content". */
  async function handle(body: unknown, log: { error(o: object, m: string): void }): Promise<RpcResponse | RpcResponse[] | undefined> {
    if (!Array.isArray(body)) return one(body, log);
    if (body.length === 0) return error(null, RPC.invalidRequest, 'Invalid Request: empty batch');
    if (body.length > 50) return error(null, RPC.invalidRequest, 'Invalid Request: a batch holds at most 50 requests');
    const answers: RpcResponse[] = [];
    for (const r of body) {
      const a = await one(r, log);
      if (a) answers.push(a);
    }
    return answers.length > 0 ? answers : undefined;
  }

  return { handle };
}

export function a2aRoutes(app: FastifyInstance, { services, db, config }: RouteDeps, now: () => Date = () => new Date()) {
  const handler = createA2aHandler(createAgentSkills(services), db, now);

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
        return reply.type('application/json').send(error(null, RPC.parseError, 'Parse error: the body is not valid JSON'));
      }
      const answer = await handler.handle(body, req.log);
      if (answer === undefined) return reply.code(204).send();
      return reply.type('application/json').send(answer);
    });
  });
}
