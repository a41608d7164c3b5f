import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, lstatSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, ConnectError, Code } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Authorization } from '../gen/envoy/service/auth/v3/external_auth_pb.js';
import { loadConfig } from '../src/config.js';
import { createBundleGate, type BundleGate } from '../src/bundle-gate.js';
import { expectProblem, json, startTestApp, type TestApp } from './support/app.js';
import { seedVerdicts } from './support/seed.js';
import { backend } from './support/db.js';

// A second instance with no database at all, started with GATE_BUNDLE_URL, answering /v1/gate
// and Envoy ext_authz from the source's bundle as the full service does, and going on answering
// while the source is down.

const PASS = 'https://pass.gate-bundle.example.com/mcp';
const FAIL = 'https://fail.gate-bundle.example.com/mcp';
const UNCERTAIN = 'https://uncertain.gate-bundle.example.com/mcp';
const UNRATED = 'https://never-seen.gate-bundle.example.com/mcp';

let source: TestApp;
let sourceUp = true;
let g: BundleGate;
let gateBase: string;
let offsetMs = 0;
let gUrlPin: BundleGate;
const dir = mkdtempSync(join(tmpdir(), 'bundle-gate-'));
const keptPinnedFile = join(dir, 'kept-pinned', 'gate-bundle.json');
const keptUrlPinFile = join(dir, 'kept-url-pin.json');
const victimFile = join(dir, 'victim.txt');

let gates = 0;
async function startGate(env: Record<string, string>, now?: () => Date): Promise<{ gate: BundleGate; base: string }> {
  // Each gate keeps its bundle in a file of its own unless the test names one.
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', GATE_BUNDLE_REFRESH_SECONDS: '3600', GATE_BUNDLE_CACHE_FILE: join(dir, `kept-${gates++}.json`), ...env });
  const gate = await createBundleGate(config, { logger: false, now });
  const address = await gate.listen();
  return { gate, base: `http://127.0.0.1:${new URL(address).port}` };
}

beforeAll(async () => {
  source = await startTestApp({});
  await seedVerdicts(source.base, { pass: PASS, fail: FAIL, uncertain: UNCERTAIN });
  // The JWKS pinned from the source ahead of time (what an operator copies into the cluster).
  writeFileSync(join(dir, 'jwks.json'), JSON.stringify(await json(fetch(`${source.base}/.well-known/jwks.json`))));
  ({ gate: g, base: gateBase } = await startGate({ GATE_BUNDLE_URL: `${source.base}/v1/bundle`, GATE_BUNDLE_JWKS: join(dir, 'jwks.json'), GATE_BUNDLE_CACHE_FILE: keptPinnedFile }, () => new Date(Date.now() + offsetMs)));
  // A second gate trusting the source's JWKS URL (the default pin), keeping its bundle too. A
  // local user planted links where a predictable temporary file would be written: the gate must
  // neither write through them nor keep one as its bundle file.
  writeFileSync(victimFile, 'not the gate\'s to write');
  for (const name of [`${keptUrlPinFile}.${process.pid}.tmp`, `${keptUrlPinFile}.tmp`]) symlinkSync(victimFile, name);
  ({ gate: gUrlPin } = await startGate({ GATE_BUNDLE_URL: `${source.base}/v1/bundle`, GATE_BUNDLE_CACHE_FILE: keptUrlPinFile }));
}, 120_000);
afterAll(async () => {
  await g?.close();
  await gUrlPin?.close();
  if (sourceUp) await source?.close();
  rmSync(dir, { recursive: true, force: true });
});

const ask = (base: string, headers: Record<string, string>, path = '/v1/gate') => fetch(`${base}${path}`, { headers });

