import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenBudgetStore } from '../../../src/admission/token-budget-store.js';
import { TOKEN_ESTIMATE_WEIGHT } from '../../../src/admission/token-budget.js';
import { redisKeys } from '../../../src/redis/keys.js';
import { testNamespace } from '../harness.js';
import { keySlot } from './cluster-slot.js';
import { closeScriptPair, openScriptPair } from './redis-clients.js';

/**
 * token-bucket-settle.lua and token-estimate-fold.lua against a real Redis, with two connections
 * standing in for two processors (and token-bucket-take.lua on the same budget key, as admission).
 */
const ns = testNamespace('lua-budget');
const keys = redisKeys(ns);
let a: Redis;
let b: Redis;
let storeA: TokenBudgetStore;
let storeB: TokenBudgetStore;
let n = 0;
const unique = (label: string) => `${label}-${++n}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// Slow refill (1 token/s) unless a test says otherwise, so arithmetic is exact within a test.
const slow = { tokensPerMinute: 60, burstTokens: 1_000 };

beforeAll(async () => {
  const pair = await openScriptPair();
  [a, b] = [pair.a, pair.b];
  storeA = new TokenBudgetStore(pair.scriptsA, keys);
  storeB = new TokenBudgetStore(pair.scriptsB, keys);
});

afterAll(async () => {
  await closeScriptPair(a, b, `*${ns}*`);
});

describe('token-bucket-settle.lua', () => {
  it('a new budget starts full; giving back never exceeds the burst', async () => {
    const t = unique('full');
    expect(await storeA.settle(t, slow, 500)).toBe(1_000);
    expect(await storeA.take(t, slow, 400)).toMatchObject({ allowed: true });
    expect(Math.floor(await storeA.settle(t, slow, 150))).toBe(750);
    expect(await storeA.settle(t, slow, 10_000)).toBe(1_000);
  });

  it('charges below zero down to -burst, and a take then waits for the debt to refill', async () => {
    const t = unique('debt');
    const fast = { tokensPerMinute: 60_000, burstTokens: 1_000 }; // 1 000 tokens/s
    expect(await storeA.settle(t, fast, -1_500)).toBeLessThan(-490);
    expect(await storeA.settle(t, fast, -100_000)).toBe(-1_000);
    const refused = await storeA.take(t, fast, 200);
    expect(refused.allowed).toBe(false);
    // From about -1 000 to 200 at 1 000/s: about 1.2 s.
    expect(refused.waitMs).toBeGreaterThan(1_100);
    expect(refused.waitMs).toBeLessThanOrEqual(1_200);
  });

  it('refills for the time elapsed before correcting', async () => {
    const t = unique('refill');
    const fast = { tokensPerMinute: 60_000, burstTokens: 1_000 };
    await storeA.settle(t, fast, -2_000);
    await sleep(300);
    const left = await storeA.settle(t, fast, 0);
    expect(left).toBeGreaterThan(-1_000 + 250);
    expect(left).toBeLessThan(-1_000 + 600);
  });

  it('settlements from two connections at once all land', async () => {
    const t = unique('race');
    await storeA.take(t, slow, 1_000);
    await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? storeA : storeB).settle(t, slow, i % 2 === 0 ? 7 : -3)));
    // 50 × 7 − 50 × 3 = 200, plus at most a few tokens of refill during the test.
    const left = await storeA.settle(t, slow, 0);
    expect(left).toBeGreaterThanOrEqual(200);
    expect(left).toBeLessThan(215);
  });

  it('keeps the key until the budget would be full again, longer when it is in debt', async () => {
    const t = unique('ttl');
    const budget = { tokensPerMinute: 6_000, burstTokens: 1_000 }; // 100/s: full after 10 s
    await storeA.settle(t, budget, -500);
    const half = await a.pttl(keys.tokenBudget(t));
    expect(half).toBeGreaterThan(5_000);
    expect(half).toBeLessThanOrEqual(6_000);
    await storeA.settle(t, budget, -1_500);
    const debt = await a.pttl(keys.tokenBudget(t));
    expect(debt).toBeGreaterThan(20_000);
    expect(debt).toBeLessThanOrEqual(21_000);
    // A take on a budget in debt keeps it as long (token-bucket-take.lua shares the key).
    await storeA.take(t, budget, 1);
    expect(await a.pttl(keys.tokenBudget(t))).toBeGreaterThan(20_000);
  });

  it('expires: an idle budget comes back full', async () => {
    const t = unique('expiry');
    const quick = { tokensPerMinute: 60_000_000, burstTokens: 10 }; // full again within a ms, key kept ~1 s
    await storeA.settle(t, quick, -10);
    await sleep(1_300);
    expect(await a.exists(keys.tokenBudget(t))).toBe(0);
  });

  it('keeps the budget in the tenant’s slot, with its request bucket', () => {
    expect(keySlot(keys.tokenBudget('acme'))).toBe(keySlot(keys.tenantBucket('acme')));
  });
});

describe('token-estimate-fold.lua', () => {
  it('the first run sets the figure; later runs move it by the weight', async () => {
    const wf = unique('wf');
    expect(await storeA.fold(wf, 1_000)).toEqual({ perRun: 1_000, samples: 1 });
    expect(await storeA.fold(wf, 2_000)).toEqual({ perRun: 1_000 + TOKEN_ESTIMATE_WEIGHT * 1_000, samples: 2 });
    expect(await a.hgetall(keys.tokenEstimate(wf))).toEqual({ per_run: String(1_000 + TOKEN_ESTIMATE_WEIGHT * 1_000), samples: '2' });
  });

  it('folds from two connections at once without losing a sample', async () => {
    const wf = unique('race');
    await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? storeA : storeB).fold(wf, 500)));
    expect(await storeA.fold(wf, 500)).toEqual({ perRun: 500, samples: 101 });
  });

  it('is kept for a week after the last completed run', async () => {
    const wf = unique('ttl');
    await storeA.fold(wf, 10);
    const pttl = await a.pttl(keys.tokenEstimate(wf));
    expect(pttl).toBeGreaterThan(7 * 86_400_000 - 5_000);
    expect(pttl).toBeLessThanOrEqual(7 * 86_400_000);
  });

  it('every workflow’s estimate is in the admission slot, read in one pipeline with the service rates', () => {
    expect(keySlot(keys.tokenEstimate('support-reply'))).toBe(keySlot(keys.serviceStats('interactive')));
  });
});
