import { describe, expect, it } from 'vitest';
import { AdmissionController, type AdmissionRequest } from '../../../src/admission/admission-controller.js';
import type { AdmissionStore } from '../../../src/admission/admission-store.js';
import type { BucketTake } from '../../../src/admission/local-token-bucket.js';
import type { BacklogResult } from '../../../src/admission/admission-policy.js';
import { RedisOutageFallback } from '../../../src/admission/redis-outage.js';
import type { ServiceState } from '../../../src/admission/service-state.js';
import { loadConfig } from '../../../src/config/load.js';
import type { RedisOutageConfig, SluiceConfig, TenantConfig } from '../../../src/config/schema.js';
import { RESERVATION_MARKER_GRACE_MS, tokenPrior, type MeasuredTokens, type TokenBudget, type TokenChange } from '../../../src/admission/token-budget.js';
import type { TokenBudgetStore } from '../../../src/admission/token-budget-store.js';
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
  takeBudget?: (tenant: string, budget: TokenBudget, tokens: number) => Promise<BucketTake>;
  measured?: MeasuredTokens;
}

function controller(outage: RedisOutageConfig, script: StoreScript, cfg: SluiceConfig = config) {
  const store = {
    takeToken: script.takeToken ?? (async () => ({ allowed: true, tokensLeft: 10, waitMs: 0 })),
    admit: script.admit ?? (async () => ({ outcome: 'admitted', tenantCount: 0, classAhead: 0, allCount: 0 })),
    withdraw: async () => true,
  } as unknown as AdmissionStore;
  const state = { service: () => ({ ratePerSec: undefined, serviceTimeMs: undefined }), tokensPerRun: () => script.measured } as unknown as ServiceState;
  const metrics = createMetrics();
  const taken: number[] = [];
  const settled: Array<{ tenant: string; runId: string; until: number; giveBack: number; charge: number }> = [];
  const tokens = {
    take: async (tenant: string, budget: TokenBudget, n: number) => {
      const take = await (script.takeBudget?.(tenant, budget, n) ?? { allowed: true, tokensLeft: 0, waitMs: 0 });
      if (take.allowed) taken.push(n);
      return take;
    },
    settle: async (tenant: string, _budget: TokenBudget, run: { runId: string; until: number }, change: TokenChange) => {
      settled.push({ tenant, ...run, ...change });
      return { tokensLeft: 0, gaveBack: true };
    },
  } as unknown as TokenBudgetStore;
  const c = new AdmissionController(cfg, store, state, { all: () => new Map() }, metrics, new RedisOutageFallback(outage), createLogger('silent'), tokens);
  return { c, metrics, taken, settled };
}

