import { canonicalizeAgentCard, type AgentCard } from '@a2a-js/sdk';
import { INTERFACE_VERSION, type Config } from '../config.js';
import type { AgentSkillId } from '../domain/agent-request.js';
import type { KeyRing } from '../signing/keyring.js';
import { A2A_V03_VERSION, V03_METHODS } from './a2a-v03.js';
import { A2A_V1_VERSION, V1_METHODS } from './a2a-v1.js';

// What /a2a can do, in one place: the skills (read by the A2A skill runner, the /a2a descriptor
// and the agent card at /.well-known/agent-card.json and agent.json), the methods of each
// protocol version, and the card itself, signed with the observatory's key.

/** The card's 0.3 `protocolVersion` (DECISIONS.md "A2A"). */
export const A2A_PROTOCOL_VERSION = '0.3.0';
/** The protocol versions /a2a serves (major.minor, as the A2A-Version header names them). */
export const A2A_VERSIONS = [A2A_V1_VERSION, A2A_V03_VERSION] as const;
/** Every JSON-RPC method /a2a answers: the 1.0 names, then the 0.3 names. */
export const A2A_METHODS = [...V1_METHODS, ...V03_METHODS] as const;

export interface A2aSkillDef {
  id: AgentSkillId;
  name: string;
  description: string;
  tags: string[];
  examples: string[];
}

export const A2A_SKILLS: readonly A2aSkillDef[] = [
  {
    id: 'check_trust',
    name: 'Trust score',
    description:
      'Trust record of an MCP server (URL, MCP Registry name or slug): trust score 0-100 and verdict (PASS >= 60, UNCERTAIN 40-59, ' +
      'FAIL < 40; UNRATED when untracked), observed metrics, category baseline and anomaly flags. Same data as GET /api/trust. ' +
      'A message that names no server gets the task into input-required: reply on the same task with the server.',
    tags: ['trust', 'mcp', 'reputation', 'telemetry'],
    examples: ['trust score for https://weather.example.com/mcp', 'what is the trust score of weather.example.com/mcp?'],
  },
  {
    id: 'preflight',
    name: 'Pre-flight check',
    description:
      'Pre-flight verdict before calling an MCP server: PASS, UNCERTAIN, FAIL or UNRATED, a recommendation and an ' +
      'Ed25519-signed diligence receipt (JWS) verifiable against /.well-known/jwks.json. Same data as GET /v1/preflight.',
    tags: ['preflight', 'trust', 'mcp', 'receipt'],
    examples: ['preflight https://weather.example.com/mcp', 'should I call weather.example.com/mcp?'],
  },
];

/**
 * The agent card: a valid A2A 1.0 AgentCard (supportedInterfaces, capabilities, skills) that A2A
 * 0.3 clients read too (protocolVersion, url, preferredTransport; DECISIONS.md "A2A"), the same
 * hybrid the A2A SDK's own compatibility layer serves. Both interfaces are the one /a2a endpoint:
 * the A2A-Version header picks the version, absent means 0.3 (A2A 1.0 section 3.6.2).
 */
export function agentCard(config: Config) {
  const base = config.publicBaseUrl;
  const endpoint = `${base}/a2a`;
  return {
    name: 'Trust Observatory',
    description:
      'Scores MCP servers on observed runtime behaviour (trust score 0-100: PASS >= 60, UNCERTAIN 40-59, FAIL < 40) ' +
      'and issues Ed25519-signed diligence receipts. Ask before calling an MCP server; report outcomes to POST /api/report.',
    supportedInterfaces: [
      { url: endpoint, protocolBinding: 'JSONRPC', protocolVersion: A2A_V1_VERSION },
      { url: endpoint, protocolBinding: 'JSONRPC', protocolVersion: A2A_V03_VERSION },
    ],
    provider: { organization: 'Trust Observatory', url: base },
    version: INTERFACE_VERSION,
    documentationUrl: `${base}/llms.txt`,
    iconUrl: `${base}/logo.svg`,
    capabilities: { streaming: true, pushNotifications: false, extendedAgentCard: false, stateTransitionHistory: false },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['application/json', 'text/plain'],
    skills: A2A_SKILLS.map((s) => ({
      id: s.id,
      name: s.name,
      description: s.description,
      tags: s.tags,
      examples: s.examples,
      inputModes: ['text/plain'],
      outputModes: ['application/json', 'text/plain'],
    })),
    // A2A 0.3 members (ignored by 1.0 readers).
    protocolVersion: A2A_PROTOCOL_VERSION,
    url: endpoint,
    preferredTransport: 'JSONRPC',
    additionalInterfaces: [{ url: endpoint, transport: 'JSONRPC' }],
    supportsAuthenticatedExtendedCard: false,
  };
}

