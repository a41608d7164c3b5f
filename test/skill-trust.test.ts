import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { TrustService } from '../gen/observatory/v1/trust_pb.js';
import { computeSkillTrust } from '../src/domain/skill-trust.js';
import { cacheLimits, setCacheLimits } from '../src/store/cache-limits.js';
import { expectProblem, json, startTestApp, type TestApp } from './support/app.js';
import { backend } from './support/db.js';
import { recordedSkill, startClawHub, type ClawHubStandIn } from './support/clawhub.js';

let clock = new Date('2026-11-25T12:00:00Z');
const now = () => clock;
let t: TestApp;
let hub: ClawHubStandIn;
const trust = (q: string) => fetch(`${t.base}/v1/trust?${q}`);

beforeAll(async () => {
  hub = await startClawHub();
  hub.skills.set('gog', recordedSkill('gog', { now: clock }));
  hub.skills.set('fresh-skill', recordedSkill('fresh-skill', { now: clock, ageDays: 2, installs: 3, stars: 0, versions: 1 }));
  hub.skills.set('sus-skill', recordedSkill('sus-skill', { now: clock, moderation: { isSuspicious: true, verdict: 'suspicious', reasonCodes: ['suspicious.exfil'] } }));
  hub.skills.set('bad-skill', recordedSkill('bad-skill', { now: clock, moderation: { isMalwareBlocked: true, verdict: 'malicious' } }));
  hub.skills.set('unscanned', recordedSkill('unscanned', { now: clock, moderation: null, owner: null }));
  t = await startTestApp({ CLAWHUB_API_URL: hub.url }, { now });
});
afterAll(async () => {
  await t?.close();
  await hub?.close();
});

