import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdmissionController } from '../../../src/admission/admission-controller.js';
import { maxAheadForDeadline } from '../../../src/admission/admission-policy.js';
import { AdmissionStore, type BacklogRun } from '../../../src/admission/admission-store.js';
import type { ServiceState } from '../../../src/admission/service-state.js';
import { RedisOutageFallback } from '../../../src/admission/redis-outage.js';
import type { SluiceConfig, TenantConfig, WorkflowConfig } from '../../../src/config/schema.js';
import type { RunClass } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import type { Metrics } from '../../../src/obs/metrics.js';
import { redisKeys, type RedisKeys } from '../../../src/redis/keys.js';
import { LuaScripts } from '../../../src/redis/scripts.js';
import { eventually, testNamespace } from '../harness.js';
import { crc16, keySlot } from '../../../src/redis/key-slot.js';
import { closeScriptPair, openScriptPair, redisNowMs, REDIS_BACKENDS } from './redis-clients.js';
import type { TokenBudgetStore } from '../../../src/admission/token-budget-store.js';

/**
 * backlog-admit.lua and backlog-release.lua against a real Redis, through AdmissionStore and raw.
 * Each test gets its own namespace (the class and all-runs sets are shared within a namespace);
 * two connections stand in for two API instances.
 */
const base = testNamespace('lua-backlog');
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let scriptsB: LuaScripts;
let n = 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A fresh namespace: its keys and a store on each connection. */
function fresh(): { keys: RedisKeys; A: AdmissionStore; B: AdmissionStore } {
  const keys = redisKeys(`${base}${++n}.`);
  return { keys, A: new AdmissionStore(scriptsA, keys), B: new AdmissionStore(scriptsB, keys) };
}

