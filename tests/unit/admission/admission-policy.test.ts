import { describe, expect, it } from 'vitest';
import {
  bucketRefusal,
  decideFromBacklog,
  dependencyRefusal,
  effectiveRefill,
  maxAheadForDeadline,
  retryAfterSeconds,
  serviceRate,
  unavailable,
  waitUntilAheadFits,
  type BacklogResult,
  type DependencyState,
  type ServiceEstimate,
  maxTenantAhead,
  queueWaitMs,
} from '../../../src/admission/admission-policy.js';

const NOW = 1_767_225_600_000;
const cold: ServiceEstimate = { ratePerSec: undefined, serviceTimeMs: undefined };
const states = (...s: DependencyState[]) => new Map(s.map((d) => [d.name, d]));
const backlog = (outcome: BacklogResult['outcome'], classAhead: number, over: Partial<BacklogResult> = {}): BacklogResult => ({ outcome, tenantCount: 0, classAhead, allCount: classAhead, ...over });

describe('retryAfterSeconds', () => {
  it('never answers less than one second for zero, negative or non-finite input', () => {
    for (const ms of [0, -0, -1, -1_000_000, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Number.MIN_VALUE * -1]) {
      expect(retryAfterSeconds(ms), String(ms)).toBe(1);
    }
  });

  it('rounds fractions of a second up, with a minimum of one', () => {
    expect(retryAfterSeconds(Number.MIN_VALUE)).toBe(1);
    expect(retryAfterSeconds(0.001)).toBe(1);
    expect(retryAfterSeconds(1)).toBe(1);
    expect(retryAfterSeconds(999.999)).toBe(1);
    expect(retryAfterSeconds(1_000)).toBe(1);
    expect(retryAfterSeconds(1_000.0001)).toBe(2);
    expect(retryAfterSeconds(1_001)).toBe(2);
    expect(retryAfterSeconds(1_999)).toBe(2);
    expect(retryAfterSeconds(2_000)).toBe(2);
    expect(retryAfterSeconds(2_001)).toBe(3);
    expect(retryAfterSeconds(59_999.5)).toBe(60);
    expect(retryAfterSeconds(3_600_000)).toBe(3_600);
  });

  it('always answers a whole number', () => {
    for (const ms of [0.5, 1.5, 123.456, 1_234.5, 98_765.4321, 1e12 + 0.5]) expect(Number.isInteger(retryAfterSeconds(ms)), String(ms)).toBe(true);
  });

  it('keeps huge finite values', () => {
    expect(retryAfterSeconds(Number.MAX_SAFE_INTEGER)).toBe(Math.ceil(Number.MAX_SAFE_INTEGER / 1000));
  });
});

describe('unavailable', () => {
  const map = states(
    { name: 'anthropic', state: 'open', retryAt: NOW + 5_000 },
    { name: 'order_lookup', state: 'closed' },
    { name: 'slow_report', state: 'half_open' },
  );

  it('lists open and half-open dependencies the workflow needs, in the order needed', () => {
    expect(unavailable(['slow_report', 'order_lookup', 'anthropic'], map)).toEqual([
      { name: 'slow_report', state: 'half_open' },
      { name: 'anthropic', state: 'open', retryAt: NOW + 5_000 },
    ]);
  });

  it('ignores closed dependencies', () => {
    expect(unavailable(['order_lookup'], map)).toEqual([]);
  });

  it('ignores dependencies with no known state (not configured, or not refreshed yet)', () => {
    expect(unavailable(['billing', 'search'], map)).toEqual([]);
    expect(unavailable(['anthropic', 'billing'], map)).toEqual([{ name: 'anthropic', state: 'open', retryAt: NOW + 5_000 }]);
    expect(unavailable(['anthropic'], new Map())).toEqual([]);
  });

  it('ignores dependencies the workflow does not need', () => {
    expect(unavailable([], map)).toEqual([]);
    expect(unavailable(['order_lookup'], map)).toEqual([]);
  });

  it('repeats a dependency named twice (callers pass dependenciesOf(), which dedupes)', () => {
    expect(unavailable(['anthropic', 'anthropic'], map)).toHaveLength(2);
  });
});

