import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Client, SdkHttpError, SSEClientTransport, SseError, StreamableHTTPClientTransport, type Transport } from '@modelcontextprotocol/client';
import { CONTEXT_ITEM_SHAPES, contextItemOf, manifestToolOf, type ContextItem, type ContextListing, type ContextListPart, type LiveContext, type ManifestTool } from '../domain/drift.js';
import { cutAt } from '../domain/text-diff.js';
import { storableCopy } from '../domain/storable-text.js';
import { MAX_JSON_DEPTH, nestedDeeperThan } from '../domain/json-depth.js';
import { ProbeFailed, responseTls, Slots, TargetRefused, untilAborted, type SafeFetcher, type TlsInfo } from './safe-fetch.js';

// The one MCP probe (docs/probes.md "The MCP probe"): the official v2 SDK client
// (@modelcontextprotocol/client) reads a live server through the safe outbound client, whatever
// protocol generation the server speaks:
// - MCP 2026-07-28 servers: server/discover, then tools/list with the per-request envelope;
// - 2025-era servers (2025-11-25 back to 2024-11-05, e.g. built with SDK 1.x): the client's
//   version negotiation falls back to initialize when server/discover is not understood;
// - HTTP+SSE servers (the transport of 2024-11-05): the catalogue says so, or the Streamable
//   HTTP POST is refused with 404/405 (the fallback the MCP transport spec describes).
// Every request goes through the safe client (address policy, redirects re-checked, size cap,
// timeouts). A failure of the safe client anywhere inside the SDK (a body over the cap, a refused
// redirect, a reset) ends the probe at once with that failure, never as a later timeout.

/**
 * What one probe takes from a server: pages, tools, the JSON size of the tools kept (every page
 * together: each answer is already held to the safe client's 1 MiB cap, but 50 of them would be
 * 50 MiB to hash, store as drift texts and show) and time.
 */
export const MANIFEST_LIMITS = { maxPages: 50, maxTools: 2000, maxBytes: 4 * 1024 * 1024, maxNameLength: 512, totalTimeoutMs: 20_000 } as const;

/**
 * What one probe takes of a server's prompts, resources and resource templates (docs/probes.md
 * "Drift of what else the server says"), read after its tools: pages and bytes of JSON kept for
 * the three lists together, items per list, the length of an item's key (a prompt's name, a
 * resource's uri), and how long one request may take. Over a limit, or when the server fails a
 * list, that list is unavailable (the check says why) and the probe goes on: never a failed probe.
 * The lists are read only within the probe's deadline, less CONTEXT_DEADLINE_RESERVE_MS (at most
 * a quarter of it), so a server stalling them cannot fail the probe either.
 */
export const CONTEXT_LIMITS = { maxPages: 50, maxItems: 2000, maxBytes: 4 * 1024 * 1024, maxKeyLength: 2048, requestTimeoutMs: 10_000 } as const;
export const CONTEXT_DEADLINE_RESERVE_MS = 2_000;

/** The method listing each context list. */
const CONTEXT_METHODS = { prompts: 'prompts/list', resources: 'resources/list', resource_templates: 'resources/templates/list' } as const satisfies Record<ContextListPart, string>;
/** The member of each list's result that holds its items. */
const CONTEXT_RESULT_MEMBERS = { prompts: 'prompts', resources: 'resources', resource_templates: 'resourceTemplates' } as const satisfies Record<ContextListPart, string>;

/**
 * The HTTP requests one probe may make, whatever the server does (docs/probes.md "The MCP probe"):
 * in all (50 pages of tools and 50 of prompts, resources and templates take about 106 with the
 * handshake and the session's DELETE), at once (each is its own socket),
 * and the answers to the server's own requests (ping, sampling, roots: the SDK client answers each
 * with a POST, unawaited). A server that answered initialize with 5,000 pings in one SSE body made
 * one probe open 3,000-5,000 sockets and grow by hundreds of MiB; beyond these the probe fails.
 */
