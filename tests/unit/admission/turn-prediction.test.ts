import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { MIN_USEFUL_CALL_MS } from '../../../src/runs/deadline.js';
import { turnRefusal, turnsNeeded, turnWaitBound, turnWaits } from '../../../src/admission/turn-prediction.js';

const config = loadConfig({ env: {} });

describe('turnsNeeded', () => {
  it('counts one turn per LLM step on its dependency and leaves out tools without a rate limit', () => {
    expect(turnsNeeded(config.workflows['support-reply']!.steps, config.dependencies)).toEqual(new Map([['anthropic', 2]]));
    expect(turnsNeeded(config.workflows['report-digest']!.steps, config.dependencies)).toEqual(new Map([['anthropic', 2]]));
  });

  it('counts an agent step’s first model turn only, and a tool step on a rate-limited tool', () => {
    const dependencies = { ...config.dependencies, 'order-lookup': { ...config.dependencies['order-lookup']!, rateLimit: { requestsPerSecond: 5, burstSeconds: 1 } } };
    expect(turnsNeeded(config.workflows['support-agent']!.steps, dependencies)).toEqual(new Map([['anthropic', 1]]));
    expect(turnsNeeded(config.workflows['support-reply']!.steps, dependencies)).toEqual(new Map([['anthropic', 2], ['order-lookup', 1]]));
  });

  it('leaves out a tool whose rate limit counts only tokens, and a dependency the config does not know', () => {
    const dependencies = { ...config.dependencies, report: { ...config.dependencies.report!, rateLimit: { inputTokensPerMinute: 5, burstSeconds: 1 } } };
    expect(turnsNeeded([{ kind: 'tool', tool: 'report' }, { kind: 'tool', tool: 'nowhere' }], dependencies)).toEqual(new Map());
  });
});

describe('turnWaitBound', () => {
  const base = { now: 1_000, deadline: 3_000, calls: 2, interactiveWaitShare: 0.5 };
  it('lets an interactive run wait at most its share of the time left, and never past what its calls need', () => {
    expect(turnWaitBound({ ...base, runClass: 'interactive', serviceTimeMs: 300 })).toBe(1_000);
    expect(turnWaitBound({ ...base, runClass: 'interactive', serviceTimeMs: 1_500 })).toBe(500);
  });

  it('lets a batch run wait all its time but what its calls take', () => {
    expect(turnWaitBound({ ...base, runClass: 'batch', serviceTimeMs: 300 })).toBe(1_700);
  });

  it('takes a useful call’s minimum per call before any service time is measured, and goes negative past the deadline', () => {
    expect(turnWaitBound({ ...base, runClass: 'batch', serviceTimeMs: undefined })).toBe(2_000 - 2 * MIN_USEFUL_CALL_MS);
    expect(turnWaitBound({ ...base, now: 4_000, runClass: 'batch', serviceTimeMs: 0 })).toBe(-1_000);
  });
});

describe('turnRefusal', () => {
  it('admits what was reserved', () => {
    expect(turnRefusal({ reserved: true, waitMs: 900, heldByShare: false }, 1_000)).toBeUndefined();
  });

  it('refuses a run its capacity cannot serve in time with 503 deadline_unreachable, retry when the turns would fit', () => {
    expect(turnRefusal({ reserved: false, waitMs: 3_200, heldByShare: false }, 1_000)).toEqual({ outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec: 3 });
  });

  it('tells a tenant over its share to slow down with 429 rate_limited', () => {
    expect(turnRefusal({ reserved: false, waitMs: 1_500, heldByShare: true }, 1_000)).toEqual({ outcome: 'deferred', reason: 'rate_limited', retryAfterSec: 1 });
  });

  it('counts from no wait at all when the bound is negative', () => {
    expect(turnRefusal({ reserved: false, waitMs: 2_500, heldByShare: false }, -400)).toMatchObject({ retryAfterSec: 3 });
  });
});

describe('turnWaits', () => {
  const base = { now: 0, calls: 2, serviceTimeMs: 500, interactiveWaitShare: 0.5, maxInlineWaitMs: 1_000 };
  it('has an interactive run reserve within its bound or be refused', () => {
    expect(turnWaits({ ...base, runClass: 'interactive', deadline: 30_000 })).toEqual({ reserveWithinMs: 15_000, refuseBeyondMs: 15_000 });
  });

  it('has a batch run reserve only turns due within the inline wait, and be refused only past its deadline', () => {
    expect(turnWaits({ ...base, runClass: 'batch', deadline: 60_000 })).toEqual({ reserveWithinMs: 1_000, refuseBeyondMs: 59_500 });
    expect(turnWaits({ ...base, runClass: 'batch', deadline: 800 })).toEqual({ reserveWithinMs: 300, refuseBeyondMs: 300 });
  });
});
