import { describe, expect, it } from 'vitest';
import { adaptiveBounds, effectiveDependencyLimit, loadSignalOf } from '../../../src/permits/adaptive-limit-policy.js';
import { StepError, type StepErrorKind } from '../../../src/steps/step-error.js';

const failed = (kind: StepErrorKind, status?: number) => new StepError(kind, 'anthropic', `${kind} ${status ?? ''}`, true, status);

describe('adaptiveBounds', () => {
  it('is undefined without adaptiveConcurrency', () => {
    expect(adaptiveBounds({ maxConcurrency: 8 })).toBeUndefined();
  });

  it('takes max from the config, or the permit limit in config when it has none', () => {
    const policy = { min: 2, decreaseFactor: 0.7, cooldownMs: 1_000, idleResetMs: 600_000 };
    expect(adaptiveBounds({ maxConcurrency: 8, adaptiveConcurrency: policy })).toEqual({ min: 2, max: 8 });
    expect(adaptiveBounds({ maxConcurrency: 8, adaptiveConcurrency: { ...policy, max: 20 } })).toEqual({ min: 2, max: 20 });
  });
});

describe('loadSignalOf', () => {
  it('counts a success in time as success, with or without a latency target', () => {
    expect(loadSignalOf(undefined, 5_000, undefined)).toBe('success');
    expect(loadSignalOf(undefined, 1_000, 1_000)).toBe('success');
  });

  it('counts a success slower than the latency target as congestion', () => {
    expect(loadSignalOf(undefined, 1_001, 1_000)).toBe('congestion');
  });

  it.each(['connect_timeout', 'read_timeout', 'total_timeout'] as const)('counts a %s as congestion', (kind) => {
    expect(loadSignalOf(failed(kind), 10, undefined)).toBe('congestion');
  });

  it.each([408, 429, 503, 529])('counts HTTP %i (the dependency busy) as congestion', (status) => {
    expect(loadSignalOf(failed('http_status', status), 10, undefined)).toBe('congestion');
  });

  it.each([400, 401, 404, 413, 500, 502, 504])('takes no signal from HTTP %i (the breaker judges it)', (status) => {
    expect(loadSignalOf(failed('http_status', status), 10, 1)).toBeUndefined();
  });

  it('takes no signal from an HTTP failure without a readable status', () => {
    expect(loadSignalOf(failed('http_status'), 10, undefined)).toBeUndefined();
  });

  it.each(['connection', 'bad_response', 'deadline'] as const)('takes no signal from a %s failure, however slow', (kind) => {
    expect(loadSignalOf(failed(kind), 60_000, 1_000)).toBeUndefined();
  });

  it('takes no signal from a failure that is not the call’s (cancellation, our own fault)', () => {
    expect(loadSignalOf(new Error('aborted'), 60_000, 1_000)).toBeUndefined();
    expect(loadSignalOf(null, 10, undefined)).toBeUndefined();
  });
});

describe('effectiveDependencyLimit', () => {
  const bounds = { min: 1, max: 10 };

  it('is the permit limit at its ramp share when the dependency has no adaptive figure', () => {
    expect(effectiveDependencyLimit(7, undefined, 3)).toBe(7);
  });

  it('is held to the figure, rounded down', () => {
    expect(effectiveDependencyLimit(8, bounds, 4.99)).toBe(4);
    expect(effectiveDependencyLimit(8, bounds, 1)).toBe(1);
  });

  it('does not lose a whole permit to a figure a hair below an integer', () => {
    expect(effectiveDependencyLimit(8, bounds, 2.9999999999)).toBe(3);
  });

  it('reads an unset figure as max, and a figure above max (bounds lowered since) as max', () => {
    expect(effectiveDependencyLimit(20, bounds, undefined)).toBe(10);
    expect(effectiveDependencyLimit(20, bounds, 15)).toBe(10);
  });

  it('never raises the permit limit: a ramping or closed dependency stays as low', () => {
    expect(effectiveDependencyLimit(2, bounds, 9)).toBe(2);
    expect(effectiveDependencyLimit(0, bounds, 9)).toBe(0);
  });
});
