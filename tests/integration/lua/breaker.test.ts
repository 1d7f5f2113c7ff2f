import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseBreakerHash, parseForcedHash } from '../../../src/breakers/breaker-board.js';
import { rampUpMs } from '../../../src/config/ramp-up.js';
import { BreakerStore, MAX_FORCE_MS, parseBreakerForceChange, parseBreakerTransition, type BreakerPolicy, type BreakerTransition } from '../../../src/breakers/breaker-store.js';
import { redisKeys, type RedisKeys } from '../../../src/redis/keys.js';
import { LuaScripts } from '../../../src/redis/scripts.js';
import { eventually, testNamespace } from '../harness.js';
import { keySlot } from '../../../src/redis/key-slot.js';
import { ShardedSubscriber } from '../../../src/redis/sharded-subscriber.js';
import { closeScriptPair, openScriptPair, redisNowMs, REDIS_BACKENDS } from './redis-clients.js';

/**
 * breaker-admit.lua and breaker-record.lua against a real Redis, through BreakerStore. Each test
 * gets its own namespace; two connections stand in for two processor instances, and a third
 * subscribes to the transition channel.
 */
const base = testNamespace('lua-breaker');
const DEP = 'dep';
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let scriptsB: LuaScripts;
let n = 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Trips on the first failure and half-opens soon, so a test reaches any state quickly. */
const POLICY: BreakerPolicy = {
  windowMs: 60_000,
  minimumCalls: 1,
  failureThreshold: 1,
  failureRateThreshold: 1,
  slowCallMs: 60_000,
  slowCallRateThreshold: 1,
  openMs: 200,
  halfOpenProbes: 2,
  halfOpenSuccesses: 2,
  probeLeaseMs: 60_000,
};

/** What the store passes as ARGV keep ms. */
const keepOf = (p: BreakerPolicy) => 2 * Math.max(p.openMs, p.probeLeaseMs, p.windowMs, p.rampUp ? rampUpMs(p.rampUp) : 0);

/** A fresh namespace: its keys, a store on each connection and readers of the dependency's keys. */
function fresh(patch: Partial<BreakerPolicy> = {}) {
  const keys: RedisKeys = redisKeys(`${base}${++n}.`);
  const policy = { ...POLICY, ...patch };
  const policyOf = (d: string) => (d.startsWith(DEP) ? policy : undefined);
  return {
    keys,
    policy,
    keep: keepOf(policy),
    A: new BreakerStore(scriptsA, keys, policyOf),
    B: new BreakerStore(scriptsB, keys, policyOf),
    hash: (dep = DEP) => a.hgetall(keys.breaker(dep)),
    probes: (dep = DEP) => a.zrange(keys.breakerProbes(dep), '0', '-1'),
  };
}
type Fresh = ReturnType<typeof fresh>;

/** Every transition published on the dependency's channel, parsed; `raw` keeps the payloads as sent. */
async function listen(keys: RedisKeys) {
  const seen: BreakerTransition[] = [];
  const raw: string[] = [];
  const sub = new ShardedSubscriber(a, [keys.breakerChanged(DEP)], {
    message: (text) => {
      raw.push(text);
      const t = parseBreakerTransition(text);
      if (t) seen.push(t);
    },
    ready: () => undefined,
    error: () => undefined,
  });
  await sub.start();
  return {
    seen,
    raw,
    /** Waits for `count` transitions, then a little longer to catch any extra one. */
    settled: async (count: number) => {
      await eventually(async () => (seen.length >= count ? true : undefined), 3_000, `${count} transitions`, 10);
      await sleep(100);
      return seen;
    },
    close: () => sub.close(),
  };
}

const untilRedisTime = (ms: number) => eventually(async () => ((await redisNowMs(a)) >= ms ? true : undefined), 5_000, `Redis time ${ms}`, 10);