export type AgentCardJson = ReturnType<typeof agentCard> & { signatures?: { protected: string; signature: string }[] };

/** How long a signed card is reused before it is signed again (a rotated key shows up within this). */
const CARD_SIGNATURE_TTL_MS = 30_000;

/**
 * The agent card with an AgentCardSignature (A2A 1.0 section 8.4): a JWS by the observatory's
 * active Ed25519 key over the card's canonical form (RFC 8785 JCS of the card as an A2A 1.0
 * AgentCard, defaults and `signatures` left out; the A2A SDK's canonicalizeAgentCard, which its
 * verifier uses too). Protected header: alg EdDSA, typ JOSE, kid, jku = our JWKS. The 0.3-only
 * members (url, preferredTransport, ...) are not part of a 1.0 card and so not signed; they repeat
 * supportedInterfaces.
 */
export function agentCardPublisher(config: Config, keyring: Pick<KeyRing, 'signJws'>) {
  const card = agentCard(config);
  const payload = canonicalizeAgentCard(card as unknown as AgentCard);
  let memo: { at: number; card: Promise<AgentCardJson> } | null = null;
  async function sign(): Promise<AgentCardJson> {
    const sig = await keyring.signJws(payload, { typ: 'JOSE', jku: `${config.publicBaseUrl}/.well-known/jwks.json` });
    return { ...card, signatures: [{ protected: sig.protected, signature: sig.signature }] };
  }
  return {
    /** The unsigned card (descriptor, llms.txt). */
    card,
    /** The signed card, re-signed every 30 s so a key rotation reaches it. */
    signed(): Promise<AgentCardJson> {
      if (!memo || performance.now() - memo.at > CARD_SIGNATURE_TTL_MS) {
        const p = sign();
        memo = { at: performance.now(), card: p };
        p.catch(() => {
          if (memo?.card === p) memo = null;
        });
      }
      return memo.card;
    },
  };
}

