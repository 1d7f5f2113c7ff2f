import { describe, expect, it } from 'vitest';
import { AdmissionStore } from '../../../src/admission/admission-store.js';
import { IdempotencyStore } from '../../../src/admission/idempotency.js';
import { TokenBudgetStore } from '../../../src/admission/token-budget-store.js';
import { BreakerStore, type BreakerPolicy } from '../../../src/breakers/breaker-store.js';
import { loadConfig } from '../../../src/config/load.js';
import { RedisRunProgress } from '../../../src/execution/run-progress.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { createLogger } from '../../../src/obs/logger.js';
import { PacingStore, PACE_BUCKETS } from '../../../src/pacing/pacing-store.js';
import { AdaptiveLimitStore } from '../../../src/permits/adaptive-limit-store.js';
import { ProcessorStateStore } from '../../../src/processors/processor-state-store.js';
import { dependencyScope, runScopes } from '../../../src/permits/permit-scopes.js';
import { PermitStore } from '../../../src/permits/permit-store.js';
import { keySlot, keysOutsideFirstSlot } from '../../../src/redis/key-slot.js';
import { redisKeys } from '../../../src/redis/keys.js';
import { LuaScripts, SCRIPTS, type ScriptName } from '../../../src/redis/scripts.js';
import { SharedRetryBudgets } from '../../../src/retries/shared-retry-budget.js';

interface Invocation {
  name: ScriptName;
  keys: readonly string[];
}

/** Records the key set of every script call the production stores make; replies so that each store gets through its call. */
function recordingScripts() {
  const calls: Invocation[] = [];
  const replies: Partial<Record<ScriptName, unknown>> = { runProgressOpen: ['', ''], runProgressRecord: '', runProgressEnd: [''], permitsAcquire: [1, Date.now() + 1_000], idempotencyClaim: ['claimed'], idempotencyAnswer: null, pacingReserve: [1, 0], adaptiveLimitUpdate: ['4', 0] };
  const scripts = {
    run: async (name: ScriptName, keys: readonly string[]) => {
      calls.push({ name, keys: [...keys] });
      return replies[name] ?? [1, 1, 1, 1];
    },
  } as unknown as LuaScripts;
  return { scripts, calls };
}

const POLICY: BreakerPolicy = { windowMs: 60_000, minimumCalls: 1, failureThreshold: 1, failureRateThreshold: 1, slowCallMs: 1_000, slowCallRateThreshold: 1, openMs: 1_000, halfOpenProbes: 1, halfOpenSuccesses: 1, probeLeaseMs: 1_000 };

/** Every script call the stores make for one tenant, workflow and dependency, in a namespace. */
async function everyInvocation(namespace: string, tenant: string, workflow: string, dependency: string): Promise<Invocation[]> {
  const config = loadConfig({ env: {} });
  config.dependencies[dependency] = { ...config.dependencies.anthropic!, adaptiveConcurrency: { min: 1, decreaseFactor: 0.7, cooldownMs: 1_000, idleResetMs: 60_000 } };
  config.tenants[tenant] = config.tenants['tenant-a']!;
  config.workflows[workflow] = config.workflows['support-reply']!;
  const keys = redisKeys(namespace);
  const { scripts, calls } = recordingScripts();
  const admission = new AdmissionStore(scripts, keys);
  await admission.takeToken(tenant, 10, 1);
  await admission.takeReadToken(tenant, 10, 1);
  for (const runClass of ['interactive', 'batch'] as const) {
    const run = { runId: 'run-1', tenantId: tenant, runClass, leaseExpiry: Date.now() + 60_000 };
    await admission.admit(run, { tenantMax: 10, globalMax: 10, maxAhead: undefined, recordAnyway: false });
    await admission.release(run, 5);
    await admission.withdraw(run);
  }
  const budget = { tokensPerMinute: 60_000, burstTokens: 10_000 };
  const budgets = new TokenBudgetStore(scripts, keys);
  await budgets.take(tenant, budget, 10);
  await budgets.settle(tenant, budget, { runId: 'run-1', until: Date.now() + 60_000 }, { charge: 5, giveBack: 5 });
  await budgets.fold(workflow, 10);
  const idempotency = new IdempotencyStore(scripts, keys, { ttlSec: 60, pendingMs: 1_000, waitMs: 1_000 });
  await idempotency.claim(tenant, 'key-1', 'fingerprint');
  await idempotency.store(tenant, 'key-1', 'token', { status: 202, body: {} } as never);
  await idempotency.forget(tenant, 'key-1', 'token');
  await idempotency.answer(tenant, 'key-1');
  const permits = new PermitStore(scripts, keys);
  for (const runClass of ['interactive', 'batch'] as const) {
    const granted = await permits.tryAcquire(runScopes(config, keys, { tenantId: tenant, workflow, runClass }), 1_000, 'run-1:1');
    if (!granted.granted) throw new Error('the recording store always grants');
    await permits.renew(granted.lease, 1_000);
    await permits.release(granted.lease);
  }
  await permits.tryAcquire([dependencyScope(config, keys, dependency)], 1_000, 'run-1:1');
  await new AdaptiveLimitStore(scripts, keys).apply(dependency, 'congestion', { min: 1, max: 4 }, config.dependencies[dependency]!.adaptiveConcurrency!);
  const breakers = new BreakerStore(scripts, keys, () => POLICY);
  await breakers.admit(dependency, 'token');
  await breakers.record(dependency, 'token', 'failure', 5);
  await breakers.tally(dependency, 3);
  await breakers.force(dependency, 'open', 1_000);
  await breakers.clearForce(dependency);
  const retries = new SharedRetryBudgets({ scripts, keys, reportEveryMs: 60_000, metrics: createMetrics(), logger: createLogger('silent') });
  await retries.tryRetry(dependency, { budgetRatio: 0.1, budgetWindowMs: 10_000, budgetMinRetries: 1 });
  const pacing = new PacingStore(scripts, keys);
  const charges = PACE_BUCKETS.map((bucket) => ({ bucket, perMinute: 60, cost: 1 }));
  await pacing.reserve(dependency, charges, { maxWaitMs: 1_000, burstMs: 1_000, keepMs: 60_000, share: 1, reserve: 0 });
  await pacing.settle(dependency, [{ bucket: 'output_tokens', delta: 5 }], 60_000);
  await pacing.observe(dependency, [{ bucket: 'requests', perMinute: 60, capacity: 0 }], Date.now() + 1_000, 60_000);
  const progress = new RedisRunProgress({} as never, scripts, keys, createLogger('silent'), { produceTimeoutMs: 5_000 });
  await progress.open('run-1');
  await progress.record('run-1', 'understand', { text: 'a' }, Date.now() + 60_000);
  await progress.addCalls('run-1', new Map([['anthropic', 1]]), Date.now() + 60_000);
  await progress.end({ runId: 'run-1', admittedAt: Date.now(), deadline: Date.now() + 60_000 }, new Map());
  await new ProcessorStateStore(scripts, {} as never, keys).publish('processor-1', { oldest: new Map([['global', 0]]), paused: [{ topic: 't', partition: 0, reason: 'buffer_full' }], held: [] }, 1_000);
  return calls;
}

