import { describe, expect, it } from 'vitest';
import { OVERVIEW_SPAN_MS, dependencySpend, finishedPointsOf, finishedWindow, pointBetween, pointsOf, spendKey, tallyAgo, tallyOf, type Tally } from '../../../src/api/console/overview.js';
import { createMetrics } from '../../../src/obs/metrics.js';

const empty = (at: number): Tally => ({ at, admission: {}, refusals: {}, deadLetters: {}, leasesLost: 0, retryBudgetExhausted: {}, wasted: {}, turns: {} });

describe('tallyOf', () => {
  it("reads the Overview's counters out of a real registry, summed over other labels", async () => {
    const m = createMetrics();
    m.admissions.inc({ tenant: 'a', class: 'interactive', outcome: 'admitted', reason: '' }, 3);
    m.admissions.inc({ tenant: 'b', class: 'batch', outcome: 'admitted', reason: '' }, 2);
    m.admissions.inc({ tenant: 'a', class: 'interactive', outcome: 'deferred', reason: 'rate_limited' }, 4);
    const t = tallyOf(await m.registry.getMetricsAsJSON(), 1000);
    expect(t.admission).toEqual({ admitted: 5, deferred: 4 });
    expect(t.refusals).toEqual({ rate_limited: 4 });
  });

  it("reads the processors' wasted calls and turns, by dependency and reason or tenant", async () => {
    const m = createMetrics();
    m.providerCallsWasted.inc({ dependency: 'anthropic', reason: 'failed' }, 2);
    m.pacingTurns.inc({ dependency: 'anthropic', tenant: 'tenant-a' }, 3);
    const t = tallyOf(await m.registry.getMetricsAsJSON(), 1000);
    expect(t.wasted).toEqual({ [spendKey('anthropic', 'failed')]: 2 });
    expect(t.turns).toEqual({ [spendKey('anthropic', 'tenant-a')]: 3 });
  });
});

describe('dependencySpend', () => {
  const tally = (at: number, wasted: Record<string, number>, turns: Record<string, number>): Tally => ({ ...empty(at), wasted, turns });
  it('gives each dependency its wasted calls by reason and turns by tenant over the span, a restart counting from zero', () => {
    const tallies = [
      tally(0, { [spendKey('anthropic', 'failed')]: 100 }, {}),
      tally(OVERVIEW_SPAN_MS, { [spendKey('anthropic', 'failed')]: 104, [spendKey('anthropic', 'expired')]: 1 }, { [spendKey('anthropic', 'tenant-a')]: 30, [spendKey('anthropic', 'tenant-b')]: 10 }),
      // The processors restarted: their counters start again.
      tally(OVERVIEW_SPAN_MS + 5_000, { [spendKey('anthropic', 'failed')]: 2 }, { [spendKey('anthropic', 'tenant-a')]: 33, [spendKey('anthropic', 'tenant-b')]: 10 }),
    ];
    expect(dependencySpend(tallies)).toEqual({ anthropic: { wasted: { failed: 2 }, turns: { 'tenant-a': 33, 'tenant-b': 10 } } });
    expect(dependencySpend(tallies.slice(0, 2))).toEqual({ anthropic: { wasted: { failed: 4, expired: 1 }, turns: { 'tenant-a': 30, 'tenant-b': 10 } } });
  });

  it('gives nothing before the first tally, and the counts so far from one', () => {
    expect(dependencySpend([])).toEqual({});
    expect(dependencySpend([tally(0, { [spendKey('anthropic', 'cancelled')]: 1 }, {})])).toEqual({ anthropic: { wasted: { cancelled: 1 }, turns: {} } });
  });
});

describe('finishedWindow', () => {
  it('spans the whole buckets of the last 15 minutes, leaving out the one still filling', () => {
    expect(finishedWindow(1_000_003_000, 5_000)).toEqual({ fromMs: 999_100_000, toMs: 1_000_000_000, bucketMs: 5_000 });
    // A bucket that does not divide 15 minutes: the window reaches back a little further, never less.
    expect(finishedWindow(1_000_000_000, 7_000)).toEqual({ fromMs: 999_096_000, toMs: 999_999_000, bucketMs: 7_000 });
  });
});

describe('finishedPointsOf', () => {
  const window = { fromMs: 100_000, toMs: 115_000, bucketMs: 5_000 };
  it('gives a point per bucket at its end: rates by status, percentiles by class', () => {
    const points = finishedPointsOf(
      [
        { bucketMs: 100_000, status: 'completed', class: null, runs: 10, onTime: 9, p50: 3, p99: 8 },
        { bucketMs: 100_000, status: 'failed', class: null, runs: 1, onTime: 0, p50: 30, p99: 30 },
        { bucketMs: 100_000, status: null, class: 'interactive', runs: 8, onTime: 7, p50: 2, p99: 5 },
        { bucketMs: 100_000, status: null, class: 'batch', runs: 3, onTime: 2, p50: 20, p99: 29.9 },
        { bucketMs: 110_000, status: 'completed', class: null, runs: 2, onTime: 2, p50: 1, p99: 1 },
        { bucketMs: 110_000, status: null, class: 'interactive', runs: 2, onTime: 2, p50: 1, p99: 1 },
      ],
      window,
    );
    expect(points).toEqual([
      // On time: counted once, from the status rows (the class rows count the same runs again).
      { at: 105_000, finished: { completed: 2, failed: 0.2 }, onTime: 1.8, p50: { interactive: 2, batch: 20 }, p99: { interactive: 5, batch: 29.9 } },
      // A quiet bucket: zero runs finished (not a gap), and no percentile to draw.
      { at: 110_000, finished: { completed: 0, failed: 0 }, onTime: 0, p50: { interactive: null, batch: null }, p99: { interactive: null, batch: null } },
      { at: 115_000, finished: { completed: 0.4, failed: 0 }, onTime: 0.4, p50: { interactive: 1, batch: null }, p99: { interactive: 1, batch: null } },
    ]);
  });
  it('gives empty points when nothing finished in the window', () => {
    expect(finishedPointsOf([], window)).toEqual([100_000, 105_000, 110_000].map((s) => ({ at: s + 5_000, finished: {}, onTime: 0, p50: {}, p99: {} })));
  });
});

describe('pointBetween', () => {
  it('turns two tallies into per-second rates, a restarted counter counting from zero', () => {
    const a = { ...empty(0), admission: { admitted: 10, rejected: 50 } };
    const b = { ...empty(5_000), admission: { admitted: 20, rejected: 5 } };
    expect(pointBetween(a, b).admission).toEqual({ admitted: 2, rejected: 1 });
    expect(pointsOf([a, b])).toHaveLength(1);
  });
  it('finds the tally a span ago, or the oldest kept', () => {
    const ts = [empty(0), empty(60_000), empty(300_000), empty(360_000)];
    expect(tallyAgo(ts, 300_000)!.at).toBe(60_000);
    expect(tallyAgo(ts, 900_000)!.at).toBe(0);
  });
});
