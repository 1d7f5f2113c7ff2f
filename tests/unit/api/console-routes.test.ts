import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { AlertWatch } from '../../../src/api/console/alerts.js';
import { ConsoleAssets } from '../../../src/api/console/console-assets.js';
import { ConsoleSessions } from '../../../src/api/console/console-session.js';
import { AuthFailureThrottle } from '../../../src/api/auth-throttle.js';
import { FinishedRunsSampler } from '../../../src/api/console/overview-finished.js';
import { OverviewSampler } from '../../../src/api/console/overview-sampler.js';
import { buildApiServer, type ApiDeps } from '../../../src/api/server.js';
import { loadConfig } from '../../../src/config/load.js';
import { createLogger } from '../../../src/obs/logger.js';
import { Gauge } from 'prom-client';
import { createMetrics } from '../../../src/obs/metrics.js';
import { redisKeys } from '../../../src/redis/keys.js';
import type { OperatorRunView } from '../../../src/status/run-store.js';
import { fakeRunStatus } from '../../support/run-status-fakes.js';
import { auditCapture } from '../../support/audit-capture.js';
import { fakeBreakerAdmin } from '../../support/breaker-admin-fakes.js';

const config = loadConfig({ env: {} });
const unused = async () => {
  throw new Error('not used by the console routes');
};
const HOST = 'console.test';
const RUN: OperatorRunView = {
  runId: '0190f5a2-7c00-7abc-8def-0123456789ab',
  tenantId: 'tenant-a',
  workflow: 'support-reply',
  class: 'interactive',
  status: 'running',
  statusMessage: 'running',
  admittedAt: '2026-01-01T12:00:00.000Z',
  deadline: '2099-01-01T12:00:30.000Z',
  attempts: 1,
};

/** Redis's SET/GET/DEL in memory, enough for sessions; `failWrites` makes SET fail as an unreachable Redis would. */
function memoryRedis(failWrites = false) {
  const values = new Map<string, string>();
  return {
    values,
    set: async (k: string, v: string) => {
      if (failWrites) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' });
      return (values.set(k, v), 'OK' as const);
    },
    get: async (k: string) => values.get(k) ?? null,
    del: async (k: string) => Number(values.delete(k)),
  };
}

function builtConsole(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-console-'));
  mkdirSync(join(dir, 'assets'));
  writeFileSync(join(dir, 'index.html'), '<!doctype html><script type="module" src="/console/assets/app-1.js"></script>');
  writeFileSync(join(dir, 'assets', 'app-1.js'), 'console.log(1)');
  return dir;
}

let app: FastifyInstance | undefined;
let audit: Record<string, any>[];
let limitFields: Map<string, number>;
let cancelled: string[];
let replays: { ids: readonly string[]; by: string; ratePerSec: number }[];
let discards: { ids: readonly string[]; who: string; reason: string }[];
/** What the run store and the DLQ store were asked to read. */
let reads: unknown[];
let breakerAdmin: ReturnType<typeof fakeBreakerAdmin>;
let alertWatch: AlertWatch;
let sampler: OverviewSampler;
let metrics: ReturnType<typeof createMetrics>;
/** The alert watch's clock. */
let clock: number;

