import { indexBundle, lookupBundleEntry, InvalidServerUrl, type BundleIndex, type BundlePayload } from '../domain/bundle.js';
import { invalidArgument, ObservatoryError } from '../errors.js';
import { loadJwksFrom, MAX_BUNDLE_JWS_LENGTH, readBundleText, verifyBundle } from '../signing/bundle.js';
import type { VerificationKey } from '../signing/jws.js';
import type { GateAssessment, GateBundleRef, GateVerdictSource } from './gate.js';

// The gate from a bundle (GATE_BUNDLE_URL; docs/bundles.md "A gate from a bundle"): an instance
// with no database mirrors a source observatory's signed bundle, verifies it against a pinned
// JWKS, refreshes it every GATE_BUNDLE_REFRESH_SECONDS (conditionally, If-None-Match), keeps the
// last good one while the source is unreachable, and answers /v1/gate and ext_authz from it
// through the same decision as the database-backed gate (src/services/gate.ts `decide`).

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
  let keys: Map<string, VerificationKey> | null = null;
  let current: MirroredBundle | null = null;
  let lastRefreshAt: Date | null = null;
  let lastSuccessAt: Date | null = null;
  let lastError: string | null = null;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;

  async function verify(text: string) {
    const read = readBundleText(text);
    if ('problem' in read) throw new Error(`${opts.url} did not answer a bundle: ${read.problem}`);
    keys ??= await loadJwksFrom(jwksSource, { fetch: doFetch });
    let v = await verifyBundle(read.jws, keys, opts.now());
    // A key the pinned JWKS does not know yet (a rotation at the source): a JWKS URL is read again
    // once; a pinned file is not, so trust only ever comes from what the operator pinned.
    if (!v.valid && v.reason.startsWith('unknown key id') && /^https?:\/\//i.test(jwksSource)) {
      keys = await loadJwksFrom(jwksSource, { fetch: doFetch });
      v = await verifyBundle(read.jws, keys, opts.now());
    }
    if (!v.valid) throw new Error(`the bundle from ${opts.url} was refused: ${v.reason}`);
    if (v.payload.delta !== null) throw new Error('GATE_BUNDLE_URL must name a full bundle, not a delta (no since=)');
    return v;
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
        throw new Error(`cannot reach ${opts.url}: ${(err as Error).message}`);
      }
      if (res.status === 304 && current) {
        await res.body?.cancel().catch(() => {});
        current = { ...current, fetchedAt: at };
      } else if (res.ok) {
        const v = await verify(await readLimited(res, MAX_BUNDLE_JWS_LENGTH + 1024 * 1024));
        // Never move back to an older bundle (a replayed one, or a source restored from backup).
        if (current && v.payload.iat < current.payload.iat) throw new Error(`the bundle from ${opts.url} is older than the one held (issued ${new Date(v.payload.iat * 1000).toISOString()}); keeping the newer one`);
        current = { payload: v.payload, index: indexBundle(v.payload.servers), kid: v.kid, etag: res.headers.get('etag'), fetchedAt: at };
      } else {
        await res.body?.cancel().catch(() => {});
        throw new Error(`${opts.url} answered HTTP ${res.status}`);
      }
      lastSuccessAt = at;
      lastError = null;
    } catch (err) {
      lastError = (err as Error).message;
      opts.onError?.(err);
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
    /** Fetches the first bundle (a failure is recorded, not thrown: the gate answers 503 until one arrives) and refreshes on the interval. */
    async start(): Promise<void> {
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
        source: opts.url,
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