export const MCP_REQUEST_LIMITS = { total: 120, inFlight: 4, serverRequests: 8 } as const;

export type McpRequestLimits = { -readonly [K in keyof typeof MCP_REQUEST_LIMITS]: number };

/**
 * What the probe keeps of what a server says about itself (its name, version and title, the
 * revisions it offers): stored per server and shown on its trust record and pages, so cut to
 * these lengths and counts, whatever the server sent.
 */
export const SELF_DESCRIPTION_LIMITS = { textChars: 256, versionChars: 64, versions: 32 } as const;

/**
 * Who the probe says it is: an ordinary client of the official SDK (docs/probes.md "How the probe
 * presents itself"). A server that could tell the probe from its clients could show it one
 * manifest and its clients another (cloaking), so every MCP request of every probe (drift,
 * observation, agency checklist, readiness) says the same as an SDK client on node would: this
 * clientInfo, with the SDK's own version, and the request headers node's fetch adds by default.
 * Other documents (robots.txt, llms.txt, Server Cards, RFC 9728 metadata) are fetched with the
 * safe client's honest User-Agent.
 */
export const MCP_CLIENT_INFO = { name: 'mcp-client', version: sdkVersion() } as const;

/** What node's fetch (undici) adds to a request unless the caller sets it; the safe client sets accept-encoding and connection itself. */
export const MCP_REQUEST_HEADERS = { 'user-agent': 'node', 'accept-language': '*', 'sec-fetch-mode': 'cors' } as const;

/** The installed @modelcontextprotocol/client's version (its package.json is not among its exports). */
function sdkVersion(): string {
  const entry = createRequire(import.meta.url).resolve('@modelcontextprotocol/client');
  const pkg = JSON.parse(readFileSync(join(dirname(entry), '..', 'package.json'), 'utf8')) as { name?: string; version?: string };
  if (pkg.name !== '@modelcontextprotocol/client' || typeof pkg.version !== 'string') throw new Error(`cannot read the version of @modelcontextprotocol/client next to ${entry}`);
  return pkg.version;
}

export type McpTransportKind = 'streamable-http' | 'sse';

/** What the server said about itself when the probe connected. */
export interface McpConnection {
  /** The protocol revision the conversation used (e.g. 2026-07-28, 2025-06-18). */
  protocol_version: string;
  /** modern: 2026-07-28 or later (server/discover, no initialize); legacy: the initialize handshake. */
  era: 'modern' | 'legacy';
  transport: McpTransportKind;
  server_info: { name: string; version: string; title: string | null } | null;
  /** Revisions a modern server advertised in server/discover; null after an initialize handshake. */
  supported_versions: string[] | null;
  /** Whether the server declared the tools capability. */
  has_tools: boolean;
}

export interface LiveManifest extends McpConnection {
  tools: ManifestTool[];
  pages: number;
  /** The server's instructions, prompts, resources and resource templates, as far as they could be read. */
  context: LiveContext;
}

/** One HTTP exchange of the probe, as the safe client saw it (agency checklist evidence). */
export interface McpExchange {
  url: string;
  method: string;
  status: number;
  headers: Headers;
  tls: TlsInfo | null;
}

export interface ManifestReadOptions {
  /** The server's transport when known (MCP Registry remote type); otherwise Streamable HTTP, then SSE on 404/405. */
  transport?: McpTransportKind;
  /** Overall deadline; default MANIFEST_LIMITS.totalTimeoutMs. */
  timeoutMs?: number;
  /** Aborts the read early (it then fails as a timeout). */
  signal?: AbortSignal;
  /** Called with every HTTP response the probe receives, in order. */
  onExchange?: (e: McpExchange) => void;
  /** Tighter request limits than MCP_REQUEST_LIMITS (never looser). */
  requestLimits?: Partial<McpRequestLimits>;
}

/** The server answered an MCP request with this HTTP status instead of MCP (401, 500, ...). */
export class McpHttpStatus extends ProbeFailed {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super('network', message);
  }
}