/** `failing`: Kafka, Postgres, the DLQ store and the processors' state's Redis fail as an unreachable one would; `sessionsDown`: sessions cannot be written. */
function server(o: { trustProxy?: boolean; failing?: boolean; sessionsDown?: boolean } = {}): FastifyInstance {
  const trail = auditCapture();
  audit = trail.entries;
  limitFields = new Map();
  cancelled = [];
  replays = [];
  discards = [];
  reads = [];
  breakerAdmin = fakeBreakerAdmin();
  metrics = createMetrics();
  // What registerPermitGauges shows at scrape time, without Redis.
  new Gauge({ name: 'sluice_permit_limit', help: 'limit', labelNames: ['scope'], registers: [metrics.registry] }).set({ scope: 'tenant:tenant-a' }, 4);
  new Gauge({ name: 'sluice_permits_in_use', help: 'in use', labelNames: ['scope'], registers: [metrics.registry] }).set({ scope: 'tenant:tenant-a' }, 4);
  clock = 0;
  sampler = new OverviewSampler(metrics, 60_000);
  alertWatch = new AlertWatch(async () => ({ lag: undefined, backlog: 'unreadable', breakers: [{ name: 'anthropic', state: 'open', retryAt: 1 }], tallies: sampler.history() }), () => clock);
  app = buildApiServer({
    config: { ...config, api: { ...config.api, trustProxy: o.trustProxy ?? false } },
    logger: createLogger('silent'),
    metrics,
    readiness: [],
    runStatus: fakeRunStatus().deps,
    reads: fakeRunStatus().reads,
    producer: { publishRunRequested: unused },
    runs: { recordAdmission: unused, getRun: unused },
    admission: { decide: unused, withdraw: unused, redisUnreachable: () => { throw new Error('not used by the console routes'); } },
    idempotency: { claim: unused, store: unused, forget: unused },
    withdrawals: { markAnswerPending: unused, markAnswered: unused, withdraw: unused },
    limits: { overrides: async () => new Map(limitFields), set: async (f, l) => void limitFields.set(f, l) },
    breakers: breakerAdmin.deps,
    audit: trail.logger,
    authFailures: new AuthFailureThrottle({ attempts: 5, perSec: 60, maxAddresses: 100 }, () => clock),
    console: {
      sessions: new ConsoleSessions(memoryRedis(o.sessionsDown), redisKeys(''), 3600),
      sessionTtlSec: 3600,
      assets: new ConsoleAssets(builtConsole()),
      sampler,
      finishedRuns: new FinishedRunsSampler({
        read: async () => {
          if (o.failing) throw new Error('Postgres: connection refused');
          return [
            { bucketMs: -60_000, status: 'completed', class: null, runs: 120, onTime: 90, p50: 2, p99: 9 },
            { bucketMs: -60_000, status: null, class: 'interactive', runs: 120, onTime: 90, p50: 1.5, p99: 4 },
          ];
        },
        bucketMs: 60_000,
        logger: createLogger('silent'),
        now: () => clock,
      }),
      alerts: alertWatch,
      alertEveryMs: 60_000,
      metrics,
      lagReport: async () => 'no active lag monitor',
      waitingForDependency: async () => [{ tenant: 'tenant-a', runClass: 'batch', runs: 2 }, { tenant: 'tenant-b', runClass: 'batch', runs: 0 }],
      processorState: async () => {
        if (o.failing) throw new Error('connect ECONNREFUSED');
        return { oldestWaitingSec: new Map([['tenant:tenant-a', 7.5]]), paused: [], held: [{ dependency: 'anthropic', runs: 1, tenants: { 'tenant-b': 1 } }] };
      },
      runs: { findRuns: async (f) => (reads.push(f), f.runId === undefined || f.runId === RUN.runId ? [RUN] : []), listEvents: async () => [] },
      cancellations: { request: async (runId) => void cancelled.push(runId) },
      dlq: {
        store: {
          list: async () => [],
          get: async (id) => void reads.push(id),
          discard: async (ids, who, reason) => {
            if (o.failing) throw new Error('Postgres: connection refused');
            discards.push({ ids, who, reason });
            return { discarded: [...ids], notFound: [], notPending: [] };
          },
        },
        replayer: {
          preview: async () => ({ replayed: 0, refused: 0, failed: 0, skipped: { not_found: 1, replayed: 0, discarded: 0, locked: 0 } }),
          replay: async (ids, _kafka, o) => {
            replays.push({ ids, by: o.by, ratePerSec: o.ratePerSec });
            for (const id of ids) o.onOutcome({ id, result: 'skipped', why: 'replayed' });
            // Row 13 fails to produce, as a row whose send Kafka refused would.
            return { tally: { replayed: 0, refused: 0, failed: ids.includes('13') ? 1 : 0, skipped: { not_found: 0, replayed: ids.length, discarded: 0, locked: 0 } }, untried: 0 };
          },
        },
        kafka: async () => {
          if (o.failing) throw new Error('Kafka: connecting timed out after 15000 ms');
          return { producer: { send: unused }, existingTopics: new Set(), produceTimeoutMs: 1_000 };
        },
      },
    },
  } satisfies ApiDeps);
  return app;
}