const request = (now: number, over: Partial<AdmissionRequest> = {}): AdmissionRequest => ({
  runId: `r-${now}`,
  tenantId: 'tenant-a',
  tenant: config.tenants['tenant-a']!,
  workflowName: 'support-reply',
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

describe('AdmissionController token budgets', () => {
  const budget: TokenBudget = { tokensPerMinute: 600, burstTokens: 1_000 };
  const withBudget = (mode: 'enforce' | 'observe' = 'enforce'): SluiceConfig => {
    const tenant: TenantConfig = { ...config.tenants['tenant-a']!, admission: { ...config.tenants['tenant-a']!.admission, mode, tokenBudget: budget } };
    return { ...config, tenants: { ...config.tenants, 'tenant-a': tenant } };
  };
  const budgeted = (cfg: SluiceConfig, over: Partial<AdmissionRequest> = {}) => request(T0, { tenant: cfg.tenants['tenant-a']!, ...over });
  const prior = tokenPrior(config.workflows['support-reply']!, config.dependencies);
  const refuse = async () => ({ allowed: false, tokensLeft: 10, waitMs: 4_500 });
  const labels = async (metrics: ReturnType<typeof createMetrics>) => (await metrics.admissions.get()).values.map((v) => v.labels);

  it('a tenant without a budget takes nothing', async () => {
    const { c, taken } = controller(closed, {});
    expect(await c.decide(request(T0))).toEqual({ outcome: 'admitted', reason: 'capacity_available' });
    expect(taken).toEqual([]);
  });

  it('takes the prior until enough runs were measured, then the measured figure, and carries it on the decision', async () => {
    const cfg = withBudget();
    const cold = controller(closed, { measured: { perRun: 300.2, samples: 4 } }, cfg);
    expect(await cold.c.decide(budgeted(cfg))).toEqual({ outcome: 'admitted', reason: 'capacity_available', tokenReservation: Math.min(prior, 1_000) });
    const warm = controller(closed, { measured: { perRun: 300.2, samples: 5 } }, cfg);
    expect(await warm.c.decide(budgeted(cfg))).toEqual({ outcome: 'admitted', reason: 'capacity_available', tokenReservation: 301 });
  });

  it('a run bigger than the burst takes the burst', async () => {
    const cfg = withBudget();
    const { c, taken } = controller(closed, { measured: { perRun: 50_000, samples: 10 } }, cfg);
    expect((await c.decide(budgeted(cfg))).tokenReservation).toBe(1_000);
    expect(taken).toEqual([1_000]);
  });

  it('refused → 429 token_budget_exhausted with the bucket’s wait, counted, and the backlog is not asked', async () => {
    const cfg = withBudget();
    let asked = false;
    const { c, metrics } = controller(closed, { takeBudget: refuse, admit: async () => ((asked = true), { outcome: 'admitted', tenantCount: 0, classAhead: 0, allCount: 0 }) }, cfg);
    expect(await c.decide(budgeted(cfg))).toEqual({ outcome: 'deferred', reason: 'token_budget_exhausted', retryAfterSec: 5 });
    expect(asked).toBe(false);
    expect(await labels(metrics)).toEqual([{ tenant: 'tenant-a', class: 'interactive', outcome: 'deferred', reason: 'token_budget_exhausted' }]);
  });

  it('the request bucket refusing first: no tokens are taken', async () => {
    const cfg = withBudget();
    const { c, taken } = controller(closed, { takeToken: async () => ({ allowed: false, tokensLeft: 0, waitMs: 100 }) }, cfg);
    expect((await c.decide(budgeted(cfg))).reason).toBe('rate_limited');
    expect(taken).toEqual([]);
  });

  it('the backlog refusing after the take: the tokens are given back', async () => {
    const cfg = withBudget();
    const { c, settled } = controller(closed, { measured: { perRun: 200, samples: 9 }, admit: async () => ({ outcome: 'tenant_full', tenantCount: 500, classAhead: 0, allCount: 500 }) }, cfg);
    const d = await c.decide(budgeted(cfg));
    expect(d).toMatchObject({ outcome: 'deferred', reason: 'tenant_backlog_full' });
    expect(d.tokenReservation).toBeUndefined();
    expect(settled).toEqual([{ tenant: 'tenant-a', runId: `r-${T0}`, until: T0 + 30_000 + RESERVATION_MARKER_GRACE_MS, charge: 0, giveBack: 200 }]);
  });

  it('withdraw gives the reservation back with the backlog entry', async () => {
    const cfg = withBudget();
    const { c, settled } = controller(closed, {}, cfg);
    await c.withdraw({ runId: 'r', tenantId: 'tenant-a', runClass: 'interactive' }, { tokens: 321, deadline: T0 });
    await c.withdraw({ runId: 'r', tenantId: 'tenant-a', runClass: 'interactive' });
    expect(settled).toEqual([{ tenant: 'tenant-a', runId: 'r', until: T0 + RESERVATION_MARKER_GRACE_MS, charge: 0, giveBack: 321 }]);
  });

  it('observe mode counts the refusal and admits without a reservation', async () => {
    const cfg = withBudget('observe');
    const { c, metrics } = controller(closed, { takeBudget: refuse }, cfg);
    expect(await c.decide(budgeted(cfg))).toEqual({ outcome: 'admitted', reason: 'capacity_available' });
    expect((await metrics.admissionObserved.get()).values.map((v) => v.labels)).toEqual([{ tenant: 'tenant-a', class: 'interactive', outcome: 'deferred', reason: 'token_budget_exhausted' }]);
  });

  it('the budget failing with Redis down follows the outage policy', async () => {
    const cfg = withBudget();
    const { c } = controller(closed, { takeBudget: () => Promise.reject(redisDown()) }, cfg);
    expect(await c.decide(budgeted(cfg))).toEqual({ outcome: 'rejected', reason: 'overloaded', retryAfterSec: 2, redisOutage: true });
  });
});

describe('AdmissionController reserves provider turns', () => {
  function withPacer(answer: (dependency: string) => { reserved: boolean; waitMs: number; heldByShare: boolean }, service: { serviceTimeMs?: number } = {}, cfg: SluiceConfig = config, batchOnly = false) {
    const booked: Array<{ dependency: string; calls: number; maxWaitMs: number }> = [];
    const givenBack: Array<{ dependency: string; tenant: string; calls: number }> = [];
    const withdrawn: string[] = [];
    const store = {
      takeToken: async () => ({ allowed: true, tokensLeft: 10, waitMs: 0 }),
      admit: async () => ({ outcome: 'admitted', tenantCount: 0, classAhead: 0, allCount: 0 }),
      withdraw: async (run: { runId: string }) => (withdrawn.push(run.runId), true),
    } as unknown as AdmissionStore;
    const state = { service: () => ({ ratePerSec: undefined, serviceTimeMs: service.serviceTimeMs }), tokensPerRun: () => undefined } as unknown as ServiceState;
    const pacer = {
      bookTurns: async (dependency: string, calls: number, _run: unknown, maxWaitMs: number) => (booked.push({ dependency, calls, maxWaitMs }), answer(dependency)),
      giveBack: async (dependency: string, tenant: string, calls: number) => void givenBack.push({ dependency, tenant, calls }),
      batchMayReserveAhead: () => batchOnly,
    };
    const tokens = {} as TokenBudgetStore;
    const metrics = createMetrics();
    const c = new AdmissionController(cfg, store, state, { all: () => new Map() }, metrics, new RedisOutageFallback(closed), createLogger('silent'), tokens, pacer);
    return { c, booked, givenBack, withdrawn, metrics };
  }

  it('admits with the turns of both LLM steps, due when the pacer said, within half an interactive run’s time less its service time', async () => {
    const { c, booked } = withPacer(() => ({ reserved: true, waitMs: 250, heldByShare: false }), { serviceTimeMs: 400 });
    const d = await c.decide(request(T0, { deadline: T0 + 2_000 }));
    expect(d).toMatchObject({ outcome: 'admitted', prepaidTurns: [{ dependency: 'anthropic', calls: 2, notBefore: T0 + 250 }] });
    expect(booked).toEqual([{ dependency: 'anthropic', calls: 2, maxWaitMs: 1_000 }]);
  });

  it('refuses a run whose turns come too late with 503 deadline_unreachable and takes its backlog entry back', async () => {
    const { c, withdrawn, metrics } = withPacer(() => ({ reserved: false, waitMs: 3_400, heldByShare: false }), { serviceTimeMs: 400 });
    expect(await c.decide(request(T0, { deadline: T0 + 2_000 }))).toEqual({ outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec: 3 });
    expect(withdrawn).toEqual([`r-${T0}`]);
    expect((await metrics.admissions.get()).values).toEqual([expect.objectContaining({ value: 1, labels: { tenant: 'tenant-a', class: 'interactive', outcome: 'rejected', reason: 'deadline_unreachable' } })]);
  });

  it('tells a tenant its share holds its turns with 429 rate_limited, and gives back what another dependency reserved', async () => {
    const dependencies = { ...config.dependencies, 'order-lookup': { ...config.dependencies['order-lookup']!, rateLimit: { requestsPerSecond: 5, burstSeconds: 1 } } };
    const answer = (d: string) => (d === 'anthropic' ? { reserved: true, waitMs: 0, heldByShare: false } : { reserved: false, waitMs: 20_000, heldByShare: true });
    const { c, givenBack } = withPacer(answer, {}, { ...config, dependencies });
    expect(await c.decide(request(T0))).toMatchObject({ outcome: 'deferred', reason: 'rate_limited' });
    expect(givenBack).toEqual([{ dependency: 'anthropic', tenant: 'tenant-a', calls: 2 }]);
  });

  it('admits a batch run whose turns are not soon but in time without them, and refuses one past its deadline', async () => {
    const later = withPacer(() => ({ reserved: false, waitMs: 20_000, heldByShare: false }), { serviceTimeMs: 500 });
    const batch = { runClass: 'batch' as const, deadline: T0 + 60_000 };
    const d = await later.c.decide(request(T0, batch));
    expect(d.outcome).toBe('admitted');
    expect(d.prepaidTurns).toBeUndefined();
    expect(later.booked).toEqual([{ dependency: 'anthropic', calls: 2, maxWaitMs: config.processor.pacing.maxInlineWaitMs }]);
    const tooLate = withPacer(() => ({ reserved: false, waitMs: 70_000, heldByShare: false }), { serviceTimeMs: 500 });
    expect(await tooLate.c.decide(request(T0, batch))).toEqual({ outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec: 11 });
  });

  it('has a batch run of a tenant asking for no interactive turns reserve all it may wait for', async () => {
    const { c, booked } = withPacer(() => ({ reserved: true, waitMs: 20_000, heldByShare: false }), { serviceTimeMs: 500 }, config, true);
    expect(await c.decide(request(T0, { runClass: 'batch', deadline: T0 + 60_000 }))).toMatchObject({ outcome: 'admitted', prepaidTurns: [{ dependency: 'anthropic', calls: 2, notBefore: T0 + 20_000 }] });
    expect(booked).toEqual([{ dependency: 'anthropic', calls: 2, maxWaitMs: 59_500 }]);
  });

  it('gives the turns back with the backlog entry when a run admitted never reached Kafka', async () => {
    const { c, givenBack, withdrawn } = withPacer(() => ({ reserved: true, waitMs: 0, heldByShare: false }));
    await c.withdraw({ runId: 'r1', tenantId: 'tenant-a', runClass: 'interactive' }, undefined, [{ dependency: 'anthropic', calls: 2, notBefore: T0 }]);
    expect(withdrawn).toEqual(['r1']);
    expect(givenBack).toEqual([{ dependency: 'anthropic', tenant: 'tenant-a', calls: 2 }]);
  });
});
