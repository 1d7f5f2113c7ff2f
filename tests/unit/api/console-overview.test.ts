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
  const permitGauges = (values: { scope: string; limit: number; inUse: number }[]) => [
    { name: 'sluice_permit_limit', help: '', type: 'gauge', aggregator: 'sum', values: values.map((v) => ({ labels: { scope: v.scope }, value: v.limit })) },
    { name: 'sluice_permits_in_use', help: '', type: 'gauge', aggregator: 'sum', values: values.map((v) => ({ labels: { scope: v.scope }, value: v.inUse })) },
  ];

  it('pairs permits in use with limits per scope, and sums paused partitions and held runs per dependency and tenant', async () => {
    const m = createMetrics();
    m.pausedPartitions.set({ reason: 'buffer_full' }, 2);
    m.pausedPartitions.set({ reason: 'breaker_open' }, 0);
    m.runsHeld.set({ dependency: 'anthropic', tenant: 'a', class: 'interactive' }, 3);
    m.runsHeld.set({ dependency: 'anthropic', tenant: 'b', class: 'batch' }, 1);
    m.runsHeld.set({ dependency: 'anthropic', tenant: 'a', class: 'batch' }, 1);
    m.runsHeld.set({ dependency: 'kb-search', tenant: 'a', class: 'batch' }, 0);
    const json = [...(await m.registry.getMetricsAsJSON()), ...permitGauges([{ scope: 'global', limit: 10, inUse: 4 }])] as Parameters<typeof backpressureGauges>[0];
    expect(backpressureGauges(json)).toEqual({
      permits: [{ scope: 'global', inUse: 4, limit: 10 }],
      processorHere: false,
      paused: [{ reason: 'buffer_full', partitions: 2 }],
      held: [{ dependency: 'anthropic', runs: 5, tenants: { a: 4, b: 1 } }],
    });
  });

  it("gives the global and class scopes the oldest waiting run's age when a processor runs in this process, and no other scope one", async () => {
    const m = createMetrics();
    m.queueOldestAge.set({ class: 'interactive' }, 4.5);
    m.queueOldestAge.set({ class: 'batch' }, 12);
    const scopes = [
      { scope: 'global', limit: 10, inUse: 10 },
      { scope: 'class:batch', limit: 5, inUse: 5 },
      { scope: 'tenant:a', limit: 4, inUse: 4 },
    ];
    const json = [...(await m.registry.getMetricsAsJSON()), ...permitGauges(scopes)] as Parameters<typeof backpressureGauges>[0];
    const gauges = backpressureGauges(json);
    expect(gauges.processorHere).toBe(true);
    expect(gauges.permits).toEqual([
      { scope: 'global', inUse: 10, limit: 10, oldestWaitingSec: 12 },
      { scope: 'class:batch', inUse: 5, limit: 5, oldestWaitingSec: 12 },
      { scope: 'tenant:a', inUse: 4, limit: 4 },
    ]);
  });
});
