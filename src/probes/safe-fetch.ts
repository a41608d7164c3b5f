import { parsePeerJson } from '../domain/json-depth.js';
import dns from 'node:dns';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction, Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { Readable } from 'node:stream';
import { classifyAddress, isIpLiteral, redirectMethod, redirectTarget, RedirectRefused, withinOrigin, type AddressPolicy } from './address-policy.js';

// The one outbound HTTP client every probe uses (docs/probes.md, "The safe client"). It
// resolves the host itself, checks every DNS answer against the address policy, and connects
// pinned to the checked address (the socket's lookup returns exactly that address, so a second
// DNS answer cannot rebind the connection). Redirects are followed by hand, each hop re-checked.
// It never sends cookies or credentials and never stores what a server sets.

export const SAFE_FETCH_DEFAULTS = {
  maxRedirects: 3,
  connectTimeoutMs: 5_000,
  totalTimeoutMs: 10_000,
  maxBytes: 1024 * 1024,
} as const;

/**
 * Honest, for what probes read as a crawler would (robots.txt, llms.txt, cards, metadata). The MCP
 * probe's requests replace it with what node's fetch sends, so a server cannot show the probe
 * another manifest than its clients (MCP_REQUEST_HEADERS in mcp-manifest.ts; docs/probes.md "How
 * the probe presents itself").
 */
const USER_AGENT = 'TrustObservatory-Probe/1.0 (+https://trust-observatory.dev/docs/probes)';
/** Headers a caller may not set: we never send credentials or cookies anywhere. */
const FORBIDDEN_HEADERS = new Set(['cookie', 'cookie2', 'authorization', 'proxy-authorization', 'host', 'connection', 'transfer-encoding']);

/** The target (or a redirect hop) resolves to an address probes may not reach. */
export class TargetRefused extends Error {
  constructor(
    readonly url: string,
    readonly reason: string,
  ) {
    super(`${url} refused: ${reason}`);
  }
}

export type ProbeFailureKind = 'dns' | 'connect' | 'timeout' | 'too_large' | 'too_many_redirects' | 'redirect' | 'network' | 'tls';

/** The request was allowed but did not complete. */
export class ProbeFailed extends Error {
  constructor(
    readonly kind: ProbeFailureKind,
    message: string,
  ) {
    super(message);
  }
}

/**
 * How names are resolved (docs/probes.md "The safe client", rule 2). Each lookup has its own
 * deadline (`timeoutMs`, within the request's), and at most `inFlight` run at once in the process;
 * more wait for a place within their deadline. The system resolver asks the name servers with
 * c-ares (`attemptTimeoutMs` per attempt, `tries` attempts), which runs on the event loop: not
 * getaddrinfo, which runs on libuv's threadpool (4 threads by default, shared with receipt
 * signing, gzip and files) and cannot be stopped, so a zone whose name server stalls held those
 * threads past every deadline.
 */
export const DNS_LIMITS = { timeoutMs: 5_000, inFlight: 32, attemptTimeoutMs: 2_000, tries: 2, otherFamilyGraceMs: 1_000 } as const;

/**
 * Resolves a host name to its addresses; `signal` aborts when the caller stops waiting (the
 * lookup should then stop too). Injectable so tests can simulate DNS without packets.
 */
export type Resolver = (host: string, signal: AbortSignal) => Promise<string[]>;

/** Names the hosts file maps, read at most once a minute (synchronously: a few hundred bytes, no threadpool). */
let hosts: { at: number; map: Map<string, string[]> } | null = null;
const HOSTS_FILE = '/etc/hosts';

/** The name-to-addresses map of a hosts file's text (only well-formed IP literals; names lower-cased). */
export function parseHosts(text: string): Map<string, string[]> {
  const map = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const [address, ...names] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (!address || names.length === 0 || !isIpLiteral(address)) continue;
    for (const n of names) {
      const name = n.toLowerCase();
      const list = map.get(name) ?? [];
      if (!list.includes(address)) list.push(address);
      map.set(name, list);
    }
  }
  return map;
}

