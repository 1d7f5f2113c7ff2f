import type { RedisClient } from '../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdmissionStore } from '../../src/admission/admission-store.js';
import { readBacklog } from '../../src/admission/backlog-census.js';
import type { RunClass, RunStatus } from '../../src/events/schemas.js';
import { MonitorLease, monitorScope } from '../../src/lag/monitor-lease.js';
import { PermitStore } from '../../src/permits/permit-store.js';
import { redisKeys } from '../../src/redis/keys.js';
import { newRunId } from '../../src/runs/run-id.js';
import { WaitingRuns } from '../../src/status/waiting-runs.js';
import { statusEvent } from '../support/status-event.js';
import { testNamespace } from './harness.js';
import { closeScriptPair, openScriptPair } from './lua/redis-clients.js';
import type { LuaScripts } from '../../src/redis/scripts.js';

/**
 * The lag monitor's Redis side against a real Redis: the lease that makes one monitor active (the
 * permit scripts, raced by several takers over separate connections), the waiting-runs record the
 * status sink keeps, and the backlog census.
 */
const base = testNamespace('lag-redis');
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let scriptsB: LuaScripts;
let n = 0;
const fresh = () => redisKeys(`${base}${++n}.`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => ({ a, b, scriptsA, scriptsB } = await openScriptPair()));
afterAll(() => closeScriptPair(a, b, `*${base}*`));

describe('MonitorLease on Redis', () => {
  it('of 20 instances racing for the lease on two connections, exactly one gets it', async () => {
    const keys = fresh();
    const leases = Array.from({ length: 20 }, (_, i) => new MonitorLease(new PermitStore(i % 2 ? scriptsA : scriptsB, keys), monitorScope(keys), { ttlMs: 5_000, owner: `m${i}` }));
    const held = await Promise.all(leases.map((l) => l.refresh()));
    expect(held.filter(Boolean)).toHaveLength(1);
    expect(await a.zcard(keys.permitScope('lag-monitor'))).toBe(1);
    // Renewals keep it with its holder; the others keep failing to take it.
    const again = await Promise.all(leases.map((l) => l.refresh()));
    expect(again).toEqual(held);
  });

  it('a lease not renewed lapses after its TTL, and another instance takes it; the old holder then finds it lost', async () => {
    const keys = fresh();
    const first = new MonitorLease(new PermitStore(scriptsA, keys), monitorScope(keys), { ttlMs: 600, owner: 'first' });
    const second = new MonitorLease(new PermitStore(scriptsB, keys), monitorScope(keys), { ttlMs: 600, owner: 'second' });
    expect(await first.refresh()).toBe(true);
    expect(await second.refresh()).toBe(false);
    await sleep(700);
    expect(first.held).toBe(false);
    expect(await second.refresh()).toBe(true);
    expect(await first.refresh()).toBe(false);
  });

  it('released, it is free at once', async () => {
    const keys = fresh();
    const first = new MonitorLease(new PermitStore(scriptsA, keys), monitorScope(keys), { ttlMs: 60_000, owner: 'first' });
    const second = new MonitorLease(new PermitStore(scriptsB, keys), monitorScope(keys), { ttlMs: 60_000, owner: 'second' });
    await first.refresh();
    await first.release();
    expect(await second.refresh()).toBe(true);
  });
});

const status = (runId: string, sequence: number, s: RunStatus, deadline: number, runClass: RunClass = 'batch') => statusEvent({ runId, sequence, status: s, deadline, class: runClass, tenantId: 'acme' });

describe('WaitingRuns on Redis', () => {
  const count = async (w: WaitingRuns, runClass: 'interactive' | 'batch') => (await w.counts(['acme'], [runClass])).find((c) => c.runClass === runClass)!.runs;

  it('counts a run while its latest status is waiting_dependency, per class, and stops once it moves on', async () => {
    const keys = fresh();
    const w = new WaitingRuns(a, keys, 1_000);
    const deadline = Date.now() + 60_000;
    await w.record([status('r1', 1001, 'waiting_dependency', deadline), status('r2', 1001, 'waiting_dependency', deadline, 'interactive'), status('r3', 1001, 'running', deadline)]);
    expect([await count(w, 'batch'), await count(w, 'interactive')]).toEqual([1, 1]);
    await w.record([status('r1', 1002, 'running', deadline)]);
    expect(await count(w, 'batch')).toBe(0);
    await w.record([status('r2', 1999, 'completed', deadline, 'interactive')]);
    expect(await count(w, 'interactive')).toBe(0);
  });

  it('a redelivered batch changes nothing', async () => {
    const keys = fresh();
    const w = new WaitingRuns(a, keys, 1_000);
    const batch = [status('r1', 1001, 'waiting_dependency', Date.now() + 60_000)];
    await w.record(batch);
    await w.record(batch);
    expect(await count(w, 'batch')).toBe(1);
  });

  it('an entry stops counting once its lease (deadline + grace) passed, is purged by the next record, and the set expires after its latest entry', async () => {
    const keys = fresh();
    const w = new WaitingRuns(a, keys, 200);
    const key = keys.waitingRuns('acme', 'batch');
    await w.record([status('lost', 1001, 'waiting_dependency', Date.now() + 100)]);
    expect(await count(w, 'batch')).toBe(1);
    const ttl = await a.pttl(key);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(300);
    await sleep(350);
    expect(await count(w, 'batch')).toBe(0);
    await w.record([status('later', 1001, 'waiting_dependency', Date.now() + 60_000)]);
    expect(await a.zrange(key, 0, '-1')).toEqual(['later']);
    expect(await a.pttl(key)).toBeGreaterThan(59_000);
    // An earlier expiry never shortens the set's life.
    await w.record([status('soon', 1001, 'waiting_dependency', Date.now() + 1_000)]);
    expect(await a.pttl(key)).toBeGreaterThan(58_000);
  });
});

describe('readBacklog on Redis', () => {
  it('counts what backlog-admit.lua recorded, per tenant and class, with the oldest admission from the run ids', async () => {
    const keys = fresh();
    const store = new AdmissionStore(scriptsA, keys);
    const open = { tenantMax: 100, globalMax: 100, maxAhead: undefined, recordAnyway: false };
    const now = Date.now();
    const ids = [newRunId(now - 5_000), newRunId(now - 2_000), newRunId(now - 1_000)];
    await store.admit({ runId: ids[0]!, tenantId: 'acme', runClass: 'batch', leaseExpiry: now + 60_000 }, open);
    await store.admit({ runId: ids[1]!, tenantId: 'acme', runClass: 'batch', leaseExpiry: now + 60_000 }, open);
    await store.admit({ runId: ids[2]!, tenantId: 'other', runClass: 'interactive', leaseExpiry: now + 60_000 }, open);
    const counts = await readBacklog(b, keys, ['acme', 'other', 'idle']);
    expect(counts.filter((c) => c.runs > 0)).toEqual([
      { tenant: 'acme', runClass: 'batch', runs: 2, oldestAdmittedAt: now - 5_000 },
      { tenant: 'other', runClass: 'interactive', runs: 1, oldestAdmittedAt: now - 1_000 },
    ]);
    expect(counts).toHaveLength(6);
    await store.release({ runId: ids[0]!, tenantId: 'acme', runClass: 'batch' }, 10);
    expect((await readBacklog(b, keys, ['acme'])).find((c) => c.runClass === 'batch')).toEqual({ tenant: 'acme', runClass: 'batch', runs: 1, oldestAdmittedAt: now - 2_000 });
  });
});
