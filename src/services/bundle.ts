import { createHash, randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { brotliCompress, constants as zlibConstants, gunzip, gzip } from 'node:zlib';
import {
  BUNDLE_ID_PATTERN,
  BUNDLE_KIND,
  BUNDLE_SCHEMA,
  bundleDelta,
  bundleEntry,
  filterKey,
  keepEntry,
  parseBundleFilters,
  type BundleEntry,
  type BundleFile,
  type BundleFilters,
  type BundlePayload,
} from '../domain/bundle.js';
import { invalidArgument, ObservatoryError } from '../errors.js';
import { bundleStore } from '../store/bundles.js';
import { BoundedMap } from '../store/cache-limits.js';
import { CARD_FLAG_WINDOW_MS } from './mcp-probe.js';
import type { ServiceDeps } from './context.js';
import type { TrustEngine } from './trust-engine.js';

// GET /v1/bundle (docs/bundles.md): every tracked server's verdict as one signed document, built
// from the cached scores at most once per BUNDLE_CACHE_SECONDS per filter set and shared by every
// request meanwhile (and by concurrent requests while it is built), compressed once per encoding.

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);
const brotliAsync = promisify(brotliCompress);
const DAY_MS = 86_400_000;

export type BundleEncoding = 'br' | 'gzip' | 'identity';

/** One signed document as served: its bytes (JSON, BundleFile) and their compressed forms. */
export interface ServedBundle {
  /** Strong ETag (quoted): the token's jti. */
  etag: string;
  bundleId: string;
  issuedAt: Date;
  expiresAt: Date;
  serverCount: number;
  body: Buffer;
  /** The body in an encoding, compressed on first use and kept. */
  encoded(encoding: BundleEncoding): Promise<Buffer>;
}

interface FullBuild {
  served: ServedBundle;
  filters: BundleFilters;
  entries: { entry: BundleEntry; digest: string }[];
  /** performance.now() when the cached scores were last read for it. */
  readMono: number;
}

const digestOf = (e: BundleEntry) => createHash('sha256').update(JSON.stringify(e)).digest('base64url').slice(0, 16);

function served(file: BundleFile, jti: string, serverCount: number, iat: number, exp: number): ServedBundle {
  const body = Buffer.from(JSON.stringify(file));
  const encodings = new Map<BundleEncoding, Promise<Buffer>>();
  return {
    etag: `"${jti}"`,
    bundleId: file.bundle_id,
    issuedAt: new Date(iat * 1000),
    expiresAt: new Date(exp * 1000),
    serverCount,
    body,
    encoded(encoding) {
      if (encoding === 'identity') return Promise.resolve(body);
      let p = encodings.get(encoding);
      if (!p) {
        // On the thread pool: a large index must not stall the event loop. Brotli at quality 5:
        // the default 11 costs seconds per megabyte for a few percent.
        p =
          encoding === 'gzip'
            ? gzipAsync(body, { level: 6 })
            : brotliAsync(body, { params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 5, [zlibConstants.BROTLI_PARAM_SIZE_HINT]: body.length } });
        encodings.set(encoding, p);
        p.catch(() => encodings.delete(encoding));
      }
      return p;
    },
  };
}

