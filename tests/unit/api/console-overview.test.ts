import { describe, expect, it } from 'vitest';
import { backpressureGauges } from '../../../src/api/console/backpressure.js';
import { pointBetween, pointsOf, quantileBetween, tallyAgo, tallyOf, type Tally } from '../../../src/api/console/overview.js';
import { createMetrics } from '../../../src/obs/metrics.js';

const empty = (at: number): Tally => ({ at, admission: {}, refusals: {}, finished: {}, endToEnd: {}, deadLetters: {}, leasesLost: 0, retryBudgetExhausted: {} });

describe('tallyOf', () => {
  it("reads the Overview's counters out of a real registry, summed over other labels", async () => {
    const m = createMetrics();
    m.admissions.inc({ tenant: 'a', class: 'interactive', outcome: 'admitted', reason: '' }, 3);
    m.admissions.inc({ tenant: 'b', class: 'batch', outcome: 'admitted', reason: '' }, 2);
    m.admissions.inc({ tenant: 'a', class: 'interactive', outcome: 'deferred', reason: 'rate_limited' }, 4);
    m.runsFinished.inc({ tenant: 'a', workflow: 'w', class: 'interactive', status: 'completed' }, 5);
    m.runEndToEnd.observe({ class: 'interactive', status: 'completed' }, 0.3);
    const t = tallyOf(await m.registry.getMetricsAsJSON(), 1000);
    expect(t.admission).toEqual({ admitted: 5, deferred: 4 });
    expect(t.refusals).toEqual({ rate_limited: 4 });
    expect(t.finished).toEqual({ completed: 5 });
    const buckets = t.endToEnd.interactive!;
    expect(buckets.le.at(-1)).toBe(Infinity);
    expect(buckets.counts[buckets.le.indexOf(0.5)]).toBe(1);
    expect(buckets.counts[buckets.le.indexOf(0.25)]).toBe(0);
  });
});

describe('quantileBetween', () => {
  const before = { le: [1, 2, Infinity], counts: [10, 10, 10] };
  it('interpolates in the bucket the rank falls in, counting only what was observed in between', () => {
    const after = { le: [1, 2, Infinity], counts: [10, 20, 20] };
    expect(quantileBetween(before, after, 0.5)).toBeCloseTo(1.5);
    expect(quantileBetween(before, after, 0.99)).toBeCloseTo(1.99);
  });
  it('answers null with nothing observed, and the last bound for the +Inf bucket', () => {
    expect(quantileBetween(before, before, 0.5)).toBeNull();
    expect(quantileBetween(before, { le: [1, 2, Infinity], counts: [10, 10, 20] }, 0.5)).toBe(2);
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

describe('backpressureGauges', () => {
  it('pairs permits in use with limits per scope, and sums paused partitions and held runs', async () => {
    const m = createMetrics();
    m.pausedPartitions.set({ reason: 'buffer_full' }, 2);
    m.pausedPartitions.set({ reason: 'breaker_open' }, 0);
    m.runsHeld.set({ dependency: 'anthropic', tenant: 'a', class: 'interactive' }, 3);
    m.runsHeld.set({ dependency: 'anthropic', tenant: 'b', class: 'batch' }, 1);
    const json = [
      ...(await m.registry.getMetricsAsJSON()),
      { name: 'sluice_permit_limit', help: '', type: 'gauge', aggregator: 'sum', values: [{ labels: { scope: 'global' }, value: 10 }] },
      { name: 'sluice_permits_in_use', help: '', type: 'gauge', aggregator: 'sum', values: [{ labels: { scope: 'global' }, value: 4 }] },
    ] as Parameters<typeof backpressureGauges>[0];
    expect(backpressureGauges(json)).toEqual({ permits: [{ scope: 'global', inUse: 4, limit: 10 }], paused: [{ reason: 'buffer_full', partitions: 2 }], held: [{ dependency: 'anthropic', runs: 4 }] });
  });
});
