import { describe, expect, it } from 'vitest';
import { backpressureGauges } from '../../../src/api/console/backpressure.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import type { ClusterProcessorState } from '../../../src/processors/processor-state.js';

const permitGauges = (values: { scope: string; limit: number; inUse: number }[]) => [
  { name: 'sluice_permit_limit', help: '', type: 'gauge', aggregator: 'sum', values: values.map((v) => ({ labels: { scope: v.scope }, value: v.limit })) },
  { name: 'sluice_permits_in_use', help: '', type: 'gauge', aggregator: 'sum', values: values.map((v) => ({ labels: { scope: v.scope }, value: v.inUse })) },
];

type Metrics = Parameters<typeof backpressureGauges>[0];

const published = (s: Partial<ClusterProcessorState>): ClusterProcessorState => ({ oldestWaitingSec: new Map(), paused: [], held: [], ...s });

describe('backpressureGauges', () => {
  it("pairs permits in use with limits per scope, and takes paused partitions and held runs from what the processors published, not from this process's gauges", async () => {
    const m = createMetrics();
    m.pausedPartitions.set({ reason: 'buffer_full' }, 2);
    m.runsHeld.set({ dependency: 'anthropic', tenant: 'a', class: 'interactive' }, 3);
    const paused = [{ reason: 'breaker_open', partitions: 1, processors: 1, topics: [{ topic: 't', partitions: [0] }], unlisted: 0 }];
    const held = [{ dependency: 'kb-search', runs: 2, tenants: { b: 2 } }];
    const json = [...(await m.registry.getMetricsAsJSON()), ...permitGauges([{ scope: 'global', limit: 10, inUse: 4 }])] as Metrics;
    expect(backpressureGauges(json, published({ paused, held }))).toEqual({
      permits: [{ scope: 'global', inUse: 4, limit: 10 }],
      processorState: { everySec: 2, why: null },
      paused,
      held,
    });
  });

  it("gives every scope with a waiter its oldest waiter's age from what the processors published", () => {
    const scopes = [
      { scope: 'global', limit: 10, inUse: 10 },
      { scope: 'class:batch', limit: 5, inUse: 5 },
      { scope: 'tenant:a', limit: 4, inUse: 4 },
      { scope: 'workflow:w', limit: 8, inUse: 3 },
      { scope: 'dependency:llm', limit: 2, inUse: 2 },
    ];
    const oldestWaitingSec = new Map([['global', 12], ['class:batch', 12], ['tenant:a', 4.5], ['dependency:llm', 30], ['tenant:gone-from-config', 99]]);
    const gauges = backpressureGauges(permitGauges(scopes) as unknown as Metrics, published({ oldestWaitingSec }));
    expect(gauges.permits).toEqual([
      { scope: 'global', inUse: 10, limit: 10, oldestWaitingSec: 12 },
      { scope: 'class:batch', inUse: 5, limit: 5, oldestWaitingSec: 12 },
      { scope: 'tenant:a', inUse: 4, limit: 4, oldestWaitingSec: 4.5 },
      { scope: 'workflow:w', inUse: 3, limit: 8 },
      { scope: 'dependency:llm', inUse: 2, limit: 2, oldestWaitingSec: 30 },
    ]);
    expect(gauges.processorState).toEqual({ everySec: 2, why: null });
  });

  it("says why the processors' state is unknown when it could not be read, and still shows the permits", () => {
    const gauges = backpressureGauges(permitGauges([{ scope: 'global', limit: 10, inUse: 10 }]) as unknown as Metrics, 'Redis unreachable (timeout)');
    expect(gauges).toEqual({ permits: [{ scope: 'global', inUse: 10, limit: 10 }], processorState: { everySec: 2, why: 'Redis unreachable (timeout)' }, paused: [], held: [] });
  });
});
