// A2A 1.0 over JSON-RPC (A2A specification v1.0, sections 3, 4, 5 and 9): PascalCase methods,
// ProtoJSON shapes (camelCase members, TASK_STATE_* and ROLE_* enum names, parts without `kind`),
// errors with google.rpc.ErrorInfo details. The work is done by the A2A service; this file only
// reads 1.0 requests and writes 1.0 results.
import { isRfc3339 } from '../domain/rfc3339.js';
import { A2A_LIMITS, A2aError, type A2aService, type ListQuery, type StoredTask, type TaskArtifact, type TaskEvent, type TaskMessage, type TaskPart, type TaskStatus } from '../services/a2a.js';
import { answerWithin, lastMessages, storableTime } from '../domain/a2a-task.js';
import {
  A2A_ERROR_CODES,
  A2A_ERROR_REASONS,
  invalidParams,
  isObject,
  member,
  optionalBool,
  optionalId,
  optionalInt,
  optionalObject,
  optionalString,
  optionalStrings,
  requiredId,
  RPC,
  RpcError,
  ServiceProblemError,
  type MethodContext,
  type MethodHandler,
  type Params,
  type VersionBinding,
} from './a2a-rpc.js';

export const A2A_V1_VERSION = '1.0';

export const V1_METHODS = [
  'SendMessage',
  'SendStreamingMessage',
  'GetTask',
  'ListTasks',
  'CancelTask',
  'SubscribeToTask',
  'CreateTaskPushNotificationConfig',
  'GetTaskPushNotificationConfig',
  'ListTaskPushNotificationConfigs',
  'DeleteTaskPushNotificationConfig',
  'GetExtendedAgentCard',
] as const;

/** Stored state -> TaskState enum name, and back. */
export const V1_TASK_STATES: Record<string, string> = {
  submitted: 'TASK_STATE_SUBMITTED',
  working: 'TASK_STATE_WORKING',
  completed: 'TASK_STATE_COMPLETED',
  failed: 'TASK_STATE_FAILED',
  canceled: 'TASK_STATE_CANCELED',
  'input-required': 'TASK_STATE_INPUT_REQUIRED',
  rejected: 'TASK_STATE_REJECTED',
  'auth-required': 'TASK_STATE_AUTH_REQUIRED',
};
const STATE_NUMBERS = ['TASK_STATE_UNSPECIFIED', 'TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING', 'TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_REJECTED', 'TASK_STATE_AUTH_REQUIRED'];
const STORED_STATES = Object.fromEntries(Object.entries(V1_TASK_STATES).map(([k, v]) => [v, k]));

const MAX_PARTS = 32;
const MAX_ID = 256;

// ----------------------------------------------------------------------------------------------
// Reading 1.0 requests
// ----------------------------------------------------------------------------------------------

function readPart(p: unknown, where: string): TaskPart {
  if (!isObject(p)) throw invalidParams(`${where} must be a Part object`);
  const metadata = optionalObject(p, 'metadata', where);
  const mediaType = optionalString(p, 'mediaType', where, 256) || undefined;
  const filename = optionalString(p, 'filename', where, 1024) || undefined;
  const present = ['text', 'raw', 'url', 'data'].filter((k) => p[k] !== undefined && p[k] !== null);
  if (present.length !== 1) {
    const hint = 'kind' in p ? ' (1.0 parts have no "kind": {"text": "..."}; the 0.3 form needs method message/send)' : '';
    throw invalidParams(`${where} must have exactly one of text, raw, url or data${hint}`);
  }
  const meta = metadata ? { metadata } : {};
  switch (present[0]) {
    case 'text':
      if (typeof p.text !== 'string') throw invalidParams(`${where}.text must be a string`);
      return { kind: 'text', text: p.text, ...meta };
    case 'data':
      return { kind: 'data', data: p.data, ...meta };
    case 'url':
      if (typeof p.url !== 'string' || p.url.length > 4096) throw invalidParams(`${where}.url must be a URL string`);
      return { kind: 'file', file: { uri: p.url, ...(mediaType ? { mimeType: mediaType } : {}), ...(filename ? { name: filename } : {}) }, ...meta };
    default:
      if (typeof p.raw !== 'string' || !/^[A-Za-z0-9+/_-]*={0,2}$/.test(p.raw)) throw invalidParams(`${where}.raw must be base64 bytes`);
      return { kind: 'file', file: { bytes: p.raw, ...(mediaType ? { mimeType: mediaType } : {}), ...(filename ? { name: filename } : {}) }, ...meta };
  }
}

