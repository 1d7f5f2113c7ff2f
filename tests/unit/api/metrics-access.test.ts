import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { registerHealthRoutes } from '../../../src/api/routes/health.js';
import { loadConfig } from '../../../src/config/load.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { sha256Hex } from '../../../src/util/sha256-hex.js';
import { fakeBreakerAdmin } from '../../support/breaker-admin-fakes.js';
import { adminApp } from './admin-app.js';
import { ADMIN, expectProblem, KEY_A } from './run-status-app.js';

const SCRAPER = 'Bearer a-scraper-key';
let app: FastifyInstance | undefined;

/** The whole API server, with a scraper's key configured. */
function server(): FastifyInstance {
  const config = loadConfig({ env: {} });
  app = adminApp({ config: { ...config, api: { ...config.api, metricsKeySha256: sha256Hex('a-scraper-key') } }, limits: { overrides: async () => new Map(), set: async () => undefined }, breakers: fakeBreakerAdmin().deps });
  return app;
}

afterEach(async () => {
  await app?.close();
  app = undefined;
});

const get = (a: FastifyInstance, url: string, authorization?: string) => a.inject({ method: 'GET', url, headers: authorization ? { authorization } : {} });

describe("the API port's /metrics", () => {
  it("answers only the admin's key and the scraper's: 401 without a key, 403 for a tenant's", async () => {
    const a = server();
    expectProblem(await get(a, '/metrics'), 401, 'unauthorized');
    expectProblem(await get(a, '/metrics', KEY_A), 403, 'forbidden');
    for (const key of [ADMIN, SCRAPER]) {
      const res = await get(a, '/metrics', key);
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toContain('text/plain');
      expect(res.body).toContain('sluice_http_requests_total');
    }
    // Health stays open to probes.
    expect((await get(a, '/healthz')).statusCode).toBe(200);
  });

  it("opens nothing else to the scraper's key", async () => {
    const a = server();
    expectProblem(await get(a, '/v1/admin/limits', SCRAPER), 403, 'forbidden');
    expectProblem(await get(a, '/v1/runs/0190f5a2-7c00-7abc-8def-0123456789ab', SCRAPER), 403, 'forbidden');
    expectProblem(await a.inject({ method: 'POST', url: '/v1/runs', headers: { authorization: SCRAPER, 'content-type': 'application/json' }, payload: { workflow: 'support-reply', input: {} } }), 403, 'forbidden');
  });
});

describe("the ops port's /metrics", () => {
  it('needs no credentials', async () => {
    app = Fastify();
    registerHealthRoutes(app, { readiness: [], metrics: createMetrics() });
    expect((await get(app, '/metrics')).statusCode).toBe(200);
  });
});
