import { describe, expect, it } from 'vitest';
import { RetryBudget, RetryBudgets } from '../../../src/retries/retry-budget.js';

function budget(ratio = 0.1, windowMs = 10_000, minRetries = 0) {
  let t = 1_000_000;
  const b = new RetryBudget({ ratio, windowMs, minRetries, now: () => t });
  return { b, advance: (ms: number) => (t += ms) };
}

describe('RetryBudget', () => {
  it('allows retries up to the ratio of calls in the window', () => {
    const { b } = budget(0.1);
    for (let i = 0; i < 20; i++) b.recordCall();
    expect(b.tryRetry()).toBe(true);
    expect(b.tryRetry()).toBe(true);
    expect(b.tryRetry()).toBe(false); // 3 retries would be 15% of 20 calls
  });

  it('allows no retry before enough calls were made (a cold start cannot storm)', () => {
    const { b } = budget(0.1);
    for (let i = 0; i < 9; i++) b.recordCall();
    expect(b.tryRetry()).toBe(false);
    b.recordCall();
    expect(b.tryRetry()).toBe(true);
  });

  it('forgets calls and retries that left the window', () => {
    const { b, advance } = budget(0.1, 10_000);
    for (let i = 0; i < 10; i++) b.recordCall();
    expect(b.tryRetry()).toBe(true);
    expect(b.tryRetry()).toBe(false);
    advance(10_000);
    expect(b.tryRetry()).toBe(false); // the old calls are gone too
    for (let i = 0; i < 10; i++) b.recordCall();
    expect(b.tryRetry()).toBe(true);
  });

  it('slides bucket by bucket rather than resetting all at once', () => {
    const { b, advance } = budget(0.5, 10_000);
    for (let i = 0; i < 4; i++) b.recordCall(); // bucket 0
    advance(5_000);
    for (let i = 0; i < 4; i++) b.recordCall(); // bucket 5
    advance(5_500); // bucket 0's calls have left, bucket 5's remain
    expect(b.tryRetry()).toBe(true);
    expect(b.tryRetry()).toBe(true);
    expect(b.tryRetry()).toBe(false);
  });

  it('keeps a floor of retries per window for low-traffic dependencies', () => {
    const { b } = budget(0.1, 10_000, 2);
    b.recordCall();
    expect(b.tryRetry()).toBe(true);
    expect(b.tryRetry()).toBe(true);
    expect(b.tryRetry()).toBe(false);
  });

  it('survives a long idle gap and a clock that does not move', () => {
    const { b, advance } = budget(1, 1_000);
    b.recordCall();
    advance(3_600_000);
    b.recordCall();
    expect(b.tryRetry()).toBe(true);
    expect(b.tryRetry()).toBe(false);
  });
});

describe('RetryBudgets', () => {
  const policy = { budgetRatio: 0.5, budgetWindowMs: 10_000, budgetMinRetries: 0 };

  it("keeps one budget per dependency: one dependency's retries do not spend another's", () => {
    const budgets = new RetryBudgets(() => 1_000_000);
    budgets.of('anthropic', policy).recordCall();
    budgets.of('anthropic', policy).recordCall();
    expect(budgets.of('anthropic', policy).tryRetry()).toBe(true);
    expect(budgets.of('anthropic', policy).tryRetry()).toBe(false);
    expect(budgets.of('order_lookup', policy).tryRetry()).toBe(false);
    budgets.of('order_lookup', policy).recordCall();
    budgets.of('order_lookup', policy).recordCall();
    expect(budgets.of('order_lookup', policy).tryRetry()).toBe(true);
  });

  it("makes a dependency's budget from its policy", () => {
    const budgets = new RetryBudgets(() => 1_000_000);
    expect(budgets.of('anthropic', { ...policy, budgetMinRetries: 2 }).tryRetry()).toBe(true);
  });
});
