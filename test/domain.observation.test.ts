import { describe, expect, it } from 'vitest';
import { parseRegistryPage, CatalogueFormatError } from '../src/domain/catalogue.js';
import { combineSources, computeTrustScore, OBSERVATORY_SOURCE, OBSERVATORY_SOURCE_CAP, type SourceAccumulator } from '../src/domain/scoring.js';
import { robustCategoryBaseline, robustServerFigures } from '../src/domain/baseline.js';
import { loadConfig, ConfigError } from '../src/config.js';

// Pure parts of issue 13: the registry page parser, the weight of the observatory's own probes,
// and the OBSERVE_* configuration. Fixed clock, no I/O.

const NOW = new Date('2026-12-01T00:00:00Z');
const src = (source: string, n: number, rate: number, latency = 100): SourceAccumulator => ({
  source,
  weight: n,
  successes: n * rate,
  latency_sum: n * latency,
  reports: n,
  updated_at: NOW,
});

describe('the observatory source weighting', () => {
  it('alone, the probes saturate at half an address source: a healthy server reaches PASS, a dead one FAIL', () => {
    const healthy = computeTrustScore({ sources: [src(OBSERVATORY_SOURCE, 500, 1)], baselineLatencyMs: 100, anomalyFlags: [], now: NOW });
    expect(healthy.breakdown).toMatchObject({ evidence_weight: OBSERVATORY_SOURCE_CAP, independent_sources: 0, observatory_weight: OBSERVATORY_SOURCE_CAP });
    expect(healthy.trust_score).toBe(68.8);
    const dead = computeTrustScore({ sources: [src(OBSERVATORY_SOURCE, 500, 0)], baselineLatencyMs: 100, anomalyFlags: [], now: NOW });
    expect(dead.trust_score).toBe(38.8);
  });

  it('with agents, the probes weigh at most half of all agents together, so the agents decide', () => {
    for (const agentReports of [1, 3, 12]) {
      const ev = combineSources([src(OBSERVATORY_SOURCE, 100, 1), src('addr:a', agentReports, 0)], NOW);
      expect(ev.observatory_weight).toBeCloseTo(Math.min(OBSERVATORY_SOURCE_CAP, agentReports / 2), 9);
      expect(ev.sources).toBe(1);
      expect(ev.success_rate).toBeLessThan(0.5);
    }
    // Agreeing agents and probes simply add up.
    const agree = combineSources([src(OBSERVATORY_SOURCE, 100, 1), src('addr:a', 12, 1), src('addr:b', 12, 1)], NOW);
    expect(agree).toMatchObject({ weight: 30, success_rate: 1, sources: 2, observatory_weight: 6 });
  });

  it('probe-only servers count in their category baseline', () => {
    const probeOnly = robustServerFigures([src(OBSERVATORY_SOURCE, 5, 1, 200)], [], NOW);
    expect(probeOnly).toMatchObject({ sources: 0, has_evidence: true });
    expect(robustCategoryBaseline('general', [probeOnly], 1).avg_latency_ms).toBe(200);
  });
});

describe('parseRegistryPage', () => {
  it('refuses documents that are not a registry page', () => {
    for (const doc of [null, 42, 'x', [], {}, { servers: 'x' }, { servers: new Array(10_001).fill(null) }, { servers: [], metadata: { nextCursor: 'x'.repeat(1001) } }]) {
      expect(() => parseRegistryPage(doc)).toThrow(CatalogueFormatError);
    }
  });

  it('reads remotes, counts local-only servers and skips the rest with reasons', () => {
    const p = parseRegistryPage({
      servers: [
        { server: { name: 'io.github.a/weather', description: 'Daily forecast', remotes: [{ type: 'sse', url: 'https://a.example/sse' }, { type: 'streamable-http', url: 'https://A.example:443/mcp/' }] } },
        { server: { name: 'io.github.a/local', packages: [{ registryType: 'npm', identifier: 'x' }] } },
        { server: { name: 'io.github.a/old', remotes: [{ type: 'sse', url: 'https://o.example' }] }, _meta: { 'io.modelcontextprotocol.registry/official': { isLatest: false } } },
      ],
      metadata: { count: 3, nextCursor: 'io.github.a/old:1.0.0' },
    });
    expect(p.nextCursor).toBe('io.github.a/old:1.0.0');
    expect(p.remotes.map((r) => [r.transport, r.url, r.category, r.slug])).toEqual([
      ['streamable-http', 'https://a.example/mcp', 'weather', 'io-github-a-weather'],
      ['sse', 'https://a.example/sse', 'weather', 'io-github-a-weather'],
    ]);
    expect(p.localOnly).toEqual(['io.github.a/local']);
    expect(p.skipped).toEqual([{ name: 'io.github.a/old', reason: 'not the latest version' }]);
  });
});

describe('OBSERVE_* configuration', () => {
  it('has documented defaults and refuses bad values naming the variable', () => {
    expect(loadConfig({}).observe).toEqual({ enabled: true, intervalSeconds: 300, concurrency: 4, ratePerMinute: 60, timeoutMs: 10_000, minSources: 3 });
    expect(loadConfig({}).newServersPerSourcePerHour).toBe(100);
    expect(loadConfig({ NEW_SERVERS_PER_SOURCE_PER_HOUR: '0', OBSERVE_MIN_SOURCES: '5' })).toMatchObject({ newServersPerSourcePerHour: 0, observe: { minSources: 5 } });
    expect(loadConfig({ OBSERVE_ENABLED: '0', OBSERVE_INTERVAL_SECONDS: '60' }).observe).toMatchObject({ enabled: false, intervalSeconds: 60 });
    for (const [name, value] of [
      ['OBSERVE_ENABLED', 'sometimes'],
      ['OBSERVE_INTERVAL_SECONDS', '5'],
      ['OBSERVE_CONCURRENCY', '0'],
      ['OBSERVE_RATE_PER_MINUTE', '-1'],
      ['OBSERVE_TIMEOUT_MS', 'fast'],
      ['OBSERVE_MIN_SOURCES', '0'],
      ['NEW_SERVERS_PER_SOURCE_PER_HOUR', 'many'],
    ]) {
      expect(() => loadConfig({ [name!]: value })).toThrow(ConfigError);
      try {
        loadConfig({ [name!]: value });
      } catch (err) {
        expect((err as ConfigError).variable).toBe(name);
      }
    }
  });
});
