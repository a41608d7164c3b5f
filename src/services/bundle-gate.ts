import { indexBundle, lookupBundleEntry, InvalidServerUrl, type BundleIndex, type BundlePayload } from '../domain/bundle.js';
import { invalidArgument, ObservatoryError } from '../errors.js';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { checkOwnDir, DataDirError, readOwnFile } from '../db/data-dir.js';
import { MAX_BUNDLE_JWS_LENGTH, parseJwks, readBundleText, readJwksText, verifyBundle } from '../signing/bundle.js';
import type { VerificationKey } from '../signing/jws.js';
import type { GateAssessment, GateBundleRef, GateVerdictSource } from './gate.js';

// The gate from a bundle (GATE_BUNDLE_URL; docs/bundles.md "A gate from a bundle"): an instance
// with no database mirrors a source observatory's signed bundle, verifies it against a pinned
// JWKS, refreshes it every GATE_BUNDLE_REFRESH_SECONDS (conditionally, If-None-Match), keeps the
// last good one while the source is unreachable, and answers /v1/gate and ext_authz from it
// through the same decision as the database-backed gate (src/services/gate.ts `decide`).
// The last good bundle is also kept on disk (GATE_BUNDLE_CACHE_FILE) with the JWKS that verified
// it, so a gate restarted while its source is down answers from it (verified again on load)
// instead of 503 until the source is back. Whoever can write that file or its directory could
// plant a bundle (with a URL pin, together with the JWKS that verifies it), so both must be this
// user's, not symbolic links and not writable by other users (src/db/data-dir.ts): otherwise
// start-up stops with one line (DataDirError), and a write finding them so is not made.
// GATE_BUNDLE_URL (and a GATE_BUNDLE_JWKS URL) may carry a credential: a presigned object-store
// URL's query, userinfo. Only `fetch` sees the full URL; status (/healthz, /readyz), every message
// (last_error, the 503 detail of /v1/gate) and log, and the kept file show `displayUrl`: origin
// and path (ops audit finding 3).

export interface MirroredBundle {
  payload: BundlePayload;
  index: BundleIndex;
  kid: string;
  etag: string | null;
  /** When this instance fetched it (or last confirmed it unchanged). */
  fetchedAt: Date;
}

export interface BundleMirrorStatus {
  bundle: { bundle_id: string; issued_at: string; expires_at: string; age_seconds: number; servers: number; kid: string } | null;
  /** fresh: the last refresh succeeded; stale: it failed, the last good bundle is served; expired / none: nothing usable. */
  state: 'fresh' | 'stale' | 'expired' | 'none';
  last_refresh_at: string | null;
  last_success_at: string | null;
  last_error: string | null;
  /** GATE_BUNDLE_URL as displayUrl shows it: never its query, fragment or userinfo. */
  source: string;
  refresh_seconds: number;
}

export interface BundleMirrorOptions {
  url: string;
  /** The pinned JWKS (file or URL); null: the source's own /.well-known/jwks.json. */
  jwks: string | null;
  refreshSeconds: number;
  now: () => Date;
  fetch?: typeof fetch;
  onError?: (err: unknown) => void;
  /** Where the last good bundle is kept across restarts; null: memory only. */
  cacheFile?: string | null;
}

/** What GATE_BUNDLE_CACHE_FILE holds. */
interface CachedBundleFile {
  format: typeof CACHE_FORMAT;
  /** The GATE_BUNDLE_URL it was fetched from, as displayUrl shows it (a file written by an earlier version: in full). */
  source: string;
  /**
   * SHA-256 (hex) of the full GATE_BUNDLE_URL: a file written for another source, or the same
   * path with another query (GET /v1/bundle filters), is ignored, without keeping a credential
   * the query may be on disk. Absent in files of earlier versions (then `source` is compared).
   */
  source_sha256?: string;
  jws: string;
  etag: string | null;
  fetched_at: string;
  /** The JWKS text that verified it, when the pin is a URL (a pinned file is read again instead). */
  jwks: string | null;
}
const CACHE_FORMAT = 'trust-observatory/gate-bundle-cache/v1';
/** How refusals about the cache file name it. */
const CACHE_LABEL = 'GATE_BUNDLE_CACHE_FILE';

/**
 * A URL as it may be shown: origin and path. Userinfo, query and fragment are removed (a presigned
 * URL's X-Amz-Signature, a token parameter, user:password@).
 */
export function displayUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return '(a URL that does not parse)';
  }
}

