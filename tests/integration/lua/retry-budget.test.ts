import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisKeys } from '../../../src/redis/keys.js';
import type { LuaScripts } from '../../../src/redis/scripts.js';
import { testNamespace } from '../harness.js';
import { keySlot } from '../../../src/redis/key-slot.js';
import { closeScriptPair, openScriptPair, REDIS_BACKENDS } from './redis-clients.js';

/**
 * retry-budget-take.lua against a real Redis: two connections stand in for two processors that
 * share one dependency's budget.
 */
const ns = testNamespace('lua-retry-budget');
const keys = redisKeys(ns);
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let scriptsB: LuaScripts;
let n = 0;
const dependency = (label: string) => `${label}-${++n}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Budget {
  ratio: number;
  windowMs: number;
  minRetries: number;
}
const TEN_PERCENT: Budget = { ratio: 0.1, windowMs: 60_000, minRetries: 0 };

async function take(scripts: LuaScripts, dep: string, calls: number, retry: boolean, budget: Budget = TEN_PERCENT): Promise<{ allowed: boolean; calls: number; retries: number }> {
  const [allowed, inWindow, retries] = (await scripts.run('retryBudgetTake', [keys.retryBudget(dep)], [calls, retry ? 1 : 0, budget.ratio, budget.windowMs, 10, budget.minRetries])) as number[];
  return { allowed: allowed === 1, calls: inWindow!, retries: retries! };
}

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => {
    ({ a, b, scriptsA, scriptsB } = await openScriptPair(backend));
  });

  afterAll(async () => {
    await closeScriptPair(a, b, `*${ns}*`);
  });

  describe('retry-budget-take.lua', () => {
    it('counts reported calls without taking a retry when not asked to', async () => {
      const dep = dependency('report');
      expect(await take(scriptsA, dep, 40, false)).toEqual({ allowed: false, calls: 40, retries: 0 });
      expect(await take(scriptsB, dep, 60, false)).toEqual({ allowed: false, calls: 100, retries: 0 });
    });

    it('allows retries up to the ratio of every processor\'s calls, exactly, under concurrent takes from two connections', async () => {
      const dep = dependency('race');
      await take(scriptsA, dep, 50, false);
      await take(scriptsB, dep, 50, false);
      const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => take(i % 2 === 0 ? scriptsA : scriptsB, dep, 0, true)));
      expect(answers.filter((x) => x.allowed)).toHaveLength(10);
      const after = await take(scriptsA, dep, 0, false);
      expect(after).toEqual({ allowed: false, calls: 100, retries: 10 });
    });

    it('adds the calls sent with a retry request before deciding', async () => {
      const dep = dependency('with-calls');
      expect((await take(scriptsA, dep, 9, true)).allowed).toBe(false);
      expect(await take(scriptsA, dep, 1, true)).toEqual({ allowed: true, calls: 10, retries: 1 });
    });

    it('lets a quiet dependency retry up to the floor', async () => {
      const dep = dependency('floor');
      const budget = { ...TEN_PERCENT, minRetries: 2 };
      const answers = [];
      for (let i = 0; i < 3; i++) answers.push((await take(scriptsA, dep, 1, true, budget)).allowed);
      expect(answers).toEqual([true, true, false]);
    });

    it('frees the budget as the window slides past old calls and retries, and drops their fields', async () => {
      const dep = dependency('slide');
      const budget = { ratio: 0.5, windowMs: 400, minRetries: 0 };
      await take(scriptsA, dep, 2, false, budget);
      expect((await take(scriptsA, dep, 0, true, budget)).allowed).toBe(true);
      expect((await take(scriptsA, dep, 0, true, budget)).allowed).toBe(false);
      await sleep(450);
      expect(await take(scriptsB, dep, 2, true, budget)).toEqual({ allowed: true, calls: 2, retries: 1 });
      // Only the current bucket's fields are left.
      const fields = await a.hkeys(keys.retryBudget(dep));
      expect(new Set(fields.map((f) => f.split(':')[1])).size).toBe(1);
    });

    it('expires an idle window after the window and one bucket', async () => {
      const dep = dependency('expiry');
      const budget = { ratio: 0.1, windowMs: 300, minRetries: 0 };
      await take(scriptsA, dep, 5, false, budget);
      const ttl = await a.pttl(keys.retryBudget(dep));
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(330);
      await sleep(400);
      expect(await a.exists(keys.retryBudget(dep))).toBe(0);
    });

    it('writes nothing for a retry refused with no calls to add', async () => {
      const dep = dependency('nothing');
      expect((await take(scriptsA, dep, 0, true)).allowed).toBe(false);
      expect(await a.exists(keys.retryBudget(dep))).toBe(0);
    });

    it('keeps each dependency\'s window in its own slot, named by its hash tag', () => {
      expect(keys.retryBudget('anthropic')).toContain('{anthropic}');
      expect(keySlot(keys.retryBudget('anthropic'))).toBe(keySlot(keys.breaker('anthropic')));
    });
  });
});
