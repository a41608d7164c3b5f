import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

// Python gRPC stubs generated at test time from proto/ with Debian's packages, for tests that
// call the service as a Python client would (test/grpc.python.test.ts). Debian's interpreter is
// used by its absolute path: the python3 first on PATH (pyenv, a venv) may lack python3-grpcio.
//
//   /usr/bin/python3            python3-grpcio, python3-protobuf (the runtime)
//   /usr/bin/protoc             protobuf-compiler, >= 3.15 for proto3 `optional`
//   /usr/bin/grpc_python_plugin protobuf-compiler-grpc (the _pb2_grpc.py stubs)
//
// python3-grpc-tools' bundled compiler is used only when the plugin is absent and it can compile
// proto3 `optional` (Debian 12's 1.14 cannot).

const run = promisify(execFile);

export const SYSTEM_PYTHON = '/usr/bin/python3';
const PROTOC = '/usr/bin/protoc';
const GRPC_PYTHON_PLUGIN = '/usr/bin/grpc_python_plugin';
const PROTO_ROOT = path.resolve('proto');

export interface PythonStubs {
  /** Directory to put on PYTHONPATH: observatory/v1/*_pb2(_grpc).py, obs_grpc/{health,reflection}/v1/*. */
  dir: string;
  /** The interpreter to run clients with. */
  python: string;
  /** How the stubs were made (for the test log). */
  generator: string;
  cleanup(): Promise<void>;
}

/**
 * The proto files a Python client needs: every observatory.v1 file with what it imports, and gRPC
 * health and reflection. The grpc/ tree is compiled under the import prefix obs_grpc/ so that the generated
 * package does not shadow grpcio's own `grpc` package.
 */
async function protoFiles(): Promise<{ args: string[]; files: string[] }> {
  const observatory = (await readdir(path.join(PROTO_ROOT, 'observatory/v1'))).filter((f) => f.endsWith('.proto')).map((f) => `observatory/v1/${f}`);
  return {
    args: [`--proto_path=${PROTO_ROOT}`, `--proto_path=obs_grpc=${path.join(PROTO_ROOT, 'grpc')}`],
    // observatory.v1 imports the buf.validate rules and the google.api.http annotations (docs/contract.md).
    files: [...observatory, 'buf/validate/validate.proto', 'google/api/annotations.proto', 'google/api/http.proto', 'obs_grpc/health/v1/health.proto', 'obs_grpc/reflection/v1/reflection.proto'],
  };
}

async function protocVersion(): Promise<[number, number] | null> {
  try {
    const { stdout } = await run(PROTOC, ['--version']);
    const m = /(\d+)\.(\d+)/.exec(stdout);
    return m ? [Number(m[1]), Number(m[2])] : null;
  } catch {
    return null;
  }
}

/** Why Python stubs cannot be made here (one line, for a skip message), or null when they can. */
export async function pythonGrpcUnavailable(): Promise<string | null> {
  if (!existsSync(SYSTEM_PYTHON)) return `${SYSTEM_PYTHON} is absent (apt-get install python3-grpcio)`;
  try {
    await run(SYSTEM_PYTHON, ['-c', 'import grpc, google.protobuf']);
  } catch {
    return `${SYSTEM_PYTHON} cannot import grpc and google.protobuf (apt-get install python3-grpcio python3-protobuf)`;
  }
  const v = await protocVersion();
  const protocOk = v !== null && (v[0] > 3 || (v[0] === 3 && v[1] >= 15));
  if (protocOk && existsSync(GRPC_PYTHON_PLUGIN)) return null;
  if (await grpcToolsCompiles()) return null;
  if (!protocOk) return `${PROTOC} ${v ? `${v[0]}.${v[1]} is older than 3.15` : 'is absent'} (apt-get install protobuf-compiler)`;
  return `${GRPC_PYTHON_PLUGIN} is absent and python3-grpc-tools cannot compile proto3 optional (apt-get install protobuf-compiler-grpc)`;
}

async function grpcToolsCompiles(): Promise<boolean> {
  const out = await mkdtemp(path.join(tmpdir(), 'obs-pystubs-probe-'));
  try {
    const { args, files } = await protoFiles();
    await run(SYSTEM_PYTHON, ['-m', 'grpc_tools.protoc', ...args, `--python_out=${out}`, `--grpc_python_out=${out}`, ...files]);
    return true;
  } catch {
    return false;
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}

/** Generates the stubs into a fresh temporary directory (call pythonGrpcUnavailable() first). */
export async function generatePythonStubs(): Promise<PythonStubs> {
  const dir = await mkdtemp(path.join(tmpdir(), 'obs-pystubs-'));
  const cleanup = () => rm(dir, { recursive: true, force: true });
  try {
    const { args, files } = await protoFiles();
    let generator: string;
    if (existsSync(GRPC_PYTHON_PLUGIN)) {
      await run(PROTOC, [...args, `--plugin=protoc-gen-grpc_python=${GRPC_PYTHON_PLUGIN}`, `--python_out=${dir}`, `--grpc_python_out=${dir}`, ...files]);
      generator = `${(await run(PROTOC, ['--version'])).stdout.trim()} + grpc_python_plugin`;
    } else {
      await run(SYSTEM_PYTHON, ['-m', 'grpc_tools.protoc', ...args, `--python_out=${dir}`, `--grpc_python_out=${dir}`, ...files]);
      generator = 'python3 -m grpc_tools.protoc';
    }
    return { dir, python: SYSTEM_PYTHON, generator, cleanup };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** Runs a Python script with the stubs importable; resolves to its stdout. */
export async function runPython(stubs: PythonStubs, script: string, args: string[], timeoutMs = 120_000): Promise<string> {
  const { stdout } = await run(stubs.python, [script, ...args], {
    env: { PATH: '/usr/bin:/bin', PYTHONPATH: stubs.dir, PYTHONDONTWRITEBYTECODE: '1', LANG: 'C.UTF-8' },
    timeout: timeoutMs,
    maxBuffer: 16 * 1024 * 1024,
  });
  return stdout;
}
