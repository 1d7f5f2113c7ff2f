import { describe, expect, it } from 'vitest';
import { budgetArrivals, budgetFigures, type BudgetTenant } from '../../../../src/dev/bench/token-budget-figures.js';
import { seededRandom } from '../../../../src/util/seeded-random.js';

const tenants: BudgetTenant[] = [
  { tenantId: 'heavy', tokensPerMinute: 24_000, tokensPerRun: 800 },
  { tenantId: 'light', tokensPerMinute: 12_000, tokensPerRun: 200 },
];

describe('budgetArrivals', () => {
  it('offers each tenant `load` times its budget in runs of its mean size', () => {
    const plan = budgetArrivals(tenants, 3, 60, seededRandom(1));
    // heavy: 3 × 24 000 / 800 = 90 runs a minute; light: 3 × 12 000 / 200 = 180
    expect(plan.filter((a) => a.tenantId === 'heavy')).toHaveLength(90);
    expect(plan.filter((a) => a.tenantId === 'light')).toHaveLength(180);
    const heavy = plan.filter((a) => a.tenantId === 'heavy').map((a) => a.tokens);
    expect(Math.min(...heavy)).toBeGreaterThanOrEqual(400);
    expect(Math.max(...heavy)).toBeLessThanOrEqual(1_200);
    expect(heavy.reduce((a, b) => a + b, 0) / heavy.length).toBeGreaterThan(700);
    expect(heavy.reduce((a, b) => a + b, 0) / heavy.length).toBeLessThan(900);
  });

  it('spaces a tenant’s runs evenly within the window, and sorts all runs by time', () => {
    const plan = budgetArrivals(tenants, 2, 30, seededRandom(7));
    expect(plan.map((a) => a.atMs)).toEqual([...plan.map((a) => a.atMs)].sort((a, b) => a - b));
    expect(plan.every((a) => a.atMs >= 0 && a.atMs < 30_000)).toBe(true);
    const light = plan.filter((a) => a.tenantId === 'light').map((a) => a.atMs);
    const gaps = light.slice(1).map((t, i) => t - light[i]!);
    for (const gap of gaps) expect(gap).toBeCloseTo(30_000 / light.length, 6);
  });

  it('scales with the window, is the same for the same seed, and offers nothing below one run', () => {
    expect(budgetArrivals(tenants, 3, 20, seededRandom(1)).filter((a) => a.tenantId === 'heavy')).toHaveLength(30);
    expect(budgetArrivals(tenants, 3, 60, seededRandom(4))).toEqual(budgetArrivals(tenants, 3, 60, seededRandom(4)));
    expect(budgetArrivals([{ tenantId: 'tiny', tokensPerMinute: 1, tokensPerRun: 1_000 }], 1, 60, seededRandom(1))).toEqual([]);
  });
});

describe('budgetFigures', () => {
  it('a tenant that used its burst plus exactly the window’s refill is at its budget', () => {
    // 6 000 a minute over 30 s: 3 000 of refill, plus a burst of 1 000
    const f = budgetFigures({ used: 4_000, windowMs: 30_000, tokensPerMinute: 6_000, burstTokens: 1_000 });
    expect(f).toEqual({ used: 4_000, allowance: 4_000, usedOfAllowance: 1, rateOfBudget: 1 });
  });

  it('takes the burst off once: over it shows above 1, under it below', () => {
    expect(budgetFigures({ used: 4_150, windowMs: 30_000, tokensPerMinute: 6_000, burstTokens: 1_000 }).rateOfBudget).toBeCloseTo(1.05, 10);
    expect(budgetFigures({ used: 2_500, windowMs: 30_000, tokensPerMinute: 6_000, burstTokens: 1_000 }).rateOfBudget).toBeCloseTo(0.5, 10);
    // three times the budget, as a tenant without one may use
    const unbounded = budgetFigures({ used: 10_000, windowMs: 60_000, tokensPerMinute: 3_000, burstTokens: 1_000 });
    expect(unbounded.rateOfBudget).toBe(3);
    expect(unbounded.usedOfAllowance).toBe(2.5);
  });

  it('has no rate over an empty window', () => {
    const f = budgetFigures({ used: 500, windowMs: 0, tokensPerMinute: 6_000, burstTokens: 1_000 });
    expect(f.usedOfAllowance).toBe(0.5);
    expect(f.rateOfBudget).toBeNaN();
  });
});
