import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { routeMetrics } from '../src/http/metrics.js';

// The per-route request counters and latency histogram (src/http/metrics.ts) in the registry's
// own exposition, and a reset that zeroes them without losing the entries route hooks hold.
describe('route metrics', () => {
  it('expose counts per status and cumulative buckets, and keep counting after a reset', async () => {
    const registry = new Registry();
    const m = routeMetrics(registry);
    const trust = m.entry('GET', '/api/trust');
    trust.record(200, 0.0004);
    trust.record(200, 0.003);
    trust.record(404, 7);
    const text = await registry.metrics();
    expect(text).toContain('# TYPE observatory_http_requests_total counter');
    expect(text).toContain('observatory_http_requests_total{method="GET",route="/api/trust",status="200"} 2');
    expect(text).toContain('observatory_http_requests_total{method="GET",route="/api/trust",status="404"} 1');
    expect(text).toContain('# TYPE observatory_http_request_duration_seconds histogram');
    expect(text).toContain('observatory_http_request_duration_seconds_bucket{le="0.0005",method="GET",route="/api/trust"} 1');
    expect(text).toContain('observatory_http_request_duration_seconds_bucket{le="0.005",method="GET",route="/api/trust"} 2');
    expect(text).toContain('observatory_http_request_duration_seconds_bucket{le="5",method="GET",route="/api/trust"} 2');
    expect(text).toContain('observatory_http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/api/trust"} 3');
    expect(text).toContain('observatory_http_request_duration_seconds_count{method="GET",route="/api/trust"} 3');
    expect(text).toMatch(/observatory_http_request_duration_seconds_sum\{method="GET",route="\/api\/trust"\} 7\.0034/);
    // JSON too (the registry's other format).
    const json = await registry.getMetricsAsJSON();
    expect(json.find((x) => x.name === 'observatory_http_requests_total')?.values).toHaveLength(2);
    registry.resetMetrics();
    expect(await registry.metrics()).not.toContain('route="/api/trust"');
    trust.record(201, 0.02);
    const after = await registry.metrics();
    expect(after).toContain('observatory_http_requests_total{method="GET",route="/api/trust",status="201"} 1');
    expect(after).toContain('observatory_http_request_duration_seconds_count{method="GET",route="/api/trust"} 1');
    expect(m.entry('GET', '/api/trust')).toBe(trust);
  });
});
