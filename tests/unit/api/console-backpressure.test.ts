import { describe, expect, it } from 'vitest';
import { backpressureGauges } from '../../../src/api/console/backpressure.js';
import { createMetrics } from '../../../src/obs/metrics.js';

const permitGauges = (values: { scope: string; limit: number; inUse: number }[]) => [
  { name: 'sluice_permit_limit', help: '', type: 'gauge', aggregator: 'sum', values: values.map((v) => ({ labels: { scope: v.scope }, value: v.limit })) },
  { name: 'sluice_permits_in_use', help: '', type: 'gauge', aggregator: 'sum', values: values.map((v) => ({ labels: { scope: v.scope }, value: v.inUse })) },
];

type Metrics = Parameters<typeof backpressureGauges>[0];

describe('backpressureGauges', () => {
  it('pairs permits in use with limits per scope, and sums paused partitions and held runs per dependency and tenant', async () => {
    const m = createMetrics();
    m.pausedPartitions.set({ reason: 'buffer_full' }, 2);
    m.pausedPartitions.set({ reason: 'breaker_open' }, 0);
    m.runsHeld.set({ dependency: 'anthropic', tenant: 'a', class: 'interactive' }, 3);
    m.runsHeld.set({ dependency: 'anthropic', tenant: 'b', class: 'batch' }, 1);
    m.runsHeld.set({ dependency: 'anthropic', tenant: 'a', class: 'batch' }, 1);
    m.runsHeld.set({ dependency: 'kb-search', tenant: 'a', class: 'batch' }, 0);
    const json = [...(await m.registry.getMetricsAsJSON()), ...permitGauges([{ scope: 'global', limit: 10, inUse: 4 }])] as Metrics;
    expect(backpressureGauges(json, new Map())).toEqual({
      permits: [{ scope: 'global', inUse: 4, limit: 10 }],
      oldestWaiters: { everySec: 2, why: null },
      processorHere: false,
      paused: [{ reason: 'buffer_full', partitions: 2 }],
      held: [{ dependency: 'anthropic', runs: 5, tenants: { a: 4, b: 1 } }],
    });
  });

  it("gives every scope with a waiter its oldest waiter's age from what the processors published, whether or not one runs in this process", async () => {
    const scopes = [
      { scope: 'global', limit: 10, inUse: 10 },
      { scope: 'class:batch', limit: 5, inUse: 5 },
      { scope: 'tenant:a', limit: 4, inUse: 4 },
      { scope: 'workflow:w', limit: 8, inUse: 3 },
      { scope: 'dependency:llm', limit: 2, inUse: 2 },
    ];
    const published = new Map([['global', 12], ['class:batch', 12], ['tenant:a', 4.5], ['dependency:llm', 30], ['tenant:gone-from-config', 99]]);
    const gauges = backpressureGauges(permitGauges(scopes) as unknown as Metrics, published);
    expect(gauges.processorHere).toBe(false);
    expect(gauges.permits).toEqual([
      { scope: 'global', inUse: 10, limit: 10, oldestWaitingSec: 12 },
      { scope: 'class:batch', inUse: 5, limit: 5, oldestWaitingSec: 12 },
      { scope: 'tenant:a', inUse: 4, limit: 4, oldestWaitingSec: 4.5 },
      { scope: 'workflow:w', inUse: 3, limit: 8 },
      { scope: 'dependency:llm', inUse: 2, limit: 2, oldestWaitingSec: 30 },
    ]);
    expect(gauges.oldestWaiters).toEqual({ everySec: 2, why: null });
  });

  it('says why the oldest waiters are unknown when they could not be read, and still shows the permits', () => {
    const gauges = backpressureGauges(permitGauges([{ scope: 'global', limit: 10, inUse: 10 }]) as unknown as Metrics, 'Redis unreachable (timeout)');
    expect(gauges.permits).toEqual([{ scope: 'global', inUse: 10, limit: 10 }]);
    expect(gauges.oldestWaiters).toEqual({ everySec: 2, why: 'Redis unreachable (timeout)' });
  });

  it("knows a processor runs in this process by its queue gauges, for the paused partitions and held runs", async () => {
    const m = createMetrics();
    m.queueOldestAge.set({ class: 'interactive' }, 0);
    expect(backpressureGauges((await m.registry.getMetricsAsJSON()) as Metrics, new Map()).processorHere).toBe(true);
  });
});
