import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
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

export async function readToolManifest(fetcher: SafeFetcher, url: string, version: string): Promise<LiveManifest> {
  // Refusal is decided before the SDK is involved, so a refused target never looks like an MCP error.
  await fetcher.check(url);
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), MANIFEST_LIMITS.totalTimeoutMs);
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: (input, init) => fetcher.fetch(input as string | URL, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, controller.signal]) : controller.signal }),
  });
  const client = new Client({ name: 'trust-observatory-drift', version }, { capabilities: {} });
  try {
    await client.connect(transport, { signal: controller.signal, timeout: MANIFEST_LIMITS.totalTimeoutMs });
    const caps = client.getServerCapabilities();
    const tools: ManifestTool[] = [];
    let pages = 0;
    if (caps?.tools) {
      let cursor: string | undefined;
      do {
        if (pages >= MANIFEST_LIMITS.maxPages) throw new ProbeFailed('too_large', `tools/list returned more than ${MANIFEST_LIMITS.maxPages} pages`);
        const page = await client.listTools(cursor === undefined ? {} : { cursor }, { signal: controller.signal, timeout: MANIFEST_LIMITS.totalTimeoutMs });
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
    if (controller.signal.aborted) throw new ProbeFailed('timeout', `${url} did not list its tools within ${MANIFEST_LIMITS.totalTimeoutMs} ms`);
    throw new ProbeFailed('network', `could not read the MCP tool manifest of ${url}: ${(err as Error).message}`.slice(0, 500));
  } finally {
    clearTimeout(timer);
    await client.close().catch(() => {});
  }
}
