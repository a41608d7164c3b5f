import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { IstioOperator } from '@kubernetes-models/istio/install.istio.io/v1alpha1/IstioOperator';
import { AuthorizationPolicy } from '@kubernetes-models/istio/security.istio.io/v1/AuthorizationPolicy';
import { EnvoyFilter } from '@kubernetes-models/istio/networking.istio.io/v1alpha3/EnvoyFilter';
import { UPSTREAM_HEADERS } from '../src/domain/gate.js';
import { canonicalServerUrl } from '../src/domain/server-identity.js';

// The gateway examples beside docs/gateway.md (docs/gateway/*.yaml) and the YAML in
// docs/gateway.md itself: every ext_authz configuration forwards Mcp-Method and Mcp-Name (so the
// gate can decide per tool) and never an upstream header a client could forge.

const DOCS = join(import.meta.dirname, '..', 'docs');
const EXT_AUTHZ = 'type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz';
const MCP_HEADERS = ['mcp-method', 'mcp-name'];

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Node = any;

/** Every object in a parsed document satisfying `pred` (depth first). */
function findAll(node: Node, pred: (n: Node) => boolean, out: Node[] = []): Node[] {
  if (Array.isArray(node)) for (const x of node) findAll(x, pred, out);
  else if (node && typeof node === 'object') {
    if (pred(node)) out.push(node);
    for (const v of Object.values(node)) findAll(v, pred, out);
  }
  return out;
}

/** The header names an ExtAuthz filter lets through to the check (exact matchers, lower-case). */
function allowedHeaders(filter: Node): string[] {
  const patterns = (filter.allowed_headers?.patterns ?? []) as Node[];
  for (const p of patterns) expect(Object.keys(p).filter((k) => k !== 'ignore_case'), JSON.stringify(p)).toEqual(['exact']);
  return patterns.map((p) => String(p.exact).toLowerCase());
}

function expectMcpHeadersOnly(names: string[], where: string) {
  for (const h of MCP_HEADERS) expect(names, `${where} forwards ${h}`).toContain(h);
  for (const h of UPSTREAM_HEADERS) expect(names, `${where} must not forward ${h}`).not.toContain(h);
}

function envoyExample(file: string) {
  const doc = parse(readFileSync(join(DOCS, 'gateway', file), 'utf8')) as Node;
  const filters = findAll(doc, (n) => n['@type'] === EXT_AUTHZ);
  expect(filters, file).toHaveLength(1);
  const clusters = new Set((doc.static_resources.clusters as Node[]).map((c) => c.name));
  // Every cluster a route or the filter names is defined.
  for (const r of findAll(doc, (n) => typeof n.cluster === 'string')) expect(clusters, file).toContain(r.cluster);
  for (const r of findAll(doc, (n) => typeof n.cluster_name === 'string' && n.envoy_grpc === undefined)) expect(clusters, file).toContain(r.cluster_name);
  return { doc, filter: filters[0], clusters: doc.static_resources.clusters as Node[] };
}