/**
 * `text` with every URL that has a query, fragment or userinfo in it shown as displayUrl shows it:
 * for messages built elsewhere (fetch quotes the URL it was given when it refuses credentials in
 * it, the JWKS reader names its source). `known` full URLs are replaced exactly first.
 */
function withoutUrlSecrets(text: string, known: readonly string[]): string {
  let out = text;
  for (const url of known) {
    if (!/[?#@]/.test(url)) continue; // nothing to hide (and no prefix of a longer URL to mangle)
    for (const form of new Set([url, safeHref(url)])) if (form) out = out.split(form).join(displayUrl(url));
  }
  return out.replace(/\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>]+/gi, (m) => (/[?#@]/.test(m) ? displayUrl(m) : m));
}

function safeHref(url: string): string | null {
  try {
    return new URL(url).href;
  } catch {
    return null;
  }
}

/** The JWKS to trust when none is pinned: the source's own, at its origin. */
export function defaultJwksFor(bundleUrl: string): string {
  return `${new URL(bundleUrl).origin}/.well-known/jwks.json`;
}

async function readLimited(res: Response, limit: number): Promise<string> {
  const declared = Number(res.headers.get('content-length') ?? NaN);
  if (Number.isFinite(declared) && declared > limit) throw new Error(`the bundle is larger than ${limit} bytes`);
  if (!res.body) return '';
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > limit) throw new Error(`the bundle is larger than ${limit} bytes`);
    chunks.push(Buffer.from(chunk));
  }
  return Buffer.concat(chunks).toString('utf8');
}

export function createBundleMirror(opts: BundleMirrorOptions) {
  const doFetch = opts.fetch ?? globalThis.fetch;
  const jwksSource = opts.jwks ?? defaultJwksFor(opts.url);
  const pinnedIsUrl = /^https?:\/\//i.test(jwksSource);
  // What is shown of the source and of a JWKS URL, computed once; the full URLs go to fetch only.
  const shownUrl = displayUrl(opts.url);
  const shownJwks = pinnedIsUrl ? displayUrl(jwksSource) : jwksSource;
  const sourceHash = createHash('sha256').update(opts.url).digest('hex');
  const clean = (message: string) => withoutUrlSecrets(message, pinnedIsUrl ? [opts.url, jwksSource] : [opts.url]);
  /** Every message leaving the mirror (onError: logs) goes through here. */
  const report = (message: string) => opts.onError?.(new Error(clean(message)));
  // The keys bundles are verified against, and the JWKS text they came from when the pin is a
  // URL (kept on disk with the bundle; a pinned file is read again instead).
  type TrustedKeys = { keys: Map<string, VerificationKey>; text: string | null };
  let trusted: TrustedKeys | null = null;
  async function loadTrusted(): Promise<TrustedKeys> {
    const text = await readJwksText(jwksSource, { fetch: doFetch });
    return { keys: parseJwks(text, shownJwks), text: pinnedIsUrl ? text : null };
  }
  const held = (v: { kid: string; payload: BundlePayload }, etag: string | null, fetchedAt: Date): MirroredBundle => ({
    payload: v.payload,
    index: indexBundle(v.payload.servers),
    kid: v.kid,
    etag,
    fetchedAt,
  });
  let current: MirroredBundle | null = null;
  let lastRefreshAt: Date | null = null;
  let lastSuccessAt: Date | null = null;
  let lastError: string | null = null;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;

  async function verify(text: string) {
    const read = readBundleText(text);
    if ('problem' in read) throw new Error(`${shownUrl} did not answer a bundle: ${read.problem}`);
    trusted ??= await loadTrusted();
    let v = await verifyBundle(read.jws, trusted.keys, opts.now());
    // A key the pinned JWKS does not know yet (a rotation at the source): a JWKS URL is read again
    // once; a pinned file is not, so trust only ever comes from what the operator pinned.
    if (!v.valid && v.reason.startsWith('unknown key id') && pinnedIsUrl) {
      trusted = await loadTrusted();
      v = await verifyBundle(read.jws, trusted.keys, opts.now());
    }
    if (!v.valid) throw new Error(`the bundle from ${shownUrl} was refused: ${v.reason}`);
    if (v.payload.delta !== null) throw new Error('GATE_BUNDLE_URL must name a full bundle, not a delta (no since=)');
    return { ...v, jws: read.jws };
  }

  /**
   * Keeps the bundle just verified on disk: written aside under a name nobody can predict, created
   * exclusively (never through a link planted there), then renamed, so never half a file. Not
   * written into a directory that is another user's, a link, or writable by other users.
   */
  async function persist(jws: string, etag: string | null, at: Date): Promise<void> {
    const file = opts.cacheFile;
    if (!file) return;
    const doc: CachedBundleFile = { format: CACHE_FORMAT, source: shownUrl, source_sha256: sourceHash, jws, etag, fetched_at: at.toISOString(), jwks: trusted?.text ?? null };
    const tmp = `${file}.${randomBytes(8).toString('hex')}.tmp`;
    try {
      // A directory it creates is private; an existing one (perhaps an operator's) is not changed,
      // only checked.
      await mkdir(dirname(file), { recursive: true, mode: 0o700 });
      checkOwnDir(CACHE_LABEL, dirname(resolve(file)));
      await writeFile(tmp, JSON.stringify(doc), { mode: 0o600, flag: 'wx' });
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true }).catch(() => {});
      report(`could not keep the bundle in ${file}: ${(err as Error).message}`);
    }
  }

  /**
   * The bundle kept on disk by an earlier run, verified again as a fetched one is (signature
   * against the pinned JWKS file, or the JWKS kept with it when the pin is a URL; not expired; a
   * full bundle of this source). Anything else is ignored and said. A file or directory that is
   * another user's, a link, or writable by other users stops start-up (DataDirError): it is where
   * a bundle signed by someone else could have been planted.
   */
  async function loadKept(): Promise<void> {
    const file = opts.cacheFile;
    if (!file) return;
    checkOwnDir(CACHE_LABEL, dirname(resolve(file)), false);
    let text: string | null;
    try {
      text = readOwnFile(CACHE_LABEL, file, 'refuse-writable');
    } catch (err) {
      if (err instanceof DataDirError) throw err;
      report(`could not read the kept bundle ${file}: ${(err as Error).message}`);
      return;
    }
    if (text === null) return;
    try {
      if (text.length > MAX_BUNDLE_JWS_LENGTH + 4 * 1024 * 1024) throw new Error('it is larger than a bundle can be');
      const doc = JSON.parse(text) as Partial<CachedBundleFile>;
      if (doc.format !== CACHE_FORMAT || typeof doc.jws !== 'string' || typeof doc.fetched_at !== 'string') throw new Error(`it is not a ${CACHE_FORMAT} file`);
      const keptFrom = typeof doc.source === 'string' ? displayUrl(doc.source) : '(no source)';
      if (keptFrom !== shownUrl) throw new Error(`it was fetched from ${keptFrom}, not ${shownUrl}`);
      if (typeof doc.source_sha256 === 'string' ? doc.source_sha256 !== sourceHash : doc.source !== opts.url) {
        throw new Error(`it was fetched from ${shownUrl} with another query or userinfo than GATE_BUNDLE_URL has now`);
      }
      let kept: TrustedKeys;
      if (pinnedIsUrl) {
        if (typeof doc.jwks !== 'string') throw new Error('it holds no JWKS');
        kept = { keys: parseJwks(doc.jwks, `the JWKS kept in ${file}`), text: doc.jwks };
      } else kept = await loadTrusted();
      const v = await verifyBundle(doc.jws, kept.keys, opts.now());
      if (!v.valid) throw new Error(`refused: ${v.reason}`);
      if (v.payload.delta !== null) throw new Error('it is a delta');
      const fetchedAt = new Date(doc.fetched_at);
      if (Number.isNaN(fetchedAt.getTime())) throw new Error('its fetched_at is not a time');
      trusted = kept;
      current = held(v, typeof doc.etag === 'string' ? doc.etag : null, fetchedAt);
    } catch (err) {
      report(`the kept bundle ${file} is not used: ${(err as Error).message}`);
    }
  }

  async function refreshOnce(): Promise<void> {
    const at = opts.now();
    lastRefreshAt = at;
    try {
      const headers: Record<string, string> = { accept: 'application/json', 'accept-encoding': 'br, gzip' };
      if (current?.etag) headers['if-none-match'] = current.etag;
      let res: Response;
      try {
        res = await doFetch(opts.url, { headers, signal: AbortSignal.timeout(Math.max(30_000, opts.refreshSeconds * 1000)) });
      } catch (err) {
        throw new Error(`cannot reach ${shownUrl}: ${(err as Error).message}`);
      }
      if (res.status === 304 && current) {
        await res.body?.cancel().catch(() => {});
        current = { ...current, fetchedAt: at };
      } else if (res.ok) {
        const v = await verify(await readLimited(res, MAX_BUNDLE_JWS_LENGTH + 1024 * 1024));
        // Never move back to an older bundle (a replayed one, or a source restored from backup).
        if (current && v.payload.iat < current.payload.iat) throw new Error(`the bundle from ${shownUrl} is older than the one held (issued ${new Date(v.payload.iat * 1000).toISOString()}); keeping the newer one`);
        current = held(v, res.headers.get('etag'), at);
        await persist(v.jws, current.etag, at);
      } else {
        await res.body?.cancel().catch(() => {});
        throw new Error(`${shownUrl} answered HTTP ${res.status}`);
      }
      lastSuccessAt = at;
      lastError = null;
    } catch (err) {
      lastError = clean((err as Error)?.message ?? String(err));
      opts.onError?.(new Error(lastError));
    }
  }

  function refresh(): Promise<void> {
    running ??= refreshOnce().finally(() => {
      running = null;
    });
    return running;
  }

  /** The bundle, when one is held and has not expired at `at`. */
  function usable(at: Date): MirroredBundle | null {
    if (!current) return null;
    return at.getTime() < current.payload.exp * 1000 ? current : null;
  }

  return {
    refresh,
    usable,
    /**
     * Loads the bundle kept on disk, if any is still good (a cache file or directory another user
     * could have written rejects with a DataDirError: start-up stops), then fetches (a failure is recorded,
     * not thrown: without a kept bundle the gate answers 503 until one arrives) and refreshes on
     * the interval.
     */
    async start(): Promise<void> {
      await loadKept();
      await refresh();
      timer = setInterval(() => void refresh(), opts.refreshSeconds * 1000);
      timer.unref();
    },
    stop(): void {
      if (timer) clearInterval(timer);
      timer = null;
    },
    status(): BundleMirrorStatus {
      const at = opts.now();
      const b = current;
      return {
        bundle: b
          ? {
              bundle_id: b.payload.bundle_id,
              issued_at: new Date(b.payload.iat * 1000).toISOString(),
              expires_at: new Date(b.payload.exp * 1000).toISOString(),
              age_seconds: Math.max(0, Math.floor(at.getTime() / 1000) - b.payload.iat),
              servers: b.payload.server_count,
              kid: b.kid,
            }
          : null,
        state: !b ? 'none' : !usable(at) ? 'expired' : lastError === null ? 'fresh' : 'stale',
        last_refresh_at: lastRefreshAt?.toISOString() ?? null,
        last_success_at: lastSuccessAt?.toISOString() ?? null,
        last_error: lastError,
        source: shownUrl,
        refresh_seconds: opts.refreshSeconds,
      };
    },
  };
}