describe('effectiveRefill', () => {
  it('keeps the configured refill while nothing needed is open', () => {
    expect(effectiveRefill(10, false, 0.5)).toBe(10);
    expect(effectiveRefill(10, false, 0)).toBe(10);
    expect(effectiveRefill(0, false, 0.5)).toBe(0);
  });

  it('multiplies the refill by the emergency factor while a needed dependency is open', () => {
    expect(effectiveRefill(10, true, 0.5)).toBe(5);
    expect(effectiveRefill(10, true, 0.25)).toBe(2.5);
    expect(effectiveRefill(10, true, 1)).toBe(10);
    expect(effectiveRefill(10, true, 0)).toBe(0);
    expect(effectiveRefill(0.3, true, 0.5)).toBeCloseTo(0.15, 12);
  });
});

describe('dependencyRefusal', () => {
  const open = (retryAt?: number, name = 'anthropic'): DependencyState => ({ name, state: 'open', ...(retryAt !== undefined ? { retryAt } : {}) });

  it('never refuses batch work, however late the probe', () => {
    expect(dependencyRefusal('batch', [open(NOW + 3_600_000)], NOW + 1_000, NOW, 5_000)).toBeUndefined();
    expect(dependencyRefusal('batch', [open()], NOW, NOW, 5_000)).toBeUndefined();
  });

  it('does not refuse interactive work when nothing needed is open', () => {
    expect(dependencyRefusal('interactive', [], NOW + 1, NOW, 1_000_000)).toBeUndefined();
  });

  it('admits when the probe plus the service time lands exactly on the deadline', () => {
    expect(dependencyRefusal('interactive', [open(NOW + 1_000)], NOW + 1_500, NOW, 500)).toBeUndefined();
  });

  it('admits when the probe plus the service time lands before the deadline', () => {
    expect(dependencyRefusal('interactive', [open(NOW + 1_000)], NOW + 10_000, NOW, 500)).toBeUndefined();
  });

  it('refuses with 503 dependency_unavailable one millisecond over, hinting the time until the probe', () => {
    expect(dependencyRefusal('interactive', [open(NOW + 1_000)], NOW + 1_499, NOW, 500)).toEqual({
      outcome: 'rejected',
      reason: 'dependency_unavailable',
      retryAfterSec: 1,
    });
    expect(dependencyRefusal('interactive', [open(NOW + 4_200)], NOW + 2_000, NOW, 500)).toEqual({
      outcome: 'rejected',
      reason: 'dependency_unavailable',
      retryAfterSec: 5,
    });
  });

  it('treats a missing retryAt as "probing now": only the service time counts', () => {
    expect(dependencyRefusal('interactive', [open()], NOW + 2_000, NOW, 2_000)).toBeUndefined();
    expect(dependencyRefusal('interactive', [open()], NOW + 1_999, NOW, 2_000)).toEqual({ outcome: 'rejected', reason: 'dependency_unavailable', retryAfterSec: 1 });
    expect(dependencyRefusal('interactive', [{ name: 'x', state: 'half_open' }], NOW + 100, NOW, 50)).toBeUndefined();
  });

  it('uses the latest retryAt of several open dependencies, whatever their order', () => {
    const deps = [open(NOW + 1_000, 'a'), open(NOW + 7_500, 'b'), open(undefined, 'c'), open(NOW + 3_000, 'd')];
    const expected = { outcome: 'rejected', reason: 'dependency_unavailable', retryAfterSec: 8 };
    expect(dependencyRefusal('interactive', deps, NOW + 5_000, NOW, 100)).toEqual(expected);
    expect(dependencyRefusal('interactive', [...deps].reverse(), NOW + 5_000, NOW, 100)).toEqual(expected);
    // The latest probe alone decides: 7 500 + 100 fits a 7 600 deadline.
    expect(dependencyRefusal('interactive', deps, NOW + 7_600, NOW, 100)).toBeUndefined();
  });

  it('counts an unknown (never measured) service time as zero', () => {
    expect(dependencyRefusal('interactive', [open(NOW + 3_000)], NOW + 3_000, NOW, undefined)).toBeUndefined();
    expect(dependencyRefusal('interactive', [open(NOW + 3_000)], NOW + 2_999, NOW, undefined)).toEqual({
      outcome: 'rejected',
      reason: 'dependency_unavailable',
      retryAfterSec: 3,
    });
  });

  it('hints at least one second when the probe time has already passed', () => {
    expect(dependencyRefusal('interactive', [open(NOW - 10_000)], NOW + 100, NOW, 20_000)).toEqual({
      outcome: 'rejected',
      reason: 'dependency_unavailable',
      retryAfterSec: 1,
    });
  });
});