describe('docs/gateway/*.yaml: Envoy and Istio ext_authz examples', () => {
  it('Envoy HTTP ext_authz: /v1/gate, the upstream set by Envoy, Mcp-Method and Mcp-Name in allowed_headers', () => {
    const { filter } = envoyExample('envoy-http-ext-authz.yaml');
    expectMcpHeadersOnly(allowedHeaders(filter), 'envoy-http-ext-authz.yaml');
    expect(filter.failure_mode_allow).toBe(false);
    expect(filter.http_service.path_prefix).toBe('/v1/gate');
    const added = filter.http_service.authorization_request.headers_to_add as Node[];
    expect(added.map((h) => h.key)).toEqual(['x-mcp-server']);
    expect(() => canonicalServerUrl(added[0].value)).not.toThrow();
    for (const k of ['allowed_upstream_headers', 'allowed_client_headers', 'allowed_client_headers_on_success']) {
      const names = (filter.http_service.authorization_response[k].patterns as Node[]).map((p) => p.exact);
      expect(names, k).toEqual(expect.arrayContaining(['x-trust-verdict', 'x-trust-score', 'x-trust-receipt']));
    }
  });

  it('Envoy gRPC ext_authz: HTTP/2 to the observatory, the upstream in a context extension, Mcp-Method and Mcp-Name in allowed_headers', () => {
    const { doc, filter, clusters } = envoyExample('envoy-grpc-ext-authz.yaml');
    expectMcpHeadersOnly(allowedHeaders(filter), 'envoy-grpc-ext-authz.yaml');
    expect(filter.failure_mode_allow).toBe(false);
    const observatory = clusters.find((c) => c.name === filter.grpc_service.envoy_grpc.cluster_name);
    expect(JSON.stringify(observatory.typed_extension_protocol_options)).toContain('http2_protocol_options');
    expect(observatory.health_checks[0].grpc_health_check).toBeDefined();
    const ext = findAll(doc, (n) => n.context_extensions !== undefined);
    expect(ext.length).toBeGreaterThan(0);
    for (const e of ext) expect(() => canonicalServerUrl(e.context_extensions.mcp_server)).not.toThrow();
  });

  it('Istio: valid custom resources; the HTTP provider includes Mcp-Method and Mcp-Name; the policy names a provider', () => {
    const docs = parseAllDocuments(readFileSync(join(DOCS, 'gateway', 'istio-ext-authz.yaml'), 'utf8')).map((d) => {
      expect(d.errors).toEqual([]);
      return d.toJS() as Node;
    });
    const byKind = new Map(docs.map((d) => [d.kind, d]));
    expect([...byKind.keys()].sort()).toEqual(['AuthorizationPolicy', 'EnvoyFilter', 'IstioOperator']);
    new IstioOperator(byKind.get('IstioOperator')).validate();
    new AuthorizationPolicy(byKind.get('AuthorizationPolicy')).validate();
    new EnvoyFilter(byKind.get('EnvoyFilter')).validate();
    // The validator is not a rubber stamp.
    expect(() => new AuthorizationPolicy({ ...byKind.get('AuthorizationPolicy'), spec: { action: 'ALLOW_ALL' } }).validate()).toThrow(/action/);

    const providers = byKind.get('IstioOperator').spec.meshConfig.extensionProviders as Node[];
    const http = providers.find((p) => p.envoyExtAuthzHttp)!.envoyExtAuthzHttp;
    expectMcpHeadersOnly((http.includeRequestHeadersInCheck as string[]).map((h) => h.toLowerCase()), 'envoyExtAuthzHttp');
    expect(http.pathPrefix).toBe('/v1/gate');
    const grpc = providers.find((p) => p.envoyExtAuthzGrpc)!;
    const policy = byKind.get('AuthorizationPolicy');
    expect(policy.spec).toMatchObject({ action: 'CUSTOM', provider: { name: grpc.name } });
    const filter = byKind.get('EnvoyFilter');
    expect(filter.spec.workloadSelector.labels).toEqual(policy.spec.selector.matchLabels);
    expect(filter.metadata.namespace).toBe(policy.metadata.namespace);
    const ext = findAll(filter, (n) => n.context_extensions !== undefined);
    expect(() => canonicalServerUrl(ext[0].context_extensions.mcp_server)).not.toThrow();
  });

  it('the Envoy configurations in docs/gateway.md forward Mcp-Method and Mcp-Name too', () => {
    const md = readFileSync(join(DOCS, 'gateway.md'), 'utf8');
    const blocks = [...md.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!);
    const filters = blocks.flatMap((b) => parseAllDocuments(b).flatMap((d) => findAll(d.toJS(), (n) => n['@type'] === EXT_AUTHZ)));
    expect(filters.length).toBeGreaterThanOrEqual(2);
    for (const f of filters) expectMcpHeadersOnly(allowedHeaders(f), 'docs/gateway.md');
    expect(md).toContain('includeRequestHeadersInCheck');
    for (const file of ['envoy-http-ext-authz.yaml', 'envoy-grpc-ext-authz.yaml', 'istio-ext-authz.yaml']) expect(md).toContain(`gateway/${file}`);
  });
});
