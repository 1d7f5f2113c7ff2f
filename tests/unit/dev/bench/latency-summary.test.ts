import { describe, expect, it } from 'vitest';
import { latencySummary } from '../../../../src/dev/bench/latency-summary.js';

describe('latencySummary', () => {
  it('is NaN with a count of 0 when nothing ended', () => {
    expect(latencySummary([])).toEqual({ count: 0, p50: NaN, p99: NaN, max: NaN });
  });

  it('gives the median and the 99th percentile within the histogram precision', () => {
    const ms = Array.from({ length: 1_000 }, (_, i) => i + 1);
    const s = latencySummary(ms);
    expect(s.count).toBe(1_000);
    expect(s.p50).toBeGreaterThanOrEqual(500);
    expect(s.p50).toBeLessThanOrEqual(501);
    expect(s.p99).toBeGreaterThanOrEqual(990);
    expect(s.p99).toBeLessThanOrEqual(991);
    expect(s.max).toBeGreaterThanOrEqual(1_000);
    expect(s.max).toBeLessThanOrEqual(1_001);
  });

  it('counts sub-millisecond latencies as 1 ms and caps them at an hour', () => {
    expect(latencySummary([0.2, 0.4]).p99).toBe(1);
    const capped = latencySummary([10_000_000]).p50;
    expect(capped).toBeGreaterThanOrEqual(3_600_000 * 0.999);
    expect(capped).toBeLessThanOrEqual(3_600_000 * 1.001);
  });
});