/** Connects, lists every page of tools/list, and disconnects. */
export function readToolManifest(fetcher: SafeFetcher, url: string, opts: ManifestReadOptions = {}): Promise<LiveManifest> {
  return probe(fetcher, url, opts, true) as Promise<LiveManifest>;
}

/** Connects (negotiating the protocol revision) and disconnects without listing anything. */
export function connectMcp(fetcher: SafeFetcher, url: string, opts: ManifestReadOptions = {}): Promise<McpConnection> {
  return probe(fetcher, url, opts, false);
}

async function probe(fetcher: SafeFetcher, url: string, opts: ManifestReadOptions, listTools: boolean): Promise<McpConnection | LiveManifest> {
  const timeoutMs = opts.timeoutMs ?? MANIFEST_LIMITS.totalTimeoutMs;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const onAbort = () => controller.abort();
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  if (opts.signal?.aborted) controller.abort();
  const limits: McpRequestLimits = { ...MCP_REQUEST_LIMITS };
  for (const k of Object.keys(limits) as (keyof McpRequestLimits)[]) limits[k] = Math.min(limits[k], opts.requestLimits?.[k] ?? Infinity);
  const run = new ProbeRun(fetcher, controller, url, limits, opts.onExchange);
  run.deadline = performance.now() + timeoutMs;
  run.contextReserveMs = Math.min(CONTEXT_DEADLINE_RESERVE_MS, timeoutMs / 4);
  try {
    // Refusal is decided before the SDK is involved, so a refused target never looks like an MCP
    // error; the lookup counts against the probe's deadline like everything else.
    await fetcher.check(url, { signal: controller.signal });
    const first: McpTransportKind = opts.transport ?? 'streamable-http';
    try {
      return await attempt(run, url, first, opts, timeoutMs, listTools);
    } catch (err) {
      const e = run.explain(err, url, timeoutMs);
      // Not a Streamable HTTP endpoint: the HTTP+SSE transport's GET stream may be (transport spec, backwards compatibility).
      if (opts.transport === undefined && e instanceof McpHttpStatus && (e.status === 404 || e.status === 405) && !controller.signal.aborted) {
        try {
          return await attempt(run, url, 'sse', opts, timeoutMs, listTools);
        } catch (err2) {
          throw run.explain(err2, url, timeoutMs);
        }
      }
      throw e;
    }
  } finally {
    clearTimeout(timer);
    opts.signal?.removeEventListener('abort', onAbort);
  }
}

