import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { adminApp } from './admin-app.js';
import { ADMIN, expectProblem, KEY_A } from './run-status-app.js';
import { auditCapture } from '../../support/audit-capture.js';
import { fakeBreakerAdmin } from '../../support/breaker-admin-fakes.js';

/** The limits hash in memory; `down` makes every call fail as an unreachable Redis would. */
function fakeLimits() {
  const fields = new Map<string, number>();
  const state = { down: false };
  const check = () => {
    if (state.down) throw new Error('connect ECONNREFUSED');
  };
  return {
    fields,
    state,
    overrides: async () => {
      check();
      return new Map(fields);
    },
    set: async (field: string, limit: number) => {
      check();
      fields.set(field, limit);
    },
  };
}

let app: FastifyInstance | undefined;
let limits: ReturnType<typeof fakeLimits>;
let audit: ReturnType<typeof auditCapture>;

/** The whole API server with only the limits store real enough to matter. */
function server(): FastifyInstance {
  limits = fakeLimits();
  audit = auditCapture();
  app = adminApp({ limits, breakers: fakeBreakerAdmin().deps, audit: audit.logger });
  return app;
}

afterEach(async () => {
  await app?.close();
  app = undefined;
});

const get = (auth?: string) => server().inject({ method: 'GET', url: '/v1/admin/limits', headers: auth ? { authorization: auth } : {} });
const put = (body: unknown, auth: string | null = ADMIN, a: FastifyInstance = server()): Promise<LightMyRequestResponse> =>
  a.inject({ method: 'PUT', url: '/v1/admin/limits', headers: { 'content-type': 'application/json', ...(auth ? { authorization: auth } : {}) }, payload: JSON.stringify(body) });

describe('GET /v1/admin/limits', () => {
  it('answers every configured scope with its limit in force, its config default and its override', async () => {
    const a = server();
    limits.fields.set('tenant:tenant-b', 2);
    limits.fields.set('global', 10);
    const res = await a.inject({ method: 'GET', url: '/v1/admin/limits', headers: { authorization: ADMIN } });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      limits: [
        { scope: 'global', limit: 10, default: 64, override: 10 },
        { scope: 'tenant', name: 'tenant-a', limit: 16, default: 16, override: null },
        { scope: 'tenant', name: 'tenant-b', limit: 2, default: 16, override: 2 },
        { scope: 'tenant', name: 'tenant-c', limit: 16, default: 16, override: null },
        { scope: 'workflow', name: 'support-agent', limit: 32, default: 32, override: null },
        { scope: 'workflow', name: 'support-reply', limit: 32, default: 32, override: null },
        { scope: 'workflow', name: 'report-digest', limit: 32, default: 32, override: null },
        { scope: 'dependency', name: 'anthropic', limit: 16, default: 16, override: null },
        { scope: 'dependency', name: 'order-lookup', limit: 8, default: 8, override: null },
        { scope: 'dependency', name: 'kb-search', limit: 8, default: 8, override: null },
        { scope: 'dependency', name: 'report', limit: 4, default: 4, override: null },
        { scope: 'dependency', name: 'notify', limit: 8, default: 8, override: null },
      ],
      // the batch share follows the global limit in force: floor(10 × 0.8)
      batch: { share: 0.8, limit: 8 },
    });
  });

  it('ignores overrides for names config no longer has', async () => {
    const a = server();
    limits.fields.set('tenant:gone', 1);
    const res = await a.inject({ method: 'GET', url: '/v1/admin/limits', headers: { authorization: ADMIN } });
    expect(JSON.stringify(res.json())).not.toContain('gone');
  });

  it('is 401 without a key and 403 for a tenant key', async () => {
    expect((await get()).statusCode).toBe(401);
    expectProblem(await get('Bearer not-a-key'), 401, 'unauthorized');
    expectProblem(await get(KEY_A), 403, 'forbidden');
  });

  it('is 503 dependency_unavailable, retryable, when Redis cannot be read', async () => {
    const a = server();
    limits.state.down = true;
    const res = await a.inject({ method: 'GET', url: '/v1/admin/limits', headers: { authorization: ADMIN } });
    expect(expectProblem(res, 503, 'dependency_unavailable')).toMatchObject({ retryable: true, retryAfterSec: 1 });
    expect(res.headers['retry-after']).toBe('1');
  });
});

