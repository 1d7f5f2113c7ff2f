import { describe, expect, it } from 'vitest';
import { CallStats, OTHER_KEY } from '../../../../src/dev/sim/call-stats.js';

describe('CallStats', () => {
  it('starts empty', () => {
    expect(new CallStats().snapshot()).toEqual({ calls: {}, callsByTenant: {}, errors: {}, rateLimited: {}, concurrent: {}, maxConcurrent: { byTarget: {}, byTenant: {}, total: 0 } });
  });

  it('counts calls, in-flight calls and peaks per target', () => {
    const stats = new CallStats();
    const first = stats.enter('anthropic', 't1');
    const second = stats.enter('anthropic', 't2');
    expect(stats.snapshot().concurrent).toEqual({ anthropic: 2 });
    first.leave();
    second.leave();
    stats.enter('anthropic', 't1').leave();
    expect(stats.snapshot()).toEqual({
      calls: { anthropic: 3 },
      callsByTenant: { anthropic: { t1: 2, t2: 1 } },
      errors: {},
      rateLimited: {},
      concurrent: { anthropic: 0 },
      maxConcurrent: { byTarget: { anthropic: 2 }, byTenant: { t1: 1, t2: 1 }, total: 2 },
    });
  });

  it('measures a tenant peak across all targets', () => {
    const stats = new CallStats();
    const tickets = [stats.enter('anthropic', 'acme'), stats.enter('report', 'acme'), stats.enter('notify', 'acme')];
    tickets.forEach((ticket) => ticket.leave());
    stats.enter('report', 'acme').leave();
    expect(stats.snapshot().maxConcurrent).toEqual({ byTarget: { anthropic: 1, report: 1, notify: 1 }, byTenant: { acme: 3 }, total: 3 });
  });

  it('makes leave, fail and refuseForRateLimit idempotent so every exit path may call them', () => {
    const stats = new CallStats();
    const ticket = stats.enter('anthropic', 't1');
    const other = stats.enter('anthropic', 't1');
    ticket.fail();
    ticket.fail();
    ticket.leave();
    ticket.leave();
    expect(stats.snapshot()).toMatchObject({ errors: { anthropic: 1 }, rateLimited: {}, concurrent: { anthropic: 1 } });
    other.refuseForRateLimit();
    other.refuseForRateLimit();
    expect(stats.snapshot()).toMatchObject({ calls: { anthropic: 2 }, errors: { anthropic: 1 }, rateLimited: { anthropic: 1 } });
    other.leave();
    expect(stats.snapshot().concurrent).toEqual({ anthropic: 0 });
  });

  it('keeps calls in flight across a reset without going negative when they leave', () => {
    const stats = new CallStats();
    const inFlight = stats.enter('anthropic', 'slow-tenant');
    const done = stats.enter('report', 'fast-tenant');
    done.fail();
    done.leave();
    const refused = stats.enter('report', 'fast-tenant');
    refused.refuseForRateLimit();
    refused.leave();
    stats.reset();
    expect(stats.snapshot()).toEqual({
      calls: {},
      callsByTenant: {},
      errors: {},
      rateLimited: {},
      concurrent: { anthropic: 1 },
      maxConcurrent: { byTarget: { anthropic: 1 }, byTenant: { 'slow-tenant': 1 }, total: 1 },
    });
    const next = stats.enter('anthropic', 'slow-tenant');
    inFlight.leave();
    next.leave();
    expect(stats.snapshot()).toEqual({
      calls: { anthropic: 1 },
      callsByTenant: { anthropic: { 'slow-tenant': 1 } },
      errors: {},
      rateLimited: {},
      concurrent: { anthropic: 0 },
      maxConcurrent: { byTarget: { anthropic: 2 }, byTenant: { 'slow-tenant': 2 }, total: 2 },
    });
  });

  it('counts names beyond the key limit under _other', () => {
    const stats = new CallStats(2);
    for (const tenant of ['a', 'b', 'c', 'd', 'a']) stats.enter('anthropic', tenant).leave();
    for (const target of ['t1', 't2', 't3']) stats.enter(target, 'a').fail();
    const snapshot = stats.snapshot();
    expect(snapshot.maxConcurrent.byTenant).toEqual({ a: 3, b: 1, [OTHER_KEY]: 1 });
    expect(snapshot.calls).toEqual({ anthropic: 5, t1: 1, [OTHER_KEY]: 2 });
    expect(snapshot.errors).toEqual({ t1: 1, [OTHER_KEY]: 2 });
    expect(snapshot.callsByTenant).toEqual({ anthropic: { a: 2, b: 1, [OTHER_KEY]: 2 }, t1: { a: 1 }, [OTHER_KEY]: { a: 2 } });
  });

  it('frees key slots on reset once their calls are done', () => {
    const stats = new CallStats(1);
    stats.enter('anthropic', 'a').leave();
    stats.enter('anthropic', 'b').leave();
    stats.reset();
    stats.enter('anthropic', 'b').leave();
    expect(stats.snapshot().maxConcurrent.byTenant).toEqual({ b: 1 });
  });

  it('treats prototype-like names as plain keys', () => {
    const stats = new CallStats();
    stats.enter('anthropic', '__proto__').leave();
    const byTenant = stats.snapshot().maxConcurrent.byTenant;
    expect(Object.keys(byTenant)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(byTenant)).toBe(Object.prototype);
  });
});
