import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AdaptiveConcurrencyConfig, SluiceConfig } from '../../../src/config/schema.js';
import type { RunRequested } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { AdaptiveLimitStore } from '../../../src/permits/adaptive-limit-store.js';
import type { AdaptiveBounds, LoadSignal } from '../../../src/permits/adaptive-limit-policy.js';
import { LeaseKeeper } from '../../../src/permits/lease-keeper.js';
import { LimitsStore } from '../../../src/permits/limits-store.js';
import { dependencyScope, runScopes } from '../../../src/permits/permit-scopes.js';
import { PermitStore } from '../../../src/permits/permit-store.js';
import { PermitWakeups } from '../../../src/permits/permit-wakeups.js';
import { RedisDependencyPermits } from '../../../src/permits/run-permits.js';
import { redisKeys } from '../../../src/redis/keys.js';
import type { LuaScripts } from '../../../src/redis/scripts.js';
import { testNamespace } from '../harness.js';
import { keySlot } from '../../../src/redis/key-slot.js';
import { closeScriptPair, openScriptPair, redisNowMs, REDIS_BACKENDS } from './redis-clients.js';

/**
 * adaptive-limit-update.lua against a real Redis, through AdaptiveLimitStore, and the adaptive
 * figure holding permits-acquire.lua's cap down, through PermitStore and RedisDependencyPermits.
 * Two connections stand in for two processors sharing one figure.
 */
const base = testNamespace('lua-adaptive');
const logger = createLogger('silent');
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let scriptsB: LuaScripts;
let n = 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const POLICY: AdaptiveConcurrencyConfig = { min: 2, decreaseFactor: 0.5, cooldownMs: 60_000, idleResetMs: 60_000 };
const BOUNDS: AdaptiveBounds = { min: 2, max: 10 };

/** Just the config the scope helpers read: dependency `llm` with a permit limit and adaptive concurrency. */
function configWith(permitLimit: number, adaptive: AdaptiveConcurrencyConfig | null = POLICY): SluiceConfig {
  return {
    limits: { global: 100, batchShare: 0.8 },
    tenants: { t1: { maxConcurrency: 100 } },
    workflows: { wf: { maxConcurrency: 100 } },
    dependencies: { llm: { maxConcurrency: permitLimit, adaptiveConcurrency: adaptive ?? undefined } },
  } as unknown as SluiceConfig;
}