function readRole(v: unknown, where: string): 'user' {
  if (v === 'ROLE_USER' || v === 1) return 'user';
  if (v === 'user') throw invalidParams(`${where}.role must be "ROLE_USER" in A2A 1.0 ("user" is the 0.3 spelling, for method message/send)`);
  throw invalidParams(`${where}.role must be "ROLE_USER" (a client sends user messages)`);
}

function readMessage(v: unknown): TaskMessage {
  const where = 'params.message';
  if (!isObject(v)) throw invalidParams(`${where} must be a Message object`);
  const role = readRole(member(v, 'role'), where);
  const messageId = requiredId(v, 'messageId', where, MAX_ID);
  const parts = member(v, 'parts');
  if (!Array.isArray(parts) || parts.length === 0 || parts.length > MAX_PARTS) throw invalidParams(`${where}.parts must be an array of 1 to ${MAX_PARTS} parts`);
  const taskId = optionalId(v, 'taskId', where, MAX_ID);
  const contextId = optionalId(v, 'contextId', where, MAX_ID);
  const metadata = optionalObject(v, 'metadata', where);
  const referenceTaskIds = optionalStrings(v, 'referenceTaskIds', where);
  const extensions = optionalStrings(v, 'extensions', where);
  return {
    kind: 'message',
    role,
    messageId,
    parts: parts.map((p, i) => readPart(p, `${where}.parts[${i}]`)),
    ...(taskId !== undefined ? { taskId } : {}),
    ...(contextId !== undefined ? { contextId } : {}),
    ...(metadata ? { metadata } : {}),
    ...(referenceTaskIds?.length ? { referenceTaskIds } : {}),
    ...(extensions?.length ? { extensions } : {}),
  };
}

interface SendRequest {
  message: TaskMessage;
  acceptedOutputModes?: string[];
  historyLength?: number;
}

function readSendRequest(params: Params | undefined): SendRequest {
  if (!params) throw invalidParams('params must be a SendMessageRequest object: {message: {role: "ROLE_USER", parts: [{text}], messageId}}');
  const message = readMessage(params.message);
  optionalObject(params, 'metadata', 'params');
  const config = optionalObject(params, 'configuration', 'params') ?? {};
  const push = member(config, 'taskPushNotificationConfig') ?? member(config, 'pushNotificationConfig');
  if (push !== undefined && push !== null) {
    throw new RpcError(RPC.pushNotificationNotSupported, 'push notifications are not supported (capabilities.pushNotifications is false); poll GetTask or use SendStreamingMessage');
  }
  optionalBool(config, 'returnImmediately', 'params.configuration');
  return {
    message,
    acceptedOutputModes: optionalStrings(config, 'acceptedOutputModes', 'params.configuration'),
    historyLength: optionalInt(config, 'historyLength', 'params.configuration'),
  };
}

function readState(v: unknown): string | undefined {
  if (v === undefined || v === null || v === '' || v === 0 || v === 'TASK_STATE_UNSPECIFIED') return undefined;
  const name = typeof v === 'number' && Number.isInteger(v) ? STATE_NUMBERS[v] : v;
  const stored = typeof name === 'string' ? STORED_STATES[name] : undefined;
  if (!stored) throw invalidParams(`params.status must be one of ${Object.values(V1_TASK_STATES).join(', ')}`);
  return stored;
}

function readTimestamp(v: unknown, where: string): Date | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string' || !isRfc3339(v) || !storableTime(new Date(v))) {
    throw invalidParams(`${where} must be an RFC 3339 timestamp from year 0001 to 9999 (UTC), such as 2026-01-31T12:00:00Z`);
  }
  return new Date(v);
}

// ----------------------------------------------------------------------------------------------
// Writing 1.0 results
// ----------------------------------------------------------------------------------------------

function partJson(p: TaskPart): Record<string, unknown> {
  const meta = p.metadata ? { metadata: p.metadata } : {};
  if (p.kind === 'text') return { text: p.text, ...meta };
  if (p.kind === 'data') return { data: p.data, mediaType: 'application/json', ...meta };
  const common = { ...(p.file.mimeType ? { mediaType: p.file.mimeType } : {}), ...(p.file.name ? { filename: p.file.name } : {}), ...meta };
  return p.file.uri !== undefined ? { url: p.file.uri, ...common } : { raw: p.file.bytes ?? '', ...common };
}

