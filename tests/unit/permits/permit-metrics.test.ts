import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { configuredScopes, registerPermitGauges } from '../../../src/permits/permit-metrics.js';
import { redisKeys } from '../../../src/redis/keys.js';
import type { RedisClient } from '../../../src/redis/client.js';

describe('configuredScopes', () => {
  it('lists global, the batch share and every configured tenant, workflow and dependency with its default limit', () => {
    const config = loadConfig({ env: {} });
    const scopes = Object.fromEntries(configuredScopes(config).map((s) => [s.name, s.defaultLimit]));
    expect(scopes.global).toBe(config.limits.global);
    expect(scopes['class:batch']).toBe(Math.floor(config.limits.global * config.limits.batchShare));
    expect(scopes['tenant:tenant-a']).toBe(config.tenants['tenant-a']!.maxConcurrency);
    expect(scopes['workflow:report-digest']).toBe(config.workflows['report-digest']!.maxConcurrency);
    expect(scopes['dependency:anthropic']).toBe(config.dependencies.anthropic!.maxConcurrency);
    expect(Object.keys(scopes)).toHaveLength(2 + 3 + 3 + 5);
  });
});

/**
 * A Redis stand-in: in the pipeline HGETALL answers the overrides, every ZCOUNT `held`, HGET of an
 * adaptive figure its `figures` entry or nothing; HMGET (outside it: each breaker hash is in its
 * own cluster slot) of a breaker hash its `breakers` entry (state, closedAt) or nothing; `fail`
 * rejects as a lost connection does.
 */
function fakeRedis(state: { overrides: Record<string, string>; held: number; fail: boolean; breakers?: Record<string, [string, string]>; figures?: Record<string, string> }): Pick<RedisClient, 'pipeline' | 'hmget'> {
  return {
    hmget: async (key: string) => {
      if (state.fail) throw new Error('Connection is closed.');
      return state.breakers?.[key] ?? [null, null];
    },
    pipeline: () => {
      const replies: [Error | null, unknown][] = [];
      const p = {
        hgetall: () => (replies.push([null, state.overrides]), p),
        zcount: () => (replies.push([null, String(state.held)]), p),
        hget: (key: string) => (replies.push([null, state.figures?.[key] ?? null]), p),
        exec: async () => {
          if (state.fail) throw new Error('Connection is closed.');
          return replies;
        },
      };
      return p;
    },
  } as unknown as Pick<RedisClient, 'pipeline' | 'hmget'>;
}

describe('registerPermitGauges', () => {
  it('shows in-use counts and limits (with run-time overrides) from one pipeline per scrape', async () => {
    const config = loadConfig({ env: {} });
    const metrics = createMetrics();
    registerPermitGauges(metrics, fakeRedis({ overrides: { 'tenant:tenant-a': '3', global: '10' }, held: 2, fail: false }), redisKeys(''), config);
    expect(await metrics.scrapeCollectors.collect()).toEqual([]);
    const text = await metrics.registry.metrics();
    expect(text).toContain('sluice_permits_in_use{scope="tenant:tenant-a"} 2');
    expect(text).toContain('sluice_permit_limit{scope="tenant:tenant-a"} 3');
    expect(text).toContain('sluice_permit_limit{scope="global"} 10');
    expect(text).toContain(`sluice_permit_limit{scope="class:batch"} ${Math.floor(10 * config.limits.batchShare)}`);
    expect(text).toContain(`sluice_permit_limit{scope="tenant:tenant-b"} ${config.tenants['tenant-b']!.maxConcurrency}`);
  });

  it('shows the cap in force of each dependency: the permit limit, at its ramp-up share while its breaker has just closed', async () => {
    const config = loadConfig({ env: {} });
    config.dependencies.anthropic!.breaker.rampUp = { initialFraction: 0.25, stepFraction: 0.25, intervalMs: 60_000 };
    config.dependencies['order-lookup']!.breaker.rampUp = { initialFraction: 0.25, stepFraction: 0.25, intervalMs: 60_000 };
    const keys = redisKeys('');
    const metrics = createMetrics();
    const breakers = { [keys.breaker('anthropic')]: ['closed', String(Date.now() - 1_000)], [keys.breaker('order-lookup')]: ['open', String(Date.now())] } as Record<string, [string, string]>;
    registerPermitGauges(metrics, fakeRedis({ overrides: { 'dependency:anthropic': '12' }, held: 0, fail: false, breakers }), keys, config);
    await metrics.scrapeCollectors.collect();
    const text = await metrics.registry.metrics();
    expect(text).toContain('sluice_dependency_limit{dependency="anthropic"} 3');
    expect(text).toContain(`sluice_dependency_limit{dependency="order-lookup"} ${config.dependencies['order-lookup']!.maxConcurrency}`);
    expect(text).toContain(`sluice_dependency_limit{dependency="report"} ${config.dependencies.report!.maxConcurrency}`);
  });

  it('holds a dependency with adaptive concurrency to its figure (rounded down; max while unset) below its ramped limit', async () => {
    const config = loadConfig({ env: {} });
    const anthropic = config.dependencies.anthropic!;
    anthropic.breaker.rampUp = { initialFraction: 0.5, stepFraction: 0.5, intervalMs: 60_000 };
    anthropic.adaptiveConcurrency = { min: 1, decreaseFactor: 0.7, cooldownMs: 1_000, idleResetMs: 60_000 };
    config.dependencies.report!.adaptiveConcurrency = { min: 1, max: 2, decreaseFactor: 0.7, cooldownMs: 1_000, idleResetMs: 60_000 };
    const keys = redisKeys('');
    const metrics = createMetrics();
    const state = { overrides: { 'dependency:anthropic': '20' }, held: 0, fail: false, breakers: { [keys.breaker('anthropic')]: ['closed', String(Date.now() - 1_000)] } as Record<string, [string, string]>, figures: { [keys.adaptiveLimit('anthropic')]: '4.7' } };
    registerPermitGauges(metrics, fakeRedis(state), keys, config);
    await metrics.scrapeCollectors.collect();
    let text = await metrics.registry.metrics();
    expect(text).toContain('sluice_dependency_limit{dependency="anthropic"} 4');
    expect(text).toContain('sluice_dependency_limit{dependency="report"} 2');
    state.figures = { [keys.adaptiveLimit('anthropic')]: '15.2' };
    await metrics.scrapeCollectors.collect();
    text = await metrics.registry.metrics();
    expect(text).toContain('sluice_dependency_limit{dependency="anthropic"} 10');
  });

  it('leaves both gauges out of a scrape Redis cannot answer, counts it, and shows them again once it can', async () => {
    const metrics = createMetrics();
    const state = { overrides: {}, held: 1, fail: false };
    registerPermitGauges(metrics, fakeRedis(state), redisKeys(''), loadConfig({ env: {} }));
    await metrics.scrapeCollectors.collect();
    expect(await metrics.registry.metrics()).toContain('sluice_permits_in_use{scope="global"} 1');

    state.fail = true;
    expect(await metrics.scrapeCollectors.collect()).toHaveLength(1);
    const text = await metrics.registry.metrics();
    expect(text).not.toContain('sluice_permits_in_use{');
    expect(text).not.toContain('sluice_permit_limit{');
    expect(text).not.toContain('sluice_dependency_limit{');
    expect(text).toContain('sluice_scrape_errors_total{collector="permits"} 1');

    state.fail = false;
    await metrics.scrapeCollectors.collect();
    expect(await metrics.registry.metrics()).toContain('sluice_permits_in_use{scope="global"} 1');
  });
});
