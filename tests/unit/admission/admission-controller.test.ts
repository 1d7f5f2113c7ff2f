import { describe, expect, it } from 'vitest';
import { AdmissionController, type AdmissionRequest } from '../../../src/admission/admission-controller.js';
import type { AdmissionStore, BucketTake } from '../../../src/admission/admission-store.js';
import type { BacklogResult } from '../../../src/admission/admission-policy.js';
import { RedisOutageFallback } from '../../../src/admission/redis-outage.js';
import type { ServiceState } from '../../../src/admission/service-state.js';
import { loadConfig } from '../../../src/config/load.js';
import type { RedisOutageConfig } from '../../../src/config/schema.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';

/**
 * The controller's handling of Redis failing under it: the outage policy decides, and only
 * infrastructure failures are treated as an outage. The Redis scripts themselves are tested
 * against Redis in tests/integration/lua.
 */
const config = loadConfig({ env: {} });
const T0 = 1_767_225_600_000;
const redisDown = () => Object.assign(new Error('Reached the max retries per request limit (which is 1).'), { name: 'MaxRetriesPerRequestError' });

interface StoreScript {
  takeToken?: () => Promise<BucketTake>;
  admit?: () => Promise<BacklogResult>;
}

function controller(outage: RedisOutageConfig, script: StoreScript) {
  const store = {
    takeToken: script.takeToken ?? (async () => ({ allowed: true, tokensLeft: 10, waitMs: 0 })),
    admit: script.admit ?? (async () => ({ outcome: 'admitted', tenantCount: 0, classAhead: 0, allCount: 0 })),
    withdraw: async () => true,
  } as unknown as AdmissionStore;
  const state = { service: () => ({ ratePerSec: undefined, serviceTimeMs: undefined }) } as unknown as ServiceState;
  const metrics = createMetrics();
  const c = new AdmissionController(config, store, state, { all: () => new Map() }, metrics, new RedisOutageFallback(outage), createLogger('silent'));
  return { c, metrics };
}

const request = (now: number, over: Partial<AdmissionRequest> = {}): AdmissionRequest => ({
  runId: `r-${now}`,
  tenantId: 'tenant-a',
  tenant: config.tenants['tenant-a']!,
  workflow: config.workflows['support-reply']!,
  runClass: 'interactive',
  deadline: now + 30_000,
  now,
  idempotencyKey: false,
  ...over,
});

const closed: RedisOutageConfig = { policy: 'fail-closed', localBucket: { capacity: 5, refillPerSec: 0 }, maxAdmittedPerOutage: 100 };
const open: RedisOutageConfig = { policy: 'fail-open', localBucket: { capacity: 5, refillPerSec: 0 }, maxAdmittedPerOutage: 3 };

describe('AdmissionController when Redis fails', () => {
  it('fail-closed: the token bucket or the backlog failing → 503 overloaded, counted per decision', async () => {
    for (const script of [{ takeToken: () => Promise.reject(redisDown()) }, { admit: () => Promise.reject(new Error('Command timed out')) }]) {
      const { c, metrics } = controller(closed, script);
      expect(await c.decide(request(T0))).toEqual({ outcome: 'rejected', reason: 'overloaded', retryAfterSec: 2, redisOutage: true });
      expect((await metrics.admissionOutageDecisions.get()).values).toEqual([expect.objectContaining({ value: 1, labels: { dependency: 'redis', policy: 'fail-closed', outcome: 'refused' } })]);
      expect((await metrics.admissions.get()).values).toEqual([expect.objectContaining({ value: 1, labels: { tenant: 'tenant-a', class: 'interactive', outcome: 'rejected', reason: 'overloaded' } })]);
    }
  });

  it('fail-open: admits up to the per-outage bound, then refuses; a keyed request is refused throughout', async () => {
    const { c, metrics } = controller(open, { takeToken: () => Promise.reject(redisDown()) });
    expect((await c.decide(request(T0, { idempotencyKey: true }))).outcome).toBe('rejected');
    const outcomes = [];
    for (let i = 0; i < 5; i++) outcomes.push((await c.decide(request(T0 + i))).outcome);
    expect(outcomes).toEqual(['admitted', 'admitted', 'admitted', 'rejected', 'rejected']);
    const counted = Object.fromEntries((await metrics.admissionOutageDecisions.get()).values.map((v) => [v.labels.outcome, v.value]));
    expect(counted).toEqual({ idempotency_key_refused: 1, admitted: 3, bound_reached: 2 });
  });

  it('the outage ends when Redis answers: the bound starts again for the next outage', async () => {
    let down = true;
    const { c } = controller(open, { takeToken: async () => (down ? Promise.reject(redisDown()) : { allowed: true, tokensLeft: 1, waitMs: 0 }) });
    for (let i = 0; i < 3; i++) await c.decide(request(T0 + i));
    expect((await c.decide(request(T0 + 3))).outcome).toBe('rejected');
    down = false;
    expect(await c.decide(request(T0 + 4))).toEqual({ outcome: 'admitted', reason: 'capacity_available' });
    down = true;
    // A new outage: the bound is fresh, the local bucket (capacity 5, no refill) has 2 tokens left.
    const outcomes = [];
    for (let i = 0; i < 3; i++) outcomes.push((await c.decide(request(T0 + 10 + i))).outcome);
    expect(outcomes).toEqual(['admitted', 'admitted', 'deferred']);
  });

  it('a bug in the Redis path is not an outage: it propagates', async () => {
    const { c, metrics } = controller(open, { admit: () => Promise.reject(new TypeError('cannot read properties of undefined')) });
    await expect(c.decide(request(T0))).rejects.toThrow(TypeError);
    expect((await metrics.admissionOutageDecisions.get()).values).toEqual([]);
  });

  it('redisUnreachable answers the Idempotency-Key claim failing: refused under either policy', () => {
    for (const outage of [closed, open]) {
      const { c } = controller(outage, {});
      expect(c.redisUnreachable({ tenantId: 'tenant-a', runClass: 'batch', idempotencyKey: true, now: T0 }, redisDown())).toMatchObject({ outcome: 'rejected', reason: 'overloaded', retryAfterSec: 2 });
    }
  });
});

describe('AdmissionController backlog bounds', () => {
  it('exports the bounds it admits against: each tenant’s and the global one, from config', async () => {
    const { metrics } = controller(closed, {});
    const tenants = Object.fromEntries((await metrics.backlogLimit.get()).values.map((v) => [v.labels.tenant, v.value]));
    expect(tenants).toEqual(Object.fromEntries(Object.entries(config.tenants).map(([id, t]) => [id, t.admission.maxBacklog])));
    expect((await metrics.globalBacklogLimit.get()).values).toEqual([expect.objectContaining({ value: config.admission.maxBacklog })]);
  });
});
