import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenBudgetStore } from '../../../src/admission/token-budget-store.js';
import { TOKEN_ESTIMATE_WEIGHT, type TokenBudget } from '../../../src/admission/token-budget.js';
import { redisKeys } from '../../../src/redis/keys.js';
import { testNamespace } from '../harness.js';
import { keySlot } from '../../../src/redis/key-slot.js';
import { closeScriptPair, openScriptPair, redisNowMs, REDIS_BACKENDS } from './redis-clients.js';

/**
 * token-bucket-settle.lua and token-estimate-fold.lua against a real Redis, with two connections
 * standing in for two processors (and token-bucket-take.lua on the same budget key, as admission).
 */
const ns = testNamespace('lua-budget');
const keys = redisKeys(ns);
let a: RedisClient;
let b: RedisClient;
let storeA: TokenBudgetStore;
let storeB: TokenBudgetStore;
let n = 0;
const unique = (label: string) => `${label}-${++n}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// Slow refill (1 token/s) unless a test says otherwise, so arithmetic is exact within a test.
const slow = { tokensPerMinute: 60, burstTokens: 1_000 };

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => {
    const pair = await openScriptPair(backend);
    [a, b] = [pair.a, pair.b];
    storeA = new TokenBudgetStore(pair.scriptsA, keys);
    storeB = new TokenBudgetStore(pair.scriptsB, keys);
  });

  afterAll(async () => {
    await closeScriptPair(a, b, `*${ns}*`);
  });

  describe('token-bucket-settle.lua', () => {
    const far = () => Date.now() + 600_000;
    const charge = (store: TokenBudgetStore, t: string, budget: TokenBudget, tokens: number) => store.settle(t, budget, { runId: unique('run'), until: far() }, { charge: tokens, giveBack: 0 });
    const giveBack = (store: TokenBudgetStore, t: string, budget: TokenBudget, runId: string, tokens: number, until = far()) => store.settle(t, budget, { runId, until }, { charge: 0, giveBack: tokens });

    it('a new budget starts full; giving back never exceeds the burst', async () => {
      const t = unique('full');
      expect(await giveBack(storeA, t, slow, 'r1', 500)).toEqual({ tokensLeft: 1_000, gaveBack: true });
      expect(await storeA.take(t, slow, 400)).toMatchObject({ allowed: true });
      expect(Math.floor((await giveBack(storeA, t, slow, 'r2', 150)).tokensLeft)).toBe(750);
      expect((await giveBack(storeA, t, slow, 'r3', 10_000)).tokensLeft).toBe(1_000);
    });

    it('gives a run’s reservation back once, however often asked, from either connection; charges always apply', async () => {
      const t = unique('once');
      await storeA.take(t, slow, 1_000);
      const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => giveBack(i % 2 === 0 ? storeA : storeB, t, slow, 'run-1', 300)));
      expect(answers.filter((x) => x.gaveBack)).toHaveLength(1);
      const left = await storeA.settle(t, slow, { runId: 'run-1', until: far() }, { charge: 100, giveBack: 300 });
      expect(left.gaveBack).toBe(false);
      expect(left.tokensLeft).toBeGreaterThanOrEqual(200);
      expect(left.tokensLeft).toBeLessThan(210);
    });

    it('keeps the give-back marker until the given time, at least a second', async () => {
      const t = unique('marker');
      const now = await redisNowMs(a);
      await giveBack(storeA, t, slow, 'late', 10, now - 60_000);
      const short = await a.pttl(keys.tokenReservationReturned(t, 'late'));
      expect(short).toBeGreaterThan(0);
      expect(short).toBeLessThanOrEqual(1_000);
      await giveBack(storeA, t, slow, 'soon', 10, now + 30_000);
      const long = await a.pttl(keys.tokenReservationReturned(t, 'soon'));
      expect(long).toBeGreaterThan(28_000);
      expect(long).toBeLessThanOrEqual(30_000);
      await sleep(1_100);
      expect(await a.exists(keys.tokenReservationReturned(t, 'late'))).toBe(0);
      expect((await giveBack(storeA, t, slow, 'late', 10)).gaveBack).toBe(true);
    });

    it('charges below zero down to -burst, and a take then waits for the debt to refill', async () => {
      const t = unique('debt');
      const fast = { tokensPerMinute: 60_000, burstTokens: 1_000 }; // 1 000 tokens/s
      expect((await charge(storeA, t, fast, 1_500)).tokensLeft).toBeLessThan(-490);
      expect((await charge(storeA, t, fast, 100_000)).tokensLeft).toBe(-1_000);
      const refused = await storeA.take(t, fast, 200);
      expect(refused.allowed).toBe(false);
      // From about -1 000 to 200 at 1 000/s: about 1.2 s.
      expect(refused.waitMs).toBeGreaterThan(1_100);
      expect(refused.waitMs).toBeLessThanOrEqual(1_200);
    });

    it('refills for the time elapsed before correcting', async () => {
      const t = unique('refill');
      const fast = { tokensPerMinute: 60_000, burstTokens: 1_000 };
      await charge(storeA, t, fast, 2_000);
      await sleep(300);
      const { tokensLeft } = await charge(storeA, t, fast, 0);
      expect(tokensLeft).toBeGreaterThan(-1_000 + 250);
      expect(tokensLeft).toBeLessThan(-1_000 + 600);
    });

    it('charges from a level within a lowered burst, also while the server clock is behind the bucket', async () => {
      const t = unique('lowered');
      // Written at burst 1 000, a minute ahead of the server clock (a failover stepped it back), so no refill applies.
      await a.hset(keys.tokenBudget(t), 'tokens', '1000', 'ts', String((await redisNowMs(a)) + 60_000));
      expect((await charge(storeA, t, { tokensPerMinute: 60, burstTokens: 100 }, 30)).tokensLeft).toBe(70);
    });

    it('settlements from two connections at once all land', async () => {
      const t = unique('race');
      await storeA.take(t, slow, 1_000);
      await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? giveBack(storeA, t, slow, `r${i}`, 7) : charge(storeB, t, slow, 3))));
      // 50 × 7 − 50 × 3 = 200, plus at most a few tokens of refill during the test.
      const { tokensLeft } = await charge(storeA, t, slow, 0);
      expect(tokensLeft).toBeGreaterThanOrEqual(200);
      expect(tokensLeft).toBeLessThan(215);
    });

    it('keeps the bucket until it would be full again, longer when it is in debt', async () => {
      const t = unique('ttl');
      const budget = { tokensPerMinute: 6_000, burstTokens: 1_000 }; // 100/s: full after 10 s
      await charge(storeA, t, budget, 500);
      const half = await a.pttl(keys.tokenBudget(t));
      expect(half).toBeGreaterThan(5_000);
      expect(half).toBeLessThanOrEqual(6_000);
      await charge(storeA, t, budget, 1_500);
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
      await charge(storeA, t, quick, 10);
      await sleep(1_300);
      expect(await a.exists(keys.tokenBudget(t))).toBe(0);
    });

    it('keeps the budget and its give-back markers in the tenant’s slot, with its request bucket', () => {
      expect(keySlot(keys.tokenBudget('acme'))).toBe(keySlot(keys.tenantBucket('acme')));
      expect(keySlot(keys.tokenReservationReturned('acme', 'r1'))).toBe(keySlot(keys.tenantBucket('acme')));
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
});