/** Opens the breaker with one failure, waits out openMs and lets `token` in as the first probe. */
async function halfOpen(f: Fresh, token: string): Promise<void> {
  expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true });
  await untilRedisTime(Number((await f.hash()).retryAt));
  expect(await f.B.admit(DEP, token)).toEqual({ allowed: true, probe: true });
  expect((await f.hash()).state).toBe('half_open');
}

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => ({ a, b, scriptsA, scriptsB } = await openScriptPair(backend)));
  afterAll(() => closeScriptPair(a, b, `*${base}*`));

  describe('the scripts’ raw interface', () => {
    it('admit returns {1, probe} or {0, state, retryAt}; record returns {state, changed}', async () => {
      const { keys, policy, keep } = fresh();
      const admitKeys = [keys.breaker(DEP), keys.breakerProbes(DEP), keys.breakerForced(DEP)];
      const admitArgs = (token: string) => [token, policy.halfOpenProbes, policy.probeLeaseMs, keep, keys.breakerChanged(DEP), DEP];
      const recordKeys = [keys.breaker(DEP), keys.breakerWindow(DEP), keys.breakerProbes(DEP), keys.breakerForced(DEP)];
      const p = policy;
      const recordArgs = (token: string, outcome: string) => [token, outcome, 5, p.windowMs, p.minimumCalls, p.failureThreshold, p.failureRateThreshold, p.slowCallMs, p.slowCallRateThreshold, p.openMs, p.halfOpenSuccesses, keep, keys.breakerChanged(DEP), DEP];
      expect(await scriptsA.run('breakerAdmit', admitKeys, admitArgs('t1'))).toEqual([1, 0]);
      expect(await scriptsA.run('breakerRecord', recordKeys, recordArgs('', 'success'))).toEqual(['closed', 0]);
      expect(await scriptsA.run('breakerRecord', recordKeys, recordArgs('', 'failure'))).toEqual(['open', 1]);
      const refused = (await scriptsB.run('breakerAdmit', admitKeys, admitArgs('t2'))) as unknown[];
      expect(refused).toEqual([0, 'open', Number((await a.hgetall(keys.breaker(DEP))).retryAt)]);
      await expect(scriptsA.run('breakerAdmit', recordKeys, admitArgs('t'))).rejects.toThrow('breakerAdmit takes 3 keys, got 4');
    });

    it('the store refuses an unknown dependency, an empty token and a duration that is no number before calling Redis', async () => {
      const { A, keys } = fresh();
      await expect(A.admit('other', 't')).rejects.toThrow('no breaker policy for dependency "other"');
      await expect(A.admit(DEP, '')).rejects.toThrow(RangeError);
      await expect(A.record(DEP, undefined, 'success', Number.NaN)).rejects.toThrow(RangeError);
      await expect(A.record(DEP, undefined, 'success', Number.POSITIVE_INFINITY)).rejects.toThrow(RangeError);
      expect(await a.exists(keys.breakerWindow(DEP))).toBe(0);
    });

    it('counts a call with a negative duration (a clock stepped back) as a fast one', async () => {
      const { A, keys } = fresh({ slowCallMs: 1, slowCallRateThreshold: 0.01 });
      expect(await A.record(DEP, undefined, 'success', -5)).toEqual({ state: 'closed', changed: false });
      expect(Object.values(await a.hgetall(keys.breakerWindow(DEP)))).toEqual(['1']);
    });
  });

  describe('closed: tripping', () => {
    it('stays closed below minimumCalls even when every call fails, and admits everything', async () => {
      const { A, B, hash } = fresh({ minimumCalls: 5, failureThreshold: 1, failureRateThreshold: 0.1 });
      for (let i = 0; i < 4; i++) {
        expect(await (i % 2 ? A : B).record(DEP, undefined, 'failure', 1)).toEqual({ state: 'closed', changed: false });
        expect(await A.admit(DEP, `t${i}`)).toEqual({ allowed: true, probe: false });
      }
      expect(await hash()).toEqual({});
      expect(await B.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true });
    });

    it('opens when failures reach failureThreshold, however many calls succeed', async () => {
      const f = fresh({ minimumCalls: 1, failureThreshold: 3 });
      const events = await listen(f.keys);
      try {
        for (let i = 0; i < 20; i++) await f.A.record(DEP, undefined, 'success', 1);
        expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'closed', changed: false });
        expect(await f.B.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'closed', changed: false });
        const before = await redisNowMs(a);
        expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true });
        const after = await redisNowMs(a);
        const h = await f.hash();
        expect(h.state).toBe('open');
        expect(Number(h.retryAt)).toBeGreaterThanOrEqual(before + f.policy.openMs);
        expect(Number(h.retryAt)).toBeLessThanOrEqual(after + f.policy.openMs);
        expect(await a.exists(f.keys.breakerWindow(DEP))).toBe(0);
        const [opened] = await events.settled(1);
        expect(events.seen).toHaveLength(1);
        expect(opened).toEqual({ dependency: DEP, from: 'closed', to: 'open', at: Number(h.retryAt) - f.policy.openMs, retryAt: Number(h.retryAt) });
      } finally {
        await events.close();
      }
    });

    it('opens when the failure rate reaches failureRateThreshold, not below', async () => {
      const { A, B } = fresh({ minimumCalls: 4, failureThreshold: 100, failureRateThreshold: 0.5 });
      const outcomes = ['success', 'success', 'failure', 'success', 'failure'] as const; // 1/4, then 2/5
      for (const o of outcomes) expect(await A.record(DEP, undefined, o, 1)).toEqual({ state: 'closed', changed: false });
      expect(await B.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true }); // 3/6
    });

    it('opens when the slow-call rate reaches slowCallRateThreshold, counting slow successes and slow failures', async () => {
      const f = fresh({ minimumCalls: 4, failureThreshold: 100, failureRateThreshold: 1, slowCallMs: 100, slowCallRateThreshold: 0.5 });
      expect(await f.A.record(DEP, undefined, 'success', 99)).toEqual({ state: 'closed', changed: false });
      expect(await f.A.record(DEP, undefined, 'success', 100)).toEqual({ state: 'closed', changed: false }); // slow: at the threshold
      expect(await f.A.record(DEP, undefined, 'success', 5)).toEqual({ state: 'closed', changed: false }); // 1/3 but below minimumCalls
      expect(await f.A.record(DEP, undefined, 'failure', 5_000)).toEqual({ state: 'open', changed: true }); // 2/4 slow, 1/4 failed

      const g = fresh({ minimumCalls: 2, failureThreshold: 100, failureRateThreshold: 1, slowCallMs: 100, slowCallRateThreshold: 1 });
      expect(await g.A.record(DEP, undefined, 'success', 150)).toEqual({ state: 'closed', changed: false });
      expect(await g.B.record(DEP, undefined, 'success', 150)).toEqual({ state: 'open', changed: true }); // all slow, all "successful"
    });

    it('never trips on successes that are fast, such as a dependency answering 4xx', async () => {
      const { A, B, hash, keys } = fresh({ minimumCalls: 1, failureThreshold: 1, failureRateThreshold: 0.01, slowCallRateThreshold: 0.01 });
      for (let i = 0; i < 50; i++) expect(await (i % 2 ? A : B).record(DEP, undefined, 'success', 10)).toEqual({ state: 'closed', changed: false });
      expect(await hash()).toEqual({});
      const fields = await a.hgetall(keys.breakerWindow(DEP));
      const sum = (kind: string) => Object.entries(fields).reduce((s, [k, v]) => (k.endsWith(`:${kind}`) ? s + Number(v) : s), 0);
      expect([sum('c'), sum('f'), sum('s')]).toEqual([50, 0, 0]);
    });

    it('counts a released call as nothing', async () => {
      const { A, keys } = fresh({ minimumCalls: 1, failureThreshold: 1 });
      for (let i = 0; i < 10; i++) expect(await A.record(DEP, undefined, 'released', 100_000)).toEqual({ state: 'closed', changed: false });
      expect(await a.exists(keys.breakerWindow(DEP))).toBe(0);
    });

    it('trips exactly once when 100 failures arrive at once from two connections', async () => {
      const f = fresh({ minimumCalls: 5, failureThreshold: 5 });
      const events = await listen(f.keys);
      try {
        const results = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 ? f.A : f.B).record(DEP, undefined, 'failure', 1)));
        expect(results.filter((r) => r.changed)).toEqual([{ state: 'open', changed: true }]);
        expect(results.filter((r) => r.state === 'closed')).toHaveLength(4);
        await events.settled(1);
        expect(events.seen.map((t) => `${t.from}→${t.to}`)).toEqual(['closed→open']);
      } finally {
        await events.close();
      }
    });
  });

  describe('closed: the sliding window', () => {
    it('forgets failures older than windowMs and deletes their buckets', async () => {
      const { A, B, keys } = fresh({ windowMs: 1_000, minimumCalls: 3, failureThreshold: 3 });
      await A.record(DEP, undefined, 'failure', 1);
      expect(await B.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'closed', changed: false });
      const last = await redisNowMs(a);
      expect(await a.hlen(keys.breakerWindow(DEP))).toBeGreaterThanOrEqual(2);
      await untilRedisTime(last + 1_000 + 20);
      expect(await A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'closed', changed: false });
      // only the new bucket's calls and failures are left
      expect(Object.values(await a.hgetall(keys.breakerWindow(DEP)))).toEqual(['1', '1']);
      expect(await B.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'closed', changed: false });
      expect(await A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true });
    });

    it('uses buckets a tenth of the window wide', async () => {
      const { A, keys } = fresh({ windowMs: 60_000 });
      const before = await redisNowMs(a);
      await A.record(DEP, undefined, 'success', 1);
      const after = await redisNowMs(a);
      const [field] = await a.hkeys(keys.breakerWindow(DEP));
      const bucket = Number(/^(\d+):c$/.exec(field!)![1]);
      expect(bucket).toBeGreaterThanOrEqual(Math.floor(before / 6_000));
      expect(bucket).toBeLessThanOrEqual(Math.floor(after / 6_000));
    });
  });

  describe('closed: successes tallied by an instance (breaker-tally.lua)', () => {
    const windowSums = async (f: Fresh) => {
      const fields = await a.hgetall(f.keys.breakerWindow(DEP));
      const sum = (kind: string) => Object.entries(fields).reduce((s, [k, v]) => (k.endsWith(`:${kind}`) ? s + Number(v) : s), 0);
      return [sum('c'), sum('f'), sum('s')];
    };

    it('counts a tally as that many fast successes, lowering the failure rate a later failure is judged by', async () => {
      const f = fresh({ minimumCalls: 4, failureThreshold: 100, failureRateThreshold: 0.5 });
      expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'closed', changed: false });
      expect(await f.B.tally(DEP, 3)).toBe(true);
      expect(await windowSums(f)).toEqual([4, 1, 0]);
      expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'closed', changed: false }); // 2/5
      expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true }); // 3/6
    });

    it('drops a tally while the breaker is open or half-open, and never changes its state', async () => {
      const f = fresh();
      const events = await listen(f.keys);
      try {
        expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true });
        expect(await f.B.tally(DEP, 10)).toBe(false);
        expect(await a.exists(f.keys.breakerWindow(DEP))).toBe(0);
        await untilRedisTime(Number((await f.hash()).retryAt));
        expect(await f.B.admit(DEP, 'probe')).toEqual({ allowed: true, probe: true });
        expect(await f.A.tally(DEP, 10)).toBe(false);
        expect((await f.hash()).state).toBe('half_open');
        await events.settled(2);
        expect(events.seen.map((t) => `${t.from}→${t.to}`)).toEqual(['closed→open', 'open→half_open']);
      } finally {
        await events.close();
      }
    });

    it('lands in the current bucket, expires with the window and prunes old buckets', async () => {
      const f = fresh({ windowMs: 60_000 });
      expect(await f.A.tally(DEP, 2)).toBe(true);
      const ttl = await a.pttl(f.keys.breakerWindow(DEP));
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(60_000);
      await a.hset(f.keys.breakerWindow(DEP), '1:c', 7);
      expect(await f.B.tally(DEP, 1)).toBe(true);
      const fields = await a.hgetall(f.keys.breakerWindow(DEP));
      expect(Object.keys(fields)).toHaveLength(1);
      expect(Object.values(fields)).toEqual(['3']);
    });

    it('refuses a tally that is not a positive whole number of calls before calling Redis', async () => {
      const f = fresh();
      await expect(f.A.tally(DEP, 0)).rejects.toThrow(RangeError);
      await expect(f.A.tally(DEP, 1.5)).rejects.toThrow(RangeError);
      await expect(f.A.tally('nope', 1)).rejects.toThrow(/no breaker policy/);
    });
  });

  describe('open', () => {
    it('refuses until retryAt; then the first admit turns it half-open, announced once', async () => {
      const f = fresh({ openMs: 1_000, halfOpenProbes: 1 });
      const events = await listen(f.keys);
      try {
        await f.A.record(DEP, undefined, 'failure', 1);
        const retryAt = Number((await f.hash()).retryAt);
        expect(await f.A.admit(DEP, 'early-a')).toEqual({ allowed: false, state: 'open', retryAt });
        expect(await f.B.admit(DEP, 'early-b')).toEqual({ allowed: false, state: 'open', retryAt });
        expect(await f.probes()).toEqual([]);
        await untilRedisTime(retryAt);
        expect(await f.B.admit(DEP, 'probe')).toEqual({ allowed: true, probe: true });
        expect(await f.hash()).toEqual({ state: 'half_open', probeSuccesses: '0' });
        expect(await f.probes()).toEqual(['probe']);
        await events.settled(2);
        expect(events.raw).toHaveLength(2);
        const [opened, halfOpened] = events.seen;
        expect(opened).toMatchObject({ dependency: DEP, from: 'closed', to: 'open', retryAt });
        expect(halfOpened).toMatchObject({ dependency: DEP, from: 'open', to: 'half_open', retryAt: null });
        expect(halfOpened!.at).toBeGreaterThanOrEqual(retryAt);
      } finally {
        await events.close();
      }
    });

    it('ignores late outcomes of calls made before the trip, even after retryAt', async () => {
      const f = fresh({ minimumCalls: 1, failureThreshold: 1 });
      await f.A.record(DEP, undefined, 'failure', 1);
      const opened = await f.hash();
      for (const outcome of ['success', 'failure', 'released'] as const) {
        expect(await f.A.record(DEP, undefined, outcome, 1)).toEqual({ state: 'open', changed: false });
        expect(await f.B.record(DEP, 'some-token', outcome, 100_000)).toEqual({ state: 'open', changed: false });
      }
      await untilRedisTime(Number(opened.retryAt));
      expect(await f.A.record(DEP, undefined, 'success', 1)).toEqual({ state: 'open', changed: false });
      expect(await f.hash()).toEqual(opened);
      expect(await a.exists(f.keys.breakerWindow(DEP), f.keys.breakerProbes(DEP))).toBe(0);
    });
  });

  describe('half-open', () => {
    it('lets at most halfOpenProbes probes through among 60 concurrent admits from two connections', async () => {
      const f = fresh({ halfOpenProbes: 3 });
      const events = await listen(f.keys);
      try {
        await f.A.record(DEP, undefined, 'failure', 1);
        await untilRedisTime(Number((await f.hash()).retryAt));
        const results = await Promise.all(Array.from({ length: 60 }, (_, i) => (i % 2 ? f.A : f.B).admit(DEP, `t${i}`)));
        const allowed = results.filter((r) => r.allowed);
        expect(allowed).toEqual([1, 2, 3].map(() => ({ allowed: true, probe: true })));
        const leases = await a.zrange(f.keys.breakerProbes(DEP), '0', '-1', 'WITHSCORES');
        expect(leases).toHaveLength(6);
        const earliest = Math.min(Number(leases[1]), Number(leases[3]), Number(leases[5]));
        // a refused caller is told when the earliest probe lease runs out, when a slot frees at the latest
        for (const r of results.filter((x) => !x.allowed)) expect(r).toEqual({ allowed: false, state: 'half_open', retryAt: earliest });
        await events.settled(2);
        expect(events.seen.map((t) => `${t.from}→${t.to}`)).toEqual(['closed→open', 'open→half_open']);
      } finally {
        await events.close();
      }
    });

    it('gives a lapsed probe’s slot to the next caller, and ignores the lapsed probe’s outcome', async () => {
      const f = fresh({ halfOpenProbes: 1, probeLeaseMs: 500 });
      await halfOpen(f, 'lapsing');
      const refused = await f.A.admit(DEP, 'next');
      expect(refused).toMatchObject({ allowed: false, state: 'half_open' });
      expect(Number(await a.zscore(f.keys.breakerProbes(DEP), 'lapsing'))).toBe((refused as { retryAt: number }).retryAt);
      await untilRedisTime((refused as { retryAt: number }).retryAt + 1);
      expect(await f.A.admit(DEP, 'next')).toEqual({ allowed: true, probe: true });
      expect(await f.probes()).toEqual(['next']);
      expect(await f.B.record(DEP, 'lapsing', 'success', 1)).toEqual({ state: 'half_open', changed: false });
      expect((await f.hash()).probeSuccesses).toBe('0');
    });

    it('gives one slot to a token that asks twice, on either connection', async () => {
      const f = fresh({ halfOpenProbes: 2 });
      await halfOpen(f, 'x');
      expect(await f.A.admit(DEP, 'x')).toEqual({ allowed: true, probe: true });
      expect(await f.probes()).toEqual(['x']);
      expect(await f.A.admit(DEP, 'y')).toEqual({ allowed: true, probe: true });
      expect(await f.B.admit(DEP, 'z')).toMatchObject({ allowed: false, state: 'half_open' });
      expect(await f.B.admit(DEP, 'y')).toEqual({ allowed: true, probe: true });
      expect((await f.probes()).sort()).toEqual(['x', 'y']);
    });

    it('closes after halfOpenSuccesses successful probes, clearing probes and window', async () => {
      const f = fresh({ halfOpenProbes: 3, halfOpenSuccesses: 2 });
      const events = await listen(f.keys);
      try {
        await halfOpen(f, 'p1');
        expect(await f.A.admit(DEP, 'p2')).toEqual({ allowed: true, probe: true });
        expect(await f.A.admit(DEP, 'p3')).toEqual({ allowed: true, probe: true });
        expect(await f.A.record(DEP, 'p1', 'success', 1)).toEqual({ state: 'half_open', changed: false });
        expect(await f.hash()).toEqual({ state: 'half_open', probeSuccesses: '1' });
        const before = await redisNowMs(a);
        expect(await f.B.record(DEP, 'p2', 'success', 1)).toEqual({ state: 'closed', changed: true });
        const { closedAt, ...rest } = await f.hash();
        expect(rest).toEqual({ state: 'closed' });
        expect(Number(closedAt)).toBeGreaterThanOrEqual(before);
        expect(Number(closedAt)).toBeLessThanOrEqual(await redisNowMs(a));
        expect(await a.exists(f.keys.breakerWindow(DEP), f.keys.breakerProbes(DEP))).toBe(0);
        expect(await f.A.admit(DEP, 'after')).toEqual({ allowed: true, probe: false });
        // the third probe, answering after the close, is an ordinary call of the closed breaker
        expect(await f.A.record(DEP, 'p3', 'success', 1)).toEqual({ state: 'closed', changed: false });
        await events.settled(3);
        const closed = events.seen[2]!;
        expect(closed).toMatchObject({ dependency: DEP, from: 'half_open', to: 'closed', retryAt: null, at: Number(closedAt) });
        expect(events.seen).toHaveLength(3);
      } finally {
        await events.close();
      }
    });

    it('reopens on one failed probe with a fresh retryAt, and ignores the other probes’ answers', async () => {
      const f = fresh({ halfOpenProbes: 2, halfOpenSuccesses: 1, openMs: 200 });
      const events = await listen(f.keys);
      try {
        await halfOpen(f, 'p1');
        const firstRetryAt = (await events.settled(2))[0]!.retryAt!;
        expect(await f.A.admit(DEP, 'p2')).toEqual({ allowed: true, probe: true });
        const before = await redisNowMs(a);
        expect(await f.B.record(DEP, 'p1', 'failure', 1)).toEqual({ state: 'open', changed: true });
        const h = await f.hash();
        expect(h.state).toBe('open');
        expect(Number(h.retryAt)).toBeGreaterThanOrEqual(before + 200);
        expect(Number(h.retryAt)).toBeGreaterThan(firstRetryAt);
        expect(h.probeSuccesses).toBeUndefined();
        expect(await f.probes()).toEqual([]);
        expect(await f.A.record(DEP, 'p2', 'success', 1)).toEqual({ state: 'open', changed: false });
        expect(await f.A.admit(DEP, 'p3')).toEqual({ allowed: false, state: 'open', retryAt: Number(h.retryAt) });
        await events.settled(3);
        expect(events.seen[2]).toMatchObject({ from: 'half_open', to: 'open', retryAt: Number(h.retryAt) });
      } finally {
        await events.close();
      }
    });

    it('ignores outcomes of calls that are not probes', async () => {
      const f = fresh({ halfOpenProbes: 1, halfOpenSuccesses: 1 });
      await halfOpen(f, 'probe');
      for (const token of [undefined, 'stranger']) {
        expect(await f.A.record(DEP, token, 'failure', 1)).toEqual({ state: 'half_open', changed: false });
        expect(await f.B.record(DEP, token, 'success', 1)).toEqual({ state: 'half_open', changed: false });
      }
      expect(await f.hash()).toEqual({ state: 'half_open', probeSuccesses: '0' });
      expect(await f.probes()).toEqual(['probe']);
      expect(await a.exists(f.keys.breakerWindow(DEP))).toBe(0);
    });

    it('frees a released probe’s slot without counting it', async () => {
      const f = fresh({ halfOpenProbes: 1, halfOpenSuccesses: 1 });
      await halfOpen(f, 'p1');
      expect(await f.A.admit(DEP, 'p2')).toMatchObject({ allowed: false, state: 'half_open' });
      expect(await f.A.record(DEP, 'p1', 'released', 100_000)).toEqual({ state: 'half_open', changed: false });
      expect(await f.hash()).toEqual({ state: 'half_open', probeSuccesses: '0' });
      expect(await f.A.admit(DEP, 'p2')).toEqual({ allowed: true, probe: true });
      // released twice, or after the slot went to someone else: still nothing
      expect(await f.B.record(DEP, 'p1', 'failure', 1)).toEqual({ state: 'half_open', changed: false });
      expect(await f.B.record(DEP, 'p2', 'success', 1)).toEqual({ state: 'closed', changed: true });
    });
  });

  describe('expiry', () => {
    it('gives every key a TTL; an open breaker outlives its retryAt', async () => {
      const f = fresh({ windowMs: 5_000, openMs: 300, probeLeaseMs: 1_000 });
      const keep = f.keep; // 10 s
      const pttl = (key: string) => a.pttl(key);
      await f.A.record(DEP, undefined, 'success', 1);
      expect(await pttl(f.keys.breakerWindow(DEP))).toBeGreaterThan(5_000 - 1_000);
      expect(await pttl(f.keys.breakerWindow(DEP))).toBeLessThanOrEqual(5_000);

      await f.A.record(DEP, undefined, 'failure', 1);
      const retryAt = Number((await f.hash()).retryAt);
      expect(Number(await a.call('PEXPIRETIME', f.keys.breaker(DEP)))).toBe(retryAt + keep);

      await untilRedisTime(retryAt);
      await f.A.admit(DEP, 'p1');
      for (const key of [f.keys.breaker(DEP), f.keys.breakerProbes(DEP)]) {
        expect(await pttl(key)).toBeGreaterThan(keep - 1_000);
        expect(await pttl(key)).toBeLessThanOrEqual(keep);
      }
      await f.A.admit(DEP, 'p2');
      await f.A.record(DEP, 'p1', 'success', 1);
      expect(await pttl(f.keys.breaker(DEP))).toBeGreaterThan(keep - 1_000);
      await f.A.record(DEP, 'p2', 'success', 1);
      expect((await f.hash()).state).toBe('closed');
      expect(await pttl(f.keys.breaker(DEP))).toBeGreaterThan(keep - 1_000);
      expect(await pttl(f.keys.breaker(DEP))).toBeLessThanOrEqual(keep);
    });

    it('stamps closedAt on the close, removes it on the next trip, and keeps a closed hash past a ramp-up longer than the rest', async () => {
      const f = fresh({ halfOpenProbes: 1, halfOpenSuccesses: 1, windowMs: 5_000, probeLeaseMs: 1_000, rampUp: { initialFraction: 0.1, stepFraction: 0.1, intervalMs: 10_000 } });
      expect(f.keep).toBe(180_000);
      await halfOpen(f, 'p1');
      await f.A.record(DEP, 'p1', 'success', 1);
      expect(Number((await f.hash()).closedAt)).toBeGreaterThan(0);
      expect(await a.pttl(f.keys.breaker(DEP))).toBeGreaterThan(f.keep - 1_000);
      // Calls of the closed breaker leave the close time alone: the ramp runs from the close.
      const closedAt = (await f.hash()).closedAt;
      await f.B.record(DEP, undefined, 'success', 1);
      expect((await f.hash()).closedAt).toBe(closedAt);
      await f.B.record(DEP, undefined, 'failure', 1);
      expect(await f.hash()).not.toHaveProperty('closedAt');
      expect((await f.hash()).state).toBe('open');
    });

    it('treats a vanished state hash as closed', async () => {
      const f = fresh();
      await f.A.record(DEP, undefined, 'failure', 1);
      await a.del(f.keys.breaker(DEP));
      expect(await f.A.admit(DEP, 't')).toEqual({ allowed: true, probe: false });
      expect(await f.A.record(DEP, undefined, 'success', 1)).toEqual({ state: 'closed', changed: false });
    });
  });

  describe('forced by an operator (breaker-force.lua)', () => {
    const windowCalls = async (f: Fresh) => Object.entries(await a.hgetall(f.keys.breakerWindow(DEP))).filter(([k]) => k.endsWith(':c')).reduce((n, [, v]) => n + Number(v), 0);

    it('forced open refuses every call until the force ends, without moving the state', async () => {
      const f = fresh();
      const forced = await f.A.force(DEP, 'open', 60_000);
      expect(forced.mode).toBe('open');
      expect(forced.until).toBeGreaterThan((await redisNowMs(a)) + 59_000);
      for (const token of ['t1', 't2']) expect(await f.B.admit(DEP, token)).toEqual({ allowed: false, state: 'open', retryAt: forced.until });
      expect(await f.hash()).toEqual({});
      expect(await a.pttl(f.keys.breakerForced(DEP))).toBeGreaterThan(59_000);
    });

    it('forced closed admits every call over an open breaker, as no probe, and the window still counts outcomes without tripping', async () => {
      const f = fresh();
      expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true });
      await f.A.force(DEP, 'closed', 60_000);
      for (const token of ['t1', 't2', 't3']) expect(await f.B.admit(DEP, token)).toEqual({ allowed: true, probe: false });
      expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: false });
      expect(await f.A.record(DEP, undefined, 'success', 1)).toEqual({ state: 'open', changed: false });
      expect(await f.A.record(DEP, undefined, 'released', 1)).toEqual({ state: 'open', changed: false });
      expect(await f.A.tally(DEP, 3)).toBe(true);
      expect(await windowCalls(f)).toBe(5);
      expect((await f.hash()).state).toBe('open');
    });

    it('forced closed over a closed breaker: failures past every threshold do not trip it while forced, and the next one after the clear does', async () => {
      const f = fresh();
      await f.A.force(DEP, 'closed', 60_000);
      for (let i = 0; i < 3; i++) expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'closed', changed: false });
      expect(await f.A.clearForce(DEP)).toBe(true);
      expect(await f.A.clearForce(DEP)).toBe(false);
      expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true });
    });

    it('a probe admitted before the force gives its lease back when its outcome comes in', async () => {
      const f = fresh();
      await halfOpen(f, 'p1');
      await f.A.force(DEP, 'open', 60_000);
      expect(await f.A.record(DEP, 'p1', 'success', 1)).toEqual({ state: 'half_open', changed: false });
      expect(await f.probes()).toEqual([]);
      expect((await f.hash()).probeSuccesses).toBe('0');
    });

    it('announces each force and each clear on the transition channel; a clear with nothing forced announces nothing', async () => {
      const f = fresh();
      const l = await listen(f.keys);
      try {
        const opened = await f.A.force(DEP, 'open', 60_000);
        const closed = await f.B.force(DEP, 'closed', 30_000);
        await f.A.clearForce(DEP);
        await f.A.clearForce(DEP);
        await eventually(async () => (l.raw.length >= 3 ? true : undefined), 3_000, 'three announcements', 10);
        await sleep(100);
        const changes = l.raw.map(parseBreakerForceChange);
        expect(changes.map((c) => c && { forced: c.forced, until: c.until, dependency: c.dependency })).toEqual([
          { dependency: DEP, forced: 'open', until: opened.until },
          { dependency: DEP, forced: 'closed', until: closed.until },
          { dependency: DEP, forced: null, until: null },
        ]);
        expect(l.seen).toEqual([]);
      } finally {
        await l.close();
      }
    });

    it('ends by itself: once its time is up the key is gone and the breaker decides again', async () => {
      const f = fresh();
      expect(await f.A.record(DEP, undefined, 'failure', 1)).toEqual({ state: 'open', changed: true });
      const { until } = await f.A.force(DEP, 'closed', 150);
      expect(await f.B.admit(DEP, 't1')).toEqual({ allowed: true, probe: false });
      // Redis expires a key once its clock is past the expiry, not at it.
      await untilRedisTime(until + 1);
      expect(await a.exists(f.keys.breakerForced(DEP))).toBe(0);
      const after = await f.B.admit(DEP, 't2');
      // openMs (200) may have passed meanwhile: then t2 is the first probe of the half-open breaker.
      expect(after.allowed ? after : after.state).toEqual(after.allowed ? { allowed: true, probe: true } : 'open');
    });

    it('a force racing calls on another connection: every admission after the force returns is refused, none before is lost', async () => {
      const f = fresh();
      const admitted: boolean[] = [];
      let forcedAt = -1;
      const calls = (async () => {
        for (let i = 0; i < 200; i++) admitted.push((await f.B.admit(DEP, `t${i}`)).allowed);
      })();
      await sleep(5);
      await f.A.force(DEP, 'open', 60_000);
      forcedAt = admitted.length;
      await calls;
      expect(forcedAt).toBeGreaterThan(0);
      const firstRefused = admitted.indexOf(false);
      expect(firstRefused).toBeGreaterThan(0);
      expect(firstRefused).toBeLessThanOrEqual(forcedAt + 1);
      expect(admitted.slice(0, firstRefused).every(Boolean)).toBe(true);
      expect(admitted.slice(firstRefused).some(Boolean)).toBe(false);
    });

    it('replacing a force replaces its mode and end; the store refuses a duration out of bounds before calling Redis', async () => {
      const f = fresh();
      await f.A.force(DEP, 'open', 60_000);
      const closed = await f.B.force(DEP, 'closed', 1_000);
      expect(parseForcedHash(await a.hgetall(f.keys.breakerForced(DEP)))).toEqual(closed);
      expect(await a.pttl(f.keys.breakerForced(DEP))).toBeLessThanOrEqual(1_000);
      for (const ms of [0, -1, 1.5, MAX_FORCE_MS + 1, Number.NaN]) await expect(f.A.force(DEP, 'open', ms)).rejects.toThrow(RangeError);
      await expect(f.A.force('other', 'open', 1_000)).rejects.toThrow('no breaker policy for dependency "other"');
      expect(parseForcedHash(await a.hgetall(f.keys.breakerForced(DEP)))).toEqual(closed);
    });
  });

  describe('what the API reads (parseBreakerHash)', () => {
    it('reads every state the scripts write', async () => {
      const f = fresh({ halfOpenProbes: 1, halfOpenSuccesses: 1 });
      const read = async () => parseBreakerHash(DEP, await f.hash());
      expect(await read()).toEqual({ name: DEP, state: 'closed' });
      await f.A.record(DEP, undefined, 'failure', 1);
      const retryAt = Number((await f.hash()).retryAt);
      expect(await read()).toEqual({ name: DEP, state: 'open', retryAt });
      await untilRedisTime(retryAt);
      await f.A.admit(DEP, 'p');
      expect(await read()).toEqual({ name: DEP, state: 'half_open' });
      await f.A.record(DEP, 'p', 'success', 1);
      expect(await read()).toEqual({ name: DEP, state: 'closed', closedAt: Number((await f.hash()).closedAt) });
    });

    it('keeps dependencies apart', async () => {
      const f = fresh();
      await f.A.record(`${DEP}-1`, undefined, 'failure', 1);
      expect(parseBreakerHash(`${DEP}-1`, await f.hash(`${DEP}-1`))).toMatchObject({ state: 'open' });
      expect(await f.A.admit(`${DEP}-2`, 't')).toEqual({ allowed: true, probe: false });
      expect(await f.hash(`${DEP}-2`)).toEqual({});
    });
  });
});

describe('cluster slots', () => {
  it('puts every key of one dependency’s breaker in one slot, under the dependency’s tag', () => {
    for (const ns of ['', base, 'prod.', 'a-b_c.']) {
      const keys = redisKeys(ns);
      for (const dep of ['anthropic', 'search-tool', 'x']) {
        const all = [keys.breaker(dep), keys.breakerWindow(dep), keys.breakerProbes(dep), keys.breakerForced(dep), keys.breakerChanged(dep)];
        expect(new Set(all.map(keySlot)).size, all.join(' ')).toBe(1);
        expect(new Set(all.map((k) => /\{([^}]+)\}/.exec(k)?.[1]))).toEqual(new Set([dep]));
      }
    }
  });
});
