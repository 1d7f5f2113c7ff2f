import { describe, expect, it } from 'vitest';
import { REDIS_OUTAGE_RETRY_AFTER_SEC, RedisOutageFallback, redisOutageDecision, type RedisOutageFacts } from '../../../src/admission/redis-outage.js';

const T0 = 1_767_225_600_000;
const overloaded = { outcome: 'rejected', reason: 'overloaded', retryAfterSec: REDIS_OUTAGE_RETRY_AFTER_SEC, redisOutage: true };

describe('redisOutageDecision', () => {
  const policies = ['fail-closed', 'fail-open'] as const;
  const buckets = [
    { allowed: true, waitMs: 0 },
    { allowed: false, waitMs: 1_500 },
    { allowed: false, waitMs: -1 },
  ];

  /** The policy as a table, read top to bottom: the first row that matches decides. */
  function expected(f: RedisOutageFacts) {
    if (f.policy === 'fail-closed') return { outcome: 'refused', decision: overloaded };
    if (f.idempotencyKey) return { outcome: 'idempotency_key_refused', decision: overloaded };
    if (f.admittedThisOutage >= f.maxAdmittedPerOutage) return { outcome: 'bound_reached', decision: overloaded };
    if (!f.localBucket.allowed) return { outcome: 'rate_limited', decision: { outcome: 'deferred', reason: 'rate_limited', retryAfterSec: f.localBucket.waitMs < 0 ? 3600 : 2, redisOutage: true } };
    return { outcome: 'admitted', decision: { outcome: 'admitted', reason: 'capacity_available', redisOutage: true } };
  }

  it('decides every combination of policy, key, bound and local bucket as the table says', () => {
    let cases = 0;
    for (const policy of policies) {
      for (const idempotencyKey of [false, true]) {
        for (const [admittedThisOutage, maxAdmittedPerOutage] of [[0, 1], [4, 5], [5, 5], [6, 5]] as const) {
          for (const localBucket of buckets) {
            const facts: RedisOutageFacts = { policy, idempotencyKey, admittedThisOutage, maxAdmittedPerOutage, localBucket };
            expect(redisOutageDecision(facts), JSON.stringify(facts)).toEqual(expected(facts));
            cases++;
          }
        }
      }
    }
    expect(cases).toBe(48);
  });

  it('fail-closed refuses everything with 503 overloaded and a Retry-After', () => {
    const d = redisOutageDecision({ policy: 'fail-closed', idempotencyKey: false, admittedThisOutage: 0, maxAdmittedPerOutage: 100, localBucket: { allowed: true, waitMs: 0 } });
    expect(d).toEqual({ outcome: 'refused', decision: overloaded });
    expect(d.decision.retryAfterSec).toBeGreaterThanOrEqual(1);
  });

  it('fail-open never admits a request with an Idempotency-Key: its record cannot be kept', () => {
    const d = redisOutageDecision({ policy: 'fail-open', idempotencyKey: true, admittedThisOutage: 0, maxAdmittedPerOutage: 100, localBucket: { allowed: true, waitMs: 0 } });
    expect(d.outcome).toBe('idempotency_key_refused');
    expect(d.decision.outcome).toBe('rejected');
  });
});

describe('RedisOutageFallback', () => {
  const open = (capacity: number, refillPerSec: number, maxAdmittedPerOutage: number) => new RedisOutageFallback({ policy: 'fail-open', localBucket: { capacity, refillPerSec }, maxAdmittedPerOutage });

  it('fail-closed refuses and admits nothing, however many requests come', () => {
    const f = new RedisOutageFallback({ policy: 'fail-closed', localBucket: { capacity: 100, refillPerSec: 100 }, maxAdmittedPerOutage: 100 });
    const outcomes = Array.from({ length: 20 }, (_, i) => f.decide('acme', false, T0 + i).outcome);
    expect(new Set(outcomes)).toEqual(new Set(['refused']));
    expect(f.redisAnswered(T0 + 20)).toEqual({ lastedMs: 20, admitted: 0 });
  });

  it('fail-open admits per tenant bucket: one tenant spending its tokens leaves the other its own', () => {
    const f = open(2, 0, 100);
    expect(['acme', 'acme', 'acme'].map((t) => f.decide(t, false, T0).outcome)).toEqual(['admitted', 'admitted', 'rate_limited']);
    expect(f.decide('globex', false, T0).outcome).toBe('admitted');
  });

  it('bounds the runs one instance admits per outage, over all tenants', () => {
    const f = open(10, 0, 3);
    const outcomes = ['a', 'b', 'c', 'd', 'a'].map((t) => f.decide(t, false, T0).outcome);
    expect(outcomes).toEqual(['admitted', 'admitted', 'admitted', 'bound_reached', 'bound_reached']);
  });

  it('refusals do not count towards the bound nor spend tokens', () => {
    const f = open(1, 0, 1);
    expect(f.decide('acme', true, T0).outcome).toBe('idempotency_key_refused');
    expect(f.decide('acme', false, T0).outcome).toBe('admitted');
  });

  it('marks the first decision of an outage, and a new outage after Redis answered', () => {
    const f = open(10, 0, 2);
    expect([f.decide('a', false, T0).began, f.decide('a', false, T0 + 1).began]).toEqual([true, false]);
    expect(f.decide('a', false, T0 + 2).outcome).toBe('bound_reached');
    expect(f.redisAnswered(T0 + 5_000)).toEqual({ lastedMs: 5_000, admitted: 2 });
    expect(f.redisAnswered(T0 + 6_000)).toBeUndefined();
    // The bound is per outage; the local buckets carry over (they are per instance, not per outage).
    const next = f.decide('a', false, T0 + 7_000);
    expect(next).toMatchObject({ began: true, outcome: 'admitted' });
  });
});