describe('maxAheadForDeadline', () => {
  const base = { deadline: NOW + 10_000, now: NOW, slots: 4 };

  it('is undefined while the rate or the service time is unknown (cold system)', () => {
    expect(maxAheadForDeadline({ ...base, service: cold })).toBeUndefined();
    expect(maxAheadForDeadline({ ...base, service: { ratePerSec: 5, serviceTimeMs: undefined } })).toBeUndefined();
    expect(maxAheadForDeadline({ ...base, service: { ratePerSec: undefined, serviceTimeMs: 100 } })).toBeUndefined();
  });

  it('is undefined for a zero or negative rate', () => {
    expect(maxAheadForDeadline({ ...base, service: { ratePerSec: 0, serviceTimeMs: 100 } })).toBeUndefined();
    expect(maxAheadForDeadline({ ...base, service: { ratePerSec: -1, serviceTimeMs: 100 } })).toBeUndefined();
  });

  it('is -1 when even an empty line cannot finish before the deadline', () => {
    expect(maxAheadForDeadline({ ...base, deadline: NOW + 999, service: { ratePerSec: 100, serviceTimeMs: 1_000 } })).toBe(-1);
    expect(maxAheadForDeadline({ ...base, deadline: NOW - 1, service: { ratePerSec: 100, serviceTimeMs: 0 } })).toBe(-1);
  });

  it('allows just the free slots when the spare time is exactly zero', () => {
    expect(maxAheadForDeadline({ ...base, deadline: NOW + 1_000, service: { ratePerSec: 100, serviceTimeMs: 1_000 } })).toBe(3);
    expect(maxAheadForDeadline({ ...base, slots: 1, deadline: NOW + 1_000, service: { ratePerSec: 100, serviceTimeMs: 1_000 } })).toBe(0);
  });

  it('is slots − 1 plus the runs finished during the spare time, rounded down', () => {
    // 2/s over 3 s spare → 6 finish; 4 slots → 3 + 6
    expect(maxAheadForDeadline({ ...base, deadline: NOW + 4_000, service: { ratePerSec: 2, serviceTimeMs: 1_000 } })).toBe(9);
    // 0.5/s over 2.999 s → 1.4995 → 1
    expect(maxAheadForDeadline({ ...base, deadline: NOW + 2_999, service: { ratePerSec: 0.5, serviceTimeMs: 0 } })).toBe(4);
    // 3/s over 0.333 s → 0.999 → 0; over 0.334 s → 1.002 → 1
    expect(maxAheadForDeadline({ ...base, deadline: NOW + 333, service: { ratePerSec: 3, serviceTimeMs: 0 } })).toBe(3);
    expect(maxAheadForDeadline({ ...base, deadline: NOW + 334, service: { ratePerSec: 3, serviceTimeMs: 0 } })).toBe(4);
  });

  it('is consistent with the script: exactly maxAhead runs ahead still finish in time', () => {
    const service = { ratePerSec: 2.5, serviceTimeMs: 800 };
    const deadline = NOW + 7_000;
    const slots = 3;
    const maxAhead = maxAheadForDeadline({ deadline, now: NOW, slots, service })!;
    // With k ahead the run starts after k − slots + 1 finishes, then runs for the service time.
    const finishAt = (k: number) => NOW + (Math.max(0, k - slots + 1) / service.ratePerSec) * 1000 + service.serviceTimeMs;
    expect(finishAt(maxAhead)).toBeLessThanOrEqual(deadline);
    expect(finishAt(maxAhead + 1)).toBeGreaterThan(deadline);
  });

  it('copes with huge values', () => {
    expect(maxAheadForDeadline({ ...base, deadline: NOW + 86_400_000, service: { ratePerSec: 1_000_000, serviceTimeMs: 0 } })).toBe(3 + 86_400_000_000);
    const far = maxAheadForDeadline({ ...base, deadline: Number.MAX_SAFE_INTEGER, service: { ratePerSec: 1e6, serviceTimeMs: 1 } })!;
    expect(Number.isFinite(far)).toBe(true);
    expect(far).toBeGreaterThan(1e18);
    expect(maxAheadForDeadline({ ...base, deadline: Number.POSITIVE_INFINITY, service: { ratePerSec: 1, serviceTimeMs: 1 } })).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('waitUntilAheadFits', () => {
  it('is infinite without a positive measured rate', () => {
    expect(waitUntilAheadFits(10, 2, undefined)).toBe(Number.POSITIVE_INFINITY);
    expect(waitUntilAheadFits(10, 2, 0)).toBe(Number.POSITIVE_INFINITY);
    expect(waitUntilAheadFits(10, 2, -3)).toBe(Number.POSITIVE_INFINITY);
  });

  it('is zero when the line already fits', () => {
    expect(waitUntilAheadFits(2, 2, 5)).toBe(0);
    expect(waitUntilAheadFits(0, 2, 5)).toBe(0);
  });

  it('is the time for the surplus to finish at the measured rate', () => {
    expect(waitUntilAheadFits(10, 4, 2)).toBe(3_000);
    expect(waitUntilAheadFits(5, 4, 0.5)).toBe(2_000);
    expect(waitUntilAheadFits(0, -1, 4)).toBe(250);
  });
});

describe('decideFromBacklog', () => {
  const measured: ServiceEstimate = { ratePerSec: 4, serviceTimeMs: 1_000 };

  it('admits while fewer runs of the class are ahead than it has slots', () => {
    expect(decideFromBacklog(backlog('admitted', 0), { slots: 4, maxAhead: undefined, service: cold })).toEqual({ outcome: 'admitted', reason: 'capacity_available' });
    expect(decideFromBacklog(backlog('admitted', 3), { slots: 4, maxAhead: undefined, service: cold })).toEqual({ outcome: 'admitted', reason: 'capacity_available' });
  });

  it('queues at position 1 exactly at the slot boundary, then counts up', () => {
    expect(decideFromBacklog(backlog('admitted', 4), { slots: 4, maxAhead: undefined, service: measured })).toEqual({ outcome: 'queued', reason: 'waiting_for_capacity', queuePosition: 1 });
    expect(decideFromBacklog(backlog('admitted', 5), { slots: 4, maxAhead: 100, service: measured })).toEqual({ outcome: 'queued', reason: 'waiting_for_capacity', queuePosition: 2 });
    expect(decideFromBacklog(backlog('admitted', 103), { slots: 4, maxAhead: 200, service: measured }).queuePosition).toBe(100);
    expect(decideFromBacklog(backlog('admitted', 1), { slots: 1, maxAhead: undefined, service: cold })).toEqual({ outcome: 'queued', reason: 'waiting_for_capacity', queuePosition: 1 });
  });

  it('answers a duplicate like an admission from the same counts', () => {
    expect(decideFromBacklog(backlog('duplicate', 0), { slots: 2, maxAhead: undefined, service: cold })).toEqual({ outcome: 'admitted', reason: 'capacity_available' });
    expect(decideFromBacklog(backlog('duplicate', 3), { slots: 2, maxAhead: undefined, service: cold })).toEqual({ outcome: 'queued', reason: 'waiting_for_capacity', queuePosition: 2 });
  });

  it('defers a full tenant (429 tenant_backlog_full) with the time for one run to finish', () => {
    expect(decideFromBacklog(backlog('tenant_full', 9), { slots: 4, maxAhead: undefined, service: { ratePerSec: 0.25, serviceTimeMs: 10 } })).toEqual({
      outcome: 'deferred',
      reason: 'tenant_backlog_full',
      retryAfterSec: 4,
    });
    expect(decideFromBacklog(backlog('tenant_full', 9), { slots: 4, maxAhead: undefined, service: { ratePerSec: 0.3, serviceTimeMs: 10 } }).retryAfterSec).toBe(4); // 3 333 ms
    expect(decideFromBacklog(backlog('tenant_full', 9), { slots: 4, maxAhead: undefined, service: measured }).retryAfterSec).toBe(1); // 250 ms → 1
  });

  it('defers a full tenant for a conservative second without a measured rate', () => {
    for (const ratePerSec of [undefined, 0, -1]) {
      expect(decideFromBacklog(backlog('tenant_full', 0), { slots: 1, maxAhead: undefined, service: { ratePerSec, serviceTimeMs: undefined } })).toEqual({
        outcome: 'deferred',
        reason: 'tenant_backlog_full',
        retryAfterSec: 1,
      });
    }
  });

  it('rejects a full system (503 overloaded) with the time for one run to finish, else a second', () => {
    expect(decideFromBacklog(backlog('global_full', 50), { slots: 4, maxAhead: undefined, service: { ratePerSec: 0.2, serviceTimeMs: 1 } })).toEqual({
      outcome: 'rejected',
      reason: 'overloaded',
      retryAfterSec: 5,
    });
    expect(decideFromBacklog(backlog('global_full', 50), { slots: 4, maxAhead: undefined, service: cold })).toEqual({ outcome: 'rejected', reason: 'overloaded', retryAfterSec: 1 });
  });

  it('rejects an unreachable deadline (503 deadline_unreachable) with the time until the line fits', () => {
    // 20 ahead, 10 may be: 10 must finish at 2/s → 5 s
    expect(decideFromBacklog(backlog('too_late', 20), { slots: 4, maxAhead: 10, service: { ratePerSec: 2, serviceTimeMs: 100 } })).toEqual({
      outcome: 'rejected',
      reason: 'deadline_unreachable',
      retryAfterSec: 5,
    });
    // maxAhead -1 (cannot finish even alone): the whole line plus one
    expect(decideFromBacklog(backlog('too_late', 3), { slots: 4, maxAhead: -1, service: { ratePerSec: 2, serviceTimeMs: 100 } }).retryAfterSec).toBe(2);
  });

  it('treats a missing maxAhead on too_late as zero, and a missing rate as a conservative second', () => {
    expect(decideFromBacklog(backlog('too_late', 20), { slots: 4, maxAhead: undefined, service: { ratePerSec: 2, serviceTimeMs: 100 } }).retryAfterSec).toBe(10);
    expect(decideFromBacklog(backlog('too_late', 20), { slots: 4, maxAhead: 10, service: cold })).toEqual({ outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec: 1 });
  });

  it('gives retry hints only on refusals and queue positions only when queued', () => {
    const opts = { slots: 2, maxAhead: 5, service: measured };
    for (const [r, hasRetry, hasPos] of [
      [backlog('admitted', 0), false, false],
      [backlog('admitted', 2), false, true],
      [backlog('duplicate', 2), false, true],
      [backlog('tenant_full', 2), true, false],
      [backlog('global_full', 2), true, false],
      [backlog('too_late', 9), true, false],
    ] as const) {
      const d = decideFromBacklog(r, opts);
      expect('retryAfterSec' in d, r.outcome).toBe(hasRetry);
      expect('queuePosition' in d, r.outcome).toBe(hasPos);
      if (hasRetry) expect(d.retryAfterSec).toBeGreaterThanOrEqual(1);
    }
  });
});

describe('serviceRate', () => {
  // bucket 10 s, window 60 s: six full buckets plus the current one
  const BUCKET = 10;
  const WINDOW = 60;

  it('is undefined with no finished runs', () => {
    expect(serviceRate(new Map(), 1_000, BUCKET, WINDOW)).toBeUndefined();
    expect(serviceRate(new Map([[100, 0]]), 1_000, BUCKET, WINDOW)).toBeUndefined();
  });

  it('counts full buckets of the window plus the current one over the time they span', () => {
    // now 1 005 s: current bucket 100 (5 s old), full buckets 94..99 → 65 s
    const b = new Map([
      [94, 13],
      [99, 7],
      [100, 6],
    ]);
    expect(serviceRate(b, 1_005, BUCKET, WINDOW)).toBeCloseTo(26 / 65, 12);
  });

  it('measures over exactly the full buckets at a bucket boundary', () => {
    expect(serviceRate(new Map([[94, 6]]), 1_000, BUCKET, WINDOW)).toBeCloseTo(0.1, 12);
    expect(serviceRate(new Map([[100, 6]]), 1_000, BUCKET, WINDOW)).toBeCloseTo(0.1, 12);
  });

  it('ignores buckets older than the window', () => {
    expect(serviceRate(new Map([[93, 1_000]]), 1_000, BUCKET, WINDOW)).toBeUndefined();
    expect(serviceRate(new Map([[93, 1_000], [94, 6]]), 1_009.999, BUCKET, WINDOW)).toBeCloseTo(6 / 69.999, 9);
    expect(serviceRate(new Map([[0, 5], [-1, 5]]), 1_000, BUCKET, WINDOW)).toBeUndefined();
  });

  it('includes a partial current bucket with its elapsed part', () => {
    expect(serviceRate(new Map([[100, 3]]), 1_000.5, BUCKET, WINDOW)).toBeCloseTo(3 / 60.5, 12);
    expect(serviceRate(new Map([[100, 3]]), 1_009.9, BUCKET, WINDOW)).toBeCloseTo(3 / 69.9, 12);
  });

  it('uses at least one full bucket when the window is shorter than a bucket', () => {
    expect(serviceRate(new Map([[99, 4], [98, 100]]), 1_002, BUCKET, 5)).toBeCloseTo(4 / 12, 12);
  });

  it('rounds a window that is not a multiple of the bucket down to whole buckets', () => {
    // 65 s → 6 full buckets: 94 counts, 93 does not
    expect(serviceRate(new Map([[94, 6], [93, 50]]), 1_000, BUCKET, 65)).toBeCloseTo(0.1, 12);
  });

  // Clock skew: `backlog-release.lua` buckets finishes by the Redis server's clock, while
  // ServiceState passes this instance's Date.now(). A bucket "from the future" (server ahead of
  // this instance, or the instance stepped back) is ignored until the local clock reaches it, so
  // the rate is under-estimated — or undefined, which switches deadline refusals off (fails open).
  it('ignores a bucket from the future relative to this instance (clock skew): under-counts', () => {
    expect(serviceRate(new Map([[101, 50]]), 1_009.9, BUCKET, WINDOW)).toBeUndefined();
    expect(serviceRate(new Map([[100, 5], [101, 50]]), 1_009.9, BUCKET, WINDOW)).toBeCloseTo(5 / 69.9, 12);
    // once the local clock reaches that bucket it counts
    expect(serviceRate(new Map([[100, 5], [101, 50]]), 1_010, BUCKET, WINDOW)).toBeCloseTo(55 / 60, 12);
  });
});

describe('bucketRefusal', () => {
  it('does not refuse an allowed take', () => {
    expect(bucketRefusal({ allowed: true, waitMs: 0 })).toBeUndefined();
    expect(bucketRefusal({ allowed: true, waitMs: -1 })).toBeUndefined();
  });

  it('defers with 429 rate_limited and the time until the token exists, rounded up', () => {
    expect(bucketRefusal({ allowed: false, waitMs: 100 })).toEqual({ outcome: 'deferred', reason: 'rate_limited', retryAfterSec: 1 });
    expect(bucketRefusal({ allowed: false, waitMs: 1_500 })).toEqual({ outcome: 'deferred', reason: 'rate_limited', retryAfterSec: 2 });
    expect(bucketRefusal({ allowed: false, waitMs: 0 })).toEqual({ outcome: 'deferred', reason: 'rate_limited', retryAfterSec: 1 });
  });

  it('asks a bucket that never refills (waitMs < 0) to come back in an hour', () => {
    expect(bucketRefusal({ allowed: false, waitMs: -1 })).toEqual({ outcome: 'deferred', reason: 'rate_limited', retryAfterSec: 3_600 });
    expect(bucketRefusal({ allowed: false, waitMs: -42 })).toEqual({ outcome: 'deferred', reason: 'rate_limited', retryAfterSec: 3_600 });
  });
});

describe('maxTenantAhead and queueWaitMs', () => {
  it('lets a tenant have its cap running plus what the cap serves within the wait budget ahead', () => {
    expect(maxTenantAhead({ cap: 16, waitBudgetMs: 1_000, serviceTimeMs: 250 })).toBe(15 + 64);
    expect(maxTenantAhead({ cap: 16, waitBudgetMs: -1, serviceTimeMs: 250 })).toBe(-1);
    expect(maxTenantAhead({ cap: 16, waitBudgetMs: 1_000, serviceTimeMs: undefined })).toBeUndefined();
  });

  it('predicts the longer of the class line and the tenant line, each served at its cap', () => {
    expect(queueWaitMs({ classAhead: 10, tenantAhead: 3 }, { class: 64, tenant: 16 }, 300)).toBe(0);
    // 20 of the tenant's runs ahead at a cap of 16: 5 wait for a slot, 16 at a time, 300 ms each
    expect(queueWaitMs({ classAhead: 20, tenantAhead: 20 }, { class: 64, tenant: 16 }, 320)).toBe(100);
    expect(queueWaitMs({ classAhead: 79, tenantAhead: 0 }, { class: 64, tenant: 16 }, 320)).toBe(80);
    expect(queueWaitMs({ classAhead: 500, tenantAhead: 500 }, { class: 64, tenant: 16 }, undefined)).toBe(0);
  });
});

describe('dependencyRefusal with a wait share', () => {
  const open = [{ name: 'anthropic', state: 'open' as const, retryAt: 1_900 }];
  it('refuses an interactive run whose next probe is past its wait share of its time, though within its deadline', () => {
    expect(dependencyRefusal('interactive', open, 2_000, 0, 50, 1)).toBeUndefined();
    expect(dependencyRefusal('interactive', open, 2_000, 0, 50, 0.5)).toEqual({ outcome: 'rejected', reason: 'dependency_unavailable', retryAfterSec: 2 });
    expect(dependencyRefusal('interactive', [{ ...open[0]!, retryAt: 900 }], 2_000, 0, 50, 0.5)).toBeUndefined();
    expect(dependencyRefusal('batch', open, 2_000, 0, 50, 0.5)).toBeUndefined();
  });
});
