import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdmissionStore } from '../../../src/admission/admission-store.js';
import { BucketRefusalMemo } from '../../../src/admission/bucket-refusal-memo.js';
import { redisKeys } from '../../../src/redis/keys.js';
import { LuaScripts } from '../../../src/redis/scripts.js';
import { eventually, testNamespace } from '../harness.js';
import { keySlot } from '../../../src/redis/key-slot.js';
import { connectPair, deleteMatching, redisNowMs, REDIS_BACKENDS } from './redis-clients.js';

/**
 * token-bucket-take.lua against a real Redis: two separate connections stand in for two API
 * instances. High refill rates and small capacities keep every wait well under a second.
 */
const ns = testNamespace('lua-bucket');
const keys = redisKeys(ns);
let a: RedisClient;
let b: RedisClient;
let storeA: AdmissionStore;
let storeB: AdmissionStore;
let scriptsA: LuaScripts;
let n = 0;
const tenant = (label: string) => `${label}-${++n}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => {
    [a, b] = await connectPair(backend);
    scriptsA = new LuaScripts(a);
    storeA = new AdmissionStore(scriptsA, keys);
    storeB = new AdmissionStore(new LuaScripts(b), keys);
  });

  afterAll(async () => {
    if (!a) return;
    await deleteMatching(a, `*${ns}*`);
    await Promise.all([a.quit(), b.quit()]);
  });

  describe('token-bucket-take.lua', () => {
    it('returns the raw triple {allowed, tokens left as a string, wait ms}', async () => {
      const res = await scriptsA.run('tokenBucketTake', [keys.tenantBucket(tenant('raw'))], [5, 100, 1]);
      expect(res).toEqual([1, '4', 0]);
    });

    it('starts full: the first takes of a new tenant succeed down to exactly zero', async () => {
      const t = tenant('full');
      const left: number[] = [];
      for (let i = 0; i < 5; i++) {
        const take = await storeA.takeToken(t, 5, 0.001);
        expect(take.allowed).toBe(true);
        expect(take.waitMs).toBe(0);
        left.push(take.tokensLeft);
      }
      expect(left.map(Math.floor)).toEqual([4, 3, 2, 1, 0]);
      const refused = await storeA.takeToken(t, 5, 0.001);
      expect(refused.allowed).toBe(false);
      expect(refused.tokensLeft).toBeLessThan(1);
    });

    it('takes `cost` tokens at once', async () => {
      const t = tenant('cost');
      expect(await storeA.takeToken(t, 5, 0.001, 3)).toMatchObject({ allowed: true, waitMs: 0 });
      const refused = await storeA.takeToken(t, 5, 0.001, 3);
      expect(refused.allowed).toBe(false);
      expect(refused.tokensLeft).toBeGreaterThanOrEqual(2);
      expect(refused.tokensLeft).toBeLessThan(2.01);
      // a refused take costs nothing: two single tokens are still there
      expect((await storeA.takeToken(t, 5, 0.001, 2)).allowed).toBe(true);
    });

    it('lets exactly `capacity` of 200 concurrent takes through, over two connections', async () => {
      const t = tenant('burst');
      const capacity = 50;
      const takes = await Promise.all(Array.from({ length: 200 }, (_, i) => (i % 2 === 0 ? storeA : storeB).takeToken(t, capacity, 0.001)));
      const allowed = takes.filter((x) => x.allowed);
      expect(allowed).toHaveLength(capacity);
      // Serialised: every allowed take saw a different remaining count, capacity−1 down to 0.
      expect(new Set(allowed.map((x) => Math.floor(x.tokensLeft))).size).toBe(capacity);
      expect(Math.min(...allowed.map((x) => Math.floor(x.tokensLeft)))).toBe(0);
      for (const x of takes.filter((y) => !y.allowed)) {
        expect(x.waitMs).toBeGreaterThan(0);
        expect(x.tokensLeft).toBeLessThan(1);
      }
      const stored = Number(await a.hget(keys.tenantBucket(t), 'tokens'));
      expect(stored).toBeLessThan(1);
      expect(stored).toBeGreaterThanOrEqual(0);
    });

    it('refills at the configured rate after a real wait', async () => {
      const t = tenant('refill');
      for (let i = 0; i < 3; i++) expect((await storeA.takeToken(t, 3, 100)).allowed).toBe(true);
      // 100/s: 3 tokens are back 30 ms later; wait a little more
      await sleep(60);
      const results = [];
      for (let i = 0; i < 3; i++) results.push(await storeA.takeToken(t, 3, 100));
      expect(results.every((r) => r.allowed)).toBe(true);
    });

    it('never holds more than capacity, however long it was idle', async () => {
      const t = tenant('cap');
      expect((await storeA.takeToken(t, 3, 1_000)).tokensLeft).toBe(2);
      await sleep(50); // would be 50 more tokens at 1000/s
      const take = await storeA.takeToken(t, 3, 1_000);
      expect(take.tokensLeft).toBe(2);
      expect(Number(await a.hget(keys.tenantBucket(t), 'tokens'))).toBeLessThanOrEqual(3);
    });

    it('clamps a stored level above a lowered capacity', async () => {
      const t = tenant('lowered');
      await storeA.takeToken(t, 100, 0.001); // 99 left at capacity 100
      const take = await storeA.takeToken(t, 10, 0.001); // operator lowered the capacity to 10
      expect(take.allowed).toBe(true);
      expect(take.tokensLeft).toBeCloseTo(9, 2);
    });

    it('answers waitMs = the real time until the token exists', async () => {
      const t = tenant('wait');
      const rate = 5; // one token per 200 ms
      expect((await storeA.takeToken(t, 1, rate)).allowed).toBe(true);
      const t0 = Date.now();
      const first = await storeA.takeToken(t, 1, rate);
      expect(first.allowed).toBe(false);
      expect(first.waitMs).toBeGreaterThan(150);
      expect(first.waitMs).toBeLessThanOrEqual(200);
      // halfway there: still refused, and the hint shrank by the time that passed
      await sleep(first.waitMs / 2);
      const t1 = Date.now();
      const mid = await storeA.takeToken(t, 1, rate);
      expect(mid.allowed).toBe(false);
      const elapsed = t1 - t0;
      expect(Math.abs(first.waitMs - mid.waitMs - elapsed)).toBeLessThanOrEqual(30);
      // when the hint says, it is there
      await sleep(mid.waitMs + 5);
      expect((await storeA.takeToken(t, 1, rate)).allowed).toBe(true);
    });

    it('computes waitMs from the missing fraction of a token, rounded up', async () => {
      const t = tenant('fraction');
      const key = keys.tenantBucket(t);
      // a bucket last touched "now" (server clock) holding 0.25 of a token, refilling 1/s:
      // e ms later it holds 0.25 + e/1000 and the last 0.75 − e/1000 arrive in 750 − e ms
      const now = await redisNowMs(a);
      await a.hset(key, 'tokens', '0.25', 'ts', String(now));
      const take = await storeA.takeToken(t, 2, 1);
      const e = (await redisNowMs(a)) - now;
      expect(take.allowed).toBe(false);
      expect(take.tokensLeft).toBeGreaterThanOrEqual(0.25);
      expect(take.tokensLeft).toBeLessThanOrEqual(0.25 + e / 1000);
      expect(take.waitMs).toBe(Math.ceil((1 - take.tokensLeft) * 1000));
      expect(take.waitMs).toBeGreaterThanOrEqual(750 - e);
      expect(take.waitMs).toBeLessThanOrEqual(750);
    });

    it('supports fractional refill rates', async () => {
      const t = tenant('slow');
      expect((await storeA.takeToken(t, 1, 0.5)).allowed).toBe(true);
      const refused = await storeA.takeToken(t, 1, 0.5);
      expect(refused.allowed).toBe(false);
      // 0.5/s: 2 s per token
      expect(refused.waitMs).toBeGreaterThan(1_950);
      expect(refused.waitMs).toBeLessThanOrEqual(2_000);

      const u = tenant('frac-fast');
      expect((await storeA.takeToken(u, 1, 12.5)).allowed).toBe(true); // 80 ms per token
      await sleep(40);
      const partial = await storeA.takeToken(u, 1, 12.5);
      expect(partial.allowed).toBe(false);
      expect(partial.tokensLeft).toBeGreaterThan(0.3);
      expect(partial.tokensLeft).toBeLessThan(1);
      await sleep(partial.waitMs + 5);
      expect((await storeA.takeToken(u, 1, 12.5)).allowed).toBe(true);
    });

    it('answers waitMs -1 (never) for a bucket that does not refill, and keeps it a day', async () => {
      const t = tenant('zero');
      expect((await storeA.takeToken(t, 2, 0)).allowed).toBe(true);
      expect((await storeA.takeToken(t, 2, 0)).allowed).toBe(true);
      const refused = await storeA.takeToken(t, 2, 0);
      expect(refused).toEqual({ allowed: false, tokensLeft: 0, waitMs: -1 });
      const pttl = await a.pttl(keys.tenantBucket(t));
      expect(pttl).toBeGreaterThan(86_400_000 - 5_000);
      expect(pttl).toBeLessThanOrEqual(86_400_000);
    });

    it('expires an idle bucket once it would be full again (capacity/rate + 1 s)', async () => {
      const t = tenant('ttl');
      await storeA.takeToken(t, 60, 10);
      const pttl = await a.pttl(keys.tenantBucket(t));
      expect(pttl).toBeGreaterThan(7_000 - 1_000);
      expect(pttl).toBeLessThanOrEqual(7_000);

      const u = tenant('gone');
      await storeA.takeToken(u, 1, 1_000); // ttl = 1 ms + 1 000 ms
      const short = await a.pttl(keys.tenantBucket(u));
      expect(short).toBeGreaterThan(800);
      expect(short).toBeLessThanOrEqual(1_001);
      await eventually(async () => ((await a.exists(keys.tenantBucket(u))) === 0 ? true : undefined), 3_000, 'the idle bucket to expire', 50);
      // gone means full again
      expect(await storeA.takeToken(u, 1, 1_000)).toEqual({ allowed: true, tokensLeft: 0, waitMs: 0 });
    });

    it('does not mint tokens when the server clock steps back (bucket ts in the future)', async () => {
      const t = tenant('stepback');
      const key = keys.tenantBucket(t);
      const future = (await redisNowMs(a)) + 60_000;
      await a.hset(key, 'tokens', '0', 'ts', String(future));
      const take = await storeA.takeToken(t, 5, 1_000);
      expect(take.allowed).toBe(false);
      expect(take.tokensLeft).toBe(0);
      expect(Number(await a.hget(key, 'ts'))).toBe(future);
    });

    // Regression guard (this was a bug): after a step back the bucket refills only once the server clock passes the stored
    // ts, but waitMs ignores that gap: it promises a token in 1 ms when it is ~60 s away.
    it('after a clock step back, waitMs still equals the real time until the token exists', async () => {
      const t = tenant('stepback-wait');
      const key = keys.tenantBucket(t);
      const now = await redisNowMs(a);
      await a.hset(key, 'tokens', '0', 'ts', String(now + 60_000));
      const take = await storeA.takeToken(t, 5, 1_000);
      expect(take.allowed).toBe(false);
      expect(take.waitMs).toBeGreaterThan(59_000);
    });
  });

  describe('AdmissionStore with a BucketRefusalMemo (refusals answered from memory)', () => {
    const remembering = () => {
      const answered: string[] = [];
      return { answered, store: new AdmissionStore(scriptsA, keys, { refusals: new BucketRefusalMemo(), answered: (bucket) => answered.push(bucket) }) };
    };

    it('refuses from memory, without touching the bucket, until the token can exist; then Redis lets it in', async () => {
      const t = tenant('memo');
      const { store, answered } = remembering();
      expect((await store.takeToken(t, 1, 5)).allowed).toBe(true);
      const fromRedis = await store.takeToken(t, 1, 5);
      expect(fromRedis.allowed).toBe(false);
      expect(answered).toEqual([]);
      const level = await a.hgetall(keys.tenantBucket(t));
      const fromMemory = await store.takeToken(t, 1, 5);
      expect(fromMemory.allowed).toBe(false);
      expect(fromMemory.waitMs).toBeGreaterThan(0);
      expect(fromMemory.waitMs).toBeLessThanOrEqual(fromRedis.waitMs);
      expect(answered).toEqual(['submit']);
      // The script rewrites the level and its time on every take, refused or not: unchanged, it was not run.
      expect(await a.hgetall(keys.tenantBucket(t))).toEqual(level);
      await sleep(fromMemory.waitMs + 5);
      expect((await store.takeToken(t, 1, 5)).allowed).toBe(true);
      expect(answered).toEqual(['submit']);
    });

    it('still lets the bucket\'s rate through: requests every 2 ms against capacity 2 + 40/s for 0.5 s', async () => {
      const t = tenant('memo-rate');
      const { store, answered } = remembering();
      const started = Date.now();
      let allowed = 0;
      while (Date.now() - started < 500) {
        if ((await store.takeToken(t, 2, 40)).allowed) allowed++;
        await sleep(2);
      }
      const elapsedSec = (Date.now() - started) / 1000;
      // Capacity plus what refilled while asking; a memory that refused too long would fall short.
      expect(allowed).toBeGreaterThanOrEqual(Math.floor(2 + 40 * (elapsedSec - 0.05)));
      expect(allowed).toBeLessThanOrEqual(Math.ceil(2 + 40 * elapsedSec) + 1);
      expect(answered.length).toBeGreaterThan(0);
    });
  });

  describe('token-bucket-take.lua on a tenant\'s read bucket', () => {
    it('is a bucket of its own: reads never spend submit tokens, nor submits read tokens', async () => {
      const t = tenant('reads');
      expect((await storeA.takeReadToken(t, 1, 0.001)).allowed).toBe(true);
      expect((await storeA.takeReadToken(t, 1, 0.001)).allowed).toBe(false);
      expect((await storeA.takeToken(t, 1, 0.001)).allowed).toBe(true);
      expect((await storeA.takeToken(t, 1, 0.001)).allowed).toBe(false);
      expect(await a.exists(keys.readBucket(t), keys.tenantBucket(t))).toBe(2);
    });

    it('is shared by every API instance: 100 concurrent reads over two connections let exactly `capacity` through', async () => {
      const t = tenant('reads-burst');
      const takes = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? storeA : storeB).takeReadToken(t, 30, 0.001)));
      expect(takes.filter((x) => x.allowed)).toHaveLength(30);
      for (const x of takes.filter((y) => !y.allowed)) expect(x.waitMs).toBeGreaterThan(0);
    });

    it("lives in the tenant's slot and expires once it would be full again", async () => {
      const t = tenant('reads-ttl');
      expect(keySlot(keys.readBucket(t))).toBe(keySlot(t));
      await storeA.takeReadToken(t, 1, 1_000);
      await eventually(async () => ((await a.exists(keys.readBucket(t))) === 0 ? true : undefined), 3_000, 'the idle read bucket to expire', 50);
      expect(await storeA.takeReadToken(t, 1, 1_000)).toEqual({ allowed: true, tokensLeft: 0, waitMs: 0 });
    });
  });
});
