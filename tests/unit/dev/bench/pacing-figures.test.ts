import { describe, expect, it } from 'vitest';
import { TENANT_MIX, arrivalPlan, rateFigures } from '../../../../src/dev/bench/pacing-figures.js';
import { seededRandom } from '../../../../src/util/seeded-random.js';

describe('arrivalPlan', () => {
  it('is the same plan for the same seed', () => {
    expect(arrivalPlan(50, seededRandom(3))).toEqual(arrivalPlan(50, seededRandom(3)));
  });

  it('draws the tenants evenly, each with its interactive share', () => {
    const plan = arrivalPlan(30_000, seededRandom(1));
    expect(plan).toHaveLength(30_000);
    for (const { tenantId, interactiveShare } of TENANT_MIX) {
      const runs = plan.filter((a) => a.tenantId === tenantId);
      expect(runs.length / plan.length).toBeCloseTo(1 / TENANT_MIX.length, 1);
      expect(runs.filter((a) => a.class === 'interactive').length / runs.length).toBeCloseTo(interactiveShare, 1);
    }
  });

  it('takes a random value at the top of its range without running past the list', () => {
    let calls = 0;
    const plan = arrivalPlan(2, () => (calls++ % 2 === 0 ? 0.9999999999 : 0));
    expect(plan.map((a) => a.tenantId)).toEqual(['tenant-c', 'tenant-c']);
    expect(plan.map((a) => a.class)).toEqual(['interactive', 'interactive']);
  });

  it('is empty for no arrivals', () => {
    expect(arrivalPlan(0, seededRandom(1))).toEqual([]);
  });
});

describe('rateFigures', () => {
  const base = { windowStart: 1_000, windowMs: 10_000, requestsPerMinute: 600 };

  it('is the share of calls refused and the successes in the window over what the limit allows in it', () => {
    // 600 a minute is 100 in 10 s; 90 successes inside, 3 outside on either side.
    const successesAt = [999, ...Array.from({ length: 90 }, (_, i) => 1_000 + i * 100), 11_000, 11_001];
    const f = rateFigures({ ...base, calls: 200, rateLimited: 2, successesAt });
    expect(f.rateLimitedShare).toBe(0.01);
    expect(f.achievedOfLimit).toBeCloseTo(0.9, 10);
  });

  it('is NaN for the share without calls, and 0 achieved without successes', () => {
    const f = rateFigures({ ...base, calls: 0, rateLimited: 0, successesAt: [] });
    expect(f.rateLimitedShare).toBeNaN();
    expect(f.achievedOfLimit).toBe(0);
  });
});
