import Fastify, { type FastifyInstance } from 'fastify';
import { Gauge } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { Readiness, readinessPlan, readinessStatus, registerHealthRoutes, type ReadinessCheck } from '../../../src/api/routes/health.js';
import type { Role } from '../../../src/config/schema.js';
import { createMetrics } from '../../../src/obs/metrics.js';

const silent = { warn: () => undefined };

/** A check that counts its runs and fails with `fail` when given. */
function countingCheck(name: string, fail?: string): ReadinessCheck & { runs: number } {
  const c = {
    name,
    runs: 0,
    check: async () => {
      c.runs++;
      if (fail) throw new Error(fail);
    },
  };
  return c;
}

describe('Readiness', () => {
  it('runs one round of checks for 100 concurrent requests and serves its report for a second', async () => {
    let now = 1_000_000;
    const redis = countingCheck('redis');
    let release!: () => void;
    const slow: ReadinessCheck = { name: 'kafka', check: () => new Promise<void>((r) => (release = r)) };
    const readiness = new Readiness([slow, redis], { logger: silent, now: () => now });

    const reports = Array.from({ length: 100 }, () => readiness.report());
    await new Promise((r) => setImmediate(r));
    release();
    const all = await Promise.all(reports);
    expect(redis.runs).toBe(1);
    expect(new Set(all).size).toBe(1);
    expect(all[0]).toEqual({ status: 'ready', checks: [{ name: 'kafka', ok: true }, { name: 'redis', ok: true }] });

    now += 999;
    await Promise.all(Array.from({ length: 100 }, () => readiness.report()));
    expect(redis.runs).toBe(1);
    now += 1;
    const later = readiness.report();
    release();
    await later;
    expect(redis.runs).toBe(2);
  });

  it('counts the cache from when a round finished, so a slow round is not followed at once by another', async () => {
    let now = 0;
    const c = countingCheck('postgres');
    const slow: ReadinessCheck = {
      name: 'slow',
      check: async () => {
        now += 5_000;
      },
    };
    const readiness = new Readiness([slow, c], { logger: silent, now: () => now });
    await readiness.report();
    await readiness.report();
    expect(c.runs).toBe(1);
  });

  it('reports a failing check by name only and logs why', async () => {
    const logged: unknown[][] = [];
    const readiness = new Readiness([countingCheck('redis', 'connect ECONNREFUSED 10.0.0.7:6379 (user admin)'), countingCheck('postgres')], { logger: { warn: (...args: unknown[]) => logged.push(args) } });
    const report = await readiness.report();
    expect(report).toEqual({ status: 'not_ready', checks: [{ name: 'redis', ok: false }, { name: 'postgres', ok: true }] });
    expect(JSON.stringify(report)).not.toContain('ECONNREFUSED');
    expect(logged).toHaveLength(1);
    expect(logged[0]![0]).toMatchObject({ check: 'redis', err: { message: 'connect ECONNREFUSED 10.0.0.7:6379 (user admin)' } });
  });

  it('fails a check that does not answer within its timeout, without waiting for it', async () => {
    const hanging: ReadinessCheck = { name: 'kafka', check: () => new Promise<void>(() => undefined) };
    const readiness = new Readiness([hanging], { logger: silent, timeoutMs: 20 });
    expect(await readiness.report()).toEqual({ status: 'not_ready', checks: [{ name: 'kafka', ok: false }] });
  });

  it('turns a check that throws synchronously into a failing check', async () => {
    const throwing: ReadinessCheck = {
      name: 'redis',
      check: () => {
        throw new Error('not connected');
      },
    };
    expect(await new Readiness([throwing], { logger: silent }).report()).toEqual({ status: 'not_ready', checks: [{ name: 'redis', ok: false }] });
  });
});

describe('readinessStatus', () => {
  it('is the worst effect among the failing checks', () => {
    expect(readinessStatus([])).toBe('ready');
    expect(readinessStatus([{ ok: true }, { ok: true, whenFailing: 'not_ready' }])).toBe('ready');
    expect(readinessStatus([{ ok: false, whenFailing: 'degraded' }, { ok: true }])).toBe('degraded');
    expect(readinessStatus([{ ok: false, whenFailing: 'degraded' }, { ok: false, whenFailing: 'not_ready' }])).toBe('not_ready');
    expect(readinessStatus([{ ok: false }])).toBe('not_ready');
  });
});