describe(`GET /v1/trust?registry=clawhub (${backend})`, () => {
  it('scores an established clean skill PASS with its source signals', async () => {
    const res = await trust('registry=clawhub&skill=gog');
    expect(res.status).toBe(200);
    const b = await json(res);
    expect(b).toMatchObject({ registry: 'clawhub', skill: 'gog', badge: 'PASS' });
    expect(b.score).toBeGreaterThanOrEqual(60);
    expect(b.signals).toMatchObject({ owner: 'steipete', latest_version: '1.5.0', moderation: { is_suspicious: false, is_malware_blocked: false, verdict: 'clean' } });
    expect(b.signals.stats).toMatchObject({ installsAllTime: 4200, stars: 310 });
    const parts = ['moderation', 'owner', 'age', 'installs', 'stars', 'versions'].reduce((s, k) => s + (b.score_breakdown[k] as number), 0);
    expect(Math.abs(parts - b.score)).toBeLessThan(0.5);
  });

  it('FAIL whenever the registry says suspicious, malicious or blocked, however popular', async () => {
    const sus = await json(trust('registry=clawhub&skill=sus-skill'));
    expect(sus).toMatchObject({ badge: 'FAIL' });
    expect(sus.score).toBeLessThanOrEqual(30);
    expect(sus.signals.flags).toContain('suspicious');
    const bad = await json(trust('registry=clawhub&skill=BAD-SKILL'));
    expect(bad).toMatchObject({ badge: 'FAIL', skill: 'bad-skill' });
    expect(bad.score).toBeLessThanOrEqual(10);
    expect(bad.signals.flags).toContain('malware_blocked');
  });

  it('a brand-new or unscanned skill is not a PASS', async () => {
    const fresh = await json(trust('registry=clawhub&skill=fresh-skill'));
    expect(fresh.badge).not.toBe('PASS');
    expect(fresh.signals.flags).toEqual(expect.arrayContaining(['new_skill', 'low_adoption']));
    const unscanned = await json(trust('registry=clawhub&skill=unscanned'));
    expect(unscanned.signals.flags).toEqual(expect.arrayContaining(['no_moderation_record', 'no_owner']));
    expect(unscanned.score).toBeLessThan((await json(trust('registry=clawhub&skill=gog'))).score);
  });

  it('400 for another registry or a missing skill, 404 for an unknown skill', async () => {
    await expectProblem(await trust('registry=npm&skill=gog'), 400, 'invalid_argument');
    await expectProblem(await trust('skill=gog'), 400, 'invalid_argument');
    await expectProblem(await trust('registry=clawhub'), 400, 'invalid_argument');
    await expectProblem(await trust('registry=clawhub&skill='), 400, 'invalid_argument');
    await expectProblem(await trust('registry=clawhub&skill=..%2F..%2Fetc'), 400, 'invalid_argument');
    await expectProblem(await trust(`registry=clawhub&skill=${'a'.repeat(5000)}`), 400);
    await expectProblem(await trust('registry=clawhub&skill=no-such-skill'), 404, 'not_found');
  });

  it('caches registry answers briefly', async () => {
    const before = hub.hits.get('gog') ?? 0;
    await trust('registry=clawhub&skill=gog');
    await trust('registry=clawhub&skill=gog');
    expect(hub.hits.get('gog') ?? 0).toBe(before);
    clock = new Date(clock.getTime() + 61_000);
    await trust('registry=clawhub&skill=gog');
    expect(hub.hits.get('gog')).toBe(before + 1);
  });

  it('keeps at most CACHE_MAX_ENTRIES registry answers, dropping the oldest first', async () => {
    const slugs = ['gog', 'fresh-skill', 'sus-skill', 'bad-skill'];
    const hits = () => slugs.map((s) => hub.hits.get(s) ?? 0);
    const before = cacheLimits().maxEntries;
    try {
      setCacheLimits({ maxEntries: 3 });
      // A new minute: every answer is read from the registry once, in this order.
      clock = new Date(clock.getTime() + 61_000);
      for (const s of slugs) expect((await trust(`registry=clawhub&skill=${s}`)).status).toBe(200);
      const read = hits();
      // The newest three are cached; the first was dropped and is read again.
      for (const s of slugs.slice(1)) await trust(`registry=clawhub&skill=${s}`);
      expect(hits()).toEqual(read);
      await trust('registry=clawhub&skill=gog');
      expect(hits()).toEqual([read[0]! + 1, ...read.slice(1)]);
    } finally {
      setCacheLimits({ maxEntries: before });
    }
  });

  it('502 problem+json when the registry is down or answers garbage', async () => {
    clock = new Date(clock.getTime() + 120_000);
    hub.mode = 'down';
    const p = await expectProblem(await trust('registry=clawhub&skill=gog'), 502, 'upstream_error');
    expect(String(p.detail)).toMatch(/503/);
    hub.mode = 'garbage';
    await expectProblem(await trust('registry=clawhub&skill=fresh-skill'), 502, 'upstream_error');
    hub.mode = 'up';
    expect((await trust('registry=clawhub&skill=gog')).status).toBe(200);
  });

  it('over Connect', async () => {
    const c = createClient(TrustService, createConnectTransport({ baseUrl: t.base, httpVersion: '1.1' }));
    const r = await c.getSkillTrust({ registry: 'clawhub', skill: 'gog' });
    expect(r.badge).toBe('PASS');
    await expect(c.getSkillTrust({ registry: 'clawhub', skill: 'nope-nope' })).rejects.toMatchObject({ code: Code.NotFound });
    await expect(c.getSkillTrust({ registry: 'x', skill: 'gog' })).rejects.toMatchObject({ code: Code.InvalidArgument });
  });
});

describe('skill score rubric (pure)', () => {
  const at = new Date('2026-01-01T00:00:00Z');
  it('is deterministic and monotone in adoption', () => {
    const low = computeSkillTrust(recordedSkill('a', { now: at, installs: 10, stars: 1 }) as never, at);
    const high = computeSkillTrust(recordedSkill('a', { now: at, installs: 10_000, stars: 1000 }) as never, at);
    expect(computeSkillTrust(recordedSkill('a', { now: at, installs: 10, stars: 1 }) as never, at)).toEqual(low);
    expect(high.score).toBeGreaterThan(low.score);
    expect(high.score).toBe(100);
  });
  it('treats a "blocked" or "malicious" verdict string as FAIL even without the booleans', () => {
    for (const verdict of ['malicious', 'blocked', 'suspicious', 'Suspicious']) {
      expect(computeSkillTrust(recordedSkill('a', { now: at, moderation: { verdict } }) as never, at).badge).toBe('FAIL');
    }
  });
});