function messageJson(m: TaskMessage): Record<string, unknown> {
  return {
    messageId: m.messageId,
    ...(m.contextId ? { contextId: m.contextId } : {}),
    ...(m.taskId ? { taskId: m.taskId } : {}),
    role: m.role === 'agent' ? 'ROLE_AGENT' : 'ROLE_USER',
    parts: m.parts.map(partJson),
    ...(m.metadata ? { metadata: m.metadata } : {}),
    ...(m.extensions?.length ? { extensions: m.extensions } : {}),
    ...(m.referenceTaskIds?.length ? { referenceTaskIds: m.referenceTaskIds } : {}),
  };
}

function statusJson(s: TaskStatus): Record<string, unknown> {
  return { state: V1_TASK_STATES[s.state] ?? 'TASK_STATE_UNSPECIFIED', ...(s.message ? { message: messageJson(s.message) } : {}), timestamp: s.timestamp };
}

function artifactJson(a: TaskArtifact): Record<string, unknown> {
  return { artifactId: a.artifactId, ...(a.name ? { name: a.name } : {}), ...(a.description ? { description: a.description } : {}), parts: a.parts.map(partJson) };
}

/**
 * A stored task in 1.0 form. historyLength 0 omits the history (section 3.2.4); `maxBytes` cuts
 * the answer to that much JSON by leaving out the oldest messages (A2A_LIMITS.maxAnswerBytes).
 */
export function taskJson(t: StoredTask, opts: { historyLength?: number; includeArtifacts?: boolean; maxBytes?: number } = {}): Record<string, unknown> {
  const history = lastMessages((t.history as TaskMessage[] | undefined) ?? [], opts.historyLength).map(messageJson);
  const artifacts = (t.artifacts as TaskArtifact[] | undefined) ?? [];
  return answerWithin(history, opts.maxBytes, (kept) => ({
    id: t.id,
    contextId: t.contextId,
    status: statusJson(t.status as TaskStatus),
    ...(opts.includeArtifacts !== false && artifacts.length > 0 ? { artifacts: artifacts.map(artifactJson) } : {}),
    ...(kept.length > 0 ? { history: kept } : {}),
    ...(t.metadata ? { metadata: t.metadata } : {}),
  }));
}

/** A stream event as a StreamResponse (section 3.2.3). */
export function streamResponseJson(e: TaskEvent): Record<string, unknown> {
  if (e.kind === 'task') return { task: taskJson(e.task, { maxBytes: A2A_LIMITS.maxAnswerBytes }) };
  if (e.kind === 'status-update') return { statusUpdate: { taskId: e.taskId, contextId: e.contextId, status: statusJson(e.status) } };
  return { artifactUpdate: { taskId: e.taskId, contextId: e.contextId, artifact: artifactJson(e.artifact), append: e.append, lastChunk: e.lastChunk } };
}

// ----------------------------------------------------------------------------------------------
// Methods
// ----------------------------------------------------------------------------------------------

/** The service's errors as 1.0 JSON-RPC errors. */
export function v1Error(err: A2aError): RpcError {
  return new RpcError(A2A_ERROR_CODES[err.kind], err.message, err.detail);
}

function idParam(params: Params | undefined): string {
  if (!params) throw invalidParams('params must be an object with the task id: {"id": "<task id>"}');
  return requiredId(params, 'id', 'params', MAX_ID);
}

async function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof A2aError) throw v1Error(err);
    throw err;
  }
}

const unary = (run: (params: Params | undefined, a2a: A2aService, ctx: MethodContext) => Promise<unknown>): MethodHandler<A2aService> => ({
  stream: false,
  run: (p, a2a, ctx) => call(() => run(p, a2a, ctx)),
});
const pushNotSupported = unary(async () => {
  throw new RpcError(RPC.pushNotificationNotSupported, 'push notifications are not supported by this agent (capabilities.pushNotifications is false); poll GetTask or use SendStreamingMessage');
});

