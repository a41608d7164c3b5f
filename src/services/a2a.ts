// A2A tasks (docs/agents.md "Tasks"): THE implementation behind /a2a for every protocol version.
// It knows no transport and no wire format: src/agents/a2a-v1.ts and a2a-v03.ts turn JSON-RPC
// requests of A2A 1.0 and 0.3 into these calls and their results back into each version's shapes.
//
// A message runs one skill at once (the skills answer in milliseconds), so a task ends completed,
// failed or rejected, or waits in input-required when the text named no server; the client's
// next message on that task (same taskId) names it and completes the task. Tasks are stored, so
// GetTask, ListTasks, CancelTask and SubscribeToTask work from any instance.
import { randomUUID } from 'node:crypto';
import type { Queryable } from '../db/index.js';
import { understandFollowUp, understandRequest, type AgentSkillId, type UnderstoodRequest } from '../domain/agent-request.js';
import {
  acceptedOutputModes,
  decodePageToken,
  encodePageToken,
  INTERRUPTED_STATES,
  isTerminal,
  LIST_PAGE_SIZE,
  newestWithin,
  TASK_STATES,
} from '../domain/a2a-task.js';
import { a2aTaskStore, type StoredTask } from '../store/a2a-tasks.js';
import { addToNetwork, networkShare } from '../domain/client-network.js';
import { rateLimitKey } from './rate-limits.js';

export type { StoredTask } from '../store/a2a-tasks.js';

/** Why an A2A request cannot be served as asked; the adapters map each kind to its error code. */
export type A2aErrorKind = 'task_not_found' | 'task_not_cancelable' | 'unsupported_operation' | 'content_type_not_supported' | 'invalid_params';

export class A2aError extends Error {
  constructor(
    readonly kind: A2aErrorKind,
    message: string,
    /** Structured detail for the error's data (task id, field, ...). */
    readonly detail: Record<string, string> = {},
  ) {
    super(message);
  }
}

export type TaskPart =
  | { kind: 'text'; text: string; metadata?: Record<string, unknown> }
  | { kind: 'data'; data: unknown; metadata?: Record<string, unknown> }
  | { kind: 'file'; file: { uri?: string; bytes?: string; mimeType?: string; name?: string }; metadata?: Record<string, unknown> };

/** A message as the task keeps it (A2A 0.3 field names; a2a-v1.ts maps roles and parts). */
export interface TaskMessage {
  kind: 'message';
  role: 'user' | 'agent';
  messageId: string;
  taskId?: string;
  contextId?: string;
  parts: TaskPart[];
  metadata?: Record<string, unknown>;
  referenceTaskIds?: string[];
  extensions?: string[];
}

export interface TaskArtifact {
  artifactId: string;
  name?: string;
  description?: string;
  parts: TaskPart[];
}

export interface TaskStatus {
  state: string;
  timestamp: string;
  message?: TaskMessage;
}

/** What a streaming call or a subscription delivers, in order. */
export type TaskEvent =
  | { kind: 'task'; task: StoredTask }
  | { kind: 'status-update'; taskId: string; contextId: string; status: TaskStatus; final: boolean }
  | { kind: 'artifact-update'; taskId: string; contextId: string; artifact: TaskArtifact; append: false; lastChunk: true };

/** What a skill answered: the record as data, a one-line summary, and the artifact's name. */
export interface SkillAnswer {
  data: Record<string, unknown>;
  text: string;
  name: string;
  description: string;
}

/** The skill refused the input as given (e.g. a malformed URL): the task fails with this reason. */
export class SkillRefused extends Error {}

/** Runs a skill; the adapter supplies it (the MCP tools and A2A skills share one implementation). */
export interface A2aSkillRunner {
  run(skill: AgentSkillId, server: string): Promise<SkillAnswer>;
  /**
   * What a task says as it ends failed because its skill threw `err` (not a refusal of the
   * input: the database was unavailable, a bug), with metadata for its status message; the
   * runner also reports the failure. Absent: a generic text.
   */
  failed?(err: unknown, skill: AgentSkillId): { text: string; metadata?: Record<string, unknown> };
}