const later = () => Date.now() + 600_000;
const run = (runId: string, tenantId = 'acme', runClass: RunClass = 'interactive', leaseExpiry = later()) => ({ runId, tenantId, runClass, leaseExpiry });
const open = { tenantMax: 1_000, globalMax: 1_000, maxAhead: undefined, recordAnyway: false };
const members = (r: RedisClient, key: string) => r.zrange(key, '0', '-1').then((m) => m.sort());

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => ({ a, b, scriptsA, scriptsB } = await openScriptPair(backend)));
  afterAll(() => closeScriptPair(a, b, `*${base}*`));

  describe('backlog-admit.lua', () => {
    it('admits and records the run in the tenant, class and all-runs sets, answering counts from before it', async () => {
      const { keys, A } = fresh();
      const expiry = later();
      expect(await A.admit(run('r1', 'acme', 'interactive', expiry), open)).toEqual({ outcome: 'admitted', tenantCount: 0, classAhead: 0, allCount: 0 });
      expect(await A.admit(run('r2', 'acme', 'batch'), open)).toEqual({ outcome: 'admitted', tenantCount: 1, classAhead: 0, allCount: 1 });
      expect(await A.admit(run('r3', 'other', 'interactive'), open)).toEqual({ outcome: 'admitted', tenantCount: 0, classAhead: 1, allCount: 2 });
      expect(await members(a, keys.backlogTenant('acme'))).toEqual(['r1', 'r2']);
      expect(await members(a, keys.backlogClass('interactive'))).toEqual(['r1', 'r3']);
      expect(await members(a, keys.backlogAll())).toEqual(['r1', 'r2', 'r3']);
      expect(Number(await a.zscore(keys.backlogAll(), 'r1'))).toBe(expiry);
    });

    it('returns the raw answer {outcome, tenant count, class count, all count}', async () => {
      const { keys } = fresh();
      const res = await scriptsA.run('backlogAdmit', [keys.backlogTenant('t'), keys.backlogClass('batch'), keys.backlogAll()], ['r', later(), 10, 10, 'none', 0]);
      expect(res).toEqual(['admitted', 0, 0, 0]);
    });

    it('defers a full tenant and does not record the run', async () => {
      const { keys, A } = fresh();
      const bounds = { ...open, tenantMax: 2 };
      expect((await A.admit(run('r1'), bounds)).outcome).toBe('admitted');
      expect((await A.admit(run('r2'), bounds)).outcome).toBe('admitted');
      expect(await A.admit(run('r3'), bounds)).toEqual({ outcome: 'tenant_full', tenantCount: 2, classAhead: 2, allCount: 2 });
      expect(await a.zscore(keys.backlogAll(), 'r3')).toBeNull();
      expect(await a.zcard(keys.backlogTenant('acme'))).toBe(2);
      // another tenant is not affected
      expect((await A.admit(run('r4', 'other'), bounds)).outcome).toBe('admitted');
    });

    it('refuses a full system and does not record the run', async () => {
      const { keys, A } = fresh();
      const bounds = { ...open, tenantMax: 10, globalMax: 3 };
      for (const [id, t] of [['r1', 'x'], ['r2', 'y'], ['r3', 'z']] as const) expect((await A.admit(run(id, t), bounds)).outcome).toBe('admitted');
      expect(await A.admit(run('r4', 'w'), bounds)).toEqual({ outcome: 'global_full', tenantCount: 0, classAhead: 3, allCount: 3 });
      expect(await a.zcard(keys.backlogAll())).toBe(3);
    });

    it('reports tenant_full before global_full when both bounds are reached', async () => {
      const { A } = fresh();
      const bounds = { ...open, tenantMax: 2, globalMax: 2 };
      await A.admit(run('r1'), bounds);
      await A.admit(run('r2'), bounds);
      expect((await A.admit(run('r3'), bounds)).outcome).toBe('tenant_full');
      expect((await A.admit(run('r4', 'other'), bounds)).outcome).toBe('global_full');
    });

    it('refuses too_late when more of the tenant’s runs, of any class, are ahead than maxTenantAhead', async () => {
      const { keys, A } = fresh();
      await A.admit(run('t1', 'x', 'interactive'), open);
      await A.admit(run('t2', 'x', 'batch'), open);
      await A.admit(run('o1', 'y', 'interactive'), open);
      // two of tenant x ahead, one of them batch: 1 refuses, 2 admits; another tenant is not counted
      expect(await A.admit(run('t3', 'x', 'interactive'), { ...open, maxTenantAhead: 1 })).toEqual({ outcome: 'too_late', tenantCount: 2, classAhead: 2, allCount: 3 });
      expect(await a.zscore(keys.backlogAll(), 't3')).toBeNull();
      expect((await A.admit(run('t3', 'x', 'interactive'), { ...open, maxTenantAhead: 2 })).outcome).toBe('admitted');
      expect((await A.admit(run('y2', 'y', 'interactive'), { ...open, maxTenantAhead: 1 })).outcome).toBe('admitted');
      expect((await A.admit(run('z1', 'z', 'interactive'), { ...open, maxTenantAhead: -1 })).outcome).toBe('too_late');
    });

    it('refuses too_late when more of the class are ahead than maxAhead, counting only that class', async () => {
      const { keys, A } = fresh();
      await A.admit(run('i1', 'x', 'interactive'), open);
      await A.admit(run('i2', 'y', 'interactive'), open);
      await A.admit(run('b1', 'x', 'batch'), open);
      // two interactive ahead: maxAhead 2 fits (not more than), 1 does not
      expect(await A.admit(run('i3', 'z', 'interactive'), { ...open, maxAhead: 1 })).toEqual({ outcome: 'too_late', tenantCount: 0, classAhead: 2, allCount: 3 });
      expect(await a.zscore(keys.backlogAll(), 'i3')).toBeNull();
      expect((await A.admit(run('i3', 'z', 'interactive'), { ...open, maxAhead: 2 })).outcome).toBe('admitted');
      // one batch ahead: maxAhead 0 refuses, 1 admits
      expect((await A.admit(run('b2', 'z', 'batch'), { ...open, maxAhead: 0 })).outcome).toBe('too_late');
      expect((await A.admit(run('b2', 'z', 'batch'), { ...open, maxAhead: 1 })).outcome).toBe('admitted');
      // an empty class admits with maxAhead 0
      const other = fresh();
      expect((await other.A.admit(run('solo'), { ...open, maxAhead: 0 })).outcome).toBe('admitted');
    });

    it('checks the tenant and global bounds before the deadline', async () => {
      const { A } = fresh();
      await A.admit(run('r1'), open);
      expect((await A.admit(run('r2'), { ...open, tenantMax: 1, maxAhead: 0 })).outcome).toBe('tenant_full');
      expect((await A.admit(run('r3', 'other'), { ...open, globalMax: 1, maxAhead: 0 })).outcome).toBe('global_full');
    });

    it("treats maxAhead 'none' (undefined in the store) as no limit, and a negative one as none allowed", async () => {
      const { keys, A } = fresh();
      for (let i = 0; i < 20; i++) expect((await A.admit(run(`r${i}`, `t${i}`), { ...open, maxAhead: undefined })).outcome).toBe('admitted');
      const raw = await scriptsA.run('backlogAdmit', [keys.backlogTenant('t'), keys.backlogClass('interactive'), keys.backlogAll()], ['raw', later(), 100, 100, 'none', 0]);
      expect(raw).toEqual(['admitted', 0, 20, 20]);
      const late = await scriptsA.run('backlogAdmit', [keys.backlogTenant('t'), keys.backlogClass('interactive'), keys.backlogAll()], ['late', later(), 100, 100, -1, 0]);
      expect(late).toEqual(['too_late', 1, 21, 21]);
    });

    // Regression guard (this was a bug): maxAheadForDeadline() answers -1 for "cannot finish even with nothing ahead"
    // (spare time < 0), but the store passes maxAhead straight to backlog-admit.lua, where -1 means
    // "no limit". So the runs that are most certainly too late are admitted instead of refused with
    // 503 deadline_unreachable.
    it('refuses a run that cannot finish even with nothing ahead (maxAheadForDeadline = -1)', async () => {
      const { A } = fresh();
      const now = Date.now();
      const deadline = now + 1_000;
      const maxAhead = maxAheadForDeadline({ deadline, now, slots: 4, service: { ratePerSec: 10, serviceTimeMs: 5_000 } });
      expect(maxAhead).toBe(-1);
      const res = await A.admit({ runId: 'hopeless', tenantId: 'acme', runClass: 'interactive', leaseExpiry: deadline + 60_000 }, { tenantMax: 100, globalMax: 100, maxAhead, recordAnyway: false });
      expect(res.outcome).toBe('too_late');
    });

    it('the same bug end to end: AdmissionController admits an interactive run whose deadline is shorter than the service time', async () => {
      const { A } = fresh();
      const config = { admission: { emergencyRefillFactor: 0.5, leaseGraceMs: 60_000, maxBacklog: 1_000 }, limits: { global: 4, batchShare: 0.5 }, tenants: {} } as unknown as SluiceConfig;
      const state = { service: () => ({ ratePerSec: 10, serviceTimeMs: 5_000 }) } as unknown as ServiceState;
      const metrics = { admissions: { inc: () => {} }, admissionObserved: { inc: () => {} }, backlogLimit: { set: () => {} }, globalBacklogLimit: { set: () => {} } } as unknown as Metrics;
      const tenant = { admission: { mode: 'enforce', bucket: { capacity: 100, refillPerSec: 100 }, maxBacklog: 100 } } as unknown as TenantConfig;
      const workflow = { steps: [{ kind: 'llm', dependency: 'anthropic' }] } as unknown as WorkflowConfig;
      const controller = new AdmissionController(config, A, state, { all: () => new Map() }, metrics, new RedisOutageFallback({ policy: 'fail-closed', localBucket: { capacity: 1, refillPerSec: 1 }, maxAdmittedPerOutage: 1 }), createLogger('silent'), {} as TokenBudgetStore);
      const now = Date.now();
      const decision = await controller.decide({ runId: 'hopeless', tenantId: 'acme', tenant, workflowName: 'wf', workflow, runClass: 'interactive', deadline: now + 1_000, now, idempotencyKey: false });
      expect(decision).toMatchObject({ outcome: 'rejected', reason: 'deadline_unreachable' });
    });

    it('answers duplicate for a run already in the backlog, whatever the bounds, and records nothing twice', async () => {
      const { keys, A } = fresh();
      await A.admit(run('r1'), open);
      await A.admit(run('r2'), open);
      // counts include the run itself (it is already there)
      expect(await A.admit(run('r1'), open)).toEqual({ outcome: 'duplicate', tenantCount: 2, classAhead: 2, allCount: 2 });
      expect(await A.admit(run('r1'), { tenantMax: 1, globalMax: 1, maxAhead: 0, recordAnyway: true })).toMatchObject({ outcome: 'duplicate' });
      expect(await a.zcard(keys.backlogAll())).toBe(2);
      // a duplicate across tenants (same runId) is found through the all-runs set
      expect((await A.admit(run('r1', 'other'), open)).outcome).toBe('duplicate');
      expect(await a.zcard(keys.backlogTenant('other'))).toBe(0);
    });

    it('keeps the first lease of a duplicate', async () => {
      const { keys, A } = fresh();
      const first = later();
      await A.admit(run('r1', 'acme', 'interactive', first), open);
      await A.admit(run('r1', 'acme', 'interactive', first + 1_000_000), open);
      expect(Number(await a.zscore(keys.backlogAll(), 'r1'))).toBe(first);
    });

    it('records the run even when refused with recordAnyway (observe mode), still answering the refusal', async () => {
      const { keys, A } = fresh();
      await A.admit(run('r1'), open);
      const res = await A.admit(run('r2'), { tenantMax: 1, globalMax: 1_000, maxAhead: undefined, recordAnyway: true });
      expect(res).toEqual({ outcome: 'tenant_full', tenantCount: 1, classAhead: 1, allCount: 1 });
      for (const key of [keys.backlogTenant('acme'), keys.backlogClass('interactive'), keys.backlogAll()]) expect(await a.zscore(key, 'r2')).not.toBeNull();
      expect((await A.admit(run('r3', 'x'), { tenantMax: 100, globalMax: 2, maxAhead: undefined, recordAnyway: true })).outcome).toBe('global_full');
      expect((await A.admit(run('r4', 'y'), { tenantMax: 100, globalMax: 100, maxAhead: 0, recordAnyway: true })).outcome).toBe('too_late');
      expect(await members(a, keys.backlogAll())).toEqual(['r1', 'r2', 'r3', 'r4']);
    });

    it('purges entries whose lease has expired: they stop counting', async () => {
      const { keys, A } = fresh();
      const now = await redisNowMs(a);
      await A.admit(run('stale', 'acme', 'interactive', now - 1), open); // already past: recorded, purged next call
      await A.admit(run('short', 'acme', 'interactive', now + 150), open);
      await A.admit(run('long', 'acme', 'interactive', now + 600_000), open);
      expect(await members(a, keys.backlogAll())).toEqual(['long', 'short']);
      await eventually(async () => ((await redisNowMs(a)) > now + 150 ? true : undefined), 2_000, 'the short lease to pass', 20);
      expect(await A.admit(run('next'), { ...open, tenantMax: 2 })).toEqual({ outcome: 'admitted', tenantCount: 1, classAhead: 1, allCount: 1 });
      for (const key of [keys.backlogTenant('acme'), keys.backlogClass('interactive'), keys.backlogAll()]) expect(await members(a, key)).toEqual(['long', 'next']);
    });

    it('lets every set expire (PEXPIREAT) with its latest lease, never shortening it', async () => {
      const { keys, A } = fresh();
      const sets = [keys.backlogTenant('acme'), keys.backlogClass('interactive'), keys.backlogAll()];
      const now = await redisNowMs(a);
      await A.admit(run('r1', 'acme', 'interactive', now + 100_000), open);
      for (const key of sets) expect(Number(await a.call('PEXPIRETIME', key))).toBe(now + 100_000);
      await A.admit(run('r2', 'acme', 'interactive', now + 200_000), open);
      for (const key of sets) expect(Number(await a.call('PEXPIRETIME', key))).toBe(now + 200_000);
      await A.admit(run('r3', 'acme', 'interactive', now + 150_000), open);
      for (const key of sets) expect(Number(await a.call('PEXPIRETIME', key))).toBe(now + 200_000);
    });

    it('drops a set entirely once its last lease has passed (a lost release cannot leak)', async () => {
      const { keys, A } = fresh();
      const now = await redisNowMs(a);
      await A.admit(run('r1', 'lonely', 'batch', now + 200), open);
      expect(await a.exists(keys.backlogTenant('lonely'), keys.backlogClass('batch'), keys.backlogAll())).toBe(3);
      await eventually(async () => ((await a.exists(keys.backlogTenant('lonely'), keys.backlogClass('batch'), keys.backlogAll())) === 0 ? true : undefined), 2_000, 'the backlog sets to expire', 25);
    });

    it('never admits more than the tenant bound from 100 concurrent admits over two connections', async () => {
      const { keys, A, B } = fresh();
      const results = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 ? A : B).admit(run(`r${i}`), { ...open, tenantMax: 25 })));
      const admitted = results.filter((r) => r.outcome === 'admitted');
      expect(admitted).toHaveLength(25);
      expect(results.filter((r) => r.outcome === 'tenant_full')).toHaveLength(75);
      // serialised: each admitted run saw a different count before it, 0..24
      expect(admitted.map((r) => r.tenantCount).sort((x, y) => x - y)).toEqual(Array.from({ length: 25 }, (_, i) => i));
      expect(await a.zcard(keys.backlogTenant('acme'))).toBe(25);
      expect(await a.zcard(keys.backlogAll())).toBe(25);
    });

    it('never admits more than the global bound from concurrent admits of many tenants', async () => {
      const { keys, A, B } = fresh();
      const results = await Promise.all(Array.from({ length: 120 }, (_, i) => (i % 2 ? A : B).admit(run(`r${i}`, `t${i % 12}`), { ...open, tenantMax: 10, globalMax: 30 })));
      expect(results.filter((r) => r.outcome === 'admitted')).toHaveLength(30);
      expect(await a.zcard(keys.backlogAll())).toBe(30);
      for (let t = 0; t < 12; t++) expect(await a.zcard(keys.backlogTenant(`t${t}`))).toBeLessThanOrEqual(10);
    });

    it('never admits more than maxAhead + 1 of a class from concurrent admits', async () => {
      const { keys, A, B } = fresh();
      const results = await Promise.all(Array.from({ length: 60 }, (_, i) => (i % 2 ? A : B).admit(run(`r${i}`, `t${i}`, 'batch'), { ...open, maxAhead: 9 })));
      expect(results.filter((r) => r.outcome === 'admitted')).toHaveLength(10);
      expect(results.filter((r) => r.outcome === 'too_late')).toHaveLength(50);
      expect(await a.zcard(keys.backlogClass('batch'))).toBe(10);
    });
  });

  describe('backlog-release.lua', () => {
    const r = (runId: string, runClass: RunClass = 'interactive', tenantId = 'acme'): BacklogRun => ({ runId, tenantId, runClass });

    async function currentBucket(): Promise<number> {
      const [s] = await a.time();
      return Math.floor(Number(s) / 10);
    }

    it('removes a finished run from every set and answers true only the first time', async () => {
      const { keys, A } = fresh();
      await A.admit(run('r1'), open);
      await A.admit(run('r2'), open);
      expect(await A.release(r('r1'), 100)).toBe(true);
      expect(await A.release(r('r1'), 100)).toBe(false);
      for (const key of [keys.backlogTenant('acme'), keys.backlogClass('interactive'), keys.backlogAll()]) expect(await members(a, key)).toEqual(['r2']);
      expect(await A.release(r('never-admitted'), 100)).toBe(false);
    });

    it('counts a released run once in its class bucket (b:<server seconds / 10>)', async () => {
      const { keys, A } = fresh();
      await A.admit(run('r1'), open);
      await A.admit(run('r2'), open);
      const before = await currentBucket();
      await A.release(r('r1'), 100);
      await A.release(r('r1'), 100); // redelivered terminal event: no-op
      await A.release(r('r2'), 100);
      const after = await currentBucket();
      const hash = await a.hgetall(keys.serviceStats('interactive'));
      const counts = Object.entries(hash).filter(([f]) => f.startsWith('b:'));
      const total = counts.reduce((s, [, v]) => s + Number(v), 0);
      expect(total).toBe(2);
      for (const [f] of counts) {
        expect(Number(f.slice(2))).toBeGreaterThanOrEqual(before);
        expect(Number(f.slice(2))).toBeLessThanOrEqual(after);
      }
      // the other class has nothing
      expect(await a.exists(keys.serviceStats('batch'))).toBe(0);
      const pttl = await a.pttl(keys.serviceStats('interactive'));
      expect(pttl).toBeGreaterThan(86_400_000 - 10_000);
      expect(pttl).toBeLessThanOrEqual(86_400_000);
    });

    it('keeps a moving service time with weight 0.1 for the newest run', async () => {
      const { keys, A } = fresh();
      for (const id of ['r1', 'r2', 'r3', 'r4']) await A.admit(run(id, 'acme', 'batch'), open);
      await A.release(r('r1', 'batch'), 1_000);
      expect(Number(await a.hget(keys.serviceStats('batch'), 'service_ms'))).toBe(1_000);
      await A.release(r('r2', 'batch'), 2_000);
      expect(Number(await a.hget(keys.serviceStats('batch'), 'service_ms'))).toBeCloseTo(1_100, 9);
      // unknown execution time: counted as finished, average untouched
      await A.release(r('r3', 'batch'), undefined);
      expect(Number(await a.hget(keys.serviceStats('batch'), 'service_ms'))).toBeCloseTo(1_100, 9);
      await A.release(r('r4', 'batch'), 0);
      expect(Number(await a.hget(keys.serviceStats('batch'), 'service_ms'))).toBeCloseTo(990, 9);
      const counts = Object.entries(await a.hgetall(keys.serviceStats('batch'))).filter(([f]) => f.startsWith('b:'));
      expect(counts.reduce((s, [, v]) => s + Number(v), 0)).toBe(4);
    });

    it('uses the weight it is given (raw script)', async () => {
      const { keys, A } = fresh();
      await A.admit(run('r1'), open);
      await A.admit(run('r2'), open);
      const k = [keys.backlogTenant('acme'), keys.backlogClass('interactive'), keys.backlogAll(), keys.serviceStats('interactive')];
      expect(await scriptsA.run('backlogRelease', k, ['r1', 400, 10, 361, 0.5, 1])).toBe(1);
      expect(await scriptsA.run('backlogRelease', k, ['r2', 800, 10, 361, 0.5, 1])).toBe(1);
      expect(Number(await a.hget(keys.serviceStats('interactive'), 'service_ms'))).toBe(600);
    });

    it('prunes buckets older than the kept window and leaves other fields alone', async () => {
      const { keys, A } = fresh();
      const key = keys.serviceStats('interactive');
      const now = await currentBucket();
      await a.hset(key, `b:${now - 362}`, '5', `b:${now - 361}`, '5', `b:${now - 360}`, '7', 'b:abc', '1', 'note', 'x');
      await A.admit(run('r1'), open);
      await A.release(r('r1'), 10);
      const after = await currentBucket();
      const fields = await a.hgetall(key);
      expect(fields[`b:${now - 362}`]).toBeUndefined();
      expect(fields[`b:${now - 361}`]).toBeUndefined();
      // kept: bucket − 361 < b (unless the 10 s bucket ticked over during the test)
      if (after === now) expect(fields[`b:${now - 360}`]).toBe('7');
      expect(fields[`b:${after}`] ?? fields[`b:${now}`]).toBe('1');
      expect(fields['b:abc']).toBe('1');
      expect(fields.note).toBe('x');
    });

    it('withdraws a run without counting it as served', async () => {
      const { keys, A } = fresh();
      await A.admit(run('r1'), open);
      expect(await A.withdraw(r('r1'))).toBe(true);
      expect(await A.withdraw(r('r1'))).toBe(false);
      for (const key of [keys.backlogTenant('acme'), keys.backlogClass('interactive'), keys.backlogAll()]) expect(await a.zcard(key)).toBe(0);
      expect(await a.exists(keys.serviceStats('interactive'))).toBe(0);
      // and a later release of the same run counts nothing either
      expect(await A.release(r('r1'), 100)).toBe(false);
      expect(await a.exists(keys.serviceStats('interactive'))).toBe(0);
    });

    it('frees capacity: a tenant at its bound can admit again after a release', async () => {
      const { A, B } = fresh();
      const bounds = { ...open, tenantMax: 1 };
      expect((await A.admit(run('r1'), bounds)).outcome).toBe('admitted');
      expect((await B.admit(run('r2'), bounds)).outcome).toBe('tenant_full');
      await B.release(r('r1'), 5);
      expect((await A.admit(run('r2'), bounds)).outcome).toBe('admitted');
    });

    it('answers false for a run whose lease already expired and was purged (it is not counted)', async () => {
      const { keys, A } = fresh();
      const now = await redisNowMs(a);
      await A.admit(run('late', 'acme', 'interactive', now + 50), open);
      await sleep(80);
      await A.admit(run('trigger', 'x'), open); // purges
      expect(await A.release(r('late'), 100)).toBe(false);
      expect(await a.exists(keys.serviceStats('interactive'))).toBe(0);
    });
  });
});