afterEach(async () => {
  await app?.close();
  app = undefined;
});

async function login(a: FastifyInstance, key = 'local-admin-key'): Promise<{ res: LightMyRequestResponse; cookie: string; csrf: string }> {
  const res = await a.inject({ method: 'POST', url: '/console/session', headers: { host: HOST, origin: `http://${HOST}` }, payload: { key } });
  const set = String(res.headers['set-cookie'] ?? '');
  return { res, cookie: set.split(';')[0]!, csrf: res.statusCode === 200 ? (res.json() as { csrfToken: string }).csrfToken : '' };
}

describe('the console login', () => {
  it('trades the admin key for an HttpOnly, SameSite=Strict cookie scoped to /console, with an expiry', async () => {
    const { res, cookie, csrf } = await login(server());
    expect(res.statusCode).toBe(200);
    const set = String(res.headers['set-cookie']);
    expect(set).toMatch(/^sluice_console=[\w-]{43}; Path=\/console; Max-Age=3600; HttpOnly; SameSite=Strict$/);
    expect(csrf).toMatch(/^[\w-]{43}$/);
    // The key itself is in no answer and no cookie.
    expect(set + res.body).not.toContain('local-admin-key');
    const session = await app!.inject({ url: '/console/api/session', headers: { cookie } });
    expect(session.json()).toMatchObject({ csrfToken: csrf });
    expect(audit).toEqual([expect.objectContaining({ action: 'login', outcome: 'done' })]);
  });

  it("refuses a tenant's key (403) and an unknown key (401), and says so in the audit log", async () => {
    const a = server();
    const tenant = await login(a, 'local-key-a');
    expect(tenant.res.statusCode).toBe(403);
    expect(tenant.res.headers['set-cookie']).toBeUndefined();
    const unknown = await login(a, 'not-a-key');
    expect(unknown.res.statusCode).toBe(401);
    expect(audit.map((e) => [e.outcome, e.why])).toEqual([
      ['refused', 'tenant key'],
      ['refused', 'unknown key'],
    ]);
  });

  it('refuses a login posted from another origin', async () => {
    const res = await server().inject({ method: 'POST', url: '/console/session', headers: { host: HOST, origin: 'https://evil.example' }, payload: { key: 'local-admin-key' } });
    expect(res.statusCode).toBe(403);
  });

  it('ends the session at logout, everywhere', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    expect((await a.inject({ method: 'DELETE', url: '/console/session', headers: { cookie, 'x-csrf-token': csrf } })).statusCode).toBe(204);
    expect((await a.inject({ url: '/console/api/overview', headers: { cookie } })).statusCode).toBe(401);
  });
});