function fresh() {
  const keys = redisKeys(`${base}${++n}.`);
  const storeA = new AdaptiveLimitStore(scriptsA, keys);
  const storeB = new AdaptiveLimitStore(scriptsB, keys);
  const apply = (signal: LoadSignal, opts: { store?: AdaptiveLimitStore; bounds?: AdaptiveBounds; policy?: Partial<AdaptiveConcurrencyConfig> } = {}) =>
    (opts.store ?? storeA).apply('llm', signal, opts.bounds ?? BOUNDS, { ...POLICY, ...opts.policy });
  const stored = async () => {
    const [limit, decreasedAt] = await a.hmget(keys.adaptiveLimit('llm'), 'limit', 'decreasedAt');
    return { limit: limit === null ? undefined : Number(limit), decreasedAt: decreasedAt === null ? undefined : Number(decreasedAt) };
  };
  return { keys, storeA, storeB, apply, stored };
}

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => ({ a, b, scriptsA, scriptsB } = await openScriptPair(backend)));
  afterAll(() => closeScriptPair(a, b, `*${base}*`));

  describe('adaptive-limit-update.lua', () => {
    it('starts an unset figure at max and returns the raw pair {figure as a string, cut}', async () => {
      const { keys } = fresh();
      expect(await scriptsA.run('adaptiveLimitUpdate', [keys.adaptiveLimit('llm')], ['success', 2, 10, 0.5, 1_000, 60_000])).toEqual(['10', 0]);
      expect(await scriptsA.run('adaptiveLimitUpdate', [keys.adaptiveLimit('llm')], ['congestion', 2, 10, 0.5, 1_000, 60_000])).toEqual(['5', 1]);
    });

    it('refuses a signal it does not know', async () => {
      const { keys } = fresh();
      await expect(scriptsA.run('adaptiveLimitUpdate', [keys.adaptiveLimit('llm')], ['slow', 2, 10, 0.5, 1_000, 60_000])).rejects.toThrow('unknown signal slow');
    });

    it('cuts multiplicatively on congestion, stamped with the server’s time', async () => {
      const { apply, stored } = fresh();
      const before = await redisNowMs(a);
      expect(await apply('congestion')).toEqual({ limit: 5, cut: true });
      const after = await redisNowMs(a);
      const { limit, decreasedAt } = await stored();
      expect(limit).toBe(5);
      expect(decreasedAt).toBeGreaterThanOrEqual(before);
      expect(decreasedAt).toBeLessThanOrEqual(after);
    });

    it('cuts once per cooldown however many calls show congestion, and again once it passed', async () => {
      const { apply } = fresh();
      const cooldown = { policy: { cooldownMs: 1_000 } };
      expect(await apply('congestion', cooldown)).toEqual({ limit: 5, cut: true });
      for (let i = 0; i < 5; i++) expect(await apply('congestion', cooldown)).toEqual({ limit: 5, cut: false });
      await sleep(1_050);
      expect(await apply('congestion', cooldown)).toEqual({ limit: 2.5, cut: true });
      expect(await apply('congestion', cooldown)).toEqual({ limit: 2.5, cut: false });
    });

    it('cuts at every congestion with a cooldown of 0', async () => {
      const { apply } = fresh();
      const results = [];
      for (let i = 0; i < 3; i++) results.push((await apply('congestion', { bounds: { min: 1, max: 16 }, policy: { cooldownMs: 0 } })).limit);
      expect(results).toEqual([8, 4, 2]);
    });

    it('never cuts below min', async () => {
      const { apply } = fresh();
      const noCooldown = { policy: { cooldownMs: 0 } };
      const results = [];
      for (let i = 0; i < 4; i++) results.push((await apply('congestion', noCooldown)).limit);
      expect(results).toEqual([5, 2.5, 2, 2]);
    });

    it('a cut stamped in the future (the clock went back) does not hold the next cut off', async () => {
      const { keys, apply } = fresh();
      await a.hset(keys.adaptiveLimit('llm'), 'limit', '8', 'decreasedAt', String((await redisNowMs(a)) + 3_600_000));
      expect(await apply('congestion')).toEqual({ limit: 4, cut: true });
    });

    it('grows by 1/figure per success, about one permit per figure’s worth of successes, up to max', async () => {
      const { keys, apply } = fresh();
      await a.hset(keys.adaptiveLimit('llm'), 'limit', '4');
      expect((await apply('success')).limit).toBeCloseTo(4.25, 10);
      for (let i = 0; i < 3; i++) await apply('success');
      const afterFour = (await apply('success')).limit;
      expect(afterFour).toBeGreaterThan(4.9);
      expect(afterFour).toBeLessThan(5.2);
      for (let i = 0; i < 200; i++) await apply('success');
      expect(await apply('success')).toEqual({ limit: 10, cut: false });
    });

    it('brings a figure outside new bounds back inside them', async () => {
      const { keys, apply } = fresh();
      await a.hset(keys.adaptiveLimit('llm'), 'limit', '30');
      expect(await apply('success')).toEqual({ limit: 10, cut: false });
      await a.hset(keys.adaptiveLimit('llm'), 'limit', '1');
      expect((await apply('success', { bounds: { min: 3, max: 10 } })).limit).toBeCloseTo(3 + 1 / 3, 10);
    });

    it('expires a figure left idle for idleResetMs, so it starts again from max; every call pushes that back', async () => {
      const { keys, apply, stored } = fresh();
      const idle = { policy: { idleResetMs: 2_000 } };
      await apply('congestion', idle);
      const ttl = await a.pttl(keys.adaptiveLimit('llm'));
      expect(ttl).toBeGreaterThan(1_500);
      expect(ttl).toBeLessThanOrEqual(2_000);
      await sleep(600);
      await apply('success', idle);
      expect(await a.pttl(keys.adaptiveLimit('llm'))).toBeGreaterThan(1_500);
      await sleep(1_000);
      expect((await stored()).limit).toBeCloseTo(5.2, 10);
      await sleep(1_100);
      expect(await stored()).toEqual({ limit: undefined, decreasedAt: undefined });
      expect(await apply('success', idle)).toEqual({ limit: 10, cut: false });
    });

    it('keeps every update of two racing processors, and cuts once for a burst both saw', async () => {
      const { keys, apply, storeA, storeB, stored } = fresh();
      await a.hset(keys.adaptiveLimit('llm'), 'limit', '4');
      await Promise.all(Array.from({ length: 40 }, (_, i) => apply('success', { store: i % 2 === 0 ? storeA : storeB })));
      let expected = 4;
      for (let i = 0; i < 40; i++) expected += 1 / expected;
      expect((await stored()).limit).toBeCloseTo(expected, 8);
      const cuts = await Promise.all(Array.from({ length: 20 }, (_, i) => apply('congestion', { store: i % 2 === 0 ? storeA : storeB })));
      expect(cuts.filter((c) => c.cut)).toHaveLength(1);
      expect((await stored()).limit).toBeCloseTo(expected / 2, 8);
    });

    it('keeps the figure in the permit slot, with the scopes and limits hash permits-acquire.lua reads with it', () => {
      for (const ns of ['', 'prod.', `${base}x.`]) {
        const keys = redisKeys(ns);
        const all = [keys.adaptiveLimit('llm'), keys.adaptiveLimit('other'), keys.permitLimits(), ...runScopes(configWith(4), keys, { tenantId: 't1', workflow: 'wf', runClass: 'batch' }).map((s) => s.key), dependencyScope(configWith(4), keys, 'llm').key];
        expect(new Set(all.map(keySlot)).size, all.join(' ')).toBe(1);
      }
    });
  });

  describe('permits-acquire.lua with an adaptive figure', () => {
    const TTL = 60_000;

    async function fill(store: PermitStore, scope: ReturnType<typeof dependencyScope>): Promise<number> {
      let granted = 0;
      while ((await store.tryAcquire([scope], TTL, `call-${granted}`)).granted) granted++;
      return granted;
    }

    it('grants the permit limit while no figure is stored and max is above it', async () => {
      const { keys } = fresh();
      expect(await fill(new PermitStore(scriptsA, keys), dependencyScope(configWith(4, { ...POLICY, max: 10 }), keys, 'llm'))).toBe(4);
    });

    it('grants max while no figure is stored and max is below the permit limit', async () => {
      const { keys } = fresh();
      expect(await fill(new PermitStore(scriptsA, keys), dependencyScope(configWith(8, { ...POLICY, max: 3 }), keys, 'llm'))).toBe(3);
    });

    it('holds the cap to the figure, rounded down, and reports that limit when full', async () => {
      const { keys, apply } = fresh();
      const config = configWith(10);
      const store = new PermitStore(scriptsA, keys);
      await apply('congestion', { policy: { cooldownMs: 0 } });
      await apply('congestion', { policy: { cooldownMs: 0 } });
      expect(await fill(store, dependencyScope(config, keys, 'llm'))).toBe(2);
      expect(await store.tryAcquire([dependencyScope(config, keys, 'llm')], TTL, 'more')).toMatchObject({ granted: false, blockedBy: 'dependency:llm', count: 2, limit: 2 });
    });

    it('takes the lower of the figure and the ramped or overridden permit limit', async () => {
      const { keys, apply } = fresh();
      const config = configWith(10);
      await apply('congestion');
      const store = new PermitStore(scriptsA, keys);
      expect(await fill(store, dependencyScope(config, keys, 'llm', 0.3))).toBe(3);
      // Overridden to 4 below the figure of 5: one more beside the 3 held.
      await new LimitsStore(b, keys).set('dependency:llm', 4);
      expect(await fill(store, dependencyScope(config, keys, 'llm'))).toBe(1);
      await new LimitsStore(b, keys).set('dependency:llm', 0);
      expect((await store.tryAcquire([dependencyScope(config, keys, 'llm')], TTL, 'closed')).granted).toBe(false);
    });

    it('ignores a figure for a scope that is not adaptive (the config turned it off)', async () => {
      const { keys, apply } = fresh();
      await apply('congestion');
      expect(await fill(new PermitStore(scriptsA, keys), dependencyScope(configWith(7, null), keys, 'llm'))).toBe(7);
    });

    it('applies the figure to the dependency scope alone when acquired with run scopes in one call', async () => {
      const { keys, apply } = fresh();
      const config = configWith(10);
      await apply('congestion', { policy: { cooldownMs: 0 } });
      await apply('congestion', { policy: { cooldownMs: 0 } });
      const store = new PermitStore(scriptsA, keys);
      const scopes = [...runScopes(config, keys, { tenantId: 't1', workflow: 'wf', runClass: 'interactive' }), dependencyScope(config, keys, 'llm')];
      let granted = 0;
      while ((await store.tryAcquire(scopes, TTL, `r-${granted}`)).granted) granted++;
      expect(granted).toBe(2);
      expect(await store.tryAcquire(scopes, TTL, 'more')).toMatchObject({ blockedBy: 'dependency:llm', limit: 2 });
      expect(await store.tryAcquire(runScopes(config, keys, { tenantId: 't1', workflow: 'wf', runClass: 'interactive' }), TTL, 'run-only')).toMatchObject({ granted: true });
    });
  });

  describe('RedisDependencyPermits under an adaptive figure', () => {
    it('lets waiting calls on two processors through as the figure grows back, never more than it at once', async () => {
      const { keys, apply } = fresh();
      const config = { ...configWith(6), processor: { permitLeaseMs: 30_000 } } as unknown as SluiceConfig;
      for (let i = 0; i < 3; i++) await apply('congestion', { bounds: { min: 1, max: 6 }, policy: { cooldownMs: 0 } });
      const processors = await Promise.all(
        [a, b].map(async (redis, i) => {
          const store = new PermitStore(i === 0 ? scriptsA : scriptsB, keys);
          const wakeups = new PermitWakeups(redis, { channel: keys.permitReleased(), logger, fallbackPollMs: 50 });
          await wakeups.start();
          const keeper = new LeaseKeeper(store, { ttlMs: 30_000, maxLeases: 100, logger });
          return { permits: new RedisDependencyPermits({ config, keys, store, keeper, wakeups, metrics: createMetrics(), logger }), keeper, wakeups };
        }),
      );
      try {
        const run = { runId: 'r', attempt: 1, deadline: Date.now() + 20_000 } as RunRequested;
        let inFlight = 0;
        let peak = 0;
        const peaks: number[] = [];
        const call = async (i: number) => {
          const release = await processors[i % 2]!.permits.acquire('llm', { ...run, runId: `r${i}` });
          inFlight++;
          peak = Math.max(peak, inFlight);
          await sleep(20);
          // As a processor does: the figure moves before the permit goes back.
          const after = await apply('success', { bounds: { min: 1, max: 6 } });
          peaks.push(Math.floor(after.limit));
          inFlight--;
          await release();
        };
        await Promise.all(Array.from({ length: 40 }, (_, i) => call(i)));
        // The figure started at 0.75 → min 1; it grows to 6 by the end.
        expect(peaks.at(-1)).toBe(6);
        expect(peak).toBeGreaterThan(1);
        expect(peak).toBeLessThanOrEqual(6);
      } finally {
        for (const p of processors) {
          p.keeper.stop();
          await p.wakeups.close();
        }
      }
    });
  });
});
