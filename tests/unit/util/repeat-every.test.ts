import { afterEach, describe, expect, it, vi } from 'vitest';
import { repeatEvery } from '../../../src/util/repeat-every.js';

describe('repeatEvery', () => {
  afterEach(() => vi.useRealTimers());

  it('runs at once and every interval until stopped, a failed run skipped rather than thrown', async () => {
    vi.useFakeTimers();
    let runs = 0;
    const stop = repeatEvery(1_000, async () => {
      runs++;
      if (runs === 2) throw new Error('a failed run');
    });
    expect(runs).toBe(1);
    await vi.advanceTimersByTimeAsync(2_500);
    expect(runs).toBe(3);
    stop();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(runs).toBe(3);
  });
});
