import { describe, expect, it } from 'vitest';
import { paceUse, retryBudgetUse, windowCounts } from '../../../src/api/console/dependencies.js';

const NOW = 1_800_000_000_000;

describe('windowCounts: a breaker window as breaker-window.lua sums it', () => {
  const windowMs = 30_000;
  const width = windowMs / 10;
  const bucket = (agoMs: number) => Math.floor((NOW - agoMs) / width);

  it('sums calls, failures and slow calls of the buckets inside the window', () => {
    const hash = { [`${bucket(0)}:c`]: '4', [`${bucket(0)}:f`]: '2', [`${bucket(width * 3)}:c`]: '6', [`${bucket(width * 3)}:s`]: '1' };
    expect(windowCounts(hash, NOW, windowMs)).toEqual({ calls: 10, failures: 2, slowCalls: 1 });
  });

  it('skips a bucket whose start is a whole window old, and fields it does not know', () => {
    const stale = Math.floor((NOW - windowMs) / width);
    expect(windowCounts({ [`${stale}:c`]: '9', [`${stale}:f`]: '9', [`${bucket(0)}:c`]: '1', junk: '5', [`${bucket(0)}:x`]: '3' }, NOW, windowMs)).toEqual({ calls: 1, failures: 0, slowCalls: 0 });
  });

  it('reads an empty window as no calls', () => {
    expect(windowCounts({}, NOW, windowMs)).toEqual({ calls: 0, failures: 0, slowCalls: 0 });
  });
});

describe('paceUse: how much of each bucket is booked', () => {
  const limit = { bucket: 'requests' as const, perMinute: 600, source: 'config' as const };

  it('is the TAT ahead of now times the rate, against a burst of burstMs of the rate', () => {
    // 600/min = 0.01 per ms; TAT 500 ms ahead = 5 requests booked; burst 1 s = 10
    expect(paceUse([limit], { 'tat:requests': String(NOW + 500), 'rate:requests': '0.01', at: String(NOW - 10) }, NOW, 1_000)).toEqual([{ ...limit, used: 5, burst: 10 }]);
  });

  it('is nothing for a bucket never charged or full again, at the limit rate', () => {
    expect(paceUse([limit], {}, NOW, 1_000)).toEqual([{ ...limit, used: 0, burst: 10 }]);
    expect(paceUse([limit], { 'tat:requests': String(NOW - 5) }, NOW, 1_000)).toEqual([{ ...limit, used: 0, burst: 10 }]);
  });

  it('uses the rate last charged (a ramp-up share lowers it), and a burst of at least one unit', () => {
    expect(paceUse([limit], { 'tat:requests': String(NOW + 1_000), 'rate:requests': '0.005' }, NOW, 1_000)).toEqual([{ ...limit, used: 5, burst: 5 }]);
    expect(paceUse([{ ...limit, perMinute: 6 }], {}, NOW, 1_000)[0]!.burst).toBe(1);
  });

  it('shifts the TATs back by a server clock that stepped back, as the script does', () => {
    expect(paceUse([limit], { 'tat:requests': String(NOW + 2_500), 'rate:requests': '0.01', at: String(NOW + 2_000) }, NOW, 1_000)[0]!.used).toBe(5);
  });
});

describe('retryBudgetUse: a retry budget window as retry-budget-take.lua counts it', () => {
  const policy = { budgetRatio: 0.1, budgetWindowMs: 60_000, budgetMinRetries: 10 };
  const current = Math.floor(NOW / 6_000);

  it('sums the buckets of the window and allows the larger of the ratio and the floor', () => {
    const hash = { [`c:${current}`]: '150', [`c:${current - 9}`]: '50', [`r:${current}`]: '4', [`c:${current - 10}`]: '999', [`r:${current - 10}`]: '99' };
    expect(retryBudgetUse(hash, NOW, policy)).toEqual({ calls: 200, retries: 4, allowed: 20, ratio: 0.1, windowMs: 60_000 });
    expect(retryBudgetUse({}, NOW, policy)).toEqual({ calls: 0, retries: 0, allowed: 10, ratio: 0.1, windowMs: 60_000 });
  });

  it('counts a bucket ahead of now (the server clock stepped back) as recent', () => {
    expect(retryBudgetUse({ [`r:${current + 2}`]: '3' }, NOW, policy).retries).toBe(3);
  });
});
