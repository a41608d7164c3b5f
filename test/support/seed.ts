import { postJson } from './app.js';

/**
 * Reports that give three servers the three verdicts: `pass` 20 fast successes (PASS), `fail`
 * 20 slow 500s (FAIL), `uncertain` one success (too little evidence: UNCERTAIN). The gate,
 * bundle and CLI tests start from these.
 */
export async function seedVerdicts(base: string, urls: { pass: string; fail: string; uncertain?: string }): Promise<void> {
  for (let i = 0; i < 20; i++) {
    await postJson(`${base}/api/report`, { server_url: urls.pass, success: true, latency_ms: 40 });
    await postJson(`${base}/api/report`, { server_url: urls.fail, success: false, latency_ms: 4000, http_status: 500 });
  }
  if (urls.uncertain !== undefined) await postJson(`${base}/api/report`, { server_url: urls.uncertain, success: true, latency_ms: 40 });
}
