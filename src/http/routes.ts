import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.js';
import type { Db } from '../db/index.js';
import type { Services } from '../services/index.js';
import { systemRoutes } from './routes/system.js';
import { telemetryRoutes } from './routes/telemetry.js';
import { otlpRoutes } from './routes/otlp.js';
import { trustRoutes } from './routes/trust.js';
import { pendingRoutes } from './routes/pending.js';
import { gateRoutes } from './routes/gate.js';
import { bundleRoutes } from './routes/bundle.js';
import { accessRoutes } from './routes/access.js';
import { preflightRoutes } from './routes/preflight.js';
import { receiptRoutes } from './routes/receipts.js';
import { wellKnownRoutes } from './routes/well-known.js';
import { discoveryRoutes } from './routes/discovery.js';
import { mcpRoutes } from '../agents/mcp.js';
import { a2aRoutes } from '../agents/a2a.js';
import { probeRoutes } from './routes/probes.js';
import { complianceRoutes } from './routes/compliance.js';
import { pageRoutes } from '../pages/routes.js';

export interface RouteDeps {
  services: Services;
  db: Db;
  config: Config;
  /** The service clock (what the services and their periodic jobs read). */
  now: () => Date;
}

/** Every REST path of SPEC.md section 4, the well-known documents and the operational probes. */
export function registerRestRoutes(app: FastifyInstance, deps: RouteDeps) {
  systemRoutes(app, deps);
  telemetryRoutes(app, deps);
  otlpRoutes(app, deps);
  trustRoutes(app, deps);
  wellKnownRoutes(app, deps);
  discoveryRoutes(app, deps);
  mcpRoutes(app, deps);
  a2aRoutes(app, deps);
  accessRoutes(app, deps);
  preflightRoutes(app, deps);
  receiptRoutes(app, deps);
  gateRoutes(app, deps);
  bundleRoutes(app, deps);
  probeRoutes(app, deps);
  complianceRoutes(app, deps);
  pageRoutes(app, deps);
  pendingRoutes(app, deps);
}
