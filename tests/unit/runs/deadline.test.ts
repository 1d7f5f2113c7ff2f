import { describe, expect, it } from 'vitest';
import { MIN_USEFUL_CALL_MS, clampTimeout, isExpired, minTimeToFinishMs, remainingMs, resolveDeadline, retryDeadline, type DeadlinePolicy } from '../../../src/runs/deadline.js';

const policy: DeadlinePolicy = { defaultInteractive: 30_000, defaultBatch: 3_600_000, min: 1_000, max: 86_400_000 };
const T0 = 1_767_225_600_000;

describe('resolveDeadline', () => {
  it('uses the interactive default when no budget is requested', () => {
    expect(resolveDeadline(undefined, 'interactive', policy, T0)).toEqual({ ok: true, deadline: T0 + 30_000, budgetMs: 30_000 });
  });

  it('uses the batch default when no budget is requested', () => {
    expect(resolveDeadline(undefined, 'batch', policy, T0)).toEqual({ ok: true, deadline: T0 + 3_600_000, budgetMs: 3_600_000 });
  });

  it('uses the requested budget whatever the class', () => {
    expect(resolveDeadline(5_000, 'interactive', policy, T0)).toEqual({ ok: true, deadline: T0 + 5_000, budgetMs: 5_000 });
    expect(resolveDeadline(5_000, 'batch', policy, T0)).toEqual({ ok: true, deadline: T0 + 5_000, budgetMs: 5_000 });
  });

  it('is absolute: the deadline is admittedAt plus the budget', () => {
    const a = resolveDeadline(2_000, 'interactive', policy, 0);
    const b = resolveDeadline(2_000, 'interactive', policy, 123_456);
    expect(a).toMatchObject({ deadline: 2_000 });
    expect(b).toMatchObject({ deadline: 125_456 });
  });

  it('accepts exactly min and exactly max', () => {
    expect(resolveDeadline(1_000, 'interactive', policy, T0)).toEqual({ ok: true, deadline: T0 + 1_000, budgetMs: 1_000 });
    expect(resolveDeadline(86_400_000, 'batch', policy, T0)).toEqual({ ok: true, deadline: T0 + 86_400_000, budgetMs: 86_400_000 });
  });

  it('refuses one millisecond below min', () => {
    expect(resolveDeadline(999, 'interactive', policy, T0)).toEqual({ ok: false, message: 'must be at least 1000 ms' });
  });

  it('refuses one millisecond above max', () => {
    expect(resolveDeadline(86_400_001, 'interactive', policy, T0)).toEqual({ ok: false, message: 'must be at most 86400000 ms' });
  });

  it('refuses zero and negative budgets (0 is not treated as "no budget")', () => {
    expect(resolveDeadline(0, 'interactive', policy, T0)).toEqual({ ok: false, message: 'must be at least 1000 ms' });
    expect(resolveDeadline(-5_000, 'batch', policy, T0)).toEqual({ ok: false, message: 'must be at least 1000 ms' });
  });

  it('refuses budgets that are not whole milliseconds', () => {
    for (const bad of [1_500.5, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      expect(resolveDeadline(bad, 'interactive', policy, T0)).toEqual({ ok: false, message: 'must be a whole number of milliseconds' });
    }
  });

  it('checks a default against the bounds too', () => {
    const tight: DeadlinePolicy = { defaultInteractive: 500, defaultBatch: 10_000_000, min: 1_000, max: 5_000_000 };
    expect(resolveDeadline(undefined, 'interactive', tight, T0)).toEqual({ ok: false, message: 'must be at least 1000 ms' });
    expect(resolveDeadline(undefined, 'batch', tight, T0)).toEqual({ ok: false, message: 'must be at most 5000000 ms' });
  });
});

describe('remainingMs and isExpired', () => {
  it('counts down to zero and never below', () => {
    expect(remainingMs(T0 + 1_500, T0)).toBe(1_500);
    expect(remainingMs(T0, T0)).toBe(0);
    expect(remainingMs(T0, T0 + 10_000)).toBe(0);
  });

  it('is expired exactly at the deadline and after it, not before', () => {
    expect(isExpired(T0, T0 - 1)).toBe(false);
    expect(isExpired(T0, T0)).toBe(true);
    expect(isExpired(T0, T0 + 1)).toBe(true);
  });
});

describe('clampTimeout', () => {
  it('keeps the call timeout when the run has more time left', () => {
    expect(clampTimeout(2_000, T0 + 10_000, T0)).toBe(2_000);
  });

  it('cuts the call timeout to what the run has left', () => {
    expect(clampTimeout(30_000, T0 + 750, T0)).toBe(750);
  });

  it('is equal when both are the same', () => {
    expect(clampTimeout(1_000, T0 + 1_000, T0)).toBe(1_000);
  });

  it('is 0 at or past the deadline, never negative', () => {
    expect(clampTimeout(5_000, T0, T0)).toBe(0);
    expect(clampTimeout(5_000, T0, T0 + 60_000)).toBe(0);
  });
});

describe('minTimeToFinishMs and retryDeadline', () => {
  it('needs a useful call’s minimum for each step left, at least one', () => {
    expect(minTimeToFinishMs(3)).toBe(3 * MIN_USEFUL_CALL_MS);
    expect(minTimeToFinishMs(0)).toBe(MIN_USEFUL_CALL_MS);
  });

  it('holds an interactive run’s retry to its wait share of its time plus what it needs to finish, a batch run’s to its deadline', () => {
    const run = { admittedAt: 1_000, deadline: 3_000 };
    expect(retryDeadline({ ...run, class: 'interactive' }, 0.5, 300)).toBe(2_300);
    expect(retryDeadline({ ...run, class: 'interactive' }, 1, 300)).toBe(3_000);
    expect(retryDeadline({ ...run, class: 'batch' }, 0.5, 300)).toBe(3_000);
  });
});
