import { describe, expect, it } from 'vitest';
import { json, postJson, startTestApp } from './support/app.js';
import { backend } from './support/db.js';
import { ConfigError, loadConfig } from '../src/config.js';
import { createReceiptRetention } from '../src/services/receipt-retention.js';
import { MARKET_FIGURES_MS } from '../src/services/trust.js';

// RECEIPT_RETENTION_DAYS: every pre-flight, gate decision and drift check whose claim changed in
// the last second stores a receipt, so a busy gateway stores one per upstream per second; before
// this job the table kept every one for good. Receipts issued longer ago than the retention are
// deleted (every 6 hours, once across instances): their id answers 404, their JWS still verifies.

const DAY = 86_400_000;

describe(`receipt retention (${backend})`, () => {
  it('deletes receipts issued before the retention, in batches, keeps younger ones; the JWS still verifies offline', async () => {
    let clock = Date.parse('2026-01-01T00:00:00.000Z');
    const app = await startTestApp({ RECEIPT_RETENTION_DAYS: '200' }, { now: () => new Date(clock) });
    const preflight = async (target: string) => json(fetch(`${app.base}/v1/preflight?target=${encodeURIComponent(target)}`));
    try {
      expect((await postJson(`${app.base}/api/report`, { server_url: 'https://kept.example.com/mcp', success: true, latency_ms: 5 })).status).toBe(200);
      // On day 0 five pre-flight and two gateway receipts (two kinds: the job finds them by kind), one on day 150.
      const old: { receipt_id: string; diligence_receipt: string }[] = [];
      for (let i = 0; i < 5; i++) old.push(await preflight(`https://old-${i}.example.com/mcp`));
      for (let i = 0; i < 2; i++) {
        const res = await fetch(`${app.base}/v1/gate`, { headers: { 'x-mcp-server': `https://gated-${i}.example.com/mcp` } });
        const id = res.headers.get('x-trust-receipt')!;
        expect(id).toMatch(/^[0-9a-f]{16}$/);
        old.push({ receipt_id: id, diligence_receipt: (await json(fetch(`${app.base}/v1/receipt/${id}`))).jws });
      }
      expect(new Set((await app.obs.db.query<{ kind: string }>('SELECT DISTINCT kind FROM receipts')).map((r) => r.kind))).toEqual(new Set(['preflight', 'gateway']));
      clock += 150 * DAY;
      const young = await preflight('https://kept.example.com/mcp');
      // Day 201: the day-0 receipts are past 200 days, the day-150 one is not.
      clock += 51 * DAY;
      // Batches of 3 (the service deletes 5,000 per statement): every old receipt goes, nothing else.
      const issued = async () => {
        clock += MARKET_FIGURES_MS; // /api/stats counts at most once per MARKET_FIGURES_MS
        return (await json(fetch(`${app.base}/api/stats`))).market_validation.receipts_issued as number;
      };
      const issuedBefore = await issued();
      expect(issuedBefore).toBeGreaterThanOrEqual(8);
      const small = createReceiptRetention({ db: app.obs.db, config: app.obs.config, now: () => new Date(clock) }, { batch: 3 });
      small.close();
      expect(await small.purge(new Date(clock))).toBe(7);
      // Deleted, still issued: /api/stats' receipts_issued counts the deleted ones too.
      expect(await issued()).toBe(issuedBefore);
      for (const r of old) expect((await fetch(`${app.base}/v1/receipt/${r.receipt_id}`)).status).toBe(404);
      expect((await fetch(`${app.base}/v1/receipt/${young.receipt_id}`)).status).toBe(200);
      // Deleted from the store, not from the record: the receipt still verifies against the JWKS.
      expect(await json(fetch(`${app.base}/v1/verify?jws=${old[0]!.diligence_receipt}`))).toMatchObject({ valid: true });
      // The periodic job runs the same purge once per period across instances.
      clock += 50 * DAY; // day 251: the day-150 receipt is 101 days old, still kept
      expect(await app.obs.services.receiptRetention.job.tick(new Date(clock))).toBe(true);
      expect(await app.obs.services.receiptRetention.job.tick(new Date(clock))).toBe(false);
      expect((await fetch(`${app.base}/v1/receipt/${young.receipt_id}`)).status).toBe(200);
    } finally {
      await app.close();
    }
  }, 60_000);

  it('0 keeps every receipt; a retention under six months is refused at start-up', async () => {
    const keep = await startTestApp({ RECEIPT_RETENTION_DAYS: '0' });
    try {
      const r = await json(fetch(`${keep.base}/v1/preflight?target=${encodeURIComponent('https://any.example.com/mcp')}`));
      expect(await keep.obs.services.receiptRetention.purge(new Date(Date.now() + 100_000 * DAY))).toBe(0);
      expect((await fetch(`${keep.base}/v1/receipt/${r.receipt_id}`)).status).toBe(200);
    } finally {
      await keep.close();
    }
    expect(loadConfig({}).receiptRetentionDays).toBe(400);
    expect(() => loadConfig({ RECEIPT_RETENTION_DAYS: '30' })).toThrow(ConfigError);
    expect(() => loadConfig({ RECEIPT_RETENTION_DAYS: '30' })).toThrow(/RECEIPT_RETENTION_DAYS.*at least 183/);
  });
});
