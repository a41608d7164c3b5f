import { Code, ConnectError, type ConnectRouter, type HandlerContext } from '@connectrpc/connect';
import { create, toBinary, type DescFile } from '@bufbuild/protobuf';
import { nestedTypes } from '@bufbuild/protobuf/reflect';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { Health, HealthCheckResponse_ServingStatus as Status, type HealthCheckRequest } from '../../gen/grpc/health/v1/health_pb.js';
import * as reflectionV1 from '../../gen/grpc/reflection/v1/reflection_pb.js';
import * as reflectionV1alpha from '../../gen/grpc/reflection/v1alpha/reflection_pb.js';
import { WatchRefused, type HealthMonitor } from '../services/health.js';
import { clientAddressKey } from '../services/context.js';

// gRPC's standard introspection services on the same port as everything else (docs/grpc.md):
// grpc.health.v1.Health for Kubernetes grpc probes, grpc-health-probe, Envoy and meshes, and
// server reflection (grpc.reflection.v1 and v1alpha) for grpcurl, `buf curl`, Postman and other
// clients that have no copy of proto/. Both read what the router actually serves, so a service
// added to the router is listed, health-checked and described without touching this file.

/** Every fully-qualified service name the router serves (in registration order). */
function servedServices(router: ConnectRouter): string[] {
  return [...new Set(router.handlers.map((h) => h.service.typeName))];
}

function servingStatus(s: 'SERVING' | 'NOT_SERVING'): Status {
  return s === 'SERVING' ? Status.SERVING : Status.NOT_SERVING;
}

export function registerHealth(router: ConnectRouter, monitor: HealthMonitor): void {
  let known: Set<string> | null = null;
  const knows = (service: string) => {
    known ??= new Set(['', ...servedServices(router)]);
    return known.has(service);
  };
  router.service(Health, {
    async check(req: HealthCheckRequest) {
      if (!knows(req.service)) throw new ConnectError(`unknown service ${JSON.stringify(req.service).slice(0, 300)}`, Code.NotFound);
      return { status: servingStatus(await monitor.check()) };
    },
    async list() {
      const status = servingStatus(await monitor.check());
      const statuses: Record<string, { status: Status }> = {};
      for (const name of ['', ...servedServices(router)]) statuses[name] = { status };
      return { statuses };
    },
    async *watch(req: HealthCheckRequest, ctx: HandlerContext) {
      // Every service here shares the process's fate: one status for all of them. Every stream,
      // an unknown service's too, is one of the monitor's bounded Watch streams: admitted (or
      // RESOURCE_EXHAUSTED) before anything is sent, and ended cleanly after its longest time.
      const unknown = !knows(req.service);
      const statuses = monitor.watch(ctx.signal, { client: ctx.values.get(clientAddressKey) });
      try {
        let first: IteratorResult<'SERVING' | 'NOT_SERVING'>;
        try {
          first = await statuses.next();
        } catch (err) {
          if (err instanceof WatchRefused) throw new ConnectError(err.message, Code.ResourceExhausted, { 'retry-after': '5' });
          throw err;
        }
        if (unknown) yield { status: Status.SERVICE_UNKNOWN };
        else if (!first.done) yield { status: servingStatus(first.value) };
        for await (const s of statuses) {
          if (!unknown) yield { status: servingStatus(s) };
        }
      } finally {
        // Also when the stream is closed while it waits to send: the monitor's count goes down.
        await statuses.return(undefined);
      }
    },
  });
}

/** Index of every file the router's services need: by name, and by each symbol they define. */
interface DescriptorIndex {
  files: Map<string, DescFile>;
  symbols: Map<string, DescFile>;
  /** Extensions by extendee type name, then field number. */
  extensions: Map<string, Map<number, DescFile>>;
}

function indexDescriptors(router: ConnectRouter): DescriptorIndex {
  const files = new Map<string, DescFile>();
  const visit = (f: DescFile) => {
    if (files.has(f.proto.name)) return;
    files.set(f.proto.name, f);
    for (const dep of f.dependencies) visit(dep);
  };
  for (const h of router.handlers) visit(h.service.file);
  const symbols = new Map<string, DescFile>();
  const extensions = new Map<string, Map<number, DescFile>>();
  for (const f of files.values()) {
    if (f.proto.package) {
      // Every prefix of the package names the file too (grpcurl asks for packages sometimes).
      symbols.set(f.proto.package, symbols.get(f.proto.package) ?? f);
    }
    for (const t of nestedTypes(f)) {
      symbols.set(t.typeName, f);
      switch (t.kind) {
        case 'message':
          for (const field of t.fields) symbols.set(`${t.typeName}.${field.name}`, f);
          for (const o of t.oneofs) symbols.set(`${t.typeName}.${o.name}`, f);
          break;
        case 'enum':
          for (const v of t.values) symbols.set(`${t.typeName.slice(0, Math.max(0, t.typeName.lastIndexOf('.')))}.${v.name}`.replace(/^\./, ''), f);
          break;
        case 'service':
          for (const m of t.methods) symbols.set(`${t.typeName}.${m.name}`, f);
          break;
        case 'extension': {
          const byNumber = extensions.get(t.extendee.typeName) ?? new Map<number, DescFile>();
          byNumber.set(t.number, f);
          extensions.set(t.extendee.typeName, byNumber);
          break;
        }
      }
    }
  }
  return { files, symbols, extensions };
}