async function attempt(run: ProbeRun, url: string, kind: McpTransportKind, opts: ManifestReadOptions, timeoutMs: number, listTools: boolean): Promise<McpConnection | LiveManifest> {
  const signal = run.controller.signal;
  const client = new Client(
    { ...MCP_CLIENT_INFO },
    // Streamable HTTP: server/discover first, initialize when the server does not understand it.
    // HTTP+SSE predates 2026-07-28: that transport only ever carries the initialize handshake.
    { capabilities: {}, ...(kind === 'streamable-http' ? { versionNegotiation: { mode: 'auto' as const, probe: { timeoutMs } } } : {}) },
  );
  client.onerror = (err) => run.note(err);
  run.getStreamEssential = kind === 'sse';
  const target = new URL(url);
  // redirectPolicy 'follow': the safe client follows redirects itself, re-checking every hop.
  const transport: Transport =
    kind === 'sse'
      ? new SSEClientTransport(target, { fetch: run.fetch, redirectPolicy: 'follow' })
      : new StreamableHTTPClientTransport(target, {
          fetch: run.fetch,
          redirectPolicy: 'follow',
          reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 },
        });
  run.watchMessages(transport);
  try {
    await run.guard(client.connect(transport, kind === 'sse' ? { signal, timeout: timeoutMs, prior: { kind: 'legacy' } } : { signal, timeout: timeoutMs }));
    const era = client.getProtocolEra() ?? 'legacy';
    const info = client.getServerVersion();
    const caps = client.getServerCapabilities();
    // NUL and lone surrogates (which no UTF-8 reader sees and the database cannot store) as U+FFFD.
    const connection: McpConnection = storableCopy({
      protocol_version: cutAt(client.getNegotiatedProtocolVersion() ?? 'unknown', SELF_DESCRIPTION_LIMITS.versionChars),
      era,
      transport: kind,
      server_info: info
        ? {
            name: cutAt(info.name, SELF_DESCRIPTION_LIMITS.textChars),
            version: cutAt(info.version, SELF_DESCRIPTION_LIMITS.textChars),
            title: typeof info.title === 'string' ? cutAt(info.title, SELF_DESCRIPTION_LIMITS.textChars) : null,
          }
        : null,
      supported_versions:
        era === 'modern'
          ? (client.getDiscoverResult()?.supportedVersions ?? []).slice(0, SELF_DESCRIPTION_LIMITS.versions).map((v) => cutAt(v, SELF_DESCRIPTION_LIMITS.versionChars))
          : null,
      has_tools: Boolean(caps?.tools),
    });
    if (!listTools) return connection;
    const tools: ManifestTool[] = [];
    // Every name listed so far, as stored (after storableCopy: NUL and lone surrogates kept as
    // U+FFFD can fold two names into one).
    const names = new Set<string>();
    let pages = 0;
    let bytes = 0;
    if (caps?.tools) {
      let cursor: string | undefined;
      do {
        if (pages >= MANIFEST_LIMITS.maxPages) throw new ProbeFailed('too_large', `tools/list returned more than ${MANIFEST_LIMITS.maxPages} pages`);
        // Page by page (not the SDK's aggregating listTools): every tool the server lists is
        // evidence, and the caps above stop a runaway server early.
        const page = await run.guard(client.request({ method: 'tools/list', params: cursor === undefined ? {} : { cursor } }, { signal, timeout: timeoutMs }));
        pages++;
        for (const t of page.tools) {
          // Names are stored, indexed (drift_tool_changes) and shown: the spec asks for at most 128 characters.
          if (t.name.length > MANIFEST_LIMITS.maxNameLength) throw new ProbeFailed('too_large', `a tool name is longer than ${MANIFEST_LIMITS.maxNameLength} characters`);
          // Hashing (RFC 8785), storing and showing a tool recurse through it: a few thousand levels would throw.
          if (nestedDeeperThan(t, MAX_JSON_DEPTH)) throw new ProbeFailed('too_large', `a tool's JSON nests deeper than ${MAX_JSON_DEPTH} levels`);
          const tool = storableCopy(manifestToolOf(t));
          // One definition per name: drift, the gate and the stored baseline know a tool by its
          // name, and clients keep one of two copies (the official SDK the last listed). A server
          // listing a decoy beside the real tool could otherwise show drift detection one and its
          // clients the other.
          if (names.has(tool.name)) throw new ProbeFailed('network', `the manifest lists the tool name ${JSON.stringify(cutAt(tool.name, 64))} more than once; tool names must be unique`);
          names.add(tool.name);
          bytes += Buffer.byteLength(JSON.stringify(tool));
          tools.push(tool);
        }
        if (tools.length > MANIFEST_LIMITS.maxTools) throw new ProbeFailed('too_large', `the manifest lists more than ${MANIFEST_LIMITS.maxTools} tools`);
        if (bytes > MANIFEST_LIMITS.maxBytes) throw new ProbeFailed('too_large', `the manifest's tools are more than ${MANIFEST_LIMITS.maxBytes} bytes of JSON`);
        cursor = page.nextCursor;
      } while (cursor);
    }
    // After the tools, and never failing the probe: what else the server gives the model.
    const instructions = client.getInstructions();
    const budget = { pages: 0, bytes: 0 };
    const notOffered: ContextListing = { status: 'not_offered' };
    const context: LiveContext = {
      instructions: typeof instructions === 'string' ? storableCopy(instructions) : null,
      prompts: caps?.prompts ? await readContextList(run, client, 'prompts', budget) : notOffered,
      resources: caps?.resources ? await readContextList(run, client, 'resources', budget) : notOffered,
      resource_templates: caps?.resources ? await readContextList(run, client, 'resource_templates', budget) : notOffered,
    };
    return { ...connection, tools, pages, context };
  } finally {
    // A stateful server (the 2025 handshake with Mcp-Session-Id) keeps the session the probe
    // opened until told: end it with the DELETE the transport spec describes (close() alone sends
    // none). Through the probe's own fetch, within its request limits and deadline; a 405 (the
    // server allows no DELETE) or any failure changes nothing of what the probe found.
    if (transport instanceof StreamableHTTPClientTransport) await run.guard(transport.terminateSession()).catch(() => {});
    await client.close().catch(() => {});
  }
}