describe('console data behind the session', () => {
  it('answers nothing without a session: not to the admin key as Bearer, nor to a tenant key', async () => {
    const a = server();
    for (const authorization of [undefined, 'Bearer local-admin-key', 'Bearer local-key-a']) {
      const res = await a.inject({ url: '/console/api/overview', headers: authorization ? { authorization } : {} });
      expect(res.statusCode).toBe(401);
    }
  });

  it('shows the alert conditions that hold (an open breaker, no lag monitor) as pending, and in the banner after their for: duration', async () => {
    const a = server();
    const { cookie } = await login(a);
    const overview = async () => (await a.inject({ url: '/console/api/overview', headers: { cookie } })).json() as { alerts: { alert: string }[]; pending: { alert: string; forMs: number }[] };
    await alertWatch.check();
    expect(await overview()).toMatchObject({ alerts: [], pending: [{ alert: 'SluiceBreakerOpen', forMs: 300_000 }, { alert: 'SluiceLagMonitorAbsent', forMs: 300_000 }] });
    clock = 300_000;
    await alertWatch.check();
    const later = await overview();
    expect(later.alerts.map((x) => x.alert)).toEqual(['SluiceBreakerOpen', 'SluiceLagMonitorAbsent']);
    expect(later.pending).toEqual([]);
  });

  it("charts this process's submissions, and every processor's finished runs from Postgres", async () => {
    const a = server();
    const { cookie } = await login(a);
    metrics.admissions.inc({ tenant: 'tenant-a', class: 'interactive', outcome: 'admitted', reason: '' }, 3);
    await sampler.take();
    const res = await a.inject({ url: '/console/api/overview', headers: { cookie } });
    expect(res.statusCode).toBe(200);
    const body = res.json() as { points: { admission: Record<string, number> }[]; finished: { points: { at: number; finished: Record<string, number>; p50: Record<string, number> }[]; asOf: number; unavailable: null } };
    expect(body.points.at(-1)!.admission.admitted).toBeGreaterThan(0);
    expect(body.finished).toMatchObject({ asOf: 0, unavailable: null });
    expect(body.finished.points.at(-1)).toEqual({ at: 0, finished: { completed: 2 }, onTime: 1.5, p50: { interactive: 1.5 }, p99: { interactive: 4 } });
  });

  it('still answers the Overview while Postgres fails: the admission points, and the finished runs marked unavailable', async () => {
    const a = server({ failing: true });
    const { cookie } = await login(a);
    metrics.admissions.inc({ tenant: 'tenant-a', class: 'interactive', outcome: 'admitted', reason: '' }, 3);
    await sampler.take();
    const res = await a.inject({ url: '/console/api/overview', headers: { cookie } });
    expect(res.statusCode).toBe(200);
    const body = res.json() as { points: { admission: Record<string, number> }[]; finished: unknown };
    expect(body.points.at(-1)!.admission.admitted).toBeGreaterThan(0);
    expect(body.finished).toEqual({ points: [], asOf: null, unavailable: 'Postgres: connection refused' });
  });

  it('shows the backpressure: runs waiting for a dependency cluster-wide (only those with some), and why the lag is missing', async () => {
    const a = server();
    const { cookie } = await login(a);
    const body = (await a.inject({ url: '/console/api/backpressure', headers: { cookie } })).json();
    expect(body).toMatchObject({ held: [{ dependency: 'anthropic', runs: 1, tenants: { 'tenant-b': 1 } }], waitingForDependency: { counts: [{ tenant: 'tenant-a', runClass: 'batch', runs: 2 }], why: null }, lag: { report: null, why: 'no active lag monitor' } });
  });

  it("shows each scope's oldest waiter and the held runs as the processors published them, or why they are unknown", async () => {
    const a = server();
    const { cookie } = await login(a);
    const body = (await a.inject({ url: '/console/api/backpressure', headers: { cookie } })).json();
    expect(body.permits).toEqual([{ scope: 'tenant:tenant-a', inUse: 4, limit: 4, oldestWaitingSec: 7.5 }]);
    expect(body.processorState).toEqual({ everySec: 2, why: null });
    await a.close();
    const b = server({ failing: true });
    const failing = await login(b);
    const unknown = (await b.inject({ url: '/console/api/backpressure', headers: { cookie: failing.cookie } })).json();
    expect(unknown.permits).toEqual([{ scope: 'tenant:tenant-a', inUse: 4, limit: 4 }]);
    expect(unknown.processorState).toEqual({ everySec: 2, why: 'Redis unreachable (connect ECONNREFUSED)' });
    expect(unknown.held).toEqual([]);
  });

  it('finds runs of any tenant and shows one with its events', async () => {
    const a = server();
    const { cookie } = await login(a);
    expect((await a.inject({ url: '/console/api/runs?tenant=tenant-a', headers: { cookie } })).json()).toMatchObject({ runs: [{ runId: RUN.runId }] });
    expect((await a.inject({ url: `/console/api/runs/${RUN.runId}`, headers: { cookie } })).json()).toMatchObject({ run: { tenantId: 'tenant-a' }, events: [] });
    expect((await a.inject({ url: '/console/api/runs?status=bogus', headers: { cookie } })).statusCode).toBe(400);
    expect((await a.inject({ url: '/console/api/runs?since=2026-01-01T00:00:00.000Z', headers: { cookie } })).statusCode).toBe(200);
    expect((await a.inject({ url: '/console/api/runs?since=yesterday', headers: { cookie } })).statusCode).toBe(400);
  });
});