export interface SendOptions {
  /** The client's acceptedOutputModes (media types); empty or absent: any. */
  acceptedOutputModes?: readonly string[];
}

export interface ListQuery {
  contextId?: string;
  state?: string;
  pageSize?: number;
  pageToken?: string;
  statusTimestampAfter?: Date;
}

export interface TaskPage {
  tasks: StoredTask[];
  /** Empty on the last page. */
  nextPageToken: string;
  pageSize: number;
  totalSize: number;
}

export const A2A_LIMITS = {
  /** Longest text a message may carry. */
  maxText: 4096,
  /** Most parts in one message. */
  maxParts: 32,
  /** Longest id (message, task, context). */
  maxId: 256,
  /** Messages kept in a task's history (a task that keeps asking stays bounded). */
  maxHistory: 50,
  /**
   * Bytes of JSON one HTTP answer of /a2a carries at most (one call or a batch of 50), and of a
   * task's kept history: tasks keep the messages clients sent (up to BODY_LIMIT each), so a task
   * keeps only its newest messages within it, reads that return tasks are cut to what is left of
   * the answer (ListTasks pages hold fewer tasks, histories lose their oldest messages, as A2A
   * allows), and a batch stops running calls when too little is left.
   */
  maxAnswerBytes: 1024 * 1024,
  /** How often a subscription looks at the stored task (changes made by other instances). */
  pollMs: 1000,
  /** A subscription ends after this long without the task finishing; the client may subscribe again. */
  subscribeMaxMs: 5 * 60_000,
  /**
   * Open subscriptions per instance (each polls the database); beyond it SubscribeToTask is
   * refused. One client network holds at most an eighth of them (at least 2): a subscription to a
   * task waiting for input lasts subscribeMaxMs, so one network could otherwise hold them all.
   */
  maxSubscriptions: 200,
  /**
   * A task still `working` this long after it started is failed when next read: the instance
   * that ran its skill stopped, or lost the database, before it could store the answer or the
   * failure. Skills answer in milliseconds and every statement they run is bounded
   * (DATABASE_STATEMENT_TIMEOUT_MS), so no instance is still working on it.
   */
  workingMaxMs: 10 * 60_000,
} as const;

/** The per-client-network share of the open subscriptions. */
export function subscriptionsPerClient(total: number): number {
  return networkShare(total);
}

const USAGE =
  'I answer "trust score for <server>" and "preflight <server>", where <server> is an MCP server URL, MCP Registry name or slug ' +
  '(for example "trust score for https://weather.example.com/mcp").';

function whichServerQuestion(skill: AgentSkillId): string {
  const what = skill === 'preflight' ? 'a pre-flight check on' : 'the trust score of';
  return `Which MCP server should I run ${what}? Reply to this task with its URL, MCP Registry name or slug, for example https://weather.example.com/mcp.`;
}

const sameStatus = (a: StoredTask, b: StoredTask) => a.status.state === b.status.state && a.status.timestamp === b.status.timestamp;

