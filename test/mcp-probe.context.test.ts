import { afterEach, describe, expect, it } from 'vitest';
import { CONTEXT_LIMITS, readToolManifest } from '../src/probes/mcp-manifest.js';
import { createSafeFetcher } from '../src/probes/safe-fetch.js';
import { startContextTarget, type ContextState, type PromptDef } from './support/context-target.js';

// The MCP probe reads what else a server gives the model besides its tools (docs/probes.md "Drift
// of what else the server says"): its instructions, and its prompts, resources and resource
// templates, each list only when the server announces it, within CONTEXT_LIMITS. A server failing
// a list, or over a limit, leaves that list unavailable with a reason: the probe itself succeeds.
// Real MCP servers on 127.0.0.1 built with the official SDKs (v2 and, for the 2025 handshake, 1.x).

const fetcher = createSafeFetcher({ allowPrivate: true });
const targets: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(targets.splice(0).map((t) => t.close()));
});
async function target(state: ContextState, opts: Parameters<typeof startContextTarget>[1] = {}) {
  const t = await startContextTarget(state, opts);
  targets.push(t);
  return t;
}

const FULL: ContextState = {
  instructions: 'Call get_forecast with a city name.',
  prompts: [
    { name: 'plan_trip', title: 'Plan a trip', description: 'Plans a trip around the weather', arguments: [{ name: 'city', required: true }] },
    { name: 'summarise' },
    { name: 'compare', description: 'Compares two cities' },
  ],
  resources: [{ uri: 'weather://stations', name: 'stations', mimeType: 'application/json', description: 'Every station' }],
  templates: [{ uriTemplate: 'weather://station/{id}', name: 'station', description: 'One station' }],
};

