import { INTERFACE_VERSION, type Config } from '../config.js';

// What /a2a can do, in one table: the message/send router (src/agents/a2a.ts), the /a2a
// descriptor and the agent card (/.well-known/agent-card.json, agent.json) all read it, so the
// card never advertises a skill the endpoint does not run.

export const A2A_PROTOCOL_VERSION = '0.3.0';
export const A2A_METHODS = ['message/send', 'tasks/get'] as const;

export interface A2aSkillDef {
  id: 'check_trust' | 'preflight';
  name: string;
  description: string;
  tags: string[];
  examples: string[];
  /** The text a user message must match; group 1 is the server. */
  pattern: RegExp;
}

export const A2A_SKILLS: readonly A2aSkillDef[] = [
  {
    id: 'check_trust',
    name: 'Trust score',
    description:
      'Trust record of an MCP server (URL, name or slug): trust score 0-100 and verdict (PASS >= 60, UNCERTAIN 40-59, ' +
      'FAIL < 40; UNRATED when untracked), observed metrics, category baseline and anomaly flags. Same data as GET /api/trust.',
    tags: ['trust', 'mcp', 'reputation', 'telemetry'],
    examples: ['trust score for https://weather.example.com/mcp', 'trust score for weather.example.com/mcp'],
    pattern: /^\s*(?:what\s+is\s+the\s+)?(?:check\s+)?trust(?:\s+score)?(?:\s+(?:for|of))?\s+(\S.*?)\s*\??\s*$/i,
  },
  {
    id: 'preflight',
    name: 'Pre-flight check',
    description:
      'Pre-flight verdict before calling an MCP server: PASS, UNCERTAIN, FAIL or UNRATED, a recommendation and an ' +
      'Ed25519-signed diligence receipt (JWS) verifiable against /.well-known/jwks.json. Same data as GET /v1/preflight.',
    tags: ['preflight', 'trust', 'mcp', 'receipt'],
    examples: ['preflight https://weather.example.com/mcp', 'preflight check for weather.example.com/mcp'],
    pattern: /^\s*pre-?flight(?:\s+check)?(?:\s+(?:for|of))?\s+(\S.*?)\s*\??\s*$/i,
  },
];

/** Picks the skill a text asks for and the server it names; null when none matches. */
export function matchSkill(text: string): { skill: A2aSkillDef; server: string } | null {
  for (const skill of A2A_SKILLS) {
    const m = skill.pattern.exec(text);
    if (m?.[1]) return { skill, server: m[1] };
  }
  return null;
}

/** The A2A agent card (A2A protocol 0.3.0, AgentCard). */
export function agentCard(config: Config) {
  const base = config.publicBaseUrl;
  return {
    protocolVersion: A2A_PROTOCOL_VERSION,
    name: 'Trust Observatory',
    description:
      'Scores MCP servers on observed runtime behaviour (trust score 0-100: PASS >= 60, UNCERTAIN 40-59, FAIL < 40) ' +
      'and issues Ed25519-signed diligence receipts. Ask before calling an MCP server; report outcomes to POST /api/report.',
    url: `${base}/a2a`,
    preferredTransport: 'JSONRPC',
    additionalInterfaces: [{ url: `${base}/a2a`, transport: 'JSONRPC' }],
    provider: { organization: 'Trust Observatory', url: base },
    version: INTERFACE_VERSION,
    documentationUrl: `${base}/llms.txt`,
    capabilities: { streaming: false, pushNotifications: false, stateTransitionHistory: false },
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
    supportsAuthenticatedExtendedCard: false,
  };
}

/** The descriptor a GET of /a2a answers: methods, skills and a usage example. */
export function a2aDescriptor(config: Config) {
  const card = agentCard(config);
  return {
    name: card.name,
    description: card.description,
    protocol: 'A2A',
    protocolVersion: A2A_PROTOCOL_VERSION,
    transport: 'JSONRPC',
    jsonrpc: '2.0',
    url: card.url,
    version: INTERFACE_VERSION,
    agent_card: `${config.publicBaseUrl}/.well-known/agent-card.json`,
    methods: [
      { name: 'message/send', params: '{message: {role:"user", parts:[{kind:"text", text}], messageId, kind:"message"}, configuration?: {historyLength?}}', result: 'Task' },
      { name: 'tasks/get', params: '{id, historyLength?}', result: 'Task' },
    ],
    skills: card.skills,
    errors: {
      '-32700': 'parse error',
      '-32600': 'invalid request (jsonrpc not "2.0", method missing or not a string, bad id type)',
      '-32601': 'method not found',
      '-32602': 'invalid params',
      '-32603': 'internal error',
      '-32001': 'task not found',
      '-32004': 'unsupported operation',
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
    },
  };
}
