import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { DependencyPacer } from '../../../src/pacing/dependency-pacer.js';
import { PacingStore, type BucketCharge, type TenantTurn } from '../../../src/pacing/pacing-store.js';
import { headerReader } from '../../../src/steps/rate-limit-headers.js';
import { redisKeys } from '../../../src/redis/keys.js';
import { LuaScripts } from '../../../src/redis/scripts.js';
import { testNamespace } from '../harness.js';
import { keySlot } from '../../../src/redis/key-slot.js';
import { closeScriptPair, openScriptPair, redisNowMs, REDIS_BACKENDS } from './redis-clients.js';

/**
 * pacing-reserve.lua, pacing-settle.lua and pacing-observe.lua against a real Redis, through
 * PacingStore; two connections stand in for two processor instances. Waits are the server's
 * answers, so they are checked against the rates exactly, up to the time the calls took.
 */
const ns = testNamespace('lua-pacing');
const keys = redisKeys(ns);
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let storeA: PacingStore;
let storeB: PacingStore;
let n = 0;
const dep = (label: string) => `${label}-${++n}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const KEEP = 5_000;
/** Requests at `perMinute`, one unit each. */
const requests = (perMinute: number): BucketCharge[] => [{ bucket: 'requests', perMinute, cost: 1 }];
const opts = (maxWaitMs: number, burstMs = 0, more: { share?: number; reserve?: number } = {}) => ({ maxWaitMs, burstMs, keepMs: KEEP, share: more.share ?? 1, reserve: more.reserve ?? 0 });

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => {
    ({ a, b, scriptsA } = await openScriptPair(backend));
    storeA = new PacingStore(scriptsA, keys);
    storeB = new PacingStore(new LuaScripts(b), keys);
  });

  afterAll(() => closeScriptPair(a, b, `*${ns}*`));

  describe('pacing-reserve.lua', () => {
    it('returns the raw triple {reserved, wait ms, held by share} and lets the first call of an idle dependency go at once', async () => {
      const d = dep('raw');
      expect(await scriptsA.run('pacingReserve', [keys.paceState(d), keys.paceObserved(d), keys.paceNotBefore(d), keys.paceTenants(d)], [1000, 0, KEEP, 1, 0, '', 1, 1, 0, 1, 'requests', 60, 1])).toEqual([1, 0, 0]);
    });

    it('spaces concurrent callers on two connections exactly at the rate, none early', async () => {
      const d = dep('rate');
      const started = Date.now();
      const res = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? storeA : storeB).reserve(d, requests(600), opts(10_000))));
      const elapsed = Date.now() - started;
      expect(res.every((r) => r.reserved)).toBe(true);
      // 600 a minute is one per 100 ms: the k-th call goes at k × 100 ms after the first, and its
      // wait is counted from the server time it asked at, at most `elapsed` after the first asked.
      const waits = res.map((r) => r.waitMs).sort((x, y) => x - y);
      waits.forEach((w, k) => {
        expect(w).toBeLessThanOrEqual(k * 100);
        expect(w).toBeGreaterThanOrEqual(k * 100 - elapsed - 1);
      });
    });

    it('lets a burst through at once, then refills after idling', async () => {
      const d = dep('burst');
      // 600 a minute with a 300 ms burst: three calls at once, the fourth waits 100 ms from the first.
      const started = Date.now();
      const first = await Promise.all([0, 1, 2].map(() => storeA.reserve(d, requests(600), opts(10_000, 300))));
      expect(first.map((r) => r.waitMs)).toEqual([0, 0, 0]);
      const fourth = await storeB.reserve(d, requests(600), opts(-1, 300));
      expect(fourth.reserved).toBe(false);
      expect(fourth.waitMs).toBeGreaterThanOrEqual(100 - (Date.now() - started) - 1);
      expect(fourth.waitMs).toBeLessThanOrEqual(100);
      await sleep(350);
      const again = await Promise.all([0, 1, 2].map(() => storeB.reserve(d, requests(600), opts(10_000, 300))));
      expect(again.map((r) => r.waitMs)).toEqual([0, 0, 0]);
    });

    it('lets a cost above the burst go once the bucket is full, overdrawing it at the rate', async () => {
      const d = dep('overdraw');
      // 6,000 tokens a minute = 0.1 per ms, burst 100 tokens: a 500-token call goes now, the next after 5 s.
      const call = (maxWaitMs: number) => storeA.reserve(d, [{ bucket: 'output_tokens', perMinute: 6_000, cost: 500 }], opts(maxWaitMs, 1_000));
      expect(await call(0)).toEqual({ reserved: true, waitMs: 0, heldByShare: false });
      const next = await call(-1);
      expect(next.reserved).toBe(false);
      expect(next.waitMs).toBeGreaterThan(4_800);
      expect(next.waitMs).toBeLessThanOrEqual(5_000);
    });

    it('books nothing when the wait exceeds the caller’s maximum, and books it when it does not', async () => {
      const d = dep('max');
      expect(await storeA.reserve(d, requests(60), opts(0))).toEqual({ reserved: true, waitMs: 0, heldByShare: false });
      const refused = await storeA.reserve(d, requests(60), opts(100));
      expect(refused.reserved).toBe(false);
      expect(refused.waitMs).toBeGreaterThan(900);
      // the refusal booked nothing: the same wait again, then a booking at it
      const again = await storeB.reserve(d, requests(60), opts(100));
      expect(again.reserved).toBe(false);
      expect(again.waitMs).toBeLessThanOrEqual(refused.waitMs);
      expect(again.waitMs).toBeGreaterThan(900);
      const booked = await storeB.reserve(d, requests(60), opts(2_000));
      expect(booked.reserved).toBe(true);
      expect(booked.waitMs).toBeGreaterThan(900);
      expect(booked.waitMs).toBeLessThanOrEqual(1_000);
    });

    it('takes every bucket’s wait at once and books all or none', async () => {
      const d = dep('all');
      const charges = (output: number): BucketCharge[] => [
        { bucket: 'requests', perMinute: 60_000, cost: 1 },
        { bucket: 'output_tokens', perMinute: 60_000, cost: output },
      ];
      // output tokens at 1 per ms: 800 tokens hold the next call 800 ms, requests only 1 ms
      expect((await storeA.reserve(d, charges(800), opts(0))).reserved).toBe(true);
      const next = await storeA.reserve(d, charges(800), opts(100));
      expect(next.reserved).toBe(false);
      expect(next.waitMs).toBeGreaterThan(700);
      // the refused call did not book its request either: a request-only call goes within the first's 1 ms
      const request = await storeA.reserve(d, [{ bucket: 'requests', perMinute: 60_000, cost: 1 }], opts(10));
      expect(request.reserved).toBe(true);
      expect(request.waitMs).toBeLessThanOrEqual(1);
    });

    it('scales every limit by the share in force while the dependency ramps up', async () => {
      const d = dep('share');
      // 600 a minute at half share is one per 200 ms
      expect((await storeA.reserve(d, requests(600), opts(0, 0, { share: 0.5 }))).waitMs).toBe(0);
      const next = await storeB.reserve(d, requests(600), opts(-1, 0, { share: 0.5 }));
      expect(next.reserved).toBe(false);
      expect(next.waitMs).toBeGreaterThan(150);
      expect(next.waitMs).toBeLessThanOrEqual(200);
    });

    it('makes a call that leaves the burst to a higher class wait while a higher-class call still goes', async () => {
      const d = dep('reserve');
      const batch = (maxWaitMs: number) => opts(maxWaitMs, 300, { reserve: 1 });
      // 600 a minute, 300 ms burst: on a full bucket a batch call goes at once
      const started = Date.now();
      expect(await storeA.reserve(d, requests(600), batch(0))).toEqual({ reserved: true, waitMs: 0, heldByShare: false });
      expect((await storeB.reserve(d, requests(600), opts(0, 300))).waitMs).toBe(0);
      // two of three units used: batch waits until every booked turn has passed (about 200 ms),
      const held = await storeA.reserve(d, requests(600), batch(-1));
      expect(held.reserved).toBe(false);
      expect(held.waitMs).toBeGreaterThanOrEqual(200 - (Date.now() - started) - 1);
      expect(held.waitMs).toBeLessThanOrEqual(200);
      // while the interactive call finds the unit left for it at once
      expect(await storeB.reserve(d, requests(600), opts(0, 300))).toEqual({ reserved: true, waitMs: 0, heldByShare: false });
      // and a batch call that may wait books its turn behind every one booked so far
      const queued = await storeA.reserve(d, requests(600), batch(1_000));
      expect(queued.reserved).toBe(true);
      expect(queued.waitMs).toBeGreaterThan(250);
      expect(queued.waitMs).toBeLessThanOrEqual(300);
    });

    it('ignores a bucket with neither a configured nor an observed limit', async () => {
      const d = dep('none');
      for (let i = 0; i < 5; i++) expect(await storeA.reserve(d, [{ bucket: 'input_tokens', perMinute: 0, cost: 1_000_000 }], opts(0))).toEqual({ reserved: true, waitMs: 0, heldByShare: false });
    });

    it('expires an idle dependency’s state once its buckets are full again and the keep time is over', async () => {
      const d = dep('ttl');
      await storeA.reserve(d, requests(600), { ...opts(0), keepMs: 200 });
      const ttl = await a.pttl(keys.paceState(d));
      // the bucket is full 100 ms after the call, kept 200 ms beyond that
      expect(ttl).toBeGreaterThan(200);
      expect(ttl).toBeLessThanOrEqual(300);
      await sleep(350);
      expect(await a.exists(keys.paceState(d))).toBe(0);
    });

    it('uses the server’s clock: the caller passes no time, and a clock that stepped back does not hold calls for the step', async () => {
      const d = dep('clock');
      const now = await redisNowMs(a);
      // As written by an instance one hour before the server's clock was set back one hour:
      // the bucket is full 500 ms after its last booking.
      await a.hset(keys.paceState(d), 'at', now + 3_600_000, 'tat:requests', now + 3_600_500, 'rate:requests', 0.001);
      const res = await storeA.reserve(d, requests(60), opts(-1));
      expect(res.waitMs).toBeGreaterThan(300);
      expect(res.waitMs).toBeLessThanOrEqual(500);
      const booked = await storeA.reserve(d, requests(60), opts(1_000));
      expect(booked.reserved).toBe(true);
      const state = await a.hgetall(keys.paceState(d));
      expect(Number(state.at)).toBeLessThan(now + 1_000);
      expect(Number(state['tat:requests'])).toBeLessThan(now + 2_000);
    });
  });

  describe('pacing-settle.lua', () => {
    const output = (cost: number): BucketCharge[] => [{ bucket: 'output_tokens', perMinute: 60_000, cost }];

    it('gives back what a call did not use, so the next call goes sooner', async () => {
      const d = dep('refund');
      await storeA.reserve(d, output(1_000), opts(0));
      await storeB.settle(d, [{ bucket: 'output_tokens', delta: -800 }], KEEP);
      const next = await storeA.reserve(d, output(1_000), opts(-1));
      expect(next.waitMs).toBeGreaterThan(100);
      expect(next.waitMs).toBeLessThanOrEqual(200);
    });

    it('never refunds into the past: a full bucket stays full, no fuller', async () => {
      const d = dep('refund-floor');
      await storeA.reserve(d, output(10), opts(0));
      // Read before the refund, so a slow round trip after it cannot make a correct answer look early.
      const before = await redisNowMs(a);
      await storeA.settle(d, [{ bucket: 'output_tokens', delta: -1_000_000 }], KEEP);
      expect(Number(await a.hget(keys.paceState(d), 'tat:output_tokens'))).toBeGreaterThanOrEqual(before);
      expect(await storeA.reserve(d, output(1_000), opts(0))).toEqual({ reserved: true, waitMs: 0, heldByShare: false });
      expect((await storeA.reserve(d, output(1_000), opts(-1))).waitMs).toBeGreaterThan(900);
    });

    it('charges what a call used beyond its booking, from now when the bucket had refilled', async () => {
      const d = dep('charge');
      await storeA.reserve(d, output(100), opts(0));
      await sleep(150);
      await storeA.settle(d, [{ bucket: 'output_tokens', delta: 500 }], KEEP);
      const next = await storeA.reserve(d, output(1), opts(-1));
      expect(next.waitMs).toBeGreaterThan(300);
      expect(next.waitMs).toBeLessThanOrEqual(500);
    });

    it('corrects nothing in a state that expired', async () => {
      const d = dep('expired');
      expect(await scriptsA.run('pacingSettle', [keys.paceState(d), keys.paceTenants(d)], [KEEP, 'tenant-a', 'requests', -1, 'output_tokens', 100])).toBe(0);
      expect(await a.exists(keys.paceTenants(d))).toBe(0);
      expect(await a.exists(keys.paceState(d))).toBe(0);
    });
  });

  describe('pacing-observe.lua', () => {
    it('lets a lower observed limit win over the configured one, not a higher, until it expires', async () => {
      const d = dep('observed');
      await storeA.observe(d, [{ bucket: 'requests', perMinute: 60, capacity: 0 }], undefined, 300);
      expect((await storeB.reserve(d, requests(6_000), opts(0))).waitMs).toBe(0);
      const slowed = await storeB.reserve(d, requests(6_000), opts(-1));
      expect(slowed.waitMs).toBeGreaterThan(900);
      await sleep(350);
      expect(await a.exists(keys.paceObserved(d))).toBe(0);
    });

    it('does not let a higher observed limit raise the configured one', async () => {
      const d = dep('observed-high');
      await storeA.observe(d, [{ bucket: 'requests', perMinute: 600_000, capacity: 0 }], undefined, KEEP);
      await storeB.reserve(d, requests(60), opts(0));
      expect((await storeB.reserve(d, requests(60), opts(-1))).waitMs).toBeGreaterThan(900);
    });

    it('applies an observed limit to a bucket without a configured one', async () => {
      const d = dep('observed-only');
      await storeA.observe(d, [{ bucket: 'input_tokens', perMinute: 60_000, capacity: 0 }], undefined, KEEP);
      const charge: BucketCharge[] = [{ bucket: 'input_tokens', perMinute: 0, cost: 500 }];
      expect((await storeB.reserve(d, charge, opts(0))).waitMs).toBe(0);
      const next = await storeB.reserve(d, charge, opts(-1));
      expect(next.waitMs).toBeGreaterThan(300);
      expect(next.waitMs).toBeLessThanOrEqual(500);
    });

    it('holds every caller until a not-before time, which only moves later and expires then', async () => {
      const d = dep('not-before');
      const now = await redisNowMs(a);
      expect(await storeA.observe(d, [], now + 400, KEEP)).toBe(now + 400);
      // an earlier one does not move it back
      expect(await storeB.observe(d, [], now + 100, KEEP)).toBe(now + 400);
      const held = await storeB.reserve(d, requests(60_000), opts(-1));
      expect(held.reserved).toBe(false);
      expect(held.waitMs).toBeGreaterThan(200);
      expect(held.waitMs).toBeLessThanOrEqual(400);
      const pttl = await a.pttl(keys.paceNotBefore(d));
      expect(pttl).toBeGreaterThan(200);
      expect(pttl).toBeLessThanOrEqual(400);
      await sleep(450);
      expect(await a.exists(keys.paceNotBefore(d))).toBe(0);
      expect(await storeA.reserve(d, requests(60_000), opts(0))).toEqual({ reserved: true, waitMs: 0, heldByShare: false });
    });

    it('ignores a not-before time already past', async () => {
      const d = dep('past');
      const now = await redisNowMs(a);
      expect(await storeA.observe(d, [], now - 1_000, KEEP)).toBe(0);
      expect(await a.exists(keys.paceNotBefore(d))).toBe(0);
    });
  });

  describe('tenant shares of the requests limit (pacing-reserve.lua and pacing-settle.lua)', () => {
    /** A tenant's turn: its own share of the rate and burst, its share of what may be borrowed, a 20% borrow reserve. */
    const turnOf = (tenant: string, share: number, borrow: number): TenantTurn => ({ tenant, share, borrow, borrowReserve: 0.2, demandWindowMs: 5_000 });
    /** 600 a minute with a burst of 10 calls. */
    const burst10 = (maxWaitMs: number) => opts(maxWaitMs, 1_000);
    const book = (store: PacingStore, d: string, turn: TenantTurn, maxWaitMs = -1, cost = 1) => store.reserve(d, [{ bucket: 'requests', perMinute: 600, cost }], burst10(maxWaitMs), turn);

    it('lets a tenant over its share borrow only down to the reserve, which a tenant within its share still finds', async () => {
      const d = dep('borrow');
      // tenant-a's own part is a tenth (one call of burst); it borrows the rest down to 20% of the burst (2 calls)
      const a1 = turnOf('tenant-a', 0.1, 1);
      const taken: boolean[] = [];
      for (let i = 0; i < 12; i++) taken.push((await book(i % 2 === 0 ? storeA : storeB, d, a1, 0)).reserved);
      expect(taken.filter(Boolean)).toHaveLength(8);
      const refused = await book(storeA, d, a1, -1);
      expect(refused).toMatchObject({ reserved: false, heldByShare: true });
      // tenant-c, within its share, takes the two units the reserve kept
      const c = turnOf('tenant-c', 0.5, 0.5);
      expect((await book(storeB, d, c, 0)).reserved).toBe(true);
      expect((await book(storeA, d, c, 0)).reserved).toBe(true);
      // the bucket is empty now: the next call waits for the rate, not for a share
      const next = await book(storeB, d, c, -1);
      expect(next).toMatchObject({ reserved: false, heldByShare: false });
      expect(next.waitMs).toBeGreaterThan(0);
      expect(next.waitMs).toBeLessThanOrEqual(100);
    });

    it('splits what tenants over their shares borrow by their borrow shares, 2:1, however their calls interleave', async () => {
      const d = dep('weights');
      const a = turnOf('a', 0.01, 2 / 3);
      const b = turnOf('b', 0.01, 1 / 3);
      const got = { a: 0, b: 0 };
      // both ask for far more than the 8 borrowable units, b twice as often as a
      const asks = Array.from({ length: 30 }, (_, i) => (i % 3 === 0 ? 'a' : 'b') as 'a' | 'b');
      const res = await Promise.all(asks.map((t, i) => book(i % 2 === 0 ? storeA : storeB, d, t === 'a' ? a : b, 0)));
      res.forEach((r, i) => {
        if (r.reserved) got[asks[i]!]++;
      });
      // each one's own unit of burst, then 8 × 2/3 and 8 × 1/3 of what may be borrowed, up to a unit
      expect(got.a + got.b).toBeLessThanOrEqual(10);
      expect(got.a).toBeGreaterThanOrEqual(5);
      expect(got.b).toBeLessThanOrEqual(4);
      expect(got.a / got.b).toBeGreaterThan(1.4);
    });

    it('records every ask as demand, refused or not, decayed over the window, and keeps the tenant’s own bucket', async () => {
      const d = dep('demand');
      const mine = turnOf('tenant-a', 0.1, 0);
      await book(storeA, d, mine, 0, 2);
      await book(storeB, d, mine, -1, 3);
      const hash = await a.hgetall(keys.paceTenants(d));
      expect(Number(hash['d:tenant-a'])).toBeGreaterThan(4.99);
      expect(Number(hash['d:tenant-a'])).toBeLessThanOrEqual(5);
      expect(Number(hash['u:tenant-a'])).toBeGreaterThan(0);
      expect(Number(hash['rate:tenant-a'])).toBeCloseTo(0.001);
      expect(Number(hash['tat:tenant-a'])).toBeGreaterThan(await redisNowMs(a));
      expect(await a.pttl(keys.paceTenants(d))).toBeGreaterThan(KEEP);
    });

    it('has a batch call leave its tenant’s own bucket to the tenant’s interactive calls only while it has some lately', async () => {
      const d = dep('own-reserve');
      const mine = turnOf('tenant-a', 0.5, 0);
      const batch = (store: PacingStore) => store.reserve(d, [{ bucket: 'requests', perMinute: 600, cost: 1 }], { ...burst10(-1), reserve: 1 }, mine);
      // a batch-only tenant is not held back in its own share: its own burst of five goes
      for (let i = 0; i < 3; i++) expect((await batch(storeA)).waitMs).toBe(0);
      const e = dep('own-reserve-mixed');
      const mixed = (store: PacingStore, reserve: number) => store.reserve(e, [{ bucket: 'requests', perMinute: 600, cost: 1 }], { ...burst10(0), reserve }, mine);
      expect((await mixed(storeA, 0)).reserved).toBe(true);
      // with an interactive ask just made, a batch call waits for the tenant's own bucket to be full again
      const held = await storeB.reserve(e, [{ bucket: 'requests', perMinute: 600, cost: 1 }], { ...burst10(-1), reserve: 1 }, mine);
      expect(held.reserved).toBe(false);
      expect(held.waitMs).toBeGreaterThan(0);
    });

    it('gives reserved turns back to the dependency and to the tenant’s own bucket', async () => {
      const d = dep('give-back');
      const mine = turnOf('tenant-a', 0.5, 0);
      // five turns of one run empty tenant-a's own burst of five
      expect((await book(storeA, d, mine, 0, 5)).reserved).toBe(true);
      expect(await book(storeB, d, mine, -1)).toMatchObject({ reserved: false, heldByShare: true });
      await storeB.settle(d, [{ bucket: 'requests', delta: -5 }], KEEP, 'tenant-a');
      expect((await book(storeA, d, mine, 0, 5)).reserved).toBe(true);
    });

    it('takes the burst a provider showed (what remained plus the call) over the configured one, never above its limit', async () => {
      const d = dep('capacity');
      await storeA.observe(d, [{ bucket: 'requests', perMinute: 600, capacity: 30 }], undefined, KEEP);
      await storeA.observe(d, [{ bucket: 'requests', perMinute: 600, capacity: 12 }], undefined, KEEP);
      expect(await a.hget(keys.paceObserved(d), 'cap:requests')).toBe('30');
      const burst = await Promise.all(Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? storeA : storeB).reserve(d, requests(600), opts(0, 1_000))));
      expect(burst.every((r) => r.reserved && r.waitMs === 0)).toBe(true);
      expect((await storeA.reserve(d, requests(600), opts(-1, 1_000))).reserved).toBe(false);
      const e = dep('capacity-cap');
      await storeA.observe(e, [{ bucket: 'requests', perMinute: 60, capacity: 100 }], undefined, KEEP);
      expect(await a.hget(keys.paceObserved(e), 'cap:requests')).toBe('60');
    });
  });

  describe('DependencyPacer on two processors', () => {
    it('paces one processor by the limit a response told the other, and holds both after a 429', async () => {
      const base = loadConfig({ env: {} });
      const d = dep('pacer');
      const config = { ...base, dependencies: { [d]: { ...base.dependencies.anthropic!, rateLimit: { requestsPerMinute: 6_000, burstSeconds: 0.001 } } } };
      const [one, two] = [storeA, storeB].map((store) => new DependencyPacer({ store, config, metrics: createMetrics(), now: Date.now, rampShare: () => 1 }));
      const tokens = { inputTokens: 10, outputTokens: 10 };
      const deadline = Date.now() + 30_000;
      expect(await one!.book(d, tokens, { class: 'interactive', deadline, tenantId: 'tenant-a' })).toEqual({ kind: 'go', waitMs: 0 });
      // 6,000 a minute: the next turn is 10 ms away, well within the inline wait
      expect((await two!.book(d, tokens, { class: 'interactive', deadline, tenantId: 'tenant-a' })).kind).toBe('go');
      await one!.learn(d, { headers: headerReader({ 'anthropic-ratelimit-requests-limit': '20' }), status: 200 });
      // 20 a minute: a turn 3 s away is further than the processor waits
      await sleep(20);
      expect(await two!.book(d, tokens, { class: 'interactive', deadline, tenantId: 'tenant-a' })).toMatchObject({ kind: 'go' });
      const deferred = await two!.book(d, tokens, { class: 'interactive', deadline, tenantId: 'tenant-a' });
      expect(deferred.kind).toBe('defer');
      expect(deferred.kind === 'defer' && deferred.until - Date.now()).toBeGreaterThan(2_000);

      const e = dep('pacer-429');
      const config429 = { ...base, dependencies: { [e]: base.dependencies.anthropic! } };
      const [p1, p2] = [storeA, storeB].map((store) => new DependencyPacer({ store, config: config429, metrics: createMetrics(), now: Date.now, rampShare: () => 1 }));
      await p1!.learn(e, { headers: headerReader({ 'retry-after': '5' }), status: 429 });
      const held = await p2!.book(e, tokens, { class: 'interactive', deadline: Date.now() + 30_000, tenantId: 'tenant-a' });
      expect(held.kind).toBe('defer');
      expect(held.kind === 'defer' && held.until - Date.now()).toBeGreaterThan(4_000);
    });
  });
});

describe('cluster slots', () => {
  it('puts every pacing key of one dependency in one slot, under the dependency’s tag', () => {
    for (const prefix of ['', ns, 'prod.']) {
      const k = redisKeys(prefix);
      for (const d of ['anthropic', 'search-tool', 'x']) {
        const all = [k.paceState(d), k.paceObserved(d), k.paceNotBefore(d), k.paceTenants(d)];
        expect(new Set(all.map(keySlot)).size, all.join(' ')).toBe(1);
        expect(new Set(all.map((key) => /\{([^}]+)\}/.exec(key)?.[1]))).toEqual(new Set([d]));
      }
    }
  });
});