/**
 * Reads every page of one context list (prompts/list, resources/list, resources/templates/list)
 * within CONTEXT_LIMITS (`budget`: pages and bytes the probe's lists have used so far), the
 * probe's request limit and its deadline less the reserve. Whatever the server does with the
 * list (an error, Method not found, a malformed or oversized answer, no answer) the list is
 * unavailable with a reason; only a failure that ends the whole probe (the safe client's, its
 * deadline, a flood of server requests) is thrown.
 */
async function readContextList(run: ProbeRun, client: Client, part: ContextListPart, budget: { pages: number; bytes: number }): Promise<ContextListing> {
  const method = CONTEXT_METHODS[part];
  const member = CONTEXT_RESULT_MEMBERS[part];
  const key = CONTEXT_ITEM_SHAPES[part].key;
  const unavailable = (detail: string): ContextListing => ({ status: 'unavailable', detail: cutAt(detail, 500) });
  const items: ContextItem[] = [];
  let pages = 0;
  let cursor: string | undefined;
  do {
    if (budget.pages >= CONTEXT_LIMITS.maxPages) return unavailable(`${method}: more than ${CONTEXT_LIMITS.maxPages} pages of prompts, resources and resource templates together`);
    const left = Math.floor(run.contextTimeLeft());
    if (left <= 0) return unavailable(`${method}: no time left within the probe's deadline`);
    // The request, a cancellation the SDK may send for it, and the session's DELETE.
    if (run.requestsLeft() < 3) return unavailable(`${method}: the probe's limit of ${run.requestLimit} requests was reached`);
    let page: Record<string, unknown> & { nextCursor?: string };
    const timeout = Math.min(left, CONTEXT_LIMITS.requestTimeoutMs);
    try {
      const signal = AbortSignal.any([run.controller.signal, AbortSignal.timeout(timeout)]);
      const params = cursor === undefined ? {} : { cursor };
      // (One call per method: the SDK types each result by its method.)
      page =
        part === 'prompts'
          ? await run.guard(client.request({ method: 'prompts/list', params }, { signal, timeout }))
          : part === 'resources'
            ? await run.guard(client.request({ method: 'resources/list', params }, { signal, timeout }))
            : await run.guard(client.request({ method: 'resources/templates/list', params }, { signal, timeout }));
    } catch (err) {
      // The probe itself failed or ran out of time: that ends it, as for the tools.
      if (run.failed || run.controller.signal.aborted) throw err;
      const e = err as { name?: unknown; message?: unknown; code?: unknown } | null;
      const timedOut = e?.name === 'TimeoutError' || e?.name === 'AbortError' || e?.code === -32001 || /timed? ?out/i.test(String(e?.message ?? ''));
      return unavailable(timedOut ? `${method} was not answered within ${timeout} ms` : `${method} failed: ${String(e?.message ?? err)}`);
    }
    pages++;
    budget.pages++;
    const entries = page[member];
    if (!Array.isArray(entries)) return unavailable(`${method} answered without a ${member} list`);
    for (const raw of entries as unknown[]) {
      if (typeof raw !== 'object' || raw === null) return unavailable(`${method} lists an entry that is not an object`);
      if (nestedDeeperThan(raw, MAX_JSON_DEPTH)) return unavailable(`${method} lists an entry whose JSON nests deeper than ${MAX_JSON_DEPTH} levels`);
      const item = contextItemOf(part, raw as Record<string, unknown>);
      if (item === null) return unavailable(`${method} lists an entry without a string ${key}`);
      if (item.key.length > CONTEXT_LIMITS.maxKeyLength) return unavailable(`${method} lists a ${key} longer than ${CONTEXT_LIMITS.maxKeyLength} characters`);
      const kept = storableCopy(item);
      budget.bytes += Buffer.byteLength(JSON.stringify(kept));
      items.push(kept);
    }
    if (items.length > CONTEXT_LIMITS.maxItems) return unavailable(`${method} lists more than ${CONTEXT_LIMITS.maxItems} entries`);
    if (budget.bytes > CONTEXT_LIMITS.maxBytes) return unavailable(`${method}: the prompts, resources and resource templates are more than ${CONTEXT_LIMITS.maxBytes} bytes of JSON together`);
    cursor = typeof page.nextCursor === 'string' && page.nextCursor !== '' ? page.nextCursor : undefined;
  } while (cursor);
  return { status: 'read', items, pages };
}