describe('console parameters, checked at the boundary', () => {
  const problem = (res: LightMyRequestResponse) => ({ status: res.statusCode, mediaType: res.headers['content-type'], ...(res.json() as { code: string; errors: { path: string }[] }) });

  it('answers 400 invalid_request naming the parameter for a time, id or filter Postgres would refuse, and reads nothing', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    const cases: [string, string, object | undefined, string][] = [
      ['GET', '/console/api/runs?since=2016-12-31T23:59:60Z', undefined, '/query/since'],
      ['GET', '/console/api/runs?until=2021-02-29T00:00:00Z', undefined, '/query/until'],
      ['GET', '/console/api/runs?runId=NOT-A-RUN', undefined, '/query/runId'],
      ['GET', '/console/api/runs?tenant=a%00b', undefined, '/query/tenant'],
      ['GET', '/console/api/dlq?reason=%00', undefined, '/query/reason'],
      ['GET', '/console/api/dlq/9999999999999999999', undefined, '/params/id'],
      ['GET', '/console/api/dlq/abc', undefined, '/params/id'],
      ['GET', '/console/api/runs/abc', undefined, '/params/id'],
      ['POST', '/console/api/runs/abc/cancel', undefined, '/params/id'],
      ['POST', '/console/api/dlq/replay', { ids: ['9999999999999999999'], dryRun: true }, '/ids/0'],
      ['POST', '/console/api/dlq/discard', { ids: ['9223372036854775808'], reason: 'x' }, '/ids/0'],
    ];
    for (const [method, url, payload, path] of cases) {
      const res = await a.inject({ method: method as 'GET' | 'POST', url, headers: { cookie, 'x-csrf-token': csrf }, ...(payload ? { payload } : {}) });
      expect(problem(res), `${method} ${url}`).toMatchObject({ status: 400, mediaType: expect.stringContaining('application/problem+json'), code: 'invalid_request', errors: [expect.objectContaining({ path })] });
    }
    expect([...reads, ...cancelled, ...replays, ...discards]).toEqual([]);
    // The edges that are fine still pass.
    expect((await a.inject({ url: '/console/api/runs?since=2016-12-31T23:59:59Z&until=2020-02-29T00:00:00%2B05:30', headers: { cookie } })).statusCode).toBe(200);
    expect((await a.inject({ url: '/console/api/dlq/9223372036854775807', headers: { cookie } })).statusCode).toBe(404);
  });
});

