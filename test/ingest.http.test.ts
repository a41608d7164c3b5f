import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { TelemetryService } from '../gen/observatory/v1/telemetry_pb.js';
import { json, postJson, startTestApp, type TestApp } from './support/app.js';

// Group commit end to end: concurrent reports share transactions, every 200 is stored, a
// stream's reports are written in chunks, batch sizes reach /metrics, trust reads see new
// evidence at once (in-process invalidation of the score cache).
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
}, 120_000);
afterAll(async () => t?.close());

const URL_A = 'https://group-commit-a.example.com/mcp';
const URL_B = 'https://group-commit-b.example.com/mcp';

async function batchMetrics(): Promise<{ count: number; sum: number }> {
  const text = await (await fetch(`${t.base}/metrics`)).text();
  const count = Number(/^observatory_ingest_batch_size_count (\d+)/m.exec(text)?.[1] ?? NaN);
  const sum = Number(/^observatory_ingest_batch_size_sum (\d+)/m.exec(text)?.[1] ?? NaN);
  return { count, sum };
}

describe('ingestion group commit', () => {
  it('stores every acknowledged concurrent report, all through the group commit', async () => {
    const before = await batchMetrics();
    const N = 60;
    const res = await Promise.all(
      Array.from({ length: N }, (_, i) => postJson(`${t.base}/api/report`, { server_url: i % 2 ? URL_A : URL_B, success: i % 5 !== 0, latency_ms: 10 + i })),
    );
    expect(res.every((r) => r.status === 200)).toBe(true);
    const a = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(URL_A)}`));
    const b = await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(URL_B)}`));
    expect(a.metrics.total_interactions + b.metrics.total_interactions).toBe(N);
    const after = await batchMetrics();
    expect(after.sum - before.sum).toBe(N);
    expect(after.count - before.count).toBeLessThanOrEqual(N);
  });

  it('a trust read right after a report sees it (no stale cache)', async () => {
    const read = () => json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(URL_A)}`));
    const n0 = (await read()).metrics.total_interactions;
    expect((await postJson(`${t.base}/api/report`, { server_url: URL_A, success: true, latency_ms: 5 })).status).toBe(200);
    expect((await read()).metrics.total_interactions).toBe(n0 + 1);
  });

  it('a gRPC stream writes its reports in chunks and counts rejections per item', async () => {
    const client = createClient(TelemetryService, createGrpcTransport({ baseUrl: t.base }));
    const read = async () => (await json(fetch(`${t.base}/api/trust?url=${encodeURIComponent(URL_B)}`))).metrics.total_interactions as number;
    const n0 = await read();
    async function* gen() {
      for (let i = 0; i < 1203; i++) {
        yield { report: i === 700 ? { serverUrl: 'not a url', success: true, latencyMs: 1 } : { serverUrl: URL_B, success: true, latencyMs: 20 } };
      }
    }
    const m0 = await batchMetrics();
    const r = await client.reportStream(gen());
    const m1 = await batchMetrics();
    // 1202 rows in chunks of 500: three transactions (fewer if other work joined them).
    expect(m1.sum - m0.sum).toBe(1202);
    expect(m1.count - m0.count).toBeLessThanOrEqual(3);
    expect(r.accepted).toBe(1202);
    expect(r.rejected).toBe(1);
    expect(r.rejections[0]?.index).toBe(700);
    expect(await read()).toBe(n0 + 1202);
  });
});
