import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DependencyReports } from '../../src/api/console/dependencies.js';
import { BreakerStore } from '../../src/breakers/breaker-store.js';
import { ownEntry } from '../../src/config/lookup.js';
import { loadConfig } from '../../src/config/load.js';
import { PacingStore } from '../../src/pacing/pacing-store.js';
import type { RedisClient } from '../../src/redis/client.js';
import { redisKeys } from '../../src/redis/keys.js';
import type { LuaScripts } from '../../src/redis/scripts.js';
import { testNamespace } from './harness.js';
import { closeScriptPair, openScriptPair, redisNowMs, REDIS_BACKENDS } from './lua/redis-clients.js';

/**
 * DependencyReports against a real Redis: what the breaker, pacing and retry-budget scripts write
 * is what the Dependencies page and `GET /v1/admin/breakers` report, read in one transaction per
 * dependency (on a cluster too: every key carries the dependency's tag).
 */
const base = testNamespace('dependency-reports');
const config = loadConfig({ env: {} });
let a: RedisClient;
let b: RedisClient;
let scripts: LuaScripts;
let n = 0;

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => ({ a, b, scriptsA: scripts } = await openScriptPair(backend)));
  afterAll(() => closeScriptPair(a, b, `*${base}*`));

  const fresh = () => {
    const keys = redisKeys(`${base}${++n}.`);
    return { keys, reports: new DependencyReports(b, keys, config), breakers: new BreakerStore(scripts, keys, (d) => ownEntry(config.dependencies, d)?.breaker), pacing: new PacingStore(scripts, keys) };
  };

  it('reports every configured dependency as closed and unused before anything was written', async () => {
    const { reports } = fresh();
    const all = await reports.all();
    expect(all.map((r) => r.dependency)).toEqual(Object.keys(config.dependencies));
    const llm = all.find((r) => r.dependency === 'anthropic')!;
    expect(llm.breaker).toMatchObject({ state: 'closed', retryAt: null, forced: null, probesInFlight: 0, window: { calls: 0, failures: 0, slowCalls: 0 } });
    expect(llm.retryBudget).toMatchObject({ calls: 0, retries: 0 });
    expect(Math.abs(llm.at - (await redisNowMs(a)))).toBeLessThan(1_000);
  });

  it('reports the window the breaker scripts filled, the force in place, the pacing booked and the retry budget spent', async () => {
    const { keys, reports, breakers, pacing } = fresh();
    const dep = config.dependencies.anthropic!;
    await breakers.record('anthropic', undefined, 'failure', 1);
    await breakers.record('anthropic', undefined, 'success', dep.breaker.slowCallMs + 1);
    await breakers.tally('anthropic', 3);
    const forced = await breakers.force('anthropic', 'closed', 60_000);
    await pacing.reserve('anthropic', [{ bucket: 'requests', perMinute: 600, cost: 1 }], { maxWaitMs: 0, burstMs: 1_000, keepMs: 60_000, share: 1, reserve: 0 });
    await scripts.run('retryBudgetTake', [keys.retryBudget('anthropic')], [40, 1, dep.retry.budgetRatio, dep.retry.budgetWindowMs, 10, dep.retry.budgetMinRetries]);
    const r = await reports.one('anthropic');
    expect(r.breaker).toMatchObject({ state: 'closed', forced, window: { calls: 5, failures: 1, slowCalls: 1 }, policy: { failureRateThreshold: dep.breaker.failureRateThreshold } });
    expect(r.retryBudget).toMatchObject({ calls: 40, retries: 1 });
    // No rateLimit configured and none observed: the LLM's buckets are charged but limit nothing, so none is reported.
    expect(r.pacing).toEqual({ buckets: [], notBefore: null });
    await pacing.observe('anthropic', [{ bucket: 'requests', perMinute: 600, capacity: 0 }], (await redisNowMs(a)) + 30_000, 60_000);
    await pacing.reserve('anthropic', [{ bucket: 'requests', perMinute: 0, cost: 1 }], { maxWaitMs: 60_000, burstMs: 1_000, keepMs: 60_000, share: 1, reserve: 0 });
    const paced = await reports.one('anthropic');
    expect(paced.pacing.buckets).toEqual([expect.objectContaining({ bucket: 'requests', perMinute: 600, source: 'observed', burst: 10 })]);
    expect(paced.pacing.buckets[0]!.used).toBeGreaterThan(0);
    expect(paced.pacing.notBefore).toBeGreaterThan(paced.at);
  });

  it('reports an open breaker with its retryAt, and refuses a dependency not configured', async () => {
    const { reports, breakers } = fresh();
    for (let i = 0; i < config.dependencies['order-lookup']!.breaker.minimumCalls; i++) await breakers.record('order-lookup', undefined, 'failure', 1);
    const r = await reports.one('order-lookup');
    expect(r.breaker.state).toBe('open');
    expect(r.breaker.retryAt).toBeGreaterThan(r.at);
    await expect(reports.one('nobody')).rejects.toThrow(RangeError);
  });
});
