import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEMAND_HEADROOM, demandPerSec, fairShares, newcomerShare } from '../../../src/pacing/fair-share.js';

const demands = fc.uniqueArray(
  fc.record({
    tenant: fc.stringMatching(/^t[a-z0-9]{0,5}$/),
    weight: fc.double({ min: 0.1, max: 10, noNaN: true }),
    perSec: fc.double({ min: 0, max: 100, noNaN: true }),
  }),
  { selector: (d) => d.tenant, minLength: 1, maxLength: 8 },
);
const capacity = fc.double({ min: 0.5, max: 200, noNaN: true });
const EPS = 1e-9;

/** The rate a tenant's own bucket gives it. */
const rateOf = (shares: ReturnType<typeof fairShares>, cap: number, tenant: string) => (shares.get(tenant)?.share ?? 0) * cap;

describe('fairShares', () => {
  it('gives three equal tenants a third each when all want more', () => {
    const s = fairShares(15, ['a', 'b', 'c'].map((tenant) => ({ tenant, weight: 1, perSec: 100 })));
    for (const t of ['a', 'b', 'c']) expect(s.get(t)).toEqual({ share: 1 / 3, borrow: 1 / 3 });
  });

  it('gives a tenant under its part what it asks with headroom, and the rest to the one over it (the capacity-avalanche case)', () => {
    // tenant-a spikes to 120 calls a second; tenant-c asks 4 and tenant-b 2 of a provider's 15
    const s = fairShares(15, [
      { tenant: 'tenant-a', weight: 1, perSec: 120 },
      { tenant: 'tenant-b', weight: 1, perSec: 2 },
      { tenant: 'tenant-c', weight: 1, perSec: 4 },
    ]);
    expect(s.get('tenant-c')!.share * 15).toBeCloseTo(4 * DEMAND_HEADROOM);
    expect(s.get('tenant-b')!.share * 15).toBeCloseTo(2 * DEMAND_HEADROOM);
    expect(s.get('tenant-a')!.share * 15).toBeCloseTo(15 - 6 * DEMAND_HEADROOM);
    expect(s.get('tenant-a')!.borrow).toBe(1);
    // the quiet tenants may borrow as if they joined tenant-a
    expect(s.get('tenant-c')!.borrow).toBe(0.5);
  });

  it('splits by weight between tenants that both want more (2:1)', () => {
    const s = fairShares(10, [
      { tenant: 'a', weight: 2, perSec: 50 },
      { tenant: 'b', weight: 1, perSec: 50 },
    ]);
    expect(s.get('a')!.share / s.get('b')!.share).toBeCloseTo(2);
    expect(s.get('a')!.borrow / s.get('b')!.borrow).toBeCloseTo(2);
  });

  it('leaves out tenants that asked nothing lately, so their part goes to the others', () => {
    const s = fairShares(10, [
      { tenant: 'a', weight: 1, perSec: 50 },
      { tenant: 'idle', weight: 5, perSec: 0 },
    ]);
    expect(s.has('idle')).toBe(false);
    expect(s.get('a')!.share).toBeCloseTo(1);
  });

  it('answers nothing without capacity or demand', () => {
    expect(fairShares(0, [{ tenant: 'a', weight: 1, perSec: 1 }]).size).toBe(0);
    expect(fairShares(10, []).size).toBe(0);
  });

  it('never hands out more than the capacity', () => {
    fc.assert(
      fc.property(capacity, demands, (cap, ds) => {
        const s = fairShares(cap, ds);
        const total = [...s.values()].reduce((n, x) => n + x.share, 0);
        // the least share is a floor for tiny tenants; beyond it the parts add up to at most the whole
        expect(total).toBeLessThanOrEqual(1 + 0.001 * ds.length + EPS);
      }),
    );
  });

  it('never starves a tenant under its weighted part: it gets what it asks, with headroom', () => {
    fc.assert(
      fc.property(capacity, demands, (cap, ds) => {
        const s = fairShares(cap, ds);
        const weights = ds.filter((d) => d.perSec >= 0.01).reduce((w, d) => w + d.weight, 0);
        for (const d of ds) {
          if (d.perSec < 0.01) continue;
          const part = (cap * d.weight) / weights;
          if (d.perSec * DEMAND_HEADROOM <= part) expect(rateOf(s, cap, d.tenant)).toBeGreaterThanOrEqual(Math.min(d.perSec * DEMAND_HEADROOM, part) - EPS);
          // and every wanting tenant gets at least the lesser of its demand and its weighted part
          expect(rateOf(s, cap, d.tenant)).toBeGreaterThanOrEqual(Math.min(d.perSec, part) - EPS);
        }
      }),
    );
  });

  it('is work-conserving: when any tenant wants more than its part, the whole capacity is handed out', () => {
    fc.assert(
      fc.property(capacity, demands, (cap, ds) => {
        const s = fairShares(cap, ds);
        const wanting = ds.filter((d) => d.perSec >= 0.01);
        const unmet = wanting.some((d) => d.perSec * DEMAND_HEADROOM > rateOf(s, cap, d.tenant) + EPS);
        const total = [...s.values()].reduce((n, x) => n + x.share, 0);
        if (unmet) expect(total).toBeGreaterThanOrEqual(1 - 1e-6);
      }),
    );
  });

  it('respects weights: two tenants both short of what they want get shares in their weights’ ratio', () => {
    fc.assert(
      fc.property(capacity, demands, (cap, ds) => {
        const s = fairShares(cap, ds);
        const short = ds.filter((d) => d.perSec >= 0.01 && d.perSec * DEMAND_HEADROOM > rateOf(s, cap, d.tenant) + 1e-6 && s.get(d.tenant)!.share > 0.001);
        for (const x of short) for (const y of short) expect(s.get(x.tenant)!.share / x.weight).toBeCloseTo(s.get(y.tenant)!.share / y.weight, 6);
      }),
    );
  });
});

describe('newcomerShare', () => {
  it('gives a tenant not yet seen its weight’s part as if it joined the tenants seen', () => {
    expect(newcomerShare(1, 2)).toEqual({ share: 1 / 3, borrow: 1 / 3 });
    expect(newcomerShare(2, 0)).toEqual({ share: 1, borrow: 1 });
  });
});

describe('demandPerSec', () => {
  it('reads the decayed count as units a second over the window', () => {
    expect(demandPerSec(50, 1_000, 1_000, 5_000)).toBe(10);
    expect(demandPerSec(50, 1_000, 6_000, 5_000)).toBeCloseTo(10 / Math.E);
  });

  it('is 0 for nothing asked, a bad count or no window, and never grows for a time in the future', () => {
    expect(demandPerSec(0, 0, 0, 5_000)).toBe(0);
    expect(demandPerSec(Number.NaN, 0, 0, 5_000)).toBe(0);
    expect(demandPerSec(5, 0, 0, 0)).toBe(0);
    expect(demandPerSec(5, 10_000, 0, 5_000)).toBe(1);
  });
});