/**
 * One probe's view of the safe client: its fetch (deadline, exchanges, body monitoring) and the
 * first failure of the safe client seen anywhere, which explains whatever the SDK then reports.
 */
class ProbeRun {
  private failure: ProbeFailed | TargetRefused | null = null;
  /**
   * Whether a GET's failure ends the probe: over HTTP+SSE the GET stream carries every answer;
   * over Streamable HTTP it is the optional server-to-client stream the SDK opens on the side
   * (its failure, or the safe client's per-request deadline closing it, says nothing).
   */
  getStreamEssential = false;

  /** When the probe's deadline passes (performance.now()), and the part of it the context lists may not use. */
  deadline = Infinity;
  contextReserveMs = 0;

  /** Requests made so far, and answers to the server's requests sent. */
  private requests = 0;
  private answers = 0;
  private readonly slots: Slots;

  constructor(
    private readonly fetcher: SafeFetcher,
    readonly controller: AbortController,
    private readonly url: string,
    private readonly limits: McpRequestLimits,
    private readonly onExchange?: (e: McpExchange) => void,
  ) {
    this.slots = new Slots(limits.inFlight);
  }

  /** Whether a failure (of the safe client, or a limit) has ended the probe. */
  get failed(): boolean {
    return this.failure !== null;
  }

  /** The probe's limit on requests, and how many it may still make. */
  get requestLimit(): number {
    return this.limits.total;
  }

  requestsLeft(): number {
    return this.limits.total - this.requests;
  }

  /** Milliseconds the context lists may still take. */
  contextTimeLeft(): number {
    return this.deadline - this.contextReserveMs - performance.now();
  }

  /** Server-to-client requests delivered to the SDK client so far (each is answered with a POST). */
  private serverRequests = 0;
  private readonly delivered = new WeakSet<object>();

  /**
   * Hands the client at most limits.serverRequests of the server's own requests: the next one
   * ends the probe, and from then on nothing the server sends reaches the client. (The client
   * answers every request with a POST, unawaited, and handles each in its own promise chain: a
   * body of 19,000 pings took 100 MiB and 270 ms of the event loop even with the POSTs refused.)
   * The SDK reads and wraps `onmessage` (version negotiation swaps it), so the handler it set is
   * kept and every message counted once.
   */
  watchMessages(transport: Transport): void {
    let handler: Transport['onmessage'];
    const watched: NonNullable<Transport['onmessage']> = (message, ...rest) => {
      if (this.failure || this.controller.signal.aborted) return;
      if (!this.delivered.has(message)) {
        this.delivered.add(message);
        if ('method' in message && 'id' in message && ++this.serverRequests > this.limits.serverRequests) {
          this.tooManyServerRequests();
          return;
        }
      }
      handler?.(message, ...rest);
    };
    Object.defineProperty(transport, 'onmessage', {
      configurable: true,
      enumerable: true,
      get: () => (handler ? watched : undefined),
      set: (h: Transport['onmessage']) => void (handler = h),
    });
  }

