// `observatory bundle pull`, `observatory check <server> --bundle <file>` and the bundle half of
// `observatory verify` (docs/bundles.md): fetch a signed bundle and verify it, then decide offline.
import { readFile, writeFile } from 'node:fs/promises';
import { bundleExitCode, indexBundle, InvalidServerUrl, lookupBundleEntry, type BundleFile, type BundlePayload } from '../domain/bundle.js';
import { keysOfJwks, loadJwksFrom, readBundleText, verifyBundle, type BundleVerification } from '../signing/bundle.js';
import type { VerificationKey } from '../signing/jws.js';
import { EXIT, UsageError, type Command } from './command.js';

export const DEFAULT_OBSERVATORY_URL = 'http://localhost:8080';

function summary(p: BundlePayload, kid: string, now: Date): string {
  const age = Math.max(0, Math.floor(now.getTime() / 1000) - p.iat);
  return `bundle ${p.bundle_id}: ${p.server_count} servers, issued ${new Date(p.iat * 1000).toISOString()} (${age} s ago) by ${p.iss}, expires ${new Date(p.exp * 1000).toISOString()}, signed by key ${kid}`;
}

async function jwksDocument(source: string): Promise<{ keys: Record<string, unknown>[] }> {
  const keys = await loadJwksFrom(source).catch((err: Error) => {
    throw new UsageError(err.message);
  });
  // Written into the pulled file as the key set that verified it: the public halves only.
  const doc = { keys: [] as Record<string, unknown>[] };
  for (const [kid, k] of keys) {
    const jwk = k.key.export({ format: 'jwk' }) as Record<string, unknown>;
    doc.keys.push({ kty: 'OKP', crv: 'Ed25519', x: jwk.x, kid, alg: 'EdDSA', use: 'sig', ...(k.retiredAt ? { exp: Math.floor(k.retiredAt.getTime() / 1000) } : {}) });
  }
  return doc;
}

/**
 * The keys a bundle is verified with: the pinned JWKS (--jwks, a file or URL) when given,
 * otherwise the JWKS the file carries (the one that verified it at pull time).
 */
export async function bundleKeys(file: BundleFile | null, pinned: string | undefined): Promise<{ keys: Map<string, VerificationKey>; from: string }> {
  if (pinned) {
    const keys = await loadJwksFrom(pinned).catch((err: Error) => {
      throw new UsageError(err.message);
    });
    return { keys, from: pinned };
  }
  if (!file) throw new UsageError('a bare bundle JWS carries no keys: pin a JWKS with --jwks <file-or-url>');
  const keys = keysOfJwks(file.jwks);
  if (!(keys instanceof Map)) throw new UsageError(`the bundle file's jwks is ${keys.problem}: pin a JWKS with --jwks <file-or-url>`);
  return { keys, from: 'the JWKS inside the bundle file' };
}

