import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import { KeyDirectory } from '../../../src/api/auth.js';
import { registerCancelRunRoute } from '../../../src/api/routes/cancel-run.js';
import { registerRunEventRoutes, type RunEventRouteDeps } from '../../../src/api/routes/run-events.js';
import { loadConfig } from '../../../src/config/load.js';
import type { Metrics } from '../../../src/obs/metrics.js';
import type { RunEventView, RunView } from '../../../src/status/run-store.js';
import type { FakeRunStatus } from '../../support/run-status-fakes.js';

export const KEY_A = 'Bearer local-key-a';
export const KEY_B = 'Bearer local-key-b';
export const ADMIN = 'Bearer local-admin-key';
export const RUN_ID = '0190f5a2-7c00-7abc-8def-0123456789ab';
export const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);

const keys = new KeyDirectory(loadConfig({ env: {} }));

/**
 * The status routes on a bare Fastify app with the API's authentication rule, so they are tested
 * without the submit path's dependencies (server.ts wiring is covered by the integration tests).
 */
export function statusApp(fake: FakeRunStatus, opts: Partial<Pick<RunEventRouteDeps, 'heartbeatMs' | 'pollMs' | 'now'>> = {}): { app: FastifyInstance; metrics: Metrics } {
  const app = Fastify();
  const { metrics, reads } = fake;
  app.addHook('onRequest', async (req, reply) => {
    const principal = keys.authenticate(req.headers.authorization);
    if (!principal) return reply.code(401).send();
    req.principal = principal;
  });
  registerRunEventRoutes(app, { ...fake.deps, reads, metrics, heartbeatMs: 60_000, pollMs: 60_000, now: () => NOW, ...opts });
  registerCancelRunRoute(app, { ...fake.deps, reads });
  return { app, metrics };
}

export function runView(status: RunView['status'], overrides: Partial<RunView> = {}): RunView {
  return {
    runId: RUN_ID,
    workflow: 'support-reply',
    class: 'interactive',
    status,
    statusMessage: status,
    admittedAt: new Date(NOW - 1_000).toISOString(),
    deadline: new Date(NOW + 29_000).toISOString(),
    attempts: 1,
    ...overrides,
  };
}

export function event(sequence: number, status: RunEventView['status'], extra: Partial<RunEventView> = {}): RunEventView {
  return { runId: RUN_ID, sequence, status, message: `${status} ${sequence}`, step: null, attempt: sequence === 0 ? 0 : 1, occurredAt: new Date(NOW + sequence).toISOString(), ...extra };
}

export function expectProblem(res: LightMyRequestResponse, status: number, code: string) {
  expect(res.statusCode).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
  const body = res.json();
  expect(body).toMatchObject({ status, code });
  return body as Record<string, unknown>;
}