const methods = new Map<string, MethodHandler<A2aService>>([
  [
    'SendMessage',
    unary(async (params, a2a, ctx) => {
      const req = readSendRequest(params);
      const task = await a2a.send(req.message, { acceptedOutputModes: req.acceptedOutputModes });
      return { task: taskJson(task, { historyLength: req.historyLength, maxBytes: ctx.budget?.left }) };
    }),
  ],
  [
    'SendStreamingMessage',
    {
      stream: true,
      open: (params, a2a) =>
        call(async () => {
          const req = readSendRequest(params);
          const events = await a2a.sendStreaming(req.message, { acceptedOutputModes: req.acceptedOutputModes });
          return map(events, streamResponseJson);
        }),
    },
  ],
  [
    'GetTask',
    unary(async (params, a2a, ctx) => {
      const id = idParam(params);
      const historyLength = optionalInt(params!, 'historyLength', 'params');
      return taskJson(await a2a.get(id), { historyLength, maxBytes: ctx.budget?.left });
    }),
  ],
  [
    'ListTasks',
    unary(async (params, a2a, ctx) => {
      const p = params ?? {};
      const query: ListQuery = {
        contextId: optionalId(p, 'contextId', 'params', MAX_ID),
        state: readState(member(p, 'status')),
        pageSize: optionalInt(p, 'pageSize', 'params', 0, 1_000_000) || undefined,
        pageToken: optionalString(p, 'pageToken', 'params', 1024),
        statusTimestampAfter: readTimestamp(member(p, 'statusTimestampAfter'), 'params.statusTimestampAfter'),
      };
      const historyLength = optionalInt(p, 'historyLength', 'params');
      const includeArtifacts = optionalBool(p, 'includeArtifacts', 'params') ?? false;
      const maxBytes = ctx.budget?.left;
      // The page is cut by the tasks' stored JSON; their 1.0 form differs by a few bytes a
      // message (role and state names), so an eighth is kept free for it.
      const page = await a2a.list(query, maxBytes === undefined ? undefined : Math.floor((maxBytes * 7) / 8));
      return {
        tasks: page.tasks.map((t) => taskJson(t, { historyLength, includeArtifacts, maxBytes })),
        nextPageToken: page.nextPageToken,
        pageSize: page.pageSize,
        totalSize: page.totalSize,
      };
    }),
  ],
  ['CancelTask', unary(async (params, a2a, ctx) => taskJson(await a2a.cancel(idParam(params)), { maxBytes: ctx.budget?.left }))],
  [
    'SubscribeToTask',
    {
      stream: true,
      open: (params, a2a, ctx) =>
        call(async () => {
          const events = await a2a.subscribe(idParam(params), ctx);
          return map(events, streamResponseJson);
        }),
    },
  ],
  ['CreateTaskPushNotificationConfig', pushNotSupported],
  ['GetTaskPushNotificationConfig', pushNotSupported],
  ['ListTaskPushNotificationConfigs', pushNotSupported],
  ['DeleteTaskPushNotificationConfig', pushNotSupported],
  [
    'GetExtendedAgentCard',
    unary(async () => {
      throw new RpcError(RPC.unsupportedOperation, 'this agent has no extended agent card (capabilities.extendedAgentCard is false): the public card at /.well-known/agent-card.json is complete');
    }),
  ],
]);

async function* map<T, U>(source: AsyncIterable<T>, fn: (t: T) => U): AsyncIterable<U> {
  for await (const x of source) yield fn(x);
}

/** Our own ErrorInfo domain (A2A's errors use a2a-protocol.org): the problem types' host. */
const SERVICE_ERROR_DOMAIN = 'trust-observatory.dev';

/**
 * A call the service could not serve, in 1.0's error model (section 3.3.2: details are
 * google.rpc types): an ErrorInfo naming the problem (reason UNAVAILABLE, metadata with REST's
 * problem type, code, status and retry_after_seconds) and, when a retry may succeed, a RetryInfo
 * with the delay, as our gRPC and Connect refusals carry it.
 */
function serviceProblemObject(err: ServiceProblemError) {
  const d = err.detail;
  const metadata: Record<string, string> = { type: d.type, code: d.code, status: String(d.status) };
  if (d.retry_after_seconds !== undefined) metadata.retry_after_seconds = String(d.retry_after_seconds);
  const data: Record<string, unknown>[] = [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: d.code.toUpperCase(), domain: SERVICE_ERROR_DOMAIN, metadata }];
  if (d.retry_after_seconds !== undefined) data.push({ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: `${d.retry_after_seconds}s` });
  return { code: err.code, message: err.message, data };
}

export const a2aV1: VersionBinding<A2aService> = {
  version: A2A_V1_VERSION,
  methods,
  errorObject(err) {
    if (err instanceof ServiceProblemError) return serviceProblemObject(err);
    const reason = A2A_ERROR_REASONS[err.code];
    const detail = isObject(err.data) ? (err.data as Record<string, string>) : {};
    if (reason) {
      return { code: err.code, message: err.message, data: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason, domain: 'a2a-protocol.org', metadata: detail }] };
    }
    if (err.code === RPC.invalidParams && typeof detail.field === 'string') {
      return { code: err.code, message: err.message, data: [{ '@type': 'type.googleapis.com/google.rpc.BadRequest', fieldViolations: [{ field: detail.field, description: err.message }] }] };
    }
    // Our own codes (e.g. -32029 rate limited) keep their data object as is.
    return err.data === undefined ? { code: err.code, message: err.message } : { code: err.code, message: err.message, data: err.data };
  },
};