describe('changes from the console', () => {
  it('need the CSRF token: without it, or with another, nothing changes and the refusal is audited', async () => {
    const a = server();
    const { cookie } = await login(a);
    for (const token of [undefined, 'x'.repeat(43)]) {
      const res = await a.inject({ method: 'PUT', url: '/console/api/limits', headers: { cookie, ...(token ? { 'x-csrf-token': token } : {}) }, payload: { scope: 'global', limit: 3 } });
      expect(res.statusCode).toBe(403);
    }
    expect(limitFields.size).toBe(0);
    expect(audit.filter((e) => e.outcome === 'refused')).toHaveLength(2);
  });

  it('refuse a cross-origin request even with the token', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    const res = await a.inject({ method: 'PUT', url: '/console/api/limits', headers: { cookie, 'x-csrf-token': csrf, host: HOST, origin: 'https://evil.example' }, payload: { scope: 'global', limit: 3 } });
    expect(res.statusCode).toBe(403);
    expect(limitFields.size).toBe(0);
  });

  it('change a limit through the admin limits logic, and audit who did what', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    const res = await a.inject({ method: 'PUT', url: '/console/api/limits', headers: { cookie, 'x-csrf-token': csrf, host: HOST, origin: `http://${HOST}` }, payload: { scope: 'global', limit: 3 } });
    expect(res.json()).toMatchObject({ scope: 'global', limit: 3, override: 3 });
    expect(limitFields.get('global')).toBe(3);
    expect(audit.at(-1)).toMatchObject({ action: 'limit.change', outcome: 'done', scope: 'global', limit: 3, session: expect.stringMatching(/^[0-9a-f]{12}$/) });
    // The same validation as the admin API: an unknown tenant is refused.
    const bad = await a.inject({ method: 'PUT', url: '/console/api/limits', headers: { cookie, 'x-csrf-token': csrf }, payload: { scope: 'tenant', name: 'nobody', limit: 3 } });
    expect(bad.statusCode).toBe(400);
  });

  it('force a breaker and clear it through the admin breakers logic, with the token, each audited', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    const headers = { cookie, 'x-csrf-token': csrf, host: HOST, origin: `http://${HOST}` };
    const refused = await a.inject({ method: 'PUT', url: '/console/api/breakers/anthropic/force', headers: { cookie }, payload: { mode: 'open', durationSec: 60 } });
    expect(refused.statusCode).toBe(403);
    expect(breakerAdmin.forces.size).toBe(0);
    const res = await a.inject({ method: 'PUT', url: '/console/api/breakers/anthropic/force', headers, payload: { mode: 'open', durationSec: 60 } });
    expect(res.json()).toEqual({ dependency: 'anthropic', forced: { mode: 'open', until: breakerAdmin.state.now + 60_000 } });
    const page = await a.inject({ url: '/console/api/dependencies', headers: { cookie } });
    expect(page.json()).toMatchObject({ dependencies: [{ dependency: 'anthropic', breaker: { forced: { mode: 'open' } } }], spend: {} });
    expect((await a.inject({ method: 'DELETE', url: '/console/api/breakers/anthropic/force', headers })).json()).toEqual({ dependency: 'anthropic', forced: null });
    // The same validation as the admin API: no duration, no force.
    expect((await a.inject({ method: 'PUT', url: '/console/api/breakers/anthropic/force', headers, payload: { mode: 'closed' } })).statusCode).toBe(400);
    expect(audit.slice(-4)).toEqual([
      expect.objectContaining({ action: 'breaker.force', outcome: 'refused', status: 403, why: 'CSRF token or origin mismatch' }),
      expect.objectContaining({ action: 'breaker.force', outcome: 'done', dependency: 'anthropic', mode: 'open', durationSec: 60, session: expect.stringMatching(/^[0-9a-f]{12}$/) }),
      expect.objectContaining({ action: 'breaker.clear', outcome: 'done', dependency: 'anthropic' }),
      expect.objectContaining({ action: 'breaker.force', outcome: 'refused', status: 400, dependency: 'anthropic' }),
    ]);
  });

  it('cancel a run, audited with its tenant', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    const res = await a.inject({ method: 'POST', url: `/console/api/runs/${RUN.runId}/cancel`, headers: { cookie, 'x-csrf-token': csrf } });
    expect(res.statusCode).toBe(202);
    expect(cancelled).toEqual([RUN.runId]);
    expect(audit.at(-1)).toMatchObject({ action: 'run.cancel', outcome: 'done', runId: RUN.runId, tenant: 'tenant-a' });
  });
});