export function createA2aService(
  deps: { db: Queryable; now: () => Date },
  runner: A2aSkillRunner,
  limits: { pollMs?: number; subscribeMaxMs?: number; maxSubscriptions?: number; maxSubscriptionsPerClient?: number; workingMaxMs?: number } = {},
) {
  const { now } = deps;
  const store = a2aTaskStore(deps.db);
  const pollMs = limits.pollMs ?? A2A_LIMITS.pollMs;
  const subscribeMaxMs = limits.subscribeMaxMs ?? A2A_LIMITS.subscribeMaxMs;
  const maxSubscriptions = limits.maxSubscriptions ?? A2A_LIMITS.maxSubscriptions;
  const perClient = limits.maxSubscriptionsPerClient ?? subscriptionsPerClient(maxSubscriptions);
  const workingMaxMs = limits.workingMaxMs ?? A2A_LIMITS.workingMaxMs;
  let openSubscriptions = 0;
  /** Open subscriptions per client network (rateLimitKey), dropped at zero. */
  const openByClient = new Map<string, number>();
  /** Why a client may not open one more subscription now; null when it may. */
  function subscriptionRefusal(id: string, client: string): A2aError | null {
    if ((openByClient.get(client) ?? 0) >= perClient) {
      return new A2aError('unsupported_operation', `this client network holds ${perClient} open subscriptions already (its share of this instance's); poll GetTask, or subscribe again once one has ended`, { taskId: id });
    }
    if (openSubscriptions >= maxSubscriptions) {
      return new A2aError('unsupported_operation', `this instance holds ${maxSubscriptions} open subscriptions already; poll GetTask, or subscribe again later`, { taskId: id });
    }
    return null;
  }
  // Subscribers in this process, woken as soon as this process changes their task; changes made
  // by other instances are seen by polling.
  const watchers = new Map<string, Set<() => void>>();
  const changed = (id: string) => watchers.get(id)?.forEach((wake) => wake());

  function agentMessage(text: string, taskId: string, contextId: string, metadata?: Record<string, unknown>): TaskMessage {
    return { kind: 'message', role: 'agent', messageId: randomUUID(), taskId, contextId, parts: [{ kind: 'text', text }], ...(metadata ? { metadata } : {}) };
  }

  /** The task ended `failed` with the agent's message `text` (and its metadata). */
  function failedTask(task: StoredTask, text: string, metadata?: Record<string, unknown>): StoredTask {
    const msg = agentMessage(text, task.id, task.contextId, metadata);
    return { ...task, status: { state: 'failed', timestamp: now().toISOString(), message: msg }, history: bounded([...((task.history as TaskMessage[] | undefined) ?? []), msg]) };
  }

  /**
   * A stored task as it is: one left `working` past workingMaxMs is failed (and stored so, unless
   * another request moved it on first, whose version is then the answer).
   */
  async function settled(task: StoredTask): Promise<StoredTask> {
    if (task.status.state !== 'working' || now().getTime() - Date.parse(task.status.timestamp) <= workingMaxMs) return task;
    const failed = failedTask(
      task,
      `The task did not finish: the skill's answer was never stored (the instance running it stopped or lost its database). Send the message again.`,
    );
    if (await store.replaceIfState(failed, 'working')) {
      changed(task.id);
      return failed;
    }
    return (await store.get(task.id)) ?? failed;
  }

  /** The text a message carries; refuses messages with no text part as the spec asks. */
  function textOf(message: TaskMessage): string {
    const text = message.parts
      .filter((p): p is Extract<TaskPart, { kind: 'text' }> => p.kind === 'text')
      .map((p) => p.text)
      .join('\n')
      .trim();
    if (text === '') {
      if (message.parts.some((p) => p.kind !== 'text')) {
        throw new A2aError('content_type_not_supported', 'the skills read text/plain parts only; send the request as a text part, e.g. "trust score for https://weather.example.com/mcp"');
      }
      throw new A2aError('invalid_params', 'the message needs a non-empty text part, e.g. "trust score for <server>" or "preflight <server>"', { field: 'message.parts' });
    }
    if (text.length > A2A_LIMITS.maxText) throw new A2aError('invalid_params', `the text is longer than ${A2A_LIMITS.maxText} characters`, { field: 'message.parts' });
    return text;
  }

  function outputModes(options: SendOptions): string[] {
    const modes = acceptedOutputModes(options.acceptedOutputModes);
    if (modes.length === 0) {
      throw new A2aError('content_type_not_supported', `the skills answer in application/json and text/plain; acceptedOutputModes allows neither`, { field: 'configuration.acceptedOutputModes' });
    }
    return modes;
  }

  /**
   * A task's history as it is kept: its last maxHistory messages, and of those only the newest
   * that fit in maxAnswerBytes of JSON (the newest always), so every stored task fits one answer.
   */
  const bounded = (history: TaskMessage[]) => {
    const last = history.slice(-A2A_LIMITS.maxHistory);
    const kept = newestWithin(last, A2A_LIMITS.maxAnswerBytes);
    return kept.length > 0 ? kept : last.slice(-1);
  };

  /** The task after the skill ran (or did not need to): its final or interrupted state. */
  async function conclude(base: StoredTask, understood: UnderstoodRequest, modes: string[]): Promise<StoredTask> {
    const id = base.id;
    const contextId = base.contextId;
    const history = (base.history as TaskMessage[] | undefined) ?? [];
    const at = now().toISOString();
    const finish = (state: string, reply: string, extra: Partial<StoredTask> = {}): StoredTask => {
      const msg = agentMessage(reply, id, contextId);
      return { ...base, ...extra, status: { state, timestamp: at, message: msg }, history: bounded([...history, msg]) };
    };
    if (understood.kind === 'unknown') return finish('rejected', USAGE);
    const metadata = { ...((base.metadata as Record<string, unknown> | undefined) ?? {}), skill: understood.skill };
    if (understood.kind === 'needs_server') return finish('input-required', whichServerQuestion(understood.skill), { metadata });
    try {
      const answer = await runner.run(understood.skill, understood.server);
      const parts: TaskPart[] = [];
      if (modes.includes('application/json')) parts.push({ kind: 'data', data: answer.data });
      if (modes.includes('text/plain')) parts.push({ kind: 'text', text: answer.text });
      const artifact: TaskArtifact = { artifactId: randomUUID(), name: answer.name, description: answer.description, parts };
      return finish('completed', answer.text, { metadata, artifacts: [...((base.artifacts as TaskArtifact[] | undefined) ?? []), artifact] });
    } catch (err) {
      if (!(err instanceof SkillRefused)) throw err;
      return finish('failed', err.message, { metadata });
    }
  }

  /**
   * Checks a message and finds what it continues. New: a fresh task (new id, the client's
   * contextId or a new one). Continuing: the stored input-required task it answers.
   */
  async function open(message: TaskMessage, options: SendOptions) {
    const modes = outputModes(options);
    const text = textOf(message);
    if (message.taskId === undefined) {
      const id = randomUUID();
      const contextId = message.contextId ?? randomUUID();
      const user: TaskMessage = { ...message, taskId: id, contextId };
      const base: StoredTask = { id, contextId, status: { state: 'submitted', timestamp: now().toISOString() }, artifacts: [], history: [user], kind: 'task' };
      return { base, previous: null as StoredTask | null, understood: understandRequest(text), modes };
    }
    const stored = await store.get(message.taskId);
    if (!stored) throw new A2aError('task_not_found', `task ${message.taskId} not found`, { taskId: message.taskId });
    const previous = await settled(stored);
    if (message.contextId !== undefined && message.contextId !== previous.contextId) {
      throw new A2aError('invalid_params', `task ${previous.id} belongs to context ${previous.contextId}, not ${message.contextId}`, { field: 'message.contextId' });
    }
    if (isTerminal(previous.status.state)) {
      throw new A2aError('unsupported_operation', `task ${previous.id} is ${previous.status.state} and accepts no more messages; send a new message without taskId`, { taskId: previous.id });
    }
    if (previous.status.state !== 'input-required') {
      throw new A2aError('unsupported_operation', `task ${previous.id} is ${previous.status.state}; only a task waiting for input takes another message`, { taskId: previous.id });
    }
    const skill = ((previous.metadata as Record<string, unknown> | undefined)?.skill as AgentSkillId | undefined) ?? 'check_trust';
    const user: TaskMessage = { ...message, taskId: previous.id, contextId: previous.contextId };
    const base: StoredTask = { ...previous, history: bounded([...((previous.history as TaskMessage[] | undefined) ?? []), user]) };
    return { base, previous, understood: understandFollowUp(text, skill), modes };
  }

  /** The stored task moved on while we worked (another instance answered or canceled it). */
  async function lost(id: string): Promise<never> {
    const current = await store.get(id);
    throw new A2aError('unsupported_operation', `task ${id} is ${current?.status.state ?? 'gone'} now: another request moved it on first`, { taskId: id });
  }

  /** SendMessage / message/send: runs the skill and answers the task in its final or interrupted state. */
  async function send(message: TaskMessage, options: SendOptions = {}): Promise<StoredTask> {
    const { base, previous, understood, modes } = await open(message, options);
    const task = await conclude(base, understood, modes);
    if (previous === null) await store.insert(task, new Date(base.status.timestamp));
    else if (!(await store.replaceIfState(task, previous.status.state))) return lost(task.id);
    changed(task.id);
    return task;
  }

  /**
   * SendStreamingMessage / message/stream. Checks the message before it answers anything (so a
   * bad request is a plain JSON-RPC error), stores the task as working, then delivers the task,
   * its artifact and its final status.
   */
  async function sendStreaming(message: TaskMessage, options: SendOptions = {}): Promise<AsyncIterable<TaskEvent>> {
    const { base, previous, understood, modes } = await open(message, options);
    const working: StoredTask = { ...base, status: { state: 'working', timestamp: now().toISOString() } };
    if (previous === null) await store.insert(working, new Date(base.status.timestamp));
    else if (!(await store.replaceIfState(working, previous.status.state))) await lost(working.id);
    changed(working.id);
    // The task is concluded whether or not the client reads on: a client that goes away after
    // the first event must not leave it working until the retention deletes it. null: canceled
    // (or otherwise moved on) while the skill ran, and the stored state is the truth.
    const concluded = (async () => {
      let task: StoredTask;
      try {
        task = await conclude(working, understood, modes);
      } catch (err) {
        // The task was stored as working: it ends failed, saying why (the database was
        // unavailable: "retry shortly"), rather than staying working.
        const why = runner.failed?.(err, understood.kind === 'ask' ? understood.skill : 'check_trust') ?? { text: 'The skill failed; send the message again.' };
        task = failedTask(working, why.text, why.metadata);
      }
      if (!(await store.replaceIfState(task, 'working'))) return null;
      changed(task.id);
      return task;
    })();
    // Nobody may be left to await it: its failure is the stream's, when one still reads.
    concluded.catch(() => undefined);
    return (async function* () {
      yield { kind: 'task', task: working } satisfies TaskEvent;
      const task = await concluded;
      if (task === null) {
        const current = await store.get(working.id);
        if (current) yield statusEvent(current);
        return;
      }
      const known = new Set(((working.artifacts as TaskArtifact[] | undefined) ?? []).map((a) => a.artifactId));
      for (const artifact of (task.artifacts as TaskArtifact[] | undefined) ?? []) {
        if (!known.has(artifact.artifactId)) yield { kind: 'artifact-update', taskId: task.id, contextId: task.contextId, artifact, append: false, lastChunk: true } satisfies TaskEvent;
      }
      yield statusEvent(task);
    })();
  }

  function statusEvent(task: StoredTask): TaskEvent {
    const final = isTerminal(task.status.state) || INTERRUPTED_STATES.has(task.status.state);
    return { kind: 'status-update', taskId: task.id, contextId: task.contextId, status: task.status as TaskStatus, final };
  }

  async function get(id: string): Promise<StoredTask> {
    const task = await store.get(id);
    if (!task) throw new A2aError('task_not_found', `task ${id} not found`, { taskId: id });
    return settled(task);
  }

  /**
   * ListTasks. /a2a has no client authentication, so a context is the unit a client can see:
   * tasks are listed per contextId (the context a client chose or was given), never all at once.
   * A page holds at most `pageSize` tasks and, after its first, only tasks whose stored JSON fits
   * in `maxBytes` together (the service may return fewer than pageSize: nextPageToken goes on).
   */
  async function list(q: ListQuery, maxBytes: number = A2A_LIMITS.maxAnswerBytes): Promise<TaskPage> {
    if (q.contextId === undefined || q.contextId === '') {
      throw new A2aError(
        'invalid_params',
        'contextId is required: /a2a has no client authentication, so a client sees the tasks of a context it knows (the contextId of its messages or of a task it received)',
        { field: 'contextId' },
      );
    }
    if (q.state !== undefined && !(TASK_STATES as readonly string[]).includes(q.state)) throw new A2aError('invalid_params', `unknown task state ${q.state}`, { field: 'status' });
    const pageSize = q.pageSize ?? LIST_PAGE_SIZE.default;
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > LIST_PAGE_SIZE.max) {
      throw new A2aError('invalid_params', `pageSize must be between 1 and ${LIST_PAGE_SIZE.max} inclusive, got ${pageSize}`, { field: 'pageSize' });
    }
    let after = null;
    if (q.pageToken !== undefined && q.pageToken !== '') {
      after = decodePageToken(q.pageToken);
      if (!after) throw new A2aError('invalid_params', 'pageToken is not a token this service issued (use nextPageToken of the previous page)', { field: 'pageToken' });
    }
    const filter = { contextId: q.contextId, state: q.state, updatedAfter: q.statusTimestampAfter };
    const [{ tasks: page, more }, totalSize] = await Promise.all([store.list(filter, after, pageSize, maxBytes), store.count(filter)]);
    const last = page[page.length - 1];
    const nextPageToken = more && last ? encodePageToken({ updatedAt: last.updatedAt, id: last.task.id }) : '';
    return { tasks: await Promise.all(page.map((r) => settled(r.task))), nextPageToken, pageSize, totalSize };
  }

  /** CancelTask / tasks/cancel: a task that is still waiting (or working) ends canceled. */
  async function cancel(id: string): Promise<StoredTask> {
    const current = await get(id);
    if (isTerminal(current.status.state)) {
      throw new A2aError('task_not_cancelable', `task ${id} is ${current.status.state}; only a task that has not ended can be canceled`, { taskId: id });
    }
    const msg = agentMessage('Canceled at the client\'s request.', id, current.contextId);
    const task: StoredTask = {
      ...current,
      status: { state: 'canceled', timestamp: now().toISOString(), message: msg },
      history: bounded([...((current.history as TaskMessage[] | undefined) ?? []), msg]),
    };
    if (!(await store.replaceIfState(task, current.status.state))) {
      const now2 = await get(id);
      throw new A2aError('task_not_cancelable', `task ${id} is ${now2.status.state}; only a task that has not ended can be canceled`, { taskId: id });
    }
    changed(id);
    return task;
  }

  /**
   * SubscribeToTask / tasks/resubscribe: the task as it is now, then each change until it ends
   * (or waits for input again, or `subscribeMaxMs` passes, or `signal` aborts).
   */
  async function subscribe(id: string, opts: { signal?: AbortSignal; client?: string } = {}): Promise<AsyncIterable<TaskEvent>> {
    const { signal } = opts;
    const client = rateLimitKey(opts.client);
    const first = await get(id);
    if (isTerminal(first.status.state)) {
      throw new A2aError('unsupported_operation', `task ${id} is ${first.status.state}; there is nothing more to stream (GetTask returns it)`, { taskId: id });
    }
    const refused = subscriptionRefusal(id, client);
    if (refused) throw refused;
    return (async function* () {
      // Counted while it runs (a stream that is never read never started), checked again as it
      // starts: subscriptions asked for at once all pass the check above before any of them runs.
      const late = subscriptionRefusal(id, client);
      if (late) throw late;
      openSubscriptions++;
      addToNetwork(openByClient, client, 1);
      try {
        yield* watch(first);
      } finally {
        openSubscriptions--;
        addToNetwork(openByClient, client, -1);
      }
    })();

    async function* watch(first: StoredTask): AsyncGenerator<TaskEvent> {
      yield { kind: 'task', task: first } satisfies TaskEvent;
      let seen = first;
      const deadline = performance.now() + subscribeMaxMs;
      while (!signal?.aborted && performance.now() < deadline) {
        await waitForChange(id, Math.min(pollMs, deadline - performance.now()), signal);
        const stored = await store.get(id);
        const current = stored && (await settled(stored));
        if (!current || sameStatus(current, seen)) continue;
        const known = new Set(((seen.artifacts as TaskArtifact[] | undefined) ?? []).map((a) => a.artifactId));
        for (const artifact of (current.artifacts as TaskArtifact[] | undefined) ?? []) {
          if (!known.has(artifact.artifactId)) yield { kind: 'artifact-update', taskId: id, contextId: current.contextId, artifact, append: false, lastChunk: true } satisfies TaskEvent;
        }
        const event = statusEvent(current);
        yield event;
        seen = current;
        if (event.kind === 'status-update' && event.final) return;
      }
    }
  }

  function waitForChange(id: string, ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      let set = watchers.get(id);
      if (!set) watchers.set(id, (set = new Set()));
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        set!.delete(done);
        if (set!.size === 0) watchers.delete(id);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      set.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  return { send, sendStreaming, get, list, cancel, subscribe };
}

export type A2aService = ReturnType<typeof createA2aService>;