  /** Ends the probe with a limit's failure (whatever request asked) and returns what to throw. */
  /** The server sent more requests of its own than the probe answers (counted as they arrive, and as answers leave). */
  private tooManyServerRequests(): ProbeFailed | TargetRefused {
    return this.overLimit(`${this.url} sent the client more than ${this.limits.serverRequests} requests of its own (ping, sampling, ...); the probe answers at most ${this.limits.serverRequests}`);
  }

  private overLimit(message: string): ProbeFailed | TargetRefused {
    this.note(new ProbeFailed('too_large', message));
    return this.failure!;
  }

  /** Failures of non-essential requests, which the SDK may still report through onerror. */
  private readonly ignored = new WeakSet<object>();

  /** Records a failure of the safe client and ends the probe: nothing after it can succeed. */
  note(err: unknown): void {
    const f = safeClientFailure(err);
    if (f && !this.ignored.has(f) && !this.failure) {
      this.failure = f;
      this.controller.abort();
    }
  }

  /** Resolves with `p`, or rejects as soon as the safe client fails (the SDK may swallow that failure and wait). */
  guard<T>(p: Promise<T>): Promise<T> {
    // Without a failure of the safe client, the abort is the deadline (or the caller): explain() says so.
    return untilAborted(p, this.controller.signal, () => this.failure ?? new Error('aborted'));
  }

  readonly fetch = async (input: string | URL, init?: RequestInit): Promise<Response> => {
    // A probe that failed (a limit, a refusal) or ran out of time sends nothing more.
    if (this.failure) throw this.failure;
    const signal = init?.signal ? AbortSignal.any([init.signal, this.controller.signal]) : this.controller.signal;
    const method = (init?.method ?? 'GET').toUpperCase();
    const { answers, optional } = bodyFacts(init?.body);
    // A context list's request (or its cancellation) may fail without ending the probe: that list is then unavailable.
    const essential = (method !== 'GET' || this.getStreamEssential) && !optional;
    // Counted before anything waits or leaves, so a flood is refused at once, not queued.
    if (++this.requests > this.limits.total) throw this.overLimit(`the probe of ${this.url} would make more than ${this.limits.total} requests`);
    if (answers > 0 && (this.answers += answers) > this.limits.serverRequests) {
      throw this.tooManyServerRequests();
    }
    const release = await this.slots.acquire(signal);
    signal.addEventListener('abort', release, { once: true });
    let res: Response;
    try {
      // The MCP POSTs stay on the server's origin (a redirect elsewhere is refused, 502); the GET
      // stream may move, every hop re-checked.
      res = await this.fetcher.fetch(input, { ...init, headers: asNodeFetch(init?.headers), signal }, { redirects: method === 'GET' ? 'follow' : 'same-origin' });
    } catch (err) {
      release();
      this.settle(err, essential);
      throw err;
    }
    const target = typeof input === 'string' ? input : input.href;
    this.onExchange?.({ url: res.url || target, method, status: res.status, headers: res.headers, tls: responseTls(res) });
    if (res.body === null) {
      release();
      return res;
    }
    // The body is read by the SDK, which may only log a failure (an SSE stream going over the
    // cap, a reset): watch it here so such a failure ends the probe with its own kind. The
    // request holds its slot (its socket) until its body is done.
    const reader = res.body.getReader();
    const body = new ReadableStream<Uint8Array>({
      pull: async (c) => {
        // Once the probe has failed, nothing more of what the server sends is handed on.
        if (this.failure) {
          release();
          c.error(this.failure);
          return void reader.cancel(this.failure).catch(() => {});
        }
        try {
          const { done, value } = await reader.read();
          if (done) {
            release();
            c.close();
          } else c.enqueue(value);
        } catch (err) {
          release();
          this.settle(err, essential);
          c.error(err);
        }
      },
      cancel: (reason) => {
        release();
        return reader.cancel(reason);
      },
    });
    const monitored = new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
    Object.defineProperty(monitored, 'url', { value: res.url });
    return monitored;
  };