function hostsEntries(): Map<string, string[]> {
  const now = performance.now();
  if (hosts && now - hosts.at < 60_000) return hosts.map;
  let map: Map<string, string[]>;
  try {
    map = parseHosts(fs.readFileSync(HOSTS_FILE, 'utf8'));
  } catch {
    map = new Map();
  }
  hosts = { at: now, map };
  return map;
}

const NO_ADDRESS = new Set(['ENODATA', 'ENOTFOUND', 'NODATA', 'NOTFOUND']);

/**
 * The system resolver, without getaddrinfo: `localhost` and its subdomains are loopback (RFC 6761,
 * never asked), names in /etc/hosts get its addresses (as getaddrinfo would, files before DNS),
 * others are asked of the system's name servers for A and AAAA records with c-ares. c-ares does not
 * apply the resolv.conf search list: probe targets are fully qualified names.
 */
export const systemResolver: Resolver = async (host, signal) => {
  const name = host.toLowerCase().replace(/\.$/, '');
  if (name === 'localhost' || name.endsWith('.localhost')) return ['127.0.0.1', '::1'];
  const listed = hostsEntries().get(name);
  if (listed) return [...listed];
  const resolver = new dns.promises.Resolver({ timeout: DNS_LIMITS.attemptTimeoutMs, tries: DNS_LIMITS.tries });
  const cancel = () => resolver.cancel();
  signal.addEventListener('abort', cancel, { once: true });
  let grace: NodeJS.Timeout | undefined;
  try {
    const v4 = resolver.resolve4(name);
    const v6 = resolver.resolve6(name);
    // Once one family has answered, the other gets a moment more (some name servers never answer
    // AAAA queries); then its query is cancelled and the answers at hand are used. Either way only
    // addresses that were checked are ever connected to.
    const first = await Promise.race([v4.then((a) => a.length > 0, () => false), v6.then((a) => a.length > 0, () => false)]);
    if (first) grace = setTimeout(cancel, DNS_LIMITS.otherFamilyGraceMs);
    const [a, aaaa] = await Promise.allSettled([v4, v6]);
    const answers = [...(a.status === 'fulfilled' ? a.value : []), ...(aaaa.status === 'fulfilled' ? aaaa.value : [])];
    if (answers.length > 0) return answers;
    // Neither family answered: say why (a failure before "no such name").
    const failures = [a, aaaa].filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason as NodeJS.ErrnoException);
    throw failures.find((e) => !NO_ADDRESS.has(String(e.code))) ?? failures[0] ?? Object.assign(new Error(`${host} has no addresses`), { code: 'ENODATA' });
  } finally {
    clearTimeout(grace);
    signal.removeEventListener('abort', cancel);
  }
};

/**
 * Settles as `p` does, or rejects with `aborted()` as soon as `signal` aborts (whatever `p` does
 * afterwards is ignored: the caller has stopped waiting).
 */
export function untilAborted<T>(p: Promise<T>, signal: AbortSignal, aborted: () => unknown): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(aborted());
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/** A bounded number of places: `acquire` waits for one (until `signal` aborts) and resolves with its release (idempotent). */
export class Slots {
  private used = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(readonly size: number) {}

  /** Places taken now. */
  inUse(): number {
    return this.used;
  }

  acquire(signal: AbortSignal): Promise<() => void> {
    const slot = () => {
      let held = true;
      return () => {
        if (!held) return;
        held = false;
        const next = this.waiting.shift();
        if (next) next();
        else this.used--;
      };
    };
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.used < this.size) {
      this.used++;
      return Promise.resolve(slot());
    }
    return new Promise((resolve, reject) => {
      const grant = () => {
        signal.removeEventListener('abort', onAbort);
        resolve(slot());
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(grant);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(grant);
    });
  }
}

