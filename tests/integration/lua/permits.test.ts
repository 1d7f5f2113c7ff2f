import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SluiceConfig } from '../../../src/config/schema.js';
import { createLogger } from '../../../src/obs/logger.js';
import { LeaseKeeper } from '../../../src/permits/lease-keeper.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { RedisDependencyPermits } from '../../../src/permits/run-permits.js';
import type { RunRequested } from '../../../src/events/schemas.js';
import { LimitsStore } from '../../../src/permits/limits-store.js';
import { dependencyCallScopes, dependencyScope, runScopes, type PermitScope } from '../../../src/permits/permit-scopes.js';
import { PermitStore, type PermitLease } from '../../../src/permits/permit-store.js';
import { PermitWakeups } from '../../../src/permits/permit-wakeups.js';
import { redisKeys, type RedisKeys } from '../../../src/redis/keys.js';
import { LuaScripts } from '../../../src/redis/scripts.js';
import { eventually, testNamespace } from '../harness.js';
import { keySlot } from '../../../src/redis/key-slot.js';
import { closeScriptPair, openScriptPair, redisNowMs, REDIS_BACKENDS } from './redis-clients.js';

/**
 * permits-acquire.lua, permits-renew.lua and permits-release.lua against a real Redis, through
 * PermitStore, LeaseKeeper, LimitsStore and PermitWakeups. Each test gets its own namespace; two
 * connections stand in for two processor instances.
 */
const base = testNamespace('lua-permits');
const logger = createLogger('silent');
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let scriptsB: LuaScripts;
let n = 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Limits {
  global?: number;
  batchShare?: number;
  tenant?: number;
  workflow?: number;
  dependency?: number;
}

/** Just the config the scope helpers read: tenants t1–t3, workflows wf and other, dependencies anthropic (fair shares) and plain (none). */
function configWith(l: Limits = {}): SluiceConfig {
  const tenant = { maxConcurrency: l.tenant ?? 100 };
  const workflow = { maxConcurrency: l.workflow ?? 100 };
  return {
    limits: { global: l.global ?? 100, batchShare: l.batchShare ?? 0.8 },
    tenants: { t1: tenant, t2: tenant, t3: tenant },
    workflows: { wf: workflow, other: workflow },
    dependencies: { anthropic: { maxConcurrency: l.dependency ?? 100, tenantFairShare: true }, plain: { maxConcurrency: l.dependency ?? 100, tenantFairShare: false } },
  } as unknown as SluiceConfig;
}

/** A fresh namespace: its keys, a store on each connection and the scopes of a config. */
function fresh(l: Limits = {}) {
  const keys = redisKeys(`${base}${++n}.`);
  const config = configWith(l);
  const scopes = (tenantId = 't1', runClass: 'interactive' | 'batch' = 'interactive', workflow = 'wf') => runScopes(config, keys, { tenantId, workflow, runClass });
  return { keys, config, scopes, A: new PermitStore(scriptsA, keys), B: new PermitStore(scriptsB, keys), limits: new LimitsStore(b, keys) };
}

const TTL = 60_000;