describe('readinessPlan', () => {
  const plan = (roles: Role[], policy: 'fail-closed' | 'fail-open' = 'fail-closed') => Object.fromEntries(readinessPlan(roles, policy).map((p) => [p.name, p.whenFailing]));

  it('the API alone: Kafka and Redis (fail-closed) are needed; without Postgres it still accepts submissions', () => {
    expect(plan(['api'])).toEqual({ kafka: 'not_ready', redis: 'not_ready', postgres: 'degraded' });
  });

  it('the API failing open keeps serving through a Redis outage: degraded', () => {
    expect(plan(['api'], 'fail-open')).toEqual({ kafka: 'not_ready', redis: 'degraded', postgres: 'degraded' });
  });

  it('a processor needs Kafka and Redis, never Postgres; the sinks need Postgres', () => {
    expect(plan(['processor'], 'fail-open')).toEqual({ kafka: 'not_ready', redis: 'not_ready' });
    expect(plan(['status-sink'])).toEqual({ kafka: 'not_ready', postgres: 'not_ready' });
    expect(plan(['dlq-sink'])).toEqual({ kafka: 'not_ready', postgres: 'not_ready' });
  });

  it('a lag monitor needs Kafka; without Redis it holds no lease and exports no lag, but refuses nothing: degraded', () => {
    expect(plan(['lag-monitor'])).toEqual({ kafka: 'not_ready', redis: 'degraded' });
    expect(plan(['lag-monitor', 'processor'])).toEqual({ kafka: 'not_ready', redis: 'not_ready' });
  });

  it('several roles in one process take the strictest need of each', () => {
    expect(plan(['api', 'processor', 'status-sink', 'dlq-sink', 'provider-sim'], 'fail-open')).toEqual({ kafka: 'not_ready', redis: 'not_ready', postgres: 'not_ready' });
    expect(plan(['api', 'status-sink'], 'fail-open')).toEqual({ kafka: 'not_ready', redis: 'degraded', postgres: 'not_ready' });
  });

  it('the simulator alone needs nothing', () => {
    expect(plan(['provider-sim'])).toEqual({});
  });
});

describe('health routes', () => {
  let app: FastifyInstance | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('/readyz answers 503 with each check ok or failing and no error text', async () => {
    app = Fastify();
    registerHealthRoutes(app, { readiness: [countingCheck('kafka'), countingCheck('redis', 'connect ECONNREFUSED 127.0.0.1:6390')], metrics: createMetrics() });
    const res = await app.inject('/readyz');
    expect(res.statusCode).toBe(503);
    expect(res.json()).toEqual({ status: 'not_ready', checks: [{ name: 'kafka', ok: true }, { name: 'redis', ok: false }] });
    expect(res.body).not.toContain('ECONNREFUSED');
  });

  it('/readyz answers 200 "degraded" when only checks whose failure degrades are failing', async () => {
    app = Fastify();
    registerHealthRoutes(app, { readiness: [countingCheck('kafka'), { ...countingCheck('postgres', 'connection refused'), whenFailing: 'degraded' }], metrics: createMetrics() });
    const res = await app.inject('/readyz');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ status: 'degraded', checks: [{ name: 'kafka', ok: true }, { name: 'postgres', ok: false }] });
  });

  it('/metrics renders when a scrape-time read fails: its gauges are left out and the error is counted in the same scrape', async () => {
    app = Fastify();
    const metrics = createMetrics();
    const gauge = new Gauge({ name: 'test_from_redis', help: 'read at scrape time', labelNames: ['scope'], registers: [metrics.registry] });
    let fail = false;
    metrics.scrapeCollectors.add({
      name: 'permits',
      read: async () => {
        if (fail) throw new Error('Connection is closed.');
        return 7;
      },
      show: (v) => gauge.set({ scope: 'global' }, v),
      omit: () => gauge.reset(),
    });
    registerHealthRoutes(app, { readiness: [], metrics });

    const healthy = await app.inject('/metrics');
    expect(healthy.statusCode).toBe(200);
    expect(healthy.body).toContain('test_from_redis{scope="global"} 7');
    expect(healthy.body).toContain('sluice_scrape_errors_total{collector="permits"} 0');

    fail = true;
    const failing = await app.inject('/metrics');
    expect(failing.statusCode).toBe(200);
    expect(failing.body).not.toContain('test_from_redis{');
    expect(failing.body).toContain('sluice_scrape_errors_total{collector="permits"} 1');
    expect(failing.body).toContain('sluice_process_');
  });
});
