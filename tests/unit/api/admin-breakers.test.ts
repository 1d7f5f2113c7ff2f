import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { auditCapture } from '../../support/audit-capture.js';
import { fakeBreakerAdmin } from '../../support/breaker-admin-fakes.js';
import { adminApp } from './admin-app.js';
import { ADMIN, expectProblem, KEY_A } from './run-status-app.js';

let app: FastifyInstance | undefined;
let breakers: ReturnType<typeof fakeBreakerAdmin>;
let audit: Record<string, any>[];

/** The whole API server with the breakers in memory. */
function server(): FastifyInstance {
  const trail = auditCapture();
  audit = trail.entries;
  breakers = fakeBreakerAdmin();
  app = adminApp({ limits: { overrides: async () => new Map(), set: async () => undefined }, breakers: breakers.deps, audit: trail.logger });
  return app;
}

afterEach(async () => {
  await app?.close();
  app = undefined;
});

const force = (a: FastifyInstance, dependency: string, body: unknown, auth: string | null = ADMIN): Promise<LightMyRequestResponse> =>
  a.inject({ method: 'PUT', url: `/v1/admin/breakers/${dependency}/force`, headers: { 'content-type': 'application/json', ...(auth ? { authorization: auth } : {}) }, payload: JSON.stringify(body) });
const clear = (a: FastifyInstance, dependency: string, auth: string | null = ADMIN) => a.inject({ method: 'DELETE', url: `/v1/admin/breakers/${dependency}/force`, headers: auth ? { authorization: auth } : {} });
const list = (a: FastifyInstance, auth: string | null = ADMIN) => a.inject({ method: 'GET', url: '/v1/admin/breakers', headers: auth ? { authorization: auth } : {} });

describe('/v1/admin/breakers', () => {
  it('forces a breaker for the asked time, reports it, and clears it; each change audited', async () => {
    const a = server();
    const res = await force(a, 'anthropic', { mode: 'open', durationSec: 300 });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ dependency: 'anthropic', forced: { mode: 'open', until: breakers.state.now + 300_000 } });
    const listed = await list(a);
    expect(listed.json()).toMatchObject({ breakers: [{ dependency: 'anthropic', state: 'closed', forced: { mode: 'open', until: breakers.state.now + 300_000 }, window: { calls: 0 } }] });
    expect((await clear(a, 'anthropic')).json()).toEqual({ dependency: 'anthropic', forced: null });
    expect(breakers.forces.size).toBe(0);
    expect(audit).toEqual([
      expect.objectContaining({ action: 'breaker.force', outcome: 'done', principal: 'admin', dependency: 'anthropic', mode: 'open', durationSec: 300, status: 200 }),
      expect.objectContaining({ action: 'breaker.clear', outcome: 'done', principal: 'admin', dependency: 'anthropic', status: 200 }),
    ]);
  });

  it('needs a duration of 1 s to an hour and a mode of open or closed: a drill ends by itself', async () => {
    const a = server();
    for (const body of [{ mode: 'open' }, { mode: 'open', durationSec: 0 }, { mode: 'open', durationSec: 3_601 }, { mode: 'open', durationSec: 1.5 }, { mode: 'half_open', durationSec: 60 }, { durationSec: 60 }, { mode: 'closed', durationSec: 60, extra: 1 }]) {
      expectProblem(await force(a, 'anthropic', body), 400, 'invalid_request');
    }
    expect(breakers.forces.size).toBe(0);
    expect((await force(a, 'anthropic', { mode: 'closed', durationSec: 3_600 })).statusCode).toBe(200);
  });

  it('is 404 for a dependency not configured, audited as refused', async () => {
    const a = server();
    expectProblem(await force(a, 'nobody', { mode: 'open', durationSec: 60 }), 404, 'not_found');
    expectProblem(await clear(a, 'constructor'), 404, 'not_found');
    expect(audit.map((e) => [e.action, e.outcome, e.status])).toEqual([
      ['breaker.force', 'refused', 404],
      ['breaker.clear', 'refused', 404],
    ]);
  });

  it('is 401 without a key and 403 for a tenant key, changing nothing; each refused change audited with who asked', async () => {
    const a = server();
    expectProblem(await force(a, 'anthropic', { mode: 'open', durationSec: 60 }, null), 401, 'unauthorized');
    expectProblem(await force(a, 'anthropic', { mode: 'open', durationSec: 60 }, KEY_A), 403, 'forbidden');
    expectProblem(await clear(a, 'anthropic', KEY_A), 403, 'forbidden');
    expectProblem(await list(a, KEY_A), 403, 'forbidden');
    expect(breakers.forces.size).toBe(0);
    expect(audit.map((e) => [e.action, e.outcome, e.status, e.principal, e.dependency])).toEqual([
      ['breaker.force', 'refused', 401, null, 'anthropic'],
      ['breaker.force', 'refused', 403, 'tenant:tenant-a', 'anthropic'],
      ['breaker.clear', 'refused', 403, 'tenant:tenant-a', 'anthropic'],
    ]);
  });

  it('is 503 dependency_unavailable, retryable, when Redis cannot be reached', async () => {
    const a = server();
    breakers.state.down = true;
    expectProblem(await force(a, 'anthropic', { mode: 'open', durationSec: 60 }), 503, 'dependency_unavailable');
    expectProblem(await list(a), 503, 'dependency_unavailable');
    expect(audit.at(-1)).toMatchObject({ action: 'breaker.force', outcome: 'failed', status: 503 });
  });
});