/** The lookups of every safe client of the process (DNS_LIMITS.inFlight). */
export const dnsLookups = new Slots(DNS_LIMITS.inFlight);

/** Options of one check: the caller's signal (its deadline) and the lookup's own deadline. */
export interface CheckOptions {
  signal?: AbortSignal;
  /** Default DNS_LIMITS.timeoutMs. */
  lookupTimeoutMs?: number;
}

export interface SafeRequestOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  maxRedirects?: number;
  connectTimeoutMs?: number;
  totalTimeoutMs?: number;
  maxBytes?: number;
  signal?: AbortSignal;
  /**
   * 'same-origin': a redirect to another origin is not followed (ProbeFailed 'redirect'); the
   * http-to-https upgrade of the same host is. 'follow' (default): followed, each hop re-checked,
   * except a redirect that would re-send a request body to another origin, which is never followed.
   */
  redirects?: 'follow' | 'same-origin';
}

/** What the fetch-compatible function takes besides RequestInit. */
export interface SafeFetchExtra {
  redirects?: SafeRequestOptions['redirects'];
}

export interface TlsInfo {
  protocol: string | null;
  authorized: boolean;
  cipher: string | null;
}

export interface SafeResponse {
  /** Final URL after redirects. */
  url: string;
  status: number;
  headers: Headers;
  body: Buffer;
  /** URLs visited before the final one. */
  redirects: string[];
  /** The address actually connected to. */
  address: string;
  /** TLS details of the final connection; null over plain http. */
  tls: TlsInfo | null;
  text(): string;
  json(): unknown;
}

interface Opened {
  res: http.IncomingMessage;
  url: URL;
  redirects: string[];
  address: string;
  tls: TlsInfo | null;
}

const tlsOfResponse = new WeakMap<Response, TlsInfo | null>();

/** TLS details of a response from SafeFetcher.fetch (null over plain http or for other responses). */
export function responseTls(res: Response): TlsInfo | null {
  return tlsOfResponse.get(res) ?? null;
}

export interface SafeFetcher {
  readonly policy: AddressPolicy;
  /**
   * Resolves the URL's host and checks every answer; throws TargetRefused, ProbeFailed('dns') (no
   * answer, or none within the lookup's deadline) or ProbeFailed('timeout') (the caller's signal).
   */
  check(url: string | URL, opts?: CheckOptions): Promise<{ url: URL; address: string }>;
  /** One request, body buffered up to maxBytes. */
  request(url: string | URL, opts?: SafeRequestOptions): Promise<SafeResponse>;
  /** A fetch-compatible function over the same rules (for the MCP SDK client); bodies stream. */
  fetch: (input: string | URL | Request, init?: RequestInit, extra?: SafeFetchExtra) => Promise<Response>;
}

function headersOf(res: http.IncomingMessage): Headers {
  const h = new Headers();
  for (let i = 0; i < res.rawHeaders.length; i += 2) {
    const name = res.rawHeaders[i]!;
    if (/^set-cookie2?$/i.test(name)) continue; // never kept, never sent back
    try {
      h.append(name, res.rawHeaders[i + 1]!);
    } catch {
      // a header value fetch's Headers rejects is dropped rather than failing the probe
    }
  }
  return h;
}