describe('DLQ actions from the console', () => {
  it('replay at the CLI rate, recorded as by the console session, with its outcome lines', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    const res = await a.inject({ method: 'POST', url: '/console/api/dlq/replay', headers: { cookie, 'x-csrf-token': csrf }, payload: { ids: ['7'], dryRun: false } });
    expect(res.json()).toEqual({ lines: ['skipped #7: already replayed'], summary: 'replayed 0, skipped 1 (1 already replayed), failed 0', untried: 0 });
    expect(replays).toEqual([{ ids: ['7'], by: expect.stringMatching(/^console:[0-9a-f]{12}$/), ratePerSec: 10 }]);
    expect(audit.at(-1)).toMatchObject({ action: 'dlq.replay', outcome: 'done', ids: ['7'], by: replays[0]!.by });
  });

  it('audit a replay whose rows partly failed as failed, though it answers 200', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    const res = await a.inject({ method: 'POST', url: '/console/api/dlq/replay', headers: { cookie, 'x-csrf-token': csrf }, payload: { ids: ['7', '13'], dryRun: false } });
    expect(res.statusCode).toBe(200);
    expect(audit.at(-1)).toMatchObject({ action: 'dlq.replay', outcome: 'failed', status: 200, failed: 1 });
  });

  it('preview without changing anything, and refuse ids that are not row ids', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    const dry = await a.inject({ method: 'POST', url: '/console/api/dlq/replay', headers: { cookie, 'x-csrf-token': csrf }, payload: { ids: ['8'], dryRun: true } });
    expect(dry.json()).toMatchObject({ summary: 'dry run, nothing changed: would replay 0, skip 1 (1 not found)' });
    expect(replays).toEqual([]);
    const bad = await a.inject({ method: 'POST', url: '/console/api/dlq/replay', headers: { cookie, 'x-csrf-token': csrf }, payload: { ids: ['1; DROP'], dryRun: true } });
    expect(bad.statusCode).toBe(400);
  });

  it('discard with a reason, audited', async () => {
    const a = server();
    const { cookie, csrf } = await login(a);
    const res = await a.inject({ method: 'POST', url: '/console/api/dlq/discard', headers: { cookie, 'x-csrf-token': csrf }, payload: { ids: ['3'], reason: 'duplicate' } });
    expect(res.json()).toEqual({ discarded: ['3'], notFound: [], notPending: [] });
    expect(discards).toEqual([{ ids: ['3'], who: expect.stringMatching(/^console:/), reason: 'duplicate' }]);
    expect(audit.at(-1)).toMatchObject({ action: 'dlq.discard', reason: 'duplicate', discarded: ['3'] });
  });
});