describe('PUT /v1/admin/limits', () => {
  it('sets the global limit and answers the scope as it now is', async () => {
    const a = server();
    const res = await put({ scope: 'global', limit: 20 }, ADMIN, a);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ scope: 'global', limit: 20, default: 64, override: 20 });
    expect(limits.fields).toEqual(new Map([['global', 20]]));
  });

  it('sets a tenant, workflow or dependency limit under the scope name the acquisitions read', async () => {
    const a = server();
    expect((await put({ scope: 'tenant', name: 'tenant-a', limit: 3 }, ADMIN, a)).json()).toEqual({ scope: 'tenant', name: 'tenant-a', limit: 3, default: 16, override: 3 });
    expect((await put({ scope: 'workflow', name: 'report-digest', limit: 5 }, ADMIN, a)).statusCode).toBe(200);
    expect((await put({ scope: 'dependency', name: 'anthropic', limit: 0 }, ADMIN, a)).json()).toEqual({ scope: 'dependency', name: 'anthropic', limit: 0, default: 16, override: 0 });
    expect(limits.fields).toEqual(new Map([['tenant:tenant-a', 3], ['workflow:report-digest', 5], ['dependency:anthropic', 0]]));
    const view = await a.inject({ method: 'GET', url: '/v1/admin/limits', headers: { authorization: ADMIN } });
    expect(view.json().limits).toContainEqual({ scope: 'workflow', name: 'report-digest', limit: 5, default: 32, override: 5 });
  });

  it('requires a name for every scope but global, and refuses one for global', async () => {
    const missing = expectProblem(await put({ scope: 'tenant', limit: 3 }), 400, 'invalid_request');
    expect(missing.errors).toEqual([{ path: '/name', message: 'is required for the tenant scope' }]);
    const extra = expectProblem(await put({ scope: 'global', name: 'x', limit: 3 }), 400, 'invalid_request');
    expect(extra.errors).toEqual([{ path: '/name', message: 'must be absent for the global scope' }]);
    expect(limits.fields.size).toBe(0);
  });

  it('refuses a name config does not have, including inherited object members', async () => {
    for (const [scope, name] of [['tenant', 'nobody'], ['workflow', 'constructor'], ['dependency', 'tenant-a']] as const) {
      const body = expectProblem(await put({ scope, name, limit: 3 }), 400, 'invalid_request');
      expect(body.errors).toEqual([{ path: '/name', message: `must be a configured ${scope}; "${name}" is not` }]);
    }
    expect(limits.fields.size).toBe(0);
  });

  it('accepts only an integer limit from 0 to 1,000,000, a known scope and no other fields', async () => {
    const bad: Array<[unknown, string]> = [
      [{ scope: 'global', limit: -1 }, '/limit'],
      [{ scope: 'global', limit: 1.5 }, '/limit'],
      [{ scope: 'global', limit: '3' }, '/limit'],
      [{ scope: 'global', limit: 1_000_001 }, '/limit'],
      [{ scope: 'global' }, '/limit'],
      [{ scope: 'class', name: 'batch', limit: 3 }, '/scope'],
      [{ limit: 3 }, '/scope'],
      [{ scope: 'global', limit: 3, force: true }, '/force'],
      [{ scope: 'tenant', name: '', limit: 3 }, '/name'],
    ];
    for (const [body, path] of bad) {
      const problem = expectProblem(await put(body), 400, 'invalid_request');
      expect((problem.errors as Array<{ path: string }>).map((e) => e.path), JSON.stringify(body)).toContain(path);
    }
    expect((await put({ scope: 'global', limit: 1_000_000 })).statusCode).toBe(200);
  });

  it('is 401 without a key and 403 for a tenant key, whatever the body', async () => {
    const a = server();
    expect((await put({ scope: 'global', limit: 3 }, null, a)).statusCode).toBe(401);
    expectProblem(await put({ scope: 'global', limit: 3 }, KEY_A, a), 403, 'forbidden');
    expectProblem(await put({ scope: 'nonsense' }, KEY_A, a), 403, 'forbidden');
    expect(limits.fields.size).toBe(0);
  });

  it('is 503 dependency_unavailable, retryable, when Redis cannot be written', async () => {
    const a = server();
    limits.state.down = true;
    const res = await put({ scope: 'global', limit: 3 }, ADMIN, a);
    expect(expectProblem(res, 503, 'dependency_unavailable')).toMatchObject({ retryable: true, retryAfterSec: 1 });
  });

  it('writes one audit line per change asked for, done, refused or failed, on the audit stream', async () => {
    const a = server();
    await put({ scope: 'tenant', name: 'tenant-a', limit: 3 }, ADMIN, a);
    await put({ scope: 'tenant', name: 'nobody', limit: 3 }, ADMIN, a);
    await put({ scope: 'global', limit: -1 }, ADMIN, a);
    await put({ scope: 'global', limit: 3 }, KEY_A, a);
    await put({ scope: 'global', limit: 3 }, 'Bearer not-a-key', a);
    limits.state.down = true;
    await put({ scope: 'global', limit: 4 }, ADMIN, a);
    // Reads leave none.
    await a.inject({ method: 'GET', url: '/v1/admin/limits', headers: { authorization: ADMIN } });
    expect(audit.entries.map((e) => [e.action, e.outcome, e.status, e.principal, e.scope ?? null, e.limit ?? null])).toEqual([
      ['limit.change', 'done', 200, 'admin', 'tenant', 3],
      ['limit.change', 'refused', 400, 'admin', 'tenant', 3],
      ['limit.change', 'refused', 400, 'admin', null, null],
      ['limit.change', 'refused', 403, 'tenant:tenant-a', null, null],
      ['limit.change', 'refused', 401, null, null, null],
      ['limit.change', 'failed', 503, 'admin', 'global', 4],
    ]);
    expect(audit.entries[5]).toMatchObject({ via: 'api', error: expect.stringContaining('ECONNREFUSED') });
    expect(audit.lines.every((l) => l.stream === 'audit' && l.msg === `api limit.change ${l.audit.outcome}`)).toBe(true);
  });
});