export type BundleMirror = ReturnType<typeof createBundleMirror>;

export function bundleRef(b: MirroredBundle, at: Date): GateBundleRef {
  return {
    bundleId: b.payload.bundle_id,
    issuedAt: new Date(b.payload.iat * 1000).toISOString(),
    expiresAt: new Date(b.payload.exp * 1000).toISOString(),
    ageSeconds: Math.max(0, Math.floor(at.getTime() / 1000) - b.payload.iat),
  };
}

/**
 * The gate's verdict source over the mirrored bundle: the verdict and score the bundle states
 * (UNRATED for a server it does not hold, as pre-flight says for an untracked one), and as
 * evidence the bundle itself; nothing to sign or store. No usable bundle: 503.
 */
export function bundleGateSource(mirror: Pick<BundleMirror, 'usable' | 'status'>, now: () => Date): GateVerdictSource<GateAssessment & { ref: GateBundleRef }> {
  return {
    async assess(upstream) {
      const at = now();
      const b = mirror.usable(at);
      if (!b) {
        const s = mirror.status();
        const why = s.state === 'expired' ? `the last bundle expired at ${s.bundle!.expires_at}` : 'no bundle has been fetched yet';
        throw new ObservatoryError('unavailable', `this gate answers from a bundle and has none usable: ${why}${s.last_error ? ` (last refresh: ${s.last_error})` : ''}`, {
          headers: { 'retry-after': String(Math.min(60, s.refresh_seconds)) },
        });
      }
      let e;
      try {
        e = lookupBundleEntry(b.index, upstream);
      } catch (err) {
        if (err instanceof InvalidServerUrl) throw invalidArgument(`upstream: ${err.message}`);
        throw err;
      }
      return { verdict: e?.verdict ?? 'UNRATED', trustScore: e?.trust_score ?? null, ref: bundleRef(b, at) };
    },
    async record(_upstream, a) {
      return { receiptId: null, jws: null, bundle: a.ref };
    },
  };
}