describe(`gate from a bundle, no database (${backend} source)`, () => {
  it('answers /v1/gate as the full service does for PASS, FAIL, UNCERTAIN and UNRATED servers', async () => {
    for (const [url, status, verdict] of [
      [PASS, 200, 'PASS'],
      [FAIL, 403, 'FAIL'],
      [UNCERTAIN, 200, null],
      [UNRATED, 403, 'UNRATED'],
    ] as const) {
      const full = await ask(source.base, { 'x-mcp-server': url });
      const local = await ask(gateBase, { 'x-mcp-server': url });
      expect(local.status, url).toBe(full.status);
      expect(local.status, url).toBe(status);
      expect(local.headers.get('x-trust-verdict'), url).toBe(full.headers.get('x-trust-verdict'));
      if (verdict) expect(local.headers.get('x-trust-verdict')).toBe(verdict);
      expect(local.headers.get('x-trust-score'), url).toBe(full.headers.get('x-trust-score'));
      const [fb, lb] = [await json(full), await json(local)];
      expect(lb).toMatchObject({ allow: fb.allow, decision: fb.decision, reason: fb.reason, verdict: fb.verdict, trust_score: fb.trust_score, upstream: fb.upstream });
      // The local decision rests on the bundle, not on a receipt of its own.
      expect(local.headers.get('x-trust-receipt')).toBeNull();
      expect(lb.receipt_id).toBeNull();
      expect(lb.bundle.bundle_id).toBe(local.headers.get('x-trust-bundle'));
      expect(Number(local.headers.get('x-trust-bundle-age'))).toBeGreaterThanOrEqual(0);
    }
    // The other upstream sources resolve alike (query dropped for request URLs).
    const viaUrl = await ask(gateBase, { 'x-original-url': `${FAIL}?session=1` });
    expect(viaUrl.status).toBe(403);
    expect(viaUrl.headers.get('x-trust-verdict')).toBe('FAIL');
    await expectProblem(await ask(gateBase, {}), 400, 'invalid_argument');
    await expectProblem(await ask(gateBase, { 'x-mcp-server': 'file:///etc/passwd' }), 400, 'invalid_argument');
  });

  it('answers Envoy ext_authz (gRPC Check) from the bundle too', async () => {
    const client = createClient(Authorization, createGrpcTransport({ baseUrl: gateBase }));
    const check = (mcp: string) => client.check({ attributes: { request: { http: { method: 'POST', headers: {}, host: 'gw.test', path: '/x', scheme: 'https' } }, contextExtensions: { mcp_server: mcp } } });
    const pass = await check(PASS);
    expect(pass.status?.code).toBe(0);
    expect(pass.httpResponse.case).toBe('okResponse');
    const fail = await check(FAIL);
    expect(fail.status?.code).toBe(7);
    expect(fail.httpResponse.case === 'deniedResponse' && fail.httpResponse.value.status?.code).toBe(403);
    expect(fail.dynamicMetadata?.trust_verdict).toBe('FAIL');
    expect(typeof fail.dynamicMetadata?.trust_bundle).toBe('string');
  });

  it('serves nothing else: other paths answer a clear 503 problem; /healthz and /readyz report the bundle', async () => {
    for (const path of ['/api/trust?url=https://a.example.com', '/v1/preflight?target=x', '/v1/bundle', '/mcp', '/api/report']) {
      const body = await expectProblem(await fetch(`${gateBase}${path}`), 503, 'unavailable');
      expect(String(body.detail)).toMatch(/gate answering from a bundle/);
    }
    const h = await fetch(`${gateBase}/healthz`);
    expect(h.status).toBe(200);
    const hb = await json(h);
    expect(hb).toMatchObject({ status: 'ok', mode: 'bundle', bundle: { state: 'fresh', last_error: null } });
    expect(hb.bundle.bundle.servers).toBe(3);
    expect((await json(fetch(`${gateBase}/readyz`))).status).toBe('ready');
  });

  it('keeps answering from the last good bundle while the source is down, and says how old it is', async () => {
    await source.close();
    sourceUp = false;
    await g.mirror.refresh();
    const pass = await ask(gateBase, { 'x-mcp-server': PASS });
    expect(pass.status).toBe(200);
    expect(pass.headers.get('x-trust-verdict')).toBe('PASS');
    expect(pass.headers.get('x-trust-bundle-age')).toMatch(/^\d+$/);
    const fail = await ask(gateBase, { 'x-mcp-server': FAIL });
    expect(fail.status).toBe(403);
    const h = await json(fetch(`${gateBase}/healthz`));
    expect(h).toMatchObject({ status: 'stale', bundle: { state: 'stale' } });
    expect(h.bundle.last_error).toMatch(/cannot reach/);

    // A day later the bundle has expired: no decision is made from it (503, fail closed), and
    // /healthz says so; ext_authz gets a transport error (Envoy's failure_mode_allow decides).
    offsetMs = 2 * 86_400_000;
    const expired = await ask(gateBase, { 'x-mcp-server': PASS });
    const body = await expectProblem(expired, 503, 'unavailable');
    expect(String(body.detail)).toMatch(/expired/);
    await expectProblem(await fetch(`${gateBase}/healthz`), 503, 'unavailable');
    const client = createClient(Authorization, createGrpcTransport({ baseUrl: gateBase }));
    const err = await client.check({ attributes: { contextExtensions: { mcp_server: PASS } } }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    offsetMs = 0;
  });

  it('restarted while its source is down, answers from the bundle it kept on disk (verified again); a tampered, foreign or expired kept file is not used', async () => {
    expect(sourceUp).toBe(false);
    const url = `${source.base}/v1/bundle`;
    const keptBundleId = g.mirror.status().bundle!.bundle_id;
    expect(statSync(keptPinnedFile).mode & 0o777).toBe(0o600);
    expect(lstatSync(keptUrlPinFile).isFile()).toBe(true);
    expect(readFileSync(victimFile, 'utf8')).toBe("not the gate's to write");
    const kept = JSON.parse(readFileSync(keptPinnedFile, 'utf8'));
    expect(kept).toMatchObject({ format: 'trust-observatory/gate-bundle-cache/v1', source: url, jwks: null });
    // Pinned JWKS file and kept bundle: answers as before the restart, and says the source is down.
    for (const [file, pin] of [
      [keptPinnedFile, { GATE_BUNDLE_JWKS: join(dir, 'jwks.json') }],
      // Pinned by URL (the source's JWKS, down as well): verified against the JWKS kept with it.
      [keptUrlPinFile, {}],
    ] as const) {
      const { gate, base } = await startGate({ GATE_BUNDLE_URL: url, GATE_BUNDLE_CACHE_FILE: file, ...pin });
      try {
        const pass = await ask(base, { 'x-mcp-server': PASS });
        expect(pass.status, file).toBe(200);
        expect(pass.headers.get('x-trust-verdict')).toBe('PASS');
        expect((await ask(base, { 'x-mcp-server': FAIL })).status).toBe(403);
        const h = await json(fetch(`${base}/healthz`));
        expect(h).toMatchObject({ status: 'stale', bundle: { state: 'stale' } });
        expect(h.bundle.last_error).toMatch(/cannot reach/);
        if (file === keptPinnedFile) expect(h.bundle.bundle.bundle_id).toBe(keptBundleId);
      } finally {
        await gate.close();
      }
    }
    // Not used: a kept bundle whose signed payload was changed, one kept for another source, one
    // whose kept JWKS was swapped for an attacker's (URL pin), and one that has expired since.
    const [h, p, sig] = (kept.jws as string).split('.') as [string, string, string];
    const payload = JSON.parse(Buffer.from(p, 'base64url').toString());
    payload.servers = payload.servers.map((e: Record<string, unknown>) => ({ ...e, verdict: 'PASS', trust_score: 99 }));
    const forged = `${h}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.${sig}`;
    const attacker = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' });
    const urlKept = JSON.parse(readFileSync(keptUrlPinFile, 'utf8'));
    const bad: [string, Record<string, unknown>, Record<string, string>, (() => Date) | undefined][] = [
      ['tampered.json', { ...kept, jws: forged }, { GATE_BUNDLE_JWKS: join(dir, 'jwks.json') }, undefined],
      ['foreign.json', { ...kept, source: 'http://127.0.0.1:9/v1/bundle' }, { GATE_BUNDLE_JWKS: join(dir, 'jwks.json') }, undefined],
      ['swapped-jwks.json', { ...urlKept, jwks: JSON.stringify({ keys: [{ ...attacker, kid: JSON.parse(Buffer.from(h, 'base64url').toString()).kid, alg: 'EdDSA', use: 'sig' }] }) }, {}, undefined],
      ['expired.json', kept, { GATE_BUNDLE_JWKS: join(dir, 'jwks.json') }, () => new Date(Date.now() + 2 * 86_400_000)],
      ['not-json.json', 'not json' as unknown as Record<string, unknown>, { GATE_BUNDLE_JWKS: join(dir, 'jwks.json') }, undefined],
    ];
    for (const [name, doc, pin, now] of bad) {
      writeFileSync(join(dir, name), typeof doc === 'string' ? doc : JSON.stringify(doc));
      const { gate, base } = await startGate({ GATE_BUNDLE_URL: url, GATE_BUNDLE_CACHE_FILE: join(dir, name), ...pin }, now);
      try {
        await expectProblem(await ask(base, { 'x-mcp-server': FAIL }), 503, 'unavailable');
        await expectProblem(await ask(base, { 'x-mcp-server': PASS }), 503, 'unavailable');
      } finally {
        await gate.close();
      }
    }
    // GATE_BUNDLE_CACHE_FILE=off keeps nothing: a restart without the source is 503.
    const off = await startGate({ GATE_BUNDLE_URL: url, GATE_BUNDLE_JWKS: join(dir, 'jwks.json'), GATE_BUNDLE_CACHE_FILE: 'off' });
    try {
      await expectProblem(await ask(off.base, { 'x-mcp-server': PASS }), 503, 'unavailable');
    } finally {
      await off.gate.close();
    }
    expect(existsSync(join(dir, 'off'))).toBe(false);
  });

  it('refuses a bundle its pinned JWKS did not sign, and answers 503 until it has a good one', async () => {
    const other = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' });
    writeFileSync(join(dir, 'foreign.json'), JSON.stringify({ keys: [{ ...other, kid: 'foreign', alg: 'EdDSA', use: 'sig' }] }));
    const src = await startTestApp({});
    const { gate, base } = await startGate({ GATE_BUNDLE_URL: `${src.base}/v1/bundle`, GATE_BUNDLE_JWKS: join(dir, 'foreign.json') });
    try {
      const res = await ask(base, { 'x-mcp-server': PASS });
      const body = await expectProblem(res, 503, 'unavailable');
      expect(String(body.detail)).toMatch(/no bundle has been fetched yet.*refused: unknown key id/);
      await expectProblem(await fetch(`${base}/healthz`), 503, 'unavailable');
    } finally {
      await gate.close();
      await src.close();
    }
    // And a gate whose source never answered: 503 too, never an allow.
    const { gate: lonely, base: lonelyBase } = await startGate({ GATE_BUNDLE_URL: 'http://127.0.0.1:1/v1/bundle' });
    try {
      await expectProblem(await ask(lonelyBase, { 'x-mcp-server': PASS }), 503, 'unavailable');
    } finally {
      await lonely.close();
    }
  });
});
