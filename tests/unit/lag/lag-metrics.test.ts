import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { clearClusterSeries, clearLagSeries, createLagMetrics, showClusterRuns, showLagReport } from '../../../src/lag/lag-metrics.js';
import type { LagReport } from '../../../src/lag/lag-report.js';

const report: LagReport = {
  at: 0,
  windowMs: 60_000,
  samples: 3,
  groups: [
    {
      group: 'ns.sluice.processor',
      members: 2,
      status: 'STOP',
      lagMessages: '7',
      maxLagSeconds: 12.5,
      partitions: [
        { topic: 'ns.sluice.runs.batch', partition: 3, committed: '1', low: '0', high: '8', lagMessages: '7', lagSeconds: 12.5, timeSource: 'record', status: 'STOP' },
      ],
    },
    {
      group: 'ns.sluice.retry-forwarder',
      members: 0,
      status: 'OK',
      lagMessages: '9',
      maxLagSeconds: 1,
      partitions: [
        { topic: 'ns.sluice.runs.retry', partition: 0, committed: null, low: '0', high: '4', lagMessages: '4', lagSeconds: 1, timeSource: 'interpolated', status: 'OK' },
        { topic: 'ns.sluice.runs.retry', partition: 1, committed: '5', low: '0', high: '10', lagMessages: '5', lagSeconds: 1, timeSource: 'record', status: 'OK' },
      ],
    },
  ],
};

/** Every sample line of the registry's text, without HELP and TYPE. */
async function samples(registry: Registry): Promise<string[]> {
  return (await registry.metrics()).split('\n').filter((l) => l && !l.startsWith('#'));
}

describe('lag metrics', () => {
  it('show a report: lag, seconds and status per partition, status and members per group, the retry topic depth', async () => {
    const registry = new Registry();
    const m = createLagMetrics(registry);
    showLagReport(m, report, 'ns.sluice.retry-forwarder');
    const lines = await samples(registry);
    expect(lines).toContain('sluice_consumer_lag_messages{group="ns.sluice.processor",topic="ns.sluice.runs.batch",partition="3"} 7');
    expect(lines).toContain('sluice_consumer_lag_seconds{group="ns.sluice.processor",topic="ns.sluice.runs.batch",partition="3"} 12.5');
    expect(lines).toContain('sluice_consumer_partition_status{group="ns.sluice.processor",topic="ns.sluice.runs.batch",partition="3"} 3');
    expect(lines).toContain('sluice_consumer_group_status{group="ns.sluice.processor"} 3');
    expect(lines).toContain('sluice_consumer_group_members{group="ns.sluice.retry-forwarder"} 0');
    expect(lines).toContain('sluice_retry_topic_depth_messages 9');
  });

  it('a report replaces the previous one: partitions no longer reported vanish', async () => {
    const registry = new Registry();
    const m = createLagMetrics(registry);
    showLagReport(m, report, 'ns.sluice.retry-forwarder');
    showLagReport(m, { ...report, groups: [report.groups[0]!] }, 'ns.sluice.retry-forwarder');
    const lines = await samples(registry);
    expect(lines.filter((l) => l.includes('retry-forwarder'))).toEqual([]);
    expect(lines.filter((l) => l.startsWith('sluice_retry_topic_depth_messages'))).toEqual(['sluice_retry_topic_depth_messages 0']);
  });

  it('cleared, nothing of the lag is rendered: not even the label-less retry depth as 0', async () => {
    const registry = new Registry();
    const m = createLagMetrics(registry);
    showLagReport(m, report, 'ns.sluice.retry-forwarder');
    clearLagSeries(m);
    const lines = await samples(registry);
    expect(lines.filter((l) => /^sluice_(consumer_|retry_topic)/.test(l))).toEqual([]);
    showLagReport(m, report, 'ns.sluice.retry-forwarder');
    expect(await samples(registry)).toContain('sluice_retry_topic_depth_messages 9');
  });

  it('show the cluster-wide runs per tenant and class, the oldest admitted age in seconds', async () => {
    const registry = new Registry();
    const m = createLagMetrics(registry);
    showClusterRuns(
      m,
      [
        { tenant: 'a', runClass: 'interactive', runs: 2, oldestAdmittedAt: 4_000 },
        { tenant: 'a', runClass: 'batch', runs: 0, oldestAdmittedAt: undefined },
      ],
      [{ tenant: 'a', runClass: 'batch', runs: 5 }],
      10_000,
    );
    const lines = await samples(registry);
    expect(lines).toContain('sluice_admission_backlog_runs{tenant="a",class="interactive"} 2');
    expect(lines).toContain('sluice_admission_backlog_oldest_age_seconds{tenant="a",class="interactive"} 6');
    expect(lines).toContain('sluice_admission_backlog_oldest_age_seconds{tenant="a",class="batch"} 0');
    expect(lines).toContain('sluice_runs_waiting_dependency{tenant="a",class="batch"} 5');
    clearClusterSeries(m);
    expect((await samples(registry)).filter((l) => /^sluice_(admission|runs_waiting)/.test(l))).toEqual([]);
  });
});