describe('the console page and its bundles', () => {
  it('are served with a strict CSP, the page never cached and the bundles cached for good', async () => {
    const a = server();
    const page = await a.inject({ url: '/console' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-security-policy']).toContain("default-src 'self'");
    expect(page.headers['content-security-policy']).toContain("script-src 'self';");
    expect(page.headers['cache-control']).toBe('no-store');
    const asset = await a.inject({ url: '/console/assets/app-1.js' });
    expect(asset.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(asset.headers['cache-control']).toContain('immutable');
    expect((await a.inject({ url: '/console/assets/..%2Findex.html' })).statusCode).toBe(404);
  });
});

describe('console hardening', () => {
  const loginFrom = (a: FastifyInstance, headers: Record<string, string> = {}, key = 'local-admin-key') =>
    a.inject({ method: 'POST', url: '/console/session', headers: { host: HOST, origin: `http://${HOST}`, ...headers }, payload: { key } });

  it('refuses a login after five unknown keys from one address within the minute, the right key too, with 429 and Retry-After, audited; another address still logs in', async () => {
    const a = server();
    for (let i = 0; i < 5; i++) expect((await loginFrom(a, {}, 'wrong-key')).statusCode).toBe(401);
    const refused = await loginFrom(a);
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('12');
    expect(refused.json()).toMatchObject({ code: 'rate_limited', retryAfterSec: 12 });
    // The fifth unknown key starts the throttle, which says so once, before its own login line.
    expect(audit.slice(-3)).toEqual([
      expect.objectContaining({ action: 'auth.throttled', outcome: 'refused', via: 'console', block: '127.0.0.1', retryAfterSec: 12 }),
      expect.objectContaining({ action: 'login', outcome: 'refused', status: 401, why: 'unknown key' }),
      expect.objectContaining({ action: 'login', outcome: 'refused', status: 429, why: 'too many failed authentications from this address' }),
    ]);
    // The console's login and the API's Bearer keys spend one bucket: the address is refused there too.
    expect((await a.inject({ url: '/v1/admin/limits', headers: { authorization: 'Bearer local-admin-key' } })).statusCode).toBe(429);
    expect((await a.inject({ method: 'POST', url: '/console/session', remoteAddress: '10.1.2.3', headers: { host: HOST, origin: `http://${HOST}` }, payload: { key: 'local-admin-key' } })).statusCode).toBe(200);
  });

  it('marks the cookie Secure when a trusted proxy says https, and ignores X-Forwarded-Proto unless proxies are trusted', async () => {
    const https = { 'x-forwarded-proto': 'https' };
    expect(String((await loginFrom(server({ trustProxy: true }), https)).headers['set-cookie'])).toMatch(/; Secure$/);
    expect(String((await loginFrom(server({ trustProxy: true }))).headers['set-cookie'])).not.toContain('Secure');
    expect(String((await loginFrom(server(), https)).headers['set-cookie'])).not.toContain('Secure');
  });

  it('ends the previous session of a browser that logs in again, with a new session id', async () => {
    const a = server();
    const first = await login(a);
    const again = await loginFrom(a, { cookie: first.cookie });
    expect(again.statusCode).toBe(200);
    const second = String(again.headers['set-cookie']).split(';')[0]!;
    expect(second).not.toBe(first.cookie);
    expect((await a.inject({ url: '/console/api/session', headers: { cookie: first.cookie } })).statusCode).toBe(401);
    expect((await a.inject({ url: '/console/api/session', headers: { cookie: second } })).statusCode).toBe(200);
    expect(audit.at(-1)).toMatchObject({ action: 'login', outcome: 'done', ended: expect.stringMatching(/^[0-9a-f]{12}$/) });
  });

  it('audits a login whose session could not be written as failed, and answers 503', async () => {
    const a = server({ sessionsDown: true });
    const { res } = await login(a);
    expect(res.statusCode).toBe(503);
    expect(res.json()).toMatchObject({ code: 'dependency_unavailable' });
    expect(audit).toEqual([expect.objectContaining({ action: 'login', outcome: 'failed', status: 503, session: null, error: expect.stringContaining('ECONNREFUSED') })]);
  });

  it('audits a replay and a discard that failed, with the failure', async () => {
    const a = server({ failing: true });
    const { cookie, csrf } = await login(a);
    const replay = await a.inject({ method: 'POST', url: '/console/api/dlq/replay', headers: { cookie, 'x-csrf-token': csrf }, payload: { ids: ['7'], dryRun: false } });
    expect(replay.statusCode).toBe(500);
    expect(audit.at(-1)).toMatchObject({ action: 'dlq.replay', outcome: 'failed', ids: ['7'], error: 'Kafka: connecting timed out after 15000 ms' });
    const discard = await a.inject({ method: 'POST', url: '/console/api/dlq/discard', headers: { cookie, 'x-csrf-token': csrf }, payload: { ids: ['3'], reason: 'duplicate' } });
    expect(discard.statusCode).toBe(500);
    expect(audit.at(-1)).toMatchObject({ action: 'dlq.discard', outcome: 'failed', ids: ['3'], reason: 'duplicate', error: 'Postgres: connection refused' });
  });

  it("gives a path under /console that no route answers the console's security headers", async () => {
    const a = server();
    for (const url of ['/console/nope', '/console/api/nope?x=1', '/console/assets/missing.js']) {
      const res = await a.inject({ url });
      expect(res.statusCode, url).toBe(404);
      expect(res.headers['content-security-policy'], url).toContain("default-src 'self'");
      expect(res.headers['x-frame-options'], url).toBe('DENY');
      expect(res.headers['cache-control'], url).toBe('no-store');
    }
    expect((await a.inject({ url: '/v1/nope' })).headers['content-security-policy']).toBeUndefined();
  });
});