function parseUrl(input: string | URL): URL {
  let u: URL;
  try {
    u = typeof input === 'string' ? new URL(input) : new URL(input.href);
  } catch {
    throw new TargetRefused(String(input), 'not an absolute URL');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TargetRefused(u.href, `only http and https are allowed, not ${u.protocol}`);
  if (u.username || u.password) throw new TargetRefused(u.origin, 'URLs carrying credentials are refused');
  return u;
}

export function createSafeFetcher(policy: AddressPolicy, resolver: Resolver = systemResolver): SafeFetcher {
  /**
   * One lookup, within its own deadline and the caller's signal, in a place of the process's
   * bound: whatever the resolver does, the caller is answered by then (and the resolver's signal
   * aborts, so the system resolver cancels its queries).
   */
  async function lookup(host: string, opts: CheckOptions): Promise<string[]> {
    const lookupTimeoutMs = opts.lookupTimeoutMs ?? DNS_LIMITS.timeoutMs;
    const timer = AbortSignal.timeout(lookupTimeoutMs);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timer]) : timer;
    const failure = () =>
      opts.signal?.aborted
        ? new ProbeFailed('timeout', `resolving ${host} did not finish before the request's deadline`)
        : new ProbeFailed('dns', `could not resolve ${host} within ${lookupTimeoutMs} ms`);
    let release: () => void;
    try {
      release = await dnsLookups.acquire(signal);
    } catch {
      throw failure();
    }
    try {
      const answer = resolver(host, signal);
      answer.catch(() => {}); // settles after we stopped waiting: nobody listens any more
      const answers = await untilAborted(answer, signal, failure).catch((err: unknown) => {
        throw err instanceof ProbeFailed ? err : new ProbeFailed('dns', `could not resolve ${host}: ${(err as NodeJS.ErrnoException)?.code ?? (err as Error)?.message}`);
      });
      if (answers.length === 0) throw new ProbeFailed('dns', `${host} has no addresses`);
      return answers;
    } finally {
      release();
    }
  }

  async function check(input: string | URL, opts: CheckOptions = {}): Promise<{ url: URL; address: string }> {
    const url = parseUrl(input);
    const host = url.hostname;
    // IP literals are never looked up.
    const answers = isIpLiteral(host) ? [host] : await lookup(host, opts);
    // Every answer must pass: a name that also points somewhere private is refused outright.
    let pinned: string | null = null;
    for (const a of answers) {
      const v = classifyAddress(a, policy);
      if (!v.allowed) throw new TargetRefused(url.origin, host === v.address || isIpLiteral(host) ? v.reason : `${host} resolves to ${v.reason}`);
      pinned ??= v.address;
    }
    return { url, address: pinned! };
  }

  /** Opens one hop, pinned to `address`, and resolves with the response head. */
  function openHop(url: URL, address: string, method: string, headers: Record<string, string>, body: string | Uint8Array | undefined, connectTimeoutMs: number, signal: AbortSignal): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      const family = address.includes(':') ? 6 : 4;
      const lookup: LookupFunction = (_host, options, cb) => {
        // Pinned: whatever the name resolves to now, the socket goes to the checked address.
        if ((options as dns.LookupAllOptions).all) (cb as unknown as (e: null, a: dns.LookupAddress[]) => void)(null, [{ address, family }]);
        else cb(null, address, family);
      };
      const mod = url.protocol === 'https:' ? https : http;
      const req = mod.request({
        protocol: url.protocol,
        hostname: url.hostname.replace(/^\[|\]$/g, ''),
        port: url.port || (url.protocol === 'https:' ? 443 : 80),
        path: `${url.pathname}${url.search}`,
        method,
        headers: { ...headers, host: url.host },
        lookup,
        agent: false,
        signal,
        ...(url.protocol === 'https:' ? { servername: isIpLiteral(url.hostname) ? undefined : url.hostname, rejectUnauthorized: true, minVersion: 'TLSv1.2' as const } : {}),
      });
      const connectTimer = setTimeout(() => req.destroy(new ProbeFailed('timeout', `connecting to ${url.host} took longer than ${connectTimeoutMs} ms`)), connectTimeoutMs);
      req.on('socket', (socket: Socket) => {
        const done = () => clearTimeout(connectTimer);
        if (url.protocol === 'https:') socket.once('secureConnect', done);
        else socket.once('connect', done);
        if (!socket.connecting) done();
      });
      req.on('response', (res) => {
        clearTimeout(connectTimer);
        resolve(res);
      });
      req.on('error', (err) => {
        clearTimeout(connectTimer);
        reject(err);
      });
      if (body !== undefined) req.end(body);
      else req.end();
    });
  }

  function classifyError(err: unknown, url: URL, totalTimeoutMs: number, external: AbortSignal | undefined, signal: AbortSignal): Error {
    if (err instanceof TargetRefused || err instanceof ProbeFailed) return err;
    if (err instanceof RedirectRefused) return new TargetRefused(url.href, err.message);
    const e = err as NodeJS.ErrnoException;
    if (external?.aborted) return e;
    if (signal.aborted || e?.name === 'AbortError' || e?.code === 'ABORT_ERR') {
      return new ProbeFailed('timeout', `${url.origin} did not answer within ${totalTimeoutMs} ms`);
    }
    if (typeof e?.code === 'string' && (e.code.startsWith('ERR_TLS') || e.code.includes('CERT') || e.code === 'EPROTO' || e.code.startsWith('ERR_SSL')))
      return new ProbeFailed('tls', `TLS with ${url.host} failed: ${e.code}`);
    if (e?.code === 'ECONNREFUSED') return new ProbeFailed('connect', `${url.host} refused the connection`);
    return new ProbeFailed('network', `request to ${url.origin} failed: ${e?.code ?? e?.message ?? 'unknown error'}`);
  }

  /** Follows redirects by hand; each hop is re-resolved and re-checked. */
  async function open(input: string | URL, opts: SafeRequestOptions, signal: AbortSignal, totalTimeoutMs: number): Promise<Opened> {
    const maxRedirects = opts.maxRedirects ?? SAFE_FETCH_DEFAULTS.maxRedirects;
    const connectTimeoutMs = opts.connectTimeoutMs ?? SAFE_FETCH_DEFAULTS.connectTimeoutMs;
    let method = (opts.method ?? 'GET').toUpperCase();
    let body = opts.body;
    const headers: Record<string, string> = { 'user-agent': USER_AGENT, 'accept-encoding': 'identity' };
    for (const [k, v] of Object.entries(opts.headers ?? {})) if (!FORBIDDEN_HEADERS.has(k.toLowerCase())) headers[k.toLowerCase()] = v;
    const redirects: string[] = [];
    let current = parseUrl(input);
    for (;;) {
      let res: http.IncomingMessage;
      let address: string;
      try {
        const checked = await check(current, { signal });
        address = checked.address;
        const hopHeaders = { ...headers };
        if (body === undefined) {
          delete hopHeaders['content-type'];
          delete hopHeaders['content-length'];
        }
        res = await openHop(current, address, method, hopHeaders, body, connectTimeoutMs, signal);
      } catch (err) {
        throw classifyError(err, current, totalTimeoutMs, opts.signal, signal);
      }
      const status = res.statusCode ?? 0;
      if ([301, 302, 303, 307, 308].includes(status)) {
        res.resume();
        if (redirects.length >= maxRedirects) throw new ProbeFailed('too_many_redirects', `more than ${maxRedirects} redirects starting at ${parseUrl(input).href}`);
        let next: URL;
        try {
          next = redirectTarget(current, res.headers.location);
        } catch (err) {
          throw classifyError(err, current, totalTimeoutMs, opts.signal, signal);
        }
        const m = redirectMethod(status, method);
        // Another origin never receives what was sent to this one: a 307/308 would re-send the
        // body (a hostile server could reflect our requests at anyone), and a caller may ask to
        // stay on the origin altogether (the MCP probe's POSTs).
        if (!withinOrigin(current, next) && ((m.keepBody && body !== undefined) || opts.redirects === 'same-origin')) {
          throw new ProbeFailed('redirect', `${current.origin} answered ${method} ${current.pathname} with a ${status} redirect to another origin (${next.origin}), which is not followed`);
        }
        method = m.method;
        if (!m.keepBody) body = undefined;
        // Cross-origin hops lose every caller header except content negotiation.
        if (next.origin !== current.origin) for (const k of Object.keys(headers)) if (!['user-agent', 'accept', 'accept-encoding', 'content-type'].includes(k)) delete headers[k];
        redirects.push(current.href);
        current = next;
        continue;
      }
      const sock = res.socket as TLSSocket;
      const tls: TlsInfo | null =
        current.protocol === 'https:' && sock && typeof sock.getProtocol === 'function'
          ? { protocol: sock.getProtocol(), authorized: sock.authorized === true, cipher: sock.getCipher()?.name ?? null }
          : null;
      return { res, url: current, redirects, address, tls };
    }
  }

  function deadline(opts: SafeRequestOptions) {
    const totalTimeoutMs = opts.totalTimeoutMs ?? SAFE_FETCH_DEFAULTS.totalTimeoutMs;
    const timeout = AbortSignal.timeout(totalTimeoutMs);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
    return { signal, totalTimeoutMs };
  }

  async function request(input: string | URL, opts: SafeRequestOptions = {}): Promise<SafeResponse> {
    const maxBytes = opts.maxBytes ?? SAFE_FETCH_DEFAULTS.maxBytes;
    const { signal, totalTimeoutMs } = deadline(opts);
    const o = await open(input, opts, signal, totalTimeoutMs);
    const declared = Number(o.res.headers['content-length']);
    if (Number.isFinite(declared) && declared > maxBytes) {
      o.res.destroy();
      throw new ProbeFailed('too_large', `${o.url.href} declares ${declared} bytes, more than the ${maxBytes}-byte cap`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of o.res as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > maxBytes) {
          o.res.destroy();
          throw new ProbeFailed('too_large', `${o.url.href} sent more than the ${maxBytes}-byte cap`);
        }
        chunks.push(chunk);
      }
    } catch (err) {
      throw classifyError(err, o.url, totalTimeoutMs, opts.signal, signal);
    }
    const body = Buffer.concat(chunks);
    return {
      url: o.url.href,
      status: o.res.statusCode ?? 0,
      headers: headersOf(o.res),
      body,
      redirects: o.redirects,
      address: o.address,
      tls: o.tls,
      text: () => body.toString('utf8'),
      json: () => parsePeerJson(body.toString('utf8')),
    };
  }

  async function safeFetchCompat(input: string | URL | Request, init: RequestInit = {}, extra: SafeFetchExtra = {}): Promise<Response> {
    const url = input instanceof Request ? input.url : input;
    const method = init.method ?? (input instanceof Request ? input.method : 'GET');
    const headers: Record<string, string> = {};
    new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined)).forEach((v, k) => (headers[k] = v));
    let body: string | Uint8Array | undefined;
    if (init.body !== undefined && init.body !== null) {
      if (typeof init.body === 'string') body = init.body;
      else if (init.body instanceof Uint8Array) body = init.body;
      else if (init.body instanceof ArrayBuffer) body = new Uint8Array(init.body);
      else throw new TypeError('safe fetch accepts string or byte bodies only');
    }
    const opts: SafeRequestOptions = { method, headers, body, signal: init.signal ?? undefined, redirects: extra.redirects };
    const { signal, totalTimeoutMs } = deadline(opts);
    const maxBytes = SAFE_FETCH_DEFAULTS.maxBytes;
    const o = await open(url, opts, signal, totalTimeoutMs);
    let size = 0;
    const capped = o.res.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) o.res.destroy(new ProbeFailed('too_large', `${o.url.href} sent more than the ${maxBytes}-byte cap`));
    });
    const status = o.res.statusCode ?? 0;
    const nullBody = method === 'HEAD' || status === 204 || status === 304;
    if (nullBody) o.res.resume();
    const res = new Response(nullBody ? null : (Readable.toWeb(capped) as ReadableStream<Uint8Array>), {
      status,
      statusText: o.res.statusMessage,
      headers: headersOf(o.res),
    });
    Object.defineProperty(res, 'url', { value: o.url.href });
    tlsOfResponse.set(res, o.tls);
    return res;
  }

  return { policy, check, request, fetch: safeFetchCompat };
}