describe('cluster slots', () => {
  it('computes slots like Redis (CRC16 XMODEM, hash tags)', () => {
    expect(crc16(Buffer.from('123456789'))).toBe(0x31c3);
    expect(keySlot('foo')).toBe(12_182);
    expect(keySlot('bar')).toBe(5_061);
    expect(keySlot('{user1000}.following')).toBe(keySlot('{user1000}.followers'));
    expect(keySlot('{}x')).toBe(crc16(Buffer.from('{}x')) % 16_384);
  });

  it('puts every key of one admit or release call in one slot', () => {
    for (const ns of ['', base, 'prod.', 'a-b_c.']) {
      const keys = redisKeys(ns);
      for (const tenant of ['acme', 'tenant-with-dashes', 'x']) {
        for (const c of ['interactive', 'batch'] as const) {
          const admitKeys = [keys.backlogTenant(tenant), keys.backlogClass(c), keys.backlogAll()];
          const releaseKeys = [...admitKeys, keys.serviceStats(c)];
          const slots = new Set(releaseKeys.map(keySlot));
          expect(slots.size, releaseKeys.join(' ')).toBe(1);
          const tags = new Set(releaseKeys.map((k) => /\{([^}]+)\}/.exec(k)?.[1]));
          expect([...tags]).toEqual([`${ns}sluice:admission`]);
        }
      }
    }
  });

  it('hashes single-key scripts on the tenant, so one tenant’s bucket and idempotency keys share a slot', () => {
    const keys = redisKeys(base);
    expect(keySlot(keys.tenantBucket('acme'))).toBe(keySlot(keys.idempotency('acme', 'abc')));
    expect(keySlot(keys.tenantBucket('acme'))).toBe(keySlot('acme'));
  });
});