async function granted(store: PermitStore, scopes: PermitScope[], ttlMs = TTL, owner = 'run'): Promise<PermitLease> {
  const res = await store.tryAcquire(scopes, ttlMs, owner);
  if (!res.granted) throw new Error(`expected a grant, blocked by ${res.blockedBy} (${res.count}/${res.limit})`);
  return res.lease;
}

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => ({ a, b, scriptsA, scriptsB } = await openScriptPair(backend)));
  afterAll(() => closeScriptPair(a, b, `*${base}*`));

  describe('permits-acquire.lua', () => {
    it('adds the token to every scope, scored with its expiry, and returns the expiry', async () => {
      const { keys, scopes, A } = fresh();
      const before = await redisNowMs(a);
      const lease = await granted(A, scopes('t1', 'batch'), 5_000, 'run-1:0');
      const after = await redisNowMs(a);
      expect(lease.token).toMatch(/^run-1:0:[0-9a-f]{16}$/);
      expect(lease.scopes).toEqual(['global', 'class:batch', 'tenant:t1', 'workflow:wf']);
      expect(lease.keys).toEqual(lease.scopes.map((s) => keys.permitScope(s)));
      expect(lease.expiresAt).toBeGreaterThanOrEqual(before + 5_000);
      expect(lease.expiresAt).toBeLessThanOrEqual(after + 5_000);
      for (const key of lease.keys) {
        expect(await a.zrange(key, '0', '-1')).toEqual([lease.token]);
        expect(Number(await a.zscore(key, lease.token))).toBe(lease.expiresAt);
        expect(Number(await a.call('PEXPIRETIME', key))).toBe(lease.expiresAt);
      }
    });

    it('returns the raw answers {1, expiry} and {0, scope index, count, limit}', async () => {
      const { keys } = fresh();
      const k = [keys.permitScope('x'), keys.permitScope('y'), keys.permitLimits()];
      const args = (token: string) => [token, TTL, 0, '', '', 0, 'x', 5, 1, 0, 0, 0, 'y', 1, 1, 0, 0, 0];
      const ok = (await scriptsA.run('permitsAcquire', k, args('a'))) as number[];
      expect(ok).toHaveLength(2);
      expect(ok[0]).toBe(1);
      expect(await scriptsA.run('permitsAcquire', k, args('b'))).toEqual([0, 2, 1, 1]);
    });

    it('is all-or-nothing: a full tenant adds nothing to global or the workflow', async () => {
      const { keys, scopes, A, B } = fresh({ tenant: 2 });
      await granted(A, scopes('t1'));
      await granted(B, scopes('t1'));
      expect(await A.tryAcquire(scopes('t1'), TTL, 'third')).toEqual({ granted: false, blockedBy: 'tenant:t1', count: 2, limit: 2 });
      expect(await a.zcard(keys.permitScope('global'))).toBe(2);
      expect(await a.zcard(keys.permitScope('workflow:wf'))).toBe(2);
      // another tenant is not held up
      await granted(B, scopes('t2'));
      expect(await a.zcard(keys.permitScope('global'))).toBe(3);
    });

    it('reports the first full scope in order: global before the tenant', async () => {
      const { scopes, A } = fresh({ global: 1, tenant: 1 });
      await granted(A, scopes('t1'));
      expect(await A.tryAcquire(scopes('t1'), TTL, 'x')).toEqual({ granted: false, blockedBy: 'global', count: 1, limit: 1 });
    });

    it('holds caps exactly under 200 concurrent acquisitions from two connections', async () => {
      const { keys, scopes, A, B } = fresh({ global: 10, tenant: 4 });
      const tenants = ['t1', 't2', 't3'];
      const results = await Promise.all(Array.from({ length: 200 }, (_, i) => (i % 2 ? A : B).tryAcquire(scopes(tenants[i % 3]), TTL, `r${i}`)));
      const leases = results.flatMap((r) => (r.granted ? [r.lease] : []));
      expect(leases).toHaveLength(10);
      expect(await a.zcard(keys.permitScope('global'))).toBe(10);
      for (const t of tenants) expect(await a.zcard(keys.permitScope(`tenant:${t}`))).toBeLessThanOrEqual(4);
      const refusals = results.flatMap((r) => (r.granted ? [] : [r]));
      for (const r of refusals) expect(r.count).toBeLessThanOrEqual(r.limit);
      expect(await Promise.all(leases.map((l, i) => (i % 2 ? A : B).release(l)))).toEqual(leases.map(() => 3));
      expect(await a.zcard(keys.permitScope('global'))).toBe(0);
    });

    it('never lets more than the cap hold at once while 200 workers on two connections take and give back', async () => {
      const { scopes, A, B } = fresh({ global: 10, tenant: 4 });
      let holding = 0;
      let most = 0;
      let done = 0;
      const worker = async (i: number) => {
        const store = i % 2 ? A : B;
        for (;;) {
          const res = await store.tryAcquire(scopes(['t1', 't2', 't3'][i % 3]), TTL, `w${i}`);
          if (!res.granted) {
            await sleep(2 + Math.random() * 8);
            continue;
          }
          // Counted after Redis granted and uncounted before it is told: a lower bound of the true holders.
          most = Math.max(most, ++holding);
          await sleep(5);
          holding--;
          await store.release(res.lease);
          done++;
          return;
        }
      };
      await Promise.all(Array.from({ length: 200 }, (_, i) => worker(i)));
      expect(done).toBe(200);
      expect(most).toBeLessThanOrEqual(10);
      expect(most).toBeGreaterThan(1);
    });

    it('caps batch runs at their share of the global limit, leaving interactive work a reserve', async () => {
      const { scopes, A } = fresh({ global: 10, batchShare: 0.5 });
      for (let i = 0; i < 5; i++) await granted(A, scopes(['t1', 't2', 't3'][i % 3], 'batch'));
      expect(await A.tryAcquire(scopes('t1', 'batch'), TTL, 'b6')).toEqual({ granted: false, blockedBy: 'class:batch', count: 5, limit: 5 });
      for (let i = 0; i < 5; i++) await granted(A, scopes('t2', 'interactive'));
      expect(await A.tryAcquire(scopes('t3', 'interactive'), TTL, 'i6')).toEqual({ granted: false, blockedBy: 'global', count: 10, limit: 10 });
    });

    it('derives the batch share from the global limit in force, and gives an open global at least one batch permit', async () => {
      const { scopes, A, limits } = fresh({ global: 10, batchShare: 0.5 });
      await limits.set('global', 4);
      await granted(A, scopes('t1', 'batch'));
      await granted(A, scopes('t2', 'batch'));
      expect(await A.tryAcquire(scopes('t3', 'batch'), TTL, 'b')).toEqual({ granted: false, blockedBy: 'class:batch', count: 2, limit: 2 });
      const tiny = fresh({ global: 10, batchShare: 0.01 });
      await granted(tiny.A, tiny.scopes('t1', 'batch'));
      expect(await tiny.A.tryAcquire(tiny.scopes('t1', 'batch'), TTL, 'b')).toMatchObject({ blockedBy: 'class:batch', limit: 1 });
    });

    it('counts a retried acquisition (same token) once', async () => {
      const { keys } = fresh();
      const k = [keys.permitScope('only'), keys.permitLimits()];
      expect((await scriptsA.run('permitsAcquire', k, ['tok', TTL, 0, '', '', 0, 'only', 1, 1, 0, 0, 0]) as number[])[0]).toBe(1);
      expect((await scriptsB.run('permitsAcquire', k, ['tok', TTL, 0, '', '', 0, 'only', 1, 1, 0, 0, 0]) as number[])[0]).toBe(1);
      expect(await a.zcard(keys.permitScope('only'))).toBe(1);
      expect(await scriptsA.run('permitsAcquire', k, ['other', TTL, 0, '', '', 0, 'only', 1, 1, 0, 0, 0])).toEqual([0, 1, 1, 1]);
    });

    it('gives a crashed holder’s permits back after the TTL, without anyone releasing them', async () => {
      const { scopes, A, B } = fresh({ tenant: 1 });
      const crashed = await granted(A, scopes('t1'), 150);
      expect(await B.tryAcquire(scopes('t1'), TTL, 'next')).toMatchObject({ granted: false, blockedBy: 'tenant:t1', count: 1 });
      await eventually(async () => ((await redisNowMs(b)) > crashed.expiresAt ? true : undefined), 2_000, 'the lease to lapse', 20);
      const next = await granted(B, scopes('t1'));
      expect(next.token).not.toBe(crashed.token);
    });

    it('takes dependency permits at a single scope', async () => {
      const { keys, config, A, B } = fresh({ dependency: 2 });
      const dep = dependencyScope(config, keys, 'anthropic');
      const first = await granted(A, [dep], TTL, 'r1:llm');
      await granted(B, [dep], TTL, 'r2:llm');
      expect(await A.tryAcquire([dep], TTL, 'r3:llm')).toEqual({ granted: false, blockedBy: 'dependency:anthropic', count: 2, limit: 2 });
      expect(await A.release(first)).toBe(1);
      await granted(B, [dep], TTL, 'r3:llm');
    });
  });

  describe("a tenant's fair share of a dependency", () => {
    const CLAIM_MS = 60_000;
    const call = (f: ReturnType<typeof fresh>, tenant: string, dependency = 'anthropic', claimMs = CLAIM_MS) =>
      dependencyCallScopes(f.config, f.keys, dependency, tenant, { claimMs });
    const takeAll = async (store: PermitStore, scopes: PermitScope[], count: number, owner: string) =>
      Promise.all(Array.from({ length: count }, (_, i) => granted(store, scopes, TTL, `${owner}${i}`)));

    it('lets a tenant alone take the whole cap, holding each call at the dependency and at its own part', async () => {
      const f = fresh({ dependency: 4 });
      const leases = await takeAll(f.A, call(f, 't1'), 4, 'r');
      expect(leases[0]!.scopes).toEqual(['dependency:anthropic', 'dependency:anthropic:tenant:t1']);
      expect(await f.A.tryAcquire(call(f, 't1'), TTL, 'r5')).toEqual({ granted: false, blockedBy: 'dependency:anthropic', count: 4, limit: 4 });
      expect(await a.zcard(f.keys.permitScope('dependency:anthropic:tenant:t1'))).toBe(4);
      expect(await f.A.release(leases[0]!)).toBe(2);
    });

    it('gives the next permit a busy tenant releases to the tenant waiting behind it, not to the busy one', async () => {
      const f = fresh({ dependency: 4 });
      const busy = await takeAll(f.A, call(f, 't1'), 4, 'busy');
      // t2 is refused by the full cap, and claims its place.
      expect(await f.B.tryAcquire(call(f, 't2'), TTL, 'quiet')).toMatchObject({ granted: false, blockedBy: 'dependency:anthropic' });
      expect(await a.zrange(f.keys.permitWaiting('anthropic'), '0', '-1')).toEqual(['t2']);
      await f.A.release(busy[0]!);
      // t1 holds 3 of 4 while one other tenant waits: its part is 2.
      expect(await f.A.tryAcquire(call(f, 't1'), TTL, 'busy-next')).toEqual({ granted: false, blockedBy: 'dependency:anthropic:tenant:t1', count: 3, limit: 2 });
      await granted(f.B, call(f, 't2'), TTL, 'quiet');
      // granted, t2 gives its claim up; t1's refusal claimed a place for t1
      expect(await a.zrange(f.keys.permitWaiting('anthropic'), '0', '-1')).toEqual(['t1']);
    });

    it('splits the cap evenly among the waiting tenants, at least one each', async () => {
      const f = fresh({ dependency: 9 });
      const busy = await takeAll(f.A, call(f, 't1'), 9, 'busy');
      for (const t of ['t2', 't3']) expect(await f.B.tryAcquire(call(f, t), TTL, t)).toMatchObject({ granted: false });
      await Promise.all(busy.slice(0, 6).map((l) => f.A.release(l)));
      expect(await f.A.tryAcquire(call(f, 't1'), TTL, 'more')).toMatchObject({ blockedBy: 'dependency:anthropic:tenant:t1', count: 3, limit: 3 });
      const g = fresh({ dependency: 2 });
      const busy2 = await takeAll(g.A, call(g, 't1'), 2, 'busy');
      for (const t of ['t2', 't3']) expect(await g.B.tryAcquire(call(g, t), TTL, t)).toMatchObject({ granted: false });
      await g.A.release(busy2[0]!);
      expect(await g.A.tryAcquire(call(g, 't1'), TTL, 'more')).toMatchObject({ blockedBy: 'dependency:anthropic:tenant:t1', count: 1, limit: 1 });
      await granted(g.B, call(g, 't2'), TTL, 't2');
    });

    it("forgets a waiter's claim once it lapses: the busy tenant may take the whole cap again", async () => {
      const f = fresh({ dependency: 4 });
      const busy = await takeAll(f.A, call(f, 't1'), 4, 'busy');
      expect(await f.B.tryAcquire(call(f, 't2', 'anthropic', 150), TTL, 'gone')).toMatchObject({ granted: false });
      expect(Number(await a.pttl(f.keys.permitWaiting('anthropic')))).toBeGreaterThan(0);
      await f.A.release(busy[0]!);
      expect(await f.A.tryAcquire(call(f, 't1', 'anthropic', 150), TTL, 'early')).toMatchObject({ granted: false, blockedBy: 'dependency:anthropic:tenant:t1' });
      await sleep(200);
      await f.B.release(busy[1]!);
      // t1's own claim (made by its refusal) does not count against it
      await takeAll(f.A, call(f, 't1'), 2, 'late');
      expect(await a.zcard(f.keys.permitScope('dependency:anthropic:tenant:t1'))).toBe(4);
    });

    it('takes no fair share for a dependency that opts out', async () => {
      const f = fresh({ dependency: 2 });
      const scopes = call(f, 't1', 'plain');
      expect(scopes.map((s) => s.name)).toEqual(['dependency:plain']);
      await takeAll(f.A, scopes, 2, 'busy');
      expect(await f.B.tryAcquire(call(f, 't2', 'plain'), TTL, 'quiet')).toMatchObject({ granted: false });
      expect(await a.exists(f.keys.permitWaiting('plain'))).toBe(0);
    });

    it('holds both the cap and the split exactly under 100 concurrent acquisitions of two tenants from two connections', async () => {
      const f = fresh({ dependency: 10 });
      const busy = await takeAll(f.A, call(f, 't1'), 10, 'busy');
      expect(await f.B.tryAcquire(call(f, 't2'), TTL, 'claim')).toMatchObject({ granted: false });
      await Promise.all(busy.slice(0, 6).map((l) => f.A.release(l)));
      const results = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 ? f.A : f.B).tryAcquire(call(f, i % 4 ? 't1' : 't2'), TTL, `race${i}`)));
      expect(results.filter((r) => r.granted)).toHaveLength(6);
      // t1 already holds 4 and its part is 5 while t2 waits: t1 gains at most one of the six
      expect(await a.zcard(f.keys.permitScope('dependency:anthropic:tenant:t1'))).toBe(5);
      expect(await a.zcard(f.keys.permitScope('dependency:anthropic:tenant:t2'))).toBe(5);
      expect(await a.zcard(f.keys.permitScope('dependency:anthropic'))).toBe(10);
    });
  });

  describe('RedisDependencyPermits sharing a dependency between a busy and a quiet tenant', () => {
    it("grants the quiet tenant's call at the next release, before any more of the busy tenant's 40 waiting calls", async () => {
      const f = fresh({ dependency: 8 });
      const config = { ...f.config, processor: { permitLeaseMs: 30_000 } } as unknown as SluiceConfig;
      const processors = await Promise.all(
        [a, b].map(async (redis, i) => {
          const wakeups = new PermitWakeups(redis, { channel: f.keys.permitReleased(), logger, fallbackPollMs: 50 });
          await wakeups.start();
          const keeper = new LeaseKeeper(i === 0 ? f.A : f.B, { ttlMs: 30_000, maxLeases: 100, logger });
          return { permits: new RedisDependencyPermits({ config, keys: f.keys, store: i === 0 ? f.A : f.B, keeper, wakeups, metrics: createMetrics(), logger }), keeper, wakeups };
        }),
      );
      try {
        const run = (tenantId: string, runId: string) => ({ runId, tenantId, attempt: 1, deadline: Date.now() + 20_000 }) as RunRequested;
        let grants = 0;
        const held: (() => Promise<void>)[] = [];
        const busyCall = async (i: number) => {
          const release = await processors[i % 2]!.permits.acquire('anthropic', run('t1', `busy${i}`));
          grants++;
          if (held.length < 8) return void held.push(release);
          await sleep(5);
          await release();
        };
        const busy = Array.from({ length: 48 }, (_, i) => busyCall(i));
        await eventually(async () => (grants === 8 && (await a.zcard(f.keys.permitWaitingCalls('anthropic', 't1'))) === 40 ? true : undefined), 5_000, 'the busy calls to wait', 10);
        const quiet = processors[0]!.permits.acquire('anthropic', run('t2', 'quiet'));
        await eventually(async () => ((await a.zscore(f.keys.permitWaiting('anthropic'), 't2')) ? true : undefined), 5_000, 'the quiet call to claim its place', 10);
        // One busy call gives its permit back: t1 holds 7 of 8 and its part is 4 while t2 waits.
        await held[0]!();
        const releaseQuiet = await quiet;
        expect(grants).toBe(8);
        await releaseQuiet();
        await Promise.all(held.slice(1).map((release) => release()));
        await Promise.all(busy);
        expect(grants).toBe(48);
      } finally {
        for (const p of processors) {
          p.keeper.stop();
          await p.wakeups.close();
        }
      }
    });
  });

  describe('a dependency ramping up after its breaker closed (share below 1)', () => {
    it('holds the ramped cap exactly under 100 concurrent acquisitions from two connections', async () => {
      const { keys, config, A, B } = fresh({ dependency: 20 });
      const dep = dependencyScope(config, keys, 'anthropic', 0.25);
      const results = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 ? A : B).tryAcquire([dep], TTL, `r${i}:llm`)));
      expect(results.filter((r) => r.granted)).toHaveLength(5);
      expect(results.find((r) => !r.granted)).toEqual({ granted: false, blockedBy: 'dependency:anthropic', count: 5, limit: 5 });
      // one step later the same holders leave room for the next ones
      await granted(A, [dependencyScope(config, keys, 'anthropic', 0.5)], TTL, 'next:llm');
    });

    it('ramps the limit in force: an operator override is the ceiling, and a closed scope stays closed', async () => {
      const { keys, config, A, limits } = fresh({ dependency: 20 });
      await limits.set('dependency:anthropic', 8);
      const dep = dependencyScope(config, keys, 'anthropic', 0.1);
      await granted(A, [dep], TTL, 'r1:llm');
      expect(await A.tryAcquire([dep], TTL, 'r2:llm')).toEqual({ granted: false, blockedBy: 'dependency:anthropic', count: 1, limit: 1 });
      await limits.set('dependency:anthropic', 0);
      expect(await A.tryAcquire([dep], TTL, 'r3:llm')).toEqual({ granted: false, blockedBy: 'dependency:anthropic', count: 1, limit: 0 });
    });
  });

  describe('limits changed at run time', () => {
    it('applies a lowered and a raised limit at the next acquisition, on any connection', async () => {
      const { scopes, A, B, limits } = fresh({ tenant: 5 });
      const held = [await granted(A, scopes('t1')), await granted(A, scopes('t1'))];
      await limits.set('tenant:t1', 1);
      // permits already held are kept; new ones wait until the tenant is under its new limit
      expect(await B.tryAcquire(scopes('t1'), TTL, 'x')).toEqual({ granted: false, blockedBy: 'tenant:t1', count: 2, limit: 1 });
      await limits.set('tenant:t1', 3);
      await granted(B, scopes('t1'));
      expect(await A.tryAcquire(scopes('t1'), TTL, 'y')).toMatchObject({ blockedBy: 'tenant:t1', count: 3, limit: 3 });
      expect(await limits.overrides()).toEqual(new Map([['tenant:t1', 3]]));
      for (const l of held) await A.release(l);
    });

    it('closes a scope with limit 0', async () => {
      const { keys, config, scopes, A, limits } = fresh();
      await limits.set('global', 0);
      expect(await A.tryAcquire(scopes('t1'), TTL, 'x')).toEqual({ granted: false, blockedBy: 'global', count: 0, limit: 0 });
      expect(await A.tryAcquire(scopes('t1', 'batch'), TTL, 'x')).toEqual({ granted: false, blockedBy: 'global', count: 0, limit: 0 });
      await limits.set('dependency:anthropic', 0);
      expect(await A.tryAcquire([dependencyScope(config, keys, 'anthropic')], TTL, 'x')).toEqual({ granted: false, blockedBy: 'dependency:anthropic', count: 0, limit: 0 });
      await limits.set('global', 2);
      await granted(A, scopes('t1'));
    });
  });

  describe('permits-renew.lua', () => {
    it('extends the lease at every scope', async () => {
      const { scopes, A } = fresh();
      const lease = await granted(A, scopes('t1', 'batch'), 1_000);
      const first = lease.expiresAt;
      await sleep(20);
      expect(await A.renew(lease, 30_000)).toBe(true);
      expect(lease.expiresAt).toBeGreaterThanOrEqual(first + 29_000);
      for (const key of lease.keys) {
        expect(Number(await a.zscore(key, lease.token))).toBe(lease.expiresAt);
        expect(Number(await a.call('PEXPIRETIME', key))).toBe(lease.expiresAt);
      }
    });

    it('keeps a renewed lease alive well past its TTL (LeaseKeeper)', async () => {
      const { scopes, A, B } = fresh({ tenant: 1 });
      const keeper = new LeaseKeeper(A, { ttlMs: 300, maxLeases: 10, logger });
      const lost: PermitLease[] = [];
      const lease = await granted(A, scopes('t1'), 300);
      keeper.keep(lease, (l) => lost.push(l));
      try {
        await sleep(1_000);
        expect(await B.tryAcquire(scopes('t1'), TTL, 'other')).toMatchObject({ granted: false, blockedBy: 'tenant:t1' });
        expect(lost).toEqual([]);
        expect(await keeper.release(lease)).toBe(3);
        expect(keeper.size).toBe(0);
        await granted(B, scopes('t1'));
      } finally {
        keeper.stop();
      }
    });

    it('refuses (0) a lease that lapsed, even before anyone purged it, and removes what is left of it', async () => {
      const { keys, scopes, A } = fresh();
      await granted(A, scopes('t1')); // keeps the sets alive past the short lease
      const lease = await granted(A, scopes('t1'), 100);
      await eventually(async () => ((await redisNowMs(a)) > lease.expiresAt ? true : undefined), 2_000, 'the lease to lapse', 20);
      expect(await a.zscore(keys.permitScope('global'), lease.token)).not.toBeNull(); // not purged yet
      expect(await scriptsA.run('permitsRenew', lease.keys, [lease.token, TTL])).toBe(0);
      for (const key of lease.keys) expect(await a.zscore(key, lease.token)).toBeNull();
    });

    it('refuses a half-lost lease and drops the half that lingered', async () => {
      const { scopes, A } = fresh();
      const lease = await granted(A, scopes('t1'));
      await a.zrem(lease.keys[2]!, lease.token); // as if purged from the tenant scope
      expect(await A.renew(lease, TTL)).toBe(false);
      for (const key of lease.keys) expect(await a.zscore(key, lease.token)).toBeNull();
    });

    it('reports a lost lease to its holder once, and stops renewing it (LeaseKeeper)', async () => {
      const { scopes, A } = fresh();
      const keeper = new LeaseKeeper(A, { ttlMs: 150, maxLeases: 10, logger });
      const lost: PermitLease[] = [];
      const lease = await granted(A, scopes('t1'), 150);
      keeper.keep(lease, (l) => lost.push(l));
      try {
        await a.zrem(lease.keys[0]!, lease.token);
        await eventually(async () => (lost.length > 0 ? true : undefined), 2_000, 'the loss to be reported', 10);
        expect(lost).toEqual([lease]);
        expect(keeper.size).toBe(0);
        await sleep(200);
        expect(lost).toHaveLength(1);
      } finally {
        keeper.stop();
      }
    });
  });

  describe('fencing', () => {
    it('a stale holder cannot renew or release the permit a newer holder took after its lease lapsed', async () => {
      const { keys, scopes, A, B } = fresh({ tenant: 1 });
      const stale = await granted(A, scopes('t1'), 100);
      await eventually(async () => ((await redisNowMs(a)) > stale.expiresAt ? true : undefined), 2_000, 'the lease to lapse', 20);
      const fresh_ = await granted(B, scopes('t1'));
      expect(await A.renew(stale, TTL)).toBe(false);
      expect(await A.release(stale)).toBe(0);
      expect(await a.zrange(keys.permitScope('tenant:t1'), '0', '-1')).toEqual([fresh_.token]);
      expect(await B.renew(fresh_, TTL)).toBe(true);
      expect(await B.release(fresh_)).toBe(3);
    });

    it('tokens differ per acquisition, so the same owner cannot touch its own newer lease with an old one', async () => {
      const { scopes, A } = fresh();
      const first = await granted(A, scopes('t1'), TTL, 'run-1:0');
      const second = await granted(A, scopes('t1'), TTL, 'run-1:0');
      expect(second.token).not.toBe(first.token);
      expect(await A.release(first)).toBe(3);
      expect(await A.release(first)).toBe(0);
      expect(await A.renew(second, TTL)).toBe(true);
    });
  });

  describe('permits-release.lua', () => {
    it('publishes the released scopes on the namespace channel; a repeated release publishes nothing', async () => {
      const { keys, scopes, A } = fresh();
      const wakeups = new PermitWakeups(a, { channel: keys.permitReleased(), logger });
      await wakeups.start();
      const seen: (readonly string[])[] = [];
      const other: (readonly string[] | null)[] = [];
      const stop = wakeups.onWake((released) => void (released ? seen.push(released) : undefined));
      wakeups.onWake((released) => void other.push(released));
      try {
        const lease = await granted(A, scopes('t2', 'batch'));
        expect(await A.release(lease)).toBe(4);
        await eventually(async () => (seen.length > 0 ? true : undefined), 2_000, 'the wake-up', 10);
        expect(seen).toEqual([['global', 'class:batch', 'tenant:t2', 'workflow:wf']]);
        expect(other).toContainEqual(['global', 'class:batch', 'tenant:t2', 'workflow:wf']);
        expect(await A.release(lease)).toBe(0);
        stop();
        const again = await granted(A, scopes('t1'));
        await A.release(again);
        await eventually(async () => (other.filter((r) => r?.includes('tenant:t1')).length > 0 ? true : undefined), 2_000, 'the second wake-up', 10);
        // the repeated release announced nothing, and the unsubscribed listener heard nothing more
        expect(other.filter((r) => r !== null)).toHaveLength(2);
        expect(seen).toHaveLength(1);
      } finally {
        await wakeups.close();
      }
    });

    it('announces only in its own namespace', async () => {
      const one = fresh();
      const two = fresh();
      const wakeups = new PermitWakeups(a, { channel: one.keys.permitReleased(), logger });
      await wakeups.start();
      const seen: (readonly string[])[] = [];
      wakeups.onWake((released) => void (released ? seen.push(released) : undefined));
      try {
        await two.A.release(await granted(two.A, two.scopes('t1')));
        await one.A.release(await granted(one.A, one.scopes('t3')));
        await eventually(async () => (seen.length > 0 ? true : undefined), 2_000, 'the wake-up', 10);
        await sleep(50);
        expect(seen).toEqual([['global', 'tenant:t3', 'workflow:wf']]);
      } finally {
        await wakeups.close();
      }
    });
  });
});

describe('cluster slots', () => {
  it('puts every key of one acquisition (scopes, waiting set and limits hash) in one slot, under the permits tag', () => {
    for (const ns of ['', base, 'prod.', 'a-b_c.']) {
      const keys: RedisKeys = redisKeys(ns);
      const config = configWith();
      for (const runClass of ['interactive', 'batch'] as const) {
        const call = dependencyCallScopes(config, keys, 'anthropic', 't1', { claimMs: 1 });
        const all = [...runScopes(config, keys, { tenantId: 't1', workflow: 'wf', runClass }).map((s) => s.key), ...call.map((s) => s.key), keys.permitWaiting('anthropic'), keys.permitWaitingCalls('anthropic', 't1'), keys.permitLimits()];
        expect(new Set(all.map(keySlot)).size, all.join(' ')).toBe(1);
        expect(new Set(all.map((k) => /\{([^}]+)\}/.exec(k)?.[1]))).toEqual(new Set([`${ns}sluice:permits`]));
      }
    }
  });
});
