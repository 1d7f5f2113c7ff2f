/** Latency percentiles of a bench or scenario run, by an HDR histogram (no sorting, bounded memory). */
import hdr from 'hdr-histogram-js';

const HOUR_MS = 3_600_000;

export interface LatencySummary {
  count: number;
  /** Milliseconds; NaN when nothing was recorded. */
  p50: number;
  p99: number;
  max: number;
}

/** p50, p99 and max of latencies in ms at 3 significant digits, from 1 ms (below counts as 1) to an hour (above counts as one). */
export function latencySummary(latenciesMs: readonly number[]): LatencySummary {
  if (latenciesMs.length === 0) return { count: 0, p50: NaN, p99: NaN, max: NaN };
  const histogram = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: HOUR_MS, numberOfSignificantValueDigits: 3 });
  try {
    for (const ms of latenciesMs) histogram.recordValue(Math.min(HOUR_MS, Math.max(1, Math.round(ms))));
    return { count: latenciesMs.length, p50: histogram.getValueAtPercentile(50), p99: histogram.getValueAtPercentile(99), max: histogram.maxValue };
  } finally {
    histogram.destroy();
  }
}
