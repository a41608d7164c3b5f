import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport, SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { ManifestTool } from '../domain/drift.js';
import { ProbeFailed, TargetRefused, type SafeFetcher } from './safe-fetch.js';

// Reads a live MCP server's tool manifest with the official SDK client: initialize, then
// tools/list page by page. Every request goes through the safe client.

export const MANIFEST_LIMITS = { maxPages: 50, maxTools: 2000, totalTimeoutMs: 20_000 } as const;

export interface LiveManifest {
  tools: ManifestTool[];
  server_info: { name: string; version: string } | null;
  protocol_version: string | null;
  pages: number;
}

export interface ManifestReadOptions {
  /** The server's transport (MCP Registry remote type); default streamable-http. */
  transport?: 'streamable-http' | 'sse';
  /** Overall deadline; default MANIFEST_LIMITS.totalTimeoutMs. */
  timeoutMs?: number;
  /** Client name sent in initialize. */
  clientName?: string;
  /** Aborts the read early (it then fails as a timeout). */
  signal?: AbortSignal;
}

/** The server answered initialize or tools/list with this HTTP status instead of MCP (401, 500, ...). */
export class McpHttpStatus extends ProbeFailed {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super('network', message);
  }
}

export async function readToolManifest(fetcher: SafeFetcher, url: string, version: string, opts: ManifestReadOptions = {}): Promise<LiveManifest> {
  // Refusal is decided before the SDK is involved, so a refused target never looks like an MCP error.
  await fetcher.check(url);
  const timeoutMs = opts.timeoutMs ?? MANIFEST_LIMITS.totalTimeoutMs;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const onAbort = () => controller.abort();
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  if (opts.signal?.aborted) controller.abort();
  const safeFetch = (input: string | URL | Request, init?: RequestInit) =>
    fetcher.fetch(input instanceof Request ? input.url : input, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, controller.signal]) : controller.signal });
  const transport: Transport & { protocolVersion?: string } =
    opts.transport === 'sse' ? new SSEClientTransport(new URL(url), { fetch: safeFetch }) : new StreamableHTTPClientTransport(new URL(url), { fetch: safeFetch });
  const client = new Client({ name: opts.clientName ?? 'trust-observatory-drift', version }, { capabilities: {} });
  try {
    await client.connect(transport, { signal: controller.signal, timeout: timeoutMs });
    const caps = client.getServerCapabilities();
    const tools: ManifestTool[] = [];
    let pages = 0;
    if (caps?.tools) {
      let cursor: string | undefined;
      do {
        if (pages >= MANIFEST_LIMITS.maxPages) throw new ProbeFailed('too_large', `tools/list returned more than ${MANIFEST_LIMITS.maxPages} pages`);
        const page = await client.listTools(cursor === undefined ? {} : { cursor }, { signal: controller.signal, timeout: timeoutMs });
        pages++;
        for (const t of page.tools) {
          tools.push({ name: t.name, description: t.description, inputSchema: t.inputSchema, outputSchema: t.outputSchema, annotations: t.annotations });
        }
        if (tools.length > MANIFEST_LIMITS.maxTools) throw new ProbeFailed('too_large', `the manifest lists more than ${MANIFEST_LIMITS.maxTools} tools`);
        cursor = page.nextCursor;
      } while (cursor);
    }
    const info = client.getServerVersion();
    return { tools, server_info: info ? { name: info.name, version: info.version } : null, protocol_version: transport.protocolVersion ?? null, pages };
  } catch (err) {
    if (err instanceof TargetRefused || err instanceof ProbeFailed) throw err;
    const cause = (err as { cause?: unknown }).cause;
    if (cause instanceof TargetRefused || cause instanceof ProbeFailed) throw cause;
    if (controller.signal.aborted) throw new ProbeFailed('timeout', `${url} did not list its tools within ${timeoutMs} ms`);
    const status = httpStatusOf(err);
    if (status !== null) throw new McpHttpStatus(status, `${url} answered HTTP ${status} instead of MCP`);
    throw new ProbeFailed('network', `could not read the MCP tool manifest of ${url}: ${(err as Error).message}`.slice(0, 500));
  } finally {
    clearTimeout(timer);
    opts.signal?.removeEventListener('abort', onAbort);
    await client.close().catch(() => {});
  }
}

/** The HTTP status an SDK transport error carries (a non-2xx answer to an MCP request), if any. */
function httpStatusOf(err: unknown): number | null {
  let code: unknown;
  if (err instanceof StreamableHTTPError || err instanceof SseError) code = err.code;
  else {
    // The SSE transport reports a failed POST as a plain Error "Error POSTing to endpoint (HTTP 500): ...".
    const m = /\(HTTP (\d{3})\)/.exec((err as Error)?.message ?? '');
    code = m ? Number(m[1]) : undefined;
  }
  return typeof code === 'number' && Number.isInteger(code) && code >= 100 && code <= 599 ? code : null;
}