/** The descriptor a GET of /a2a answers: versions, methods, skills and usage examples. */
export function a2aDescriptor(config: Config) {
  const card = agentCard(config);
  const v1 = (name: string, params: string, result: string) => ({ name, version: A2A_V1_VERSION, params, result });
  const v03 = (name: string, params: string, result: string) => ({ name, version: A2A_V03_VERSION, params, result });
  return {
    name: card.name,
    description: card.description,
    protocol: 'A2A',
    versions: [...A2A_VERSIONS],
    protocolVersion: A2A_PROTOCOL_VERSION,
    transport: 'JSONRPC',
    jsonrpc: '2.0',
    url: card.url,
    version: INTERFACE_VERSION,
    agent_card: `${config.publicBaseUrl}/.well-known/agent-card.json`,
    version_negotiation:
      'Send the A2A-Version header (or ?A2A-Version=) with the version you speak: 1.0 for the PascalCase methods, 0.3 (or no header) for the slash-named ones. Any other version answers -32009 (VersionNotSupportedError).',
    methods: [
      v1('SendMessage', '{message: {role: "ROLE_USER", parts: [{text}], messageId, taskId?, contextId?}, configuration?: {acceptedOutputModes?, historyLength?}}', '{task: Task}'),
      v1('SendStreamingMessage', 'as SendMessage', 'text/event-stream of StreamResponse: {task}, {artifactUpdate}, {statusUpdate}'),
      v1('GetTask', '{id, historyLength?}', 'Task'),
      v1('ListTasks', '{contextId, status?, pageSize? (1-100, default 50), pageToken?, historyLength?, statusTimestampAfter?, includeArtifacts?}', '{tasks, nextPageToken, pageSize, totalSize}'),
      v1('CancelTask', '{id}', 'Task (TASK_STATE_CANCELED); -32002 when the task has ended'),
      v1('SubscribeToTask', '{id}', 'text/event-stream of StreamResponse until the task ends; -32004 when it has ended'),
      v1('CreateTaskPushNotificationConfig', '-', '-32003 PushNotificationNotSupportedError'),
      v1('GetTaskPushNotificationConfig', '-', '-32003 PushNotificationNotSupportedError'),
      v1('ListTaskPushNotificationConfigs', '-', '-32003 PushNotificationNotSupportedError'),
      v1('DeleteTaskPushNotificationConfig', '-', '-32003 PushNotificationNotSupportedError'),
      v1('GetExtendedAgentCard', '-', '-32004 UnsupportedOperationError (no extended card)'),
      v03('message/send', '{message: {role: "user", parts: [{kind: "text", text}], messageId, kind: "message", taskId?, contextId?}, configuration?: {acceptedOutputModes?, historyLength?}}', 'Task'),
      v03('message/stream', 'as message/send', 'text/event-stream of Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent (final)'),
      v03('tasks/get', '{id, historyLength?}', 'Task'),
      v03('tasks/cancel', '{id}', 'Task (canceled); -32002 when the task has ended'),
      v03('tasks/resubscribe', '{id}', 'text/event-stream until the task ends; -32004 when it has ended'),
      v03('tasks/pushNotificationConfig/set', '-', '-32003'),
      v03('tasks/pushNotificationConfig/get', '-', '-32003'),
      v03('tasks/pushNotificationConfig/list', '-', '-32003'),
      v03('tasks/pushNotificationConfig/delete', '-', '-32003'),
      v03('agent/getAuthenticatedExtendedCard', '-', '-32004 (no extended card)'),
    ],
    skills: card.skills,
    errors: {
      '-32700': 'parse error',
      '-32600': 'invalid request (jsonrpc not "2.0", method missing or not a string, bad id type)',
      '-32601': 'method not found (or a method of the other protocol version)',
      '-32602': 'invalid params',
      '-32603': 'internal error; or, with data naming the problem "unavailable" and retry_after_seconds (HTTP 503 + Retry-After when alone), the database is unavailable: retry shortly',
      '-32001': 'task not found',
      '-32002': 'task not cancelable (it has ended)',
      '-32003': 'push notifications not supported',
      '-32004': 'unsupported operation',
      '-32005': 'content type not supported (the skills read text/plain, answer application/json and text/plain)',
      '-32009': 'A2A version not supported (1.0 and 0.3 are)',
    },
    usage: {
      request: {
        jsonrpc: '2.0',
        id: 1,
        method: 'message/send',
        params: {
          message: {
            role: 'user',
            parts: [{ kind: 'text', text: 'trust score for https://weather.example.com/mcp' }],
            messageId: '9229e770-767c-417b-a0b0-f0741243c589',
            kind: 'message',
          },
        },
      },
      then: { jsonrpc: '2.0', id: 2, method: 'tasks/get', params: { id: '<result.id of message/send>' } },
      v1: {
        headers: { 'A2A-Version': '1.0' },
        request: {
          jsonrpc: '2.0',
          id: 1,
          method: 'SendMessage',
          params: { message: { role: 'ROLE_USER', parts: [{ text: 'trust score for https://weather.example.com/mcp' }], messageId: '5f0e3c1a-2b9d-4e8f-a1c7-3d6b9e2f4a10' } },
        },
        then: { jsonrpc: '2.0', id: 2, method: 'GetTask', params: { id: '<result.task.id of SendMessage>' } },
      },
    },
  };
}
