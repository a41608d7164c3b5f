import http from 'node:http';
import type { AddressInfo } from 'node:net';

// A local stand-in for ClawHub's API v1 (127.0.0.1 only), serving answers recorded in the shape
// of GET https://clawhub.ai/api/v1/skills/{slug}: skill, latestVersion, metadata, owner, moderation.

const DAY = 86_400_000;

export function recordedSkill(slug: string, over: { now: Date; ageDays?: number; installs?: number; stars?: number; versions?: number; owner?: string | null; moderation?: Record<string, unknown> | null }) {
  const created = over.now.getTime() - (over.ageDays ?? 240) * DAY;
  const versions = over.versions ?? 6;
  return {
    skill: {
      slug,
      displayName: slug.replace(/-/g, ' ').replace(/\b\w/g, (c) => c.toUpperCase()),
      summary: `Recorded answer for ${slug}`,
      tags: { latest: `1.${versions - 1}.0` },
      stats: { comments: 4, downloads: (over.installs ?? 4200) * 3, installsAllTime: over.installs ?? 4200, installsCurrent: Math.floor((over.installs ?? 4200) / 2), stars: over.stars ?? 310, versions },
      createdAt: created,
      updatedAt: over.now.getTime() - 3 * DAY,
    },
    latestVersion: { version: `1.${versions - 1}.0`, createdAt: over.now.getTime() - 3 * DAY, changelog: 'Fix edge cases', license: 'MIT-0' },
    metadata: null,
    owner: over.owner === null ? null : { handle: over.owner ?? 'steipete', userId: 'kn7a1b2c3d4e5f6g7h8j9k0m1n2p3q4r', displayName: 'Peter', image: 'https://avatars.githubusercontent.com/u/58493?v=4' },
    moderation:
      over.moderation === null
        ? null
        : { isSuspicious: false, isMalwareBlocked: false, verdict: 'clean', reasonCodes: [], summary: null, engineVersion: 'v2.1.0', updatedAt: over.now.getTime() - 3 * DAY, ...over.moderation },
  };
}

export interface ClawHubStandIn {
  url: string;
  hits: Map<string, number>;
  skills: Map<string, unknown>;
  mode: 'up' | 'down' | 'garbage';
  close(): Promise<void>;
}

export async function startClawHub(): Promise<ClawHubStandIn> {
  const state: ClawHubStandIn = { url: '', hits: new Map(), skills: new Map(), mode: 'up', close: async () => {} };
  const server = http.createServer((req, res) => {
    const m = /^\/api\/v1\/skills\/([^/?]+)$/.exec(req.url ?? '');
    if (state.mode === 'down') return res.writeHead(503, { 'content-type': 'text/plain' }).end('Service Unavailable');
    if (!m) return res.writeHead(404, { 'content-type': 'text/plain' }).end('Not found');
    const slug = decodeURIComponent(m[1]!).toLowerCase();
    state.hits.set(slug, (state.hits.get(slug) ?? 0) + 1);
    if (state.mode === 'garbage') return res.writeHead(200, { 'content-type': 'text/html' }).end('<html>maintenance</html>');
    const skill = state.skills.get(slug);
    if (!skill) return res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Skill not found');
    res.writeHead(200, { 'content-type': 'application/json', 'x-ratelimit-limit': '120', 'x-ratelimit-remaining': '119' }).end(JSON.stringify(skill));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v1`;
  state.close = () => new Promise<void>((r) => server.close(() => r()));
  return state;
}