describe('the MCP probe reads a server\'s instructions, prompts and resources', () => {
  for (const kind of ['2026-07-28 (SDK v2)', '2025 handshake (SDK 1.x)'] as const) {
    it(`every page of every list a ${kind} server announces, and its instructions`, async () => {
      const t = await target(FULL, kind.includes('1.x') ? { sdk1: true } : { modernOnly: true });
      const m = await readToolManifest(fetcher, t.url);
      expect(m.era).toBe(kind.includes('1.x') ? 'legacy' : 'modern');
      expect(m.tools.map((x) => x.name)).toEqual(['get_forecast']);
      expect(m.context.instructions).toBe('Call get_forecast with a city name.');
      expect(m.context.prompts).toEqual({
        status: 'read',
        pages: 2,
        items: [
          { key: 'plan_trip', fields: { title: 'Plan a trip', description: 'Plans a trip around the weather', arguments: [{ name: 'city', required: true }] } },
          { key: 'summarise', fields: {} },
          { key: 'compare', fields: { description: 'Compares two cities' } },
        ],
      });
      expect(m.context.resources).toEqual({ status: 'read', pages: 1, items: [{ key: 'weather://stations', fields: { name: 'stations', mimeType: 'application/json', description: 'Every station' } }] });
      expect(m.context.resource_templates).toEqual({ status: 'read', pages: 1, items: [{ key: 'weather://station/{id}', fields: { name: 'station', description: 'One station' } }] });
      expect(t.methods.filter((x) => x === 'prompts/list')).toHaveLength(2);
    });
  }

  it('a server that announces neither prompts nor resources is not asked for them; no instructions are null', async () => {
    const t = await target({});
    const m = await readToolManifest(fetcher, t.url);
    expect(m.context).toEqual({ instructions: null, prompts: { status: 'not_offered' }, resources: { status: 'not_offered' }, resource_templates: { status: 'not_offered' } });
    expect(t.methods).toContain('tools/list');
    expect(t.methods.filter((x) => x.startsWith('prompts/') || x.startsWith('resources/'))).toEqual([]);
  });

  it('a server announcing resources only is asked for resources and templates, never prompts', async () => {
    const t = await target({ resources: [{ uri: 'weather://x', name: 'x' }] });
    const m = await readToolManifest(fetcher, t.url);
    expect(m.context.prompts).toEqual({ status: 'not_offered' });
    expect(m.context.resources.status).toBe('read');
    expect(m.context.resource_templates).toEqual({ status: 'read', pages: 1, items: [] });
    expect(t.methods).not.toContain('prompts/list');
  });

  for (const failure of ['not_found', 'error'] as const) {
    it(`a server failing prompts/list (${failure === 'not_found' ? 'Method not found' : 'an internal error'}): the probe succeeds, prompts are unavailable and say why`, async () => {
      const t = await target({ ...FULL, fail: { prompts: failure } });
      const m = await readToolManifest(fetcher, t.url);
      expect(m.tools.map((x) => x.name)).toEqual(['get_forecast']);
      expect(m.context.prompts.status).toBe('unavailable');
      expect(m.context.prompts).toMatchObject({ detail: expect.stringMatching(failure === 'not_found' ? /^prompts\/list failed: .*Method not found/ : /^prompts\/list failed: /) });
      // The other lists are read as usual.
      expect(m.context.resources.status).toBe('read');
      expect(m.context.instructions).toBe(FULL.instructions);
    });
  }

  it('a server that never answers prompts/list: the probe ends within its deadline, the list unavailable', async () => {
    const t = await target({ ...FULL, fail: { prompts: 'hang' } });
    const m = await readToolManifest(fetcher, t.url, { timeoutMs: 4000 });
    expect(m.tools.map((x) => x.name)).toEqual(['get_forecast']);
    expect(m.context.prompts).toEqual({ status: 'unavailable', detail: expect.stringMatching(/^prompts\/list was not answered within \d+ ms$/) });
    expect(m.context.instructions).toBe(FULL.instructions);
  });

  it(`a list that never ends is read to ${CONTEXT_LIMITS.maxPages} pages of all lists together, then unavailable; the probe succeeds`, async () => {
    const t = await target({ ...FULL, endlessCursor: true, pageSize: 1 });
    const m = await readToolManifest(fetcher, t.url);
    expect(m.context.prompts).toEqual({ status: 'unavailable', detail: `prompts/list: more than ${CONTEXT_LIMITS.maxPages} pages of prompts, resources and resource templates together` });
    // The page budget is shared: nothing is left for the resources.
    expect(m.context.resources.status).toBe('unavailable');
    expect(m.context.resource_templates.status).toBe('unavailable');
    const asked = t.methods.filter((x) => x === 'prompts/list' || x.startsWith('resources/'));
    expect(asked).toHaveLength(CONTEXT_LIMITS.maxPages);
  });

  it(`more than ${CONTEXT_LIMITS.maxBytes} bytes of prompts: unavailable, and no page read past it`, async () => {
    // Six pages of one prompt each, ~900 KB of description apiece (each answer within the safe client's 1 MiB).
    const prompts: PromptDef[] = Array.from({ length: 6 }, (_, i) => ({ name: `p${i}`, description: `${i}`.repeat(900_000) }));
    const t = await target({ prompts, pageSize: 1 });
    const m = await readToolManifest(fetcher, t.url);
    expect(m.context.prompts).toEqual({ status: 'unavailable', detail: `prompts/list: the prompts, resources and resource templates are more than ${CONTEXT_LIMITS.maxBytes} bytes of JSON together` });
    expect(t.methods.filter((x) => x === 'prompts/list')).toHaveLength(5);
    expect(m.tools.map((x) => x.name)).toEqual(['get_forecast']);
  });

  it(`more than ${CONTEXT_LIMITS.maxItems} resources: unavailable`, async () => {
    const resources = Array.from({ length: CONTEXT_LIMITS.maxItems + 1 }, (_, i) => ({ uri: `weather://r/${i}`, name: `r${i}` }));
    const t = await target({ resources, pageSize: 1000 });
    const m = await readToolManifest(fetcher, t.url);
    expect(m.context.resources).toEqual({ status: 'unavailable', detail: `resources/list lists more than ${CONTEXT_LIMITS.maxItems} entries` });
    expect(m.context.resource_templates.status).toBe('read');
  });

  it('a key longer than the limit makes its list unavailable', async () => {
    const t = await target({ resources: [{ uri: `weather://${'x'.repeat(CONTEXT_LIMITS.maxKeyLength)}`, name: 'long' }] });
    const m = await readToolManifest(fetcher, t.url);
    expect(m.context.resources).toEqual({ status: 'unavailable', detail: `resources/list lists a uri longer than ${CONTEXT_LIMITS.maxKeyLength} characters` });
  });
});