/** Reads a bundle file and verifies it; a one-line reason when it is not usable. */
export async function openBundleFile(path: string, pinned: string | undefined, now: Date): Promise<(BundleVerification & { from: string }) | { valid: false; reason: string }> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    return { valid: false, reason: `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
  }
  const read = readBundleText(text);
  if ('problem' in read) return { valid: false, reason: `${path} is ${read.problem}` };
  let keys;
  try {
    keys = await bundleKeys(read.file, pinned);
  } catch (err) {
    return { valid: false, reason: (err as Error).message };
  }
  const v = await verifyBundle(read.jws, keys.keys, now);
  if (v.valid && v.payload.delta !== null) return { valid: false, reason: `${path} is a delta (since ${v.payload.delta.since}), not a full bundle: pull one without --since` };
  return { ...v, from: keys.from };
}

export const bundlePullCommand: Command = {
  name: 'bundle pull',
  usage: 'bundle pull [--out <file>] [--observatory <base-url>] [--jwks <file-or-url>] [--category <c>] [--verdict <v,...>]',
  summary: 'Fetch the signed verdict bundle, verify it (against --jwks, else the observatory\'s /.well-known/jwks.json) and write it with that JWKS to --out (default stdout)',
  options: { out: 'value', observatory: 'value', jwks: 'value', category: 'value', verdict: 'value' },
  async run({ options, io }) {
    const base = ((options.observatory as string | undefined) ?? io.env.OBSERVATORY_URL ?? DEFAULT_OBSERVATORY_URL).replace(/\/+$/, '');
    let url: URL;
    try {
      url = new URL(`${base}/v1/bundle`);
    } catch {
      throw new UsageError(`--observatory: not a URL: ${base}`);
    }
    if (options.category) url.searchParams.set('category', options.category as string);
    if (options.verdict) url.searchParams.set('verdict', options.verdict as string);
    let res: Response;
    try {
      res = await fetch(url, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(300_000) });
    } catch (err) {
      io.err(`bundle pull: cannot reach ${url.origin}: ${(err as Error).message}`);
      return EXIT.invalid;
    }
    const text = await res.text();
    if (!res.ok) {
      let detail = text.slice(0, 200);
      try {
        detail = String((JSON.parse(text) as { detail?: string }).detail ?? detail);
      } catch {
        /* not JSON */
      }
      io.err(`bundle pull: ${url.origin} answered ${res.status}: ${detail}`);
      return EXIT.invalid;
    }
    const read = readBundleText(text);
    if ('problem' in read || !read.file) {
      io.err(`bundle pull: ${url.href} did not answer a bundle file`);
      return EXIT.invalid;
    }
    const jwksSource = (options.jwks as string | undefined) ?? `${base}/.well-known/jwks.json`;
    const jwks = await jwksDocument(jwksSource);
    const keys = keysOfJwks(jwks) as Map<string, VerificationKey>;
    const now = new Date();
    const v = await verifyBundle(read.jws, keys, now);
    if (!v.valid) {
      io.err(`bundle pull: refused: ${v.reason} (keys from ${jwksSource})`);
      return EXIT.invalid;
    }
    const file: BundleFile = { ...read.file, jwks };
    const out = options.out as string | undefined;
    if (out) {
      await writeFile(out, JSON.stringify(file));
      io.out(`${summary(v.payload, v.kid, now)}; written to ${out}`);
    } else {
      io.out(JSON.stringify(file));
      io.err(summary(v.payload, v.kid, now));
    }
    return EXIT.ok;
  },
};

/** `observatory check <server> --bundle <file> [--jwks <pinned>] [--json]`: the offline gate. Exit 0/1/2 by verdict, 3 no usable bundle. */
export async function checkFromBundle(server: string, path: string, pinned: string | undefined, asJson: boolean, io: { out(l: string): void; err(l: string): void }): Promise<number> {
  const now = new Date();
  const v = await openBundleFile(path, pinned, now);
  if (!v.valid) {
    io.err(`observatory check: bundle refused: ${v.reason}`);
    return 3;
  }
  let entry;
  try {
    entry = lookupBundleEntry(indexBundle(v.payload.servers), server);
  } catch (err) {
    if (err instanceof InvalidServerUrl) {
      io.err(`observatory check: ${server}: ${err.message}`);
      return 3;
    }
    throw err;
  }
  const verdict = entry?.verdict ?? 'UNRATED';
  const code = bundleExitCode(verdict);
  const p = v.payload;
  const ageS = Math.max(0, Math.floor(now.getTime() / 1000) - p.iat);
  if (asJson) {
    io.out(JSON.stringify({ server, verdict, trust_score: entry?.trust_score ?? null, tracked: entry !== null, entry, bundle: { bundle_id: p.bundle_id, issuer: p.iss, issued_at: new Date(p.iat * 1000).toISOString(), expires_at: new Date(p.exp * 1000).toISOString(), age_seconds: ageS, kid: 'kid' in v ? v.kid : null, keys_from: v.from }, ci: { exit_code: code } }, null, 2));
  } else {
    const what = entry ? `${entry.url} (trust ${entry.trust_score === null ? 'none' : entry.trust_score.toFixed(1)}, ${entry.total_interactions} reports, tier ${entry.tier}${entry.anomaly_flags.length ? `, flags ${entry.anomaly_flags.join(',')}` : ''})` : `${server} (not in the bundle: no runtime evidence)`;
    io.out(`${verdict} ${what}`);
    io.out(`from bundle ${p.bundle_id} of ${p.iss}, issued ${new Date(p.iat * 1000).toISOString()} (${ageS} s ago), expires ${new Date(p.exp * 1000).toISOString()}; keys from ${v.from}`);
  }
  return code;
}