export function createBundleService(deps: Pick<ServiceDeps, 'db' | 'config' | 'now' | 'keyring'>, trust: { engine: Pick<TrustEngine, 'refreshNewEvidence'> }) {
  const { db, config, now, keyring } = deps;
  const store = bundleStore(db);
  // Built bundles by filter set, and deltas by filter set and `since`: at most
  // BUNDLE_CACHE_MAX_ENTRIES of each (default 8), the oldest dropped first. A full bundle of
  // 100,000 servers is ~56 MB (plus its compressed forms): a client cycling through filter sets
  // must not make the process hold hundreds of them.
  const maxCached = () => config.bundle.cacheMaxEntries;
  const full = new BoundedMap<string, FullBuild>(maxCached);
  const fullInflight = new Map<string, Promise<FullBuild>>();
  const deltas = new BoundedMap<string, { base: string; served: ServedBundle }>(maxCached);

  async function sign(filters: BundleFilters, bundleId: string, servers: BundleEntry[], removed: string[], serverCount: number, since: string | null): Promise<ServedBundle> {
    const at = now();
    const iat = Math.floor(at.getTime() / 1000);
    const exp = iat + config.bundle.ttlSeconds;
    const jti = randomBytes(8).toString('hex');
    const payload: BundlePayload = {
      schema: BUNDLE_SCHEMA,
      kind: BUNDLE_KIND,
      iss: config.publicBaseUrl,
      iat,
      exp,
      jti,
      bundle_id: bundleId,
      filters: { category: filters.category, verdict: filters.verdicts },
      delta: since === null ? null : { since },
      server_count: serverCount,
      servers,
      removed,
    };
    // A large index can keep this process busy (and PGlite's one connection) longer than the key
    // ring's background re-read allows for signing: read the keys now, outside any transaction.
    await keyring.refresh();
    const { jws } = await keyring.sign(payload);
    const file: BundleFile = {
      format: BUNDLE_SCHEMA,
      bundle_id: bundleId,
      issuer: config.publicBaseUrl,
      issued_at: new Date(iat * 1000).toISOString(),
      expires_at: new Date(exp * 1000).toISOString(),
      server_count: serverCount,
      delta: payload.delta,
      jws,
      jwks: (await keyring.jwks()) as unknown as BundleFile['jwks'],
    };
    return served(file, jti, serverCount, iat, exp);
  }

  // One read of every server's entry, shared by every filter set (and by concurrent builds) for
  // BUNDLE_CACHE_SECONDS: a second filter set costs a filter, not another read of the index.
  let snapshot: { entries: { entry: BundleEntry; digest: string }[]; readMono: number } | null = null;
  let snapshotInflight: Promise<{ entries: { entry: BundleEntry; digest: string }[]; readMono: number }> | null = null;
  function readAll(): Promise<{ entries: { entry: BundleEntry; digest: string }[]; readMono: number }> {
    const s = snapshot;
    if (s && performance.now() - s.readMono < config.bundle.cacheSeconds * 1000) return Promise.resolve(s);
    snapshotInflight ??= (async () => {
      const at = now();
      // Only scores that new reports made stale are recomputed (usually none or a few); the rest
      // is read as the trust engine cached it.
      await trust.engine.refreshNewEvidence(at);
      const rows = await store.rows(new Date(at.getTime() - 30 * DAY_MS));
      const entries = rows.map((r) => {
        const entry = bundleEntry(r, at, CARD_FLAG_WINDOW_MS);
        return { entry, digest: digestOf(entry) };
      });
      snapshot = { entries, readMono: performance.now() };
      return snapshot;
    })().finally(() => {
      snapshotInflight = null;
    });
    return snapshotInflight;
  }

  async function build(key: string, filters: BundleFilters, previous: FullBuild | undefined): Promise<FullBuild> {
    const all = await readAll();
    const at = now();
    const entries = all.entries.filter((e) => keepEntry(e.entry, filters));
    const h = createHash('sha256').update(key);
    for (const e of entries) h.update(`\n${e.entry.url}\t${e.digest}`);
    const bundleId = h.digest('hex').slice(0, 16);
    const readMono = all.readMono;
    // The same state signed less than half its lifetime ago is served again: same bytes, same
    // ETag, so a mirror polling with If-None-Match gets 304 until something changes.
    if (previous && previous.served.bundleId === bundleId && previous.served.expiresAt.getTime() - at.getTime() > (config.bundle.ttlSeconds * 1000) / 2) {
      return { ...previous, readMono };
    }
    const s = await sign(
      filters,
      bundleId,
      entries.map((e) => e.entry),
      [],
      entries.length,
      null,
    );
    const digests = await gzipAsync(Buffer.from(JSON.stringify(entries.map((e) => [e.entry.url, e.digest]))));
    await store.remember({ bundle_id: bundleId, filter_key: key, server_count: entries.length, digests }, at);
    await store.prune(new Date(at.getTime() - config.bundle.deltaRetentionHours * 3_600_000));
    return { served: s, filters, entries, readMono };
  }

  // Builds (and deltas) run one at a time: concurrent requests for many filter sets queue
  // instead of holding many large documents in memory at once.
  let queue: Promise<unknown> = Promise.resolve();
  function serially<T>(fn: () => Promise<T>): Promise<T> {
    const p = queue.then(fn, fn);
    queue = p.catch(() => {});
    return p;
  }

  function current(filters: BundleFilters): Promise<FullBuild> {
    const key = filterKey(filters);
    const hit = full.get(key);
    if (hit && performance.now() - hit.readMono < config.bundle.cacheSeconds * 1000 && hit.served.expiresAt.getTime() > now().getTime()) return Promise.resolve(hit);
    let p = fullInflight.get(key);
    if (!p) {
      p = serially(() => build(key, filters, hit))
        .then((b) => {
          // Set again, it counts as the newest.
          full.set(key, b);
          return b;
        })
        .finally(() => fullInflight.delete(key));
      fullInflight.set(key, p);
    }
    return p;
  }

  async function delta(b: FullBuild, since: string): Promise<ServedBundle> {
    const key = filterKey(b.filters);
    const cacheKey = `${key}|${since}`;
    const hit = deltas.get(cacheKey);
    if (hit && hit.base === b.served.bundleId) return hit.served;
    const base = await store.get(since);
    if (!base) {
      throw new ObservatoryError('not_found', `no bundle ${since} is kept (earlier bundles are kept ${config.bundle.deltaRetentionHours} hours): fetch the full bundle without since`);
    }
    if (base.filter_key !== key) throw invalidArgument(`since names a bundle of other filters (${base.filter_key}); ask with the same category and verdict`);
    const pairs = JSON.parse((await gunzipAsync(base.digests)).toString('utf8')) as [string, string][];
    const d = bundleDelta(new Map(pairs), b.entries);
    const s = await sign(b.filters, b.served.bundleId, d.changed, d.removed, b.entries.length, since);
    deltas.set(cacheKey, { base: b.served.bundleId, served: s });
    return s;
  }

  return {
    /**
     * The bundle for a request: ?category=, ?verdict= (comma-separated) and ?since= (an earlier
     * bundle_id of the same filters: a signed delta). 400 for values we do not know, 404 when
     * `since` is no longer kept.
     */
    async get(q: { category?: string; verdict?: string; since?: string }): Promise<ServedBundle> {
      const f = parseBundleFilters(q.category, q.verdict);
      if ('problem' in f) throw invalidArgument(f.problem);
      if (q.since !== undefined && !BUNDLE_ID_PATTERN.test(q.since)) throw invalidArgument('since must be the bundle_id (16 lower-case hex) of an earlier bundle');
      const b = await current(f);
      return q.since === undefined ? b.served : serially(() => delta(b, q.since!));
    },
  };
}

export type BundleService = ReturnType<typeof createBundleService>;
