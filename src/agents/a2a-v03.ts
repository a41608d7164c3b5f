// A2A 0.3 over JSON-RPC (DECISIONS.md "A2A"): the slash-named methods (message/send, tasks/get,
// ...) with 0.3 shapes: messages {role, parts: [{kind: "text", text}], messageId, kind: "message"},
// tasks {id, contextId, status: {state, timestamp}, artifacts, history, kind: "task"} and stream
// events {kind: "status-update" | "artifact-update", ..., final}. The stored task document is
// already in this form (src/services/a2a.ts), so results are the documents themselves.
import { answerWithin, lastMessages } from '../domain/a2a-task.js';
import { A2A_LIMITS, A2aError, type A2aService, type StoredTask, type TaskEvent, type TaskMessage, type TaskPart } from '../services/a2a.js';
import {
  A2A_ERROR_CODES,
  invalidParams,
  isObject,
  optionalInt,
  optionalObject,
  optionalString,
  optionalStrings,
  RPC,
  RpcError,
  ServiceProblemError,
  type MethodContext,
  type MethodHandler,
  type Params,
  type VersionBinding,
} from './a2a-rpc.js';

export const A2A_V03_VERSION = '0.3';

export const V03_METHODS = [
  'message/send',
  'message/stream',
  'tasks/get',
  'tasks/cancel',
  'tasks/resubscribe',
  'tasks/pushNotificationConfig/set',
  'tasks/pushNotificationConfig/get',
  'tasks/pushNotificationConfig/list',
  'tasks/pushNotificationConfig/delete',
  'agent/getAuthenticatedExtendedCard',
] as const;

const MAX_PARTS = 32;
const MAX_ID = 256;

function readPart(p: unknown, where: string): TaskPart {
  if (!isObject(p)) throw invalidParams(`${where} must be a Part object`);
  const metadata = optionalObject(p, 'metadata', where);
  const meta = metadata ? { metadata } : {};
  switch (p.kind) {
    case 'text':
      if (typeof p.text !== 'string') throw invalidParams(`${where}.text must be a string`);
      return { kind: 'text', text: p.text, ...meta };
    case 'data':
      if (!isObject(p.data)) throw invalidParams(`${where}.data must be an object`);
      return { kind: 'data', data: p.data, ...meta };
    case 'file': {
      const f = p.file;
      if (!isObject(f)) throw invalidParams(`${where}.file must be an object with bytes or uri`);
      const mimeType = optionalString(f, 'mimeType', `${where}.file`);
      const name = optionalString(f, 'name', `${where}.file`, 1024);
      const extra = { ...(mimeType ? { mimeType } : {}), ...(name ? { name } : {}) };
      if (typeof f.uri === 'string' && f.uri.length <= 4096) return { kind: 'file', file: { uri: f.uri, ...extra }, ...meta };
      if (typeof f.bytes === 'string') return { kind: 'file', file: { bytes: f.bytes, ...extra }, ...meta };
      throw invalidParams(`${where}.file must carry bytes (base64) or uri`);
    }
    default: {
      const hint = 'text' in p && !('kind' in p) ? ' (0.3 parts carry kind: {"kind": "text", "text": "..."}; the 1.0 form needs method SendMessage with A2A-Version: 1.0)' : '';
      throw invalidParams(`${where}.kind must be "text", "data" or "file"${hint}`);
    }
  }
}

function readMessage(v: unknown): TaskMessage {
  const where = 'params.message';
  if (!isObject(v)) throw invalidParams(`${where} must be a Message object`);
  if (v.role !== 'user') throw invalidParams(`${where}.role must be "user"`);
  if (typeof v.messageId !== 'string' || v.messageId === '' || v.messageId.length > MAX_ID) throw invalidParams(`${where}.messageId must be a non-empty string`);
  if (v.kind !== undefined && v.kind !== 'message') throw invalidParams(`${where}.kind must be "message"`);
  const parts = v.parts;
  if (!Array.isArray(parts) || parts.length === 0 || parts.length > MAX_PARTS) throw invalidParams(`${where}.parts must be an array of 1 to ${MAX_PARTS} parts`);
  for (const k of ['contextId', 'taskId'] as const) {
    const x = v[k];
    if (x !== undefined && (typeof x !== 'string' || x === '' || x.length > MAX_ID)) throw invalidParams(`${where}.${k} must be a non-empty string`);
  }
  const metadata = optionalObject(v, 'metadata', where);
  const referenceTaskIds = optionalStrings(v, 'referenceTaskIds', where);
  const extensions = optionalStrings(v, 'extensions', where);
  return {
    kind: 'message',
    role: 'user',
    messageId: v.messageId,
    parts: parts.map((p, i) => readPart(p, `${where}.parts[${i}]`)),
    ...(typeof v.taskId === 'string' ? { taskId: v.taskId } : {}),
    ...(typeof v.contextId === 'string' ? { contextId: v.contextId } : {}),
    ...(metadata ? { metadata } : {}),
    ...(referenceTaskIds?.length ? { referenceTaskIds } : {}),
    ...(extensions?.length ? { extensions } : {}),
  };
}