/** The protocol's response, as an init shape common to v1 and v1alpha (same fields and numbers). */
type ReflectionAnswer =
  | { case: 'fileDescriptorResponse'; value: { fileDescriptorProto: Uint8Array[] } }
  | { case: 'allExtensionNumbersResponse'; value: { baseTypeName: string; extensionNumber: number[] } }
  | { case: 'listServicesResponse'; value: { service: { name: string }[] } }
  | { case: 'errorResponse'; value: { errorCode: number; errorMessage: string } };

type ReflectionQuestion = reflectionV1.ServerReflectionRequest['messageRequest'] | reflectionV1alpha.ServerReflectionRequest['messageRequest'];

const MAX_NAME = 1024;

function notFound(what: string): ReflectionAnswer {
  return { case: 'errorResponse', value: { errorCode: Code.NotFound, errorMessage: `${what} not found`.slice(0, MAX_NAME + 64) } };
}

/** Answers one reflection request; `sent` holds the files already sent on this stream (each file goes once, as grpc-go does). */
function answer(router: ConnectRouter, index: () => DescriptorIndex, q: ReflectionQuestion, sent: Set<string>): ReflectionAnswer {
  const filesFrom = (f: DescFile): ReflectionAnswer => {
    // The file asked for always, then those of its transitive imports not yet sent on this stream.
    const out: Uint8Array[] = [toBinary(FileDescriptorProtoSchema, f.proto)];
    sent.add(f.proto.name);
    const walk = (d: DescFile) => {
      for (const dep of d.dependencies) {
        if (sent.has(dep.proto.name)) continue;
        sent.add(dep.proto.name);
        out.push(toBinary(FileDescriptorProtoSchema, dep.proto));
        walk(dep);
      }
    };
    walk(f);
    return { case: 'fileDescriptorResponse', value: { fileDescriptorProto: out } };
  };
  switch (q.case) {
    case 'listServices':
      return { case: 'listServicesResponse', value: { service: servedServices(router).map((name) => ({ name })) } };
    case 'fileByFilename': {
      const f = index().files.get(q.value);
      return f ? filesFrom(f) : notFound(`file ${JSON.stringify(q.value.slice(0, MAX_NAME))}`);
    }
    case 'fileContainingSymbol': {
      const f = index().symbols.get(q.value.replace(/^\./, ''));
      return f ? filesFrom(f) : notFound(`symbol ${JSON.stringify(q.value.slice(0, MAX_NAME))}`);
    }
    case 'fileContainingExtension': {
      const f = index().extensions.get(q.value.containingType.replace(/^\./, ''))?.get(q.value.extensionNumber);
      return f ? filesFrom(f) : notFound(`extension ${q.value.extensionNumber} of ${JSON.stringify(q.value.containingType.slice(0, MAX_NAME))}`);
    }
    case 'allExtensionNumbersOfType': {
      const name = q.value.replace(/^\./, '');
      const idx = index();
      // A message we describe with no extensions answers an empty list; an unknown type is NOT_FOUND.
      if (!idx.symbols.has(name)) return notFound(`type ${JSON.stringify(q.value.slice(0, MAX_NAME))}`);
      return { case: 'allExtensionNumbersResponse', value: { baseTypeName: name, extensionNumber: [...(idx.extensions.get(name)?.keys() ?? [])].sort((a, b) => a - b) } };
    }
    default:
      return { case: 'errorResponse', value: { errorCode: Code.InvalidArgument, errorMessage: 'the request names no question (file_by_filename, file_containing_symbol, list_services ...)' } };
  }
}

export function registerReflection(router: ConnectRouter): void {
  let cached: DescriptorIndex | null = null;
  // Built on first use, when every service has been registered.
  const index = () => (cached ??= indexDescriptors(router));
  router.service(reflectionV1.ServerReflection, {
    async *serverReflectionInfo(requests) {
      const sent = new Set<string>();
      for await (const req of requests) {
        const messageResponse = answer(router, index, req.messageRequest, sent);
        yield create(reflectionV1.ServerReflectionResponseSchema, { validHost: req.host, originalRequest: req, messageResponse });
      }
    },
  });
  router.service(reflectionV1alpha.ServerReflection, {
    async *serverReflectionInfo(requests) {
      const sent = new Set<string>();
      for await (const req of requests) {
        const messageResponse = answer(router, index, req.messageRequest, sent);
        yield create(reflectionV1alpha.ServerReflectionResponseSchema, { validHost: req.host, originalRequest: req, messageResponse });
      }
    },
  });
}