describe('Redis Cluster slots of the script calls', () => {
  it('computes slots as Redis Cluster does (CRC16 of the hash tag, mod 16384)', () => {
    expect(keySlot('foo')).toBe(12_182);
    expect(keySlot('bar')).toBe(5_061);
    expect(keySlot('{user1000}.following')).toBe(keySlot('{user1000}.followers'));
    expect(keySlot('{}x')).not.toBe(keySlot('x'));
    expect(keysOutsideFirstSlot(['{a}1', '{a}2', '{b}3'])).toEqual(['{b}3']);
    expect(keysOutsideFirstSlot(['only'])).toEqual([]);
  });

  it.each([
    ['', 'tenant-a', 'support-reply', 'anthropic'],
    ['prod.', 'acme', 'report-digest', 'order-lookup'],
    ['ns-{x}.', 'tenant:with:colons', 'wf', 'dep{tagged}'],
  ])('keeps every key of every call in one slot (namespace %j, tenant %j, workflow %j, dependency %j)', async (namespace, tenant, workflow, dependency) => {
    const calls = await everyInvocation(namespace, tenant, workflow, dependency);
    expect(new Set(calls.map((c) => c.name))).toEqual(new Set(Object.keys(SCRIPTS)));
    for (const call of calls) expect(keysOutsideFirstSlot(call.keys), `${call.name}: ${call.keys.join(' ')}`).toEqual([]);
  });

  it('puts the permit wake-up channel in the permit slot and each breaker channel in its breaker\'s slot (SPUBLISH from the scripts)', () => {
    const keys = redisKeys('ns.');
    expect(keySlot(keys.permitReleased())).toBe(keySlot(keys.permitScope('global')));
    for (const d of ['anthropic', 'order-lookup']) {
      expect(keySlot(keys.breakerChanged(d))).toBe(keySlot(keys.breaker(d)));
      expect(keySlot(keys.breakerForced(d))).toBe(keySlot(keys.breaker(d)));
    }
  });

  it('refuses a script call whose keys span slots before it reaches Redis', async () => {
    const sent: unknown[] = [];
    const redis = { defineCommand: () => undefined, permitsRenew: async (...args: unknown[]) => sent.push(args) };
    const scripts = new LuaScripts(redis as never);
    const keys = redisKeys('');
    await expect(scripts.run('permitsRenew', [keys.permitScope('global'), keys.breaker('anthropic')], ['token', 1_000])).rejects.toThrow(`permitsRenew: every key must be in the slot of ${keys.permitScope('global')}, but ${keys.breaker('anthropic')} are not`);
    expect(sent).toEqual([]);
    await scripts.run('permitsRenew', [keys.permitScope('global'), keys.permitScope('tenant:a')], ['token', 1_000]);
    expect(sent).toHaveLength(1);
  });
});