  private settle(err: unknown, essential: boolean): void {
    if (essential) return this.note(err);
    const f = safeClientFailure(err);
    if (f) this.ignored.add(f);
  }

  /** The error the probe reports for `err`: the safe client's own failure first, then HTTP status, then timeout. */
  explain(err: unknown, url: string, timeoutMs: number): Error {
    if (this.failure) return this.failure;
    const own = safeClientFailure(err);
    if (own) return own;
    if (this.controller.signal.aborted) return new ProbeFailed('timeout', `${url} did not answer MCP within ${timeoutMs} ms`);
    const status = httpStatusOf(err);
    if (status !== null) return new McpHttpStatus(status, `${url} answered HTTP ${status} instead of MCP`);
    return new ProbeFailed('network', `could not read the MCP tool manifest of ${url}: ${(err as Error)?.message ?? String(err)}`.slice(0, 500));
  }
}

/** The SDK's request headers with what node's fetch would add (MCP_REQUEST_HEADERS) where the SDK set nothing. */
function asNodeFetch(given: RequestInit['headers']): Headers {
  const headers = new Headers(given);
  for (const [k, v] of Object.entries(MCP_REQUEST_HEADERS)) if (!headers.has(k)) headers.set(k, v);
  return headers;
}

/** Requests whose failure does not end the probe: the context lists' (and cancellations the SDK sends for them). */
const OPTIONAL_METHODS: ReadonlySet<string> = new Set([...Object.values(CONTEXT_METHODS), 'notifications/cancelled']);

/**
 * What a request body carries: how many JSON-RPC responses (answers to the server's requests),
 * and whether it is only requests of OPTIONAL_METHODS.
 */
function bodyFacts(body: RequestInit['body']): { answers: number; optional: boolean } {
  if (typeof body !== 'string') return { answers: 0, optional: false };
  let msg: unknown;
  try {
    msg = JSON.parse(body);
  } catch {
    return { answers: 0, optional: false };
  }
  const isAnswer = (m: unknown) => typeof m === 'object' && m !== null && !('method' in m) && 'id' in m;
  const isOptional = (m: unknown) => typeof m === 'object' && m !== null && typeof (m as { method?: unknown }).method === 'string' && OPTIONAL_METHODS.has((m as { method: string }).method);
  const all = Array.isArray(msg) ? msg : [msg];
  return { answers: all.filter(isAnswer).length, optional: all.length > 0 && all.every(isOptional) };
}

/** A TargetRefused or ProbeFailed thrown by the safe client, possibly wrapped by the SDK (cause chain). */
function safeClientFailure(err: unknown): ProbeFailed | TargetRefused | null {
  for (let e = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof TargetRefused || e instanceof ProbeFailed) return e;
  }
  return null;
}

/** The HTTP status an SDK transport error carries (a non-2xx answer to an MCP request), if any. */
function httpStatusOf(err: unknown): number | null {
  let code: unknown;
  if (err instanceof SdkHttpError) code = err.status;
  else if (err instanceof SseError) code = err.code;
  else {
    // The SSE transport reports a failed POST as a plain Error "Error POSTing to endpoint (HTTP 500): ...".
    const m = /\(HTTP (\d{3})\)/.exec((err as Error)?.message ?? '');
    code = m ? Number(m[1]) : undefined;
  }
  return typeof code === 'number' && Number.isInteger(code) && code >= 100 && code <= 599 ? code : null;
}
