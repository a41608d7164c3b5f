import { createContextKey, createContextValues, type ContextValues } from '@connectrpc/connect';
import type { Config } from '../config.js';
import type { Db } from '../db/index.js';
import type { KeyRing } from '../signing/keyring.js';
import type { ReceiptIssuer } from '../signing/receipts.js';

/** What every service is built from; passed by closure, no DI framework. */
export interface ServiceDeps {
  db: Db;
  config: Config;
  now: () => Date;
  /** The shared Ed25519 key ring (JWKS, signing). */
  keyring: KeyRing;
  /** Issues, stores and verifies signed receipts. */
  receipts: ReceiptIssuer;
  /** Optional observation hooks (Prometheus metrics in the server; absent in scripts). */
  observe?: ServiceObservers;
  /** Where background work (the observation loop) reports failures it survives; the server logs them. */
  onBackgroundError?: (err: unknown) => void;
}

export interface ServiceObservers {
  /** Size of each committed telemetry batch (group commit). */
  ingestBatch?(size: number): void;
  /** Size of each committed receipt + demand batch (pre-flight). */
  receiptBatch?(size: number): void;
  /** Spans or data points received over OTLP, by what became of them (src/services/otlp.ts). */
  otlpItems?(signal: 'traces' | 'metrics', outcome: string, n: number): void;
}

/**
 * The part of a Connect HandlerContext our implementations read. REST adapters build one from
 * the fastify request; Connect passes its own HandlerContext, which has these members too.
 */
export interface CallContext {
  requestHeader: Headers;
  values: ContextValues;
  /**
   * Headers of a successful answer (e.g. x402 PAYMENT-RESPONSE). Connect's HandlerContext has it;
   * REST adapters copy it onto the reply. Absent for calls that cannot answer with headers.
   */
  responseHeader?: Headers;
  /**
   * Aborted once the caller went away before its answer: Connect's own signal, or for a REST call
   * a view of its response (callContext's `response`). A write that has not begun when it is
   * aborted is dropped (src/store/group-commit.ts). Absent: the caller is never known to be gone.
   */
  signal?: { readonly aborted: boolean };
}

/** The parts of a node HTTP/1.1 or HTTP/2 compatibility response that tell whether its client is gone. */
export interface ResponseState {
  readonly destroyed?: boolean;
  readonly writableEnded?: boolean;
  /** HTTP/2: the stream (its `destroyed` turns true when the client resets it or the session ends). */
  readonly stream?: { readonly destroyed: boolean };
}

/** A REST call's "caller gone" (CallContext.signal): its response was destroyed before it was ended. */
class ResponseGone {
  constructor(private readonly res: ResponseState) {}
  get aborted(): boolean {
    const stream = this.res.stream;
    if (stream !== undefined) return stream.destroyed;
    return this.res.destroyed === true && this.res.writableEnded !== true;
  }
}

/** The client's address as decided by TRUST_PROXY; in memory only, never stored or logged. */
export const clientAddressKey = createContextKey<string | undefined>(undefined, { description: 'client address' });

/**
 * The CallContext of a REST adapter, from the fastify request's headers. Its fetch Headers
 * (undici validates every name and value) are built only when something reads them: most calls
 * read one header or none, and `requestHeaderValue` reads a raw one without building anything.
 */
class RestCallContext implements CallContext {
  #requestHeader: Headers | undefined;
  #responseHeader: Headers | undefined;
  readonly values: ContextValues;
  readonly signal: { readonly aborted: boolean } | undefined;
  constructor(
    readonly raw: Record<string, string | string[] | undefined>,
    clientAddress: string | undefined,
    response: ResponseState | undefined,
  ) {
    this.values = createContextValues().set(clientAddressKey, clientAddress);
    this.signal = response === undefined ? undefined : new ResponseGone(response);
  }
  get requestHeader(): Headers {
    if (this.#requestHeader === undefined) {
      const h = new Headers();
      for (const [k, v] of Object.entries(this.raw)) {
        if (v === undefined) continue;
        if (Array.isArray(v)) for (const x of v) h.append(k, x);
        else h.set(k, v);
      }
      this.#requestHeader = h;
    }
    return this.#requestHeader;
  }
  get responseHeader(): Headers {
    return (this.#responseHeader ??= new Headers());
  }
}

/** A REST call's context; with `response` (the node response), ctx.signal tells when its client went away. */
export function callContext(headers: Record<string, string | string[] | undefined>, clientAddress?: string, response?: ResponseState): CallContext {
  return new RestCallContext(headers, clientAddress, response);
}

/** One request header (lower-case name), as Headers.get gives it, without building Headers for a REST call. */
export function requestHeaderValue(ctx: CallContext | undefined, name: string): string | null {
  if (ctx instanceof RestCallContext) {
    const v = ctx.raw[name];
    return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
  }
  return ctx?.requestHeader.get(name) ?? null;
}

/** For calls that read nothing from the request context (most reads). */
export const EMPTY_CONTEXT: CallContext = { requestHeader: new Headers(), values: createContextValues() };