function readSendParams(params: Params | undefined) {
  if (!params) throw invalidParams('params must be MessageSendParams: {message: {role: "user", parts: [{kind: "text", text}], messageId, kind: "message"}}');
  const message = readMessage(params.message);
  const config = optionalObject(params, 'configuration', 'params') ?? {};
  if (config.pushNotificationConfig !== undefined && config.pushNotificationConfig !== null) {
    throw new RpcError(RPC.pushNotificationNotSupported, 'push notifications are not supported (capabilities.pushNotifications is false); poll tasks/get or use message/stream');
  }
  return {
    message,
    acceptedOutputModes: optionalStrings(config, 'acceptedOutputModes', 'params.configuration'),
    historyLength: optionalInt(config, 'historyLength', 'params.configuration'),
  };
}

/**
 * A stored task as 0.3 sends it, with its history cut to the last `historyLength` messages and
 * the answer to `maxBytes` of JSON (the oldest messages left out; A2A_LIMITS.maxAnswerBytes).
 */
export function v03Task(t: StoredTask, historyLength?: number, maxBytes?: number): StoredTask {
  if (!Array.isArray(t.history)) return t;
  const history = lastMessages(t.history as TaskMessage[], historyLength);
  return answerWithin(history, maxBytes, (kept) => ({ ...t, history: kept })) as StoredTask;
}

/** A stream event as a 0.3 SendStreamingMessageResponse result. */
export function v03Event(e: TaskEvent): unknown {
  if (e.kind === 'task') return v03Task(e.task, undefined, A2A_LIMITS.maxAnswerBytes);
  return e;
}

function idParam(params: Params | undefined): string {
  if (!params || typeof params.id !== 'string' || params.id === '' || params.id.length > MAX_ID) throw invalidParams('params.id must be a task id string');
  return params.id;
}

async function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof A2aError) throw new RpcError(A2A_ERROR_CODES[err.kind], err.message);
    throw err;
  }
}

const unary = (run: (params: Params | undefined, a2a: A2aService, ctx: MethodContext) => Promise<unknown>): MethodHandler<A2aService> => ({
  stream: false,
  run: (p, a2a, ctx) => call(() => run(p, a2a, ctx)),
});
const pushNotSupported = unary(async () => {
  throw new RpcError(RPC.pushNotificationNotSupported, 'Push Notification is not supported by this agent (capabilities.pushNotifications is false); poll tasks/get or use message/stream');
});

async function* map<T, U>(source: AsyncIterable<T>, fn: (t: T) => U): AsyncIterable<U> {
  for await (const x of source) yield fn(x);
}

const methods = new Map<string, MethodHandler<A2aService>>([
  [
    'message/send',
    unary(async (params, a2a, ctx) => {
      const req = readSendParams(params);
      return v03Task(await a2a.send(req.message, { acceptedOutputModes: req.acceptedOutputModes }), req.historyLength, ctx.budget?.left);
    }),
  ],
  [
    'message/stream',
    {
      stream: true,
      open: (params, a2a) =>
        call(async () => {
          const req = readSendParams(params);
          return map(await a2a.sendStreaming(req.message, { acceptedOutputModes: req.acceptedOutputModes }), v03Event);
        }),
    },
  ],
  [
    'tasks/get',
    unary(async (params, a2a, ctx) => {
      const id = idParam(params);
      const historyLength = optionalInt(params!, 'historyLength', 'params');
      return v03Task(await a2a.get(id), historyLength, ctx.budget?.left);
    }),
  ],
  ['tasks/cancel', unary(async (params, a2a, ctx) => v03Task(await a2a.cancel(idParam(params)), undefined, ctx.budget?.left))],
  ['tasks/resubscribe', { stream: true, open: (params, a2a, ctx) => call(async () => map(await a2a.subscribe(idParam(params), ctx), v03Event)) }],
  ['tasks/pushNotificationConfig/set', pushNotSupported],
  ['tasks/pushNotificationConfig/get', pushNotSupported],
  ['tasks/pushNotificationConfig/list', pushNotSupported],
  ['tasks/pushNotificationConfig/delete', pushNotSupported],
  [
    'agent/getAuthenticatedExtendedCard',
    unary(async () => {
      throw new RpcError(RPC.unsupportedOperation, 'this agent has no authenticated extended card (supportsAuthenticatedExtendedCard is false): the public card is complete');
    }),
  ],
]);

export const a2aV03: VersionBinding<A2aService> = {
  version: A2A_V03_VERSION,
  methods,
  errorObject: (err) => {
    // A call the service could not serve: the problem as REST names it, in the error's data.
    if (err instanceof ServiceProblemError) return { code: err.code, message: err.message, data: err.detail };
    return err.data === undefined ? { code: err.code, message: err.message } : { code: err.code, message: err.message, data: err.data };
  },
};
