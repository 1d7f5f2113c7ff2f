import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { RunClass, RunRequested } from '../../../src/events/schemas.js';
import { InfraBackoff } from '../../../src/processors/infra-backoff.js';

const task = (id: string, source: string, runClass: RunClass = 'interactive') => ({ run: { runId: id, class: runClass } as RunRequested, source });

describe('InfraBackoff', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('resubmits each run once its own delay has passed, and forgets it then', () => {
    const backoff = new InfraBackoff<ReturnType<typeof task>>();
    const resubmitted: string[] = [];
    backoff.wait(task('slow', 'p0'), 200, (t) => resubmitted.push(t.run.runId));
    backoff.wait(task('fast', 'p0', 'batch'), 50, (t) => resubmitted.push(t.run.runId));
    expect(backoff.size).toBe(2);
    expect(backoff.sizeOf('batch')).toBe(1);
    vi.advanceTimersByTime(50);
    expect(resubmitted).toEqual(['fast']);
    expect(backoff.sizeOf('batch')).toBe(0);
    vi.advanceTimersByTime(150);
    expect(resubmitted).toEqual(['fast', 'slow']);
    expect(backoff.size).toBe(0);
  });

  it('never resubmits a run of a revoked partition, nor any run after clear', () => {
    const backoff = new InfraBackoff<ReturnType<typeof task>>();
    const resubmitted: string[] = [];
    const again = (t: ReturnType<typeof task>) => resubmitted.push(t.run.runId);
    backoff.wait(task('a', 'p0'), 10, again);
    backoff.wait(task('b', 'p1'), 10, again);
    backoff.wait(task('c', 'p0'), 10, again);
    expect(backoff.forget((s) => s === 'p0')).toBe(2);
    vi.advanceTimersByTime(10);
    expect(resubmitted).toEqual(['b']);
    backoff.wait(task('d', 'p1'), 10, again);
    backoff.clear();
    vi.advanceTimersByTime(100);
    expect(resubmitted).toEqual(['b']);
    expect(backoff.size).toBe(0);
  });
});
