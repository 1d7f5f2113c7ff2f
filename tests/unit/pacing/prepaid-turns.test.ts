import { describe, expect, it } from 'vitest';
import type { RunRequested } from '../../../src/events/schemas.js';
import { PrepaidTurnLedger } from '../../../src/pacing/prepaid-turns.js';

const run = (over: Partial<RunRequested> = {}): RunRequested => ({
  runId: 'r1',
  tenantId: 'tenant-a',
  workflow: 'support-reply',
  class: 'interactive',
  admittedAt: 0,
  deadline: 10_000,
  attempt: 1,
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  input: '{}',
  idempotencyKey: null,
  dueAt: null,
  prepaidTurns: [{ dependency: 'anthropic', calls: 2, notBefore: 500 }],
  ...over,
});

describe('PrepaidTurnLedger', () => {
  it('spends the reserved turns one call at a time, then has none', () => {
    const l = new PrepaidTurnLedger();
    const r = run();
    expect(l.take(r, 'anthropic')).toBe(500);
    expect(l.take(r, 'anthropic')).toBe(500);
    expect(l.take(r, 'anthropic')).toBeUndefined();
    expect(l.take(r, 'order-lookup')).toBeUndefined();
    expect(l.settle(r, 0)).toEqual([]);
  });

  it('hands back what the attempt did not use, and what a call put back', () => {
    const l = new PrepaidTurnLedger();
    const r = run();
    l.take(r, 'anthropic');
    l.take(r, 'anthropic');
    l.putBack(r, 'anthropic');
    expect(l.settle(r, 0)).toEqual([{ dependency: 'anthropic', calls: 1, notBefore: 500 }]);
  });

  it('gives a later attempt, a run without turns, and an attempt repeated after it ended none', () => {
    const l = new PrepaidTurnLedger();
    expect(l.take(run({ attempt: 2 }), 'anthropic')).toBeUndefined();
    expect(l.take(run({ prepaidTurns: null }), 'anthropic')).toBeUndefined();
    const r = run();
    expect(l.settle(r, 0)).toEqual([{ dependency: 'anthropic', calls: 2, notBefore: 500 }]);
    expect(l.take(r, 'anthropic')).toBeUndefined();
    expect(l.settle(r, 0)).toEqual([]);
  });

  it('forgets an ended run once its deadline passed, oldest first', () => {
    const l = new PrepaidTurnLedger();
    l.settle(run({ runId: 'a', deadline: 100 }), 0);
    l.settle(run({ runId: 'b', deadline: 200 }), 0);
    l.settle(run({ runId: 'c' }), 150);
    // a is forgotten (its record could only come back as a new attempt); b is still remembered
    expect(l.take(run({ runId: 'a' }), 'anthropic')).toBe(500);
    expect(l.take(run({ runId: 'b' }), 'anthropic')).toBeUndefined();
  });
});
