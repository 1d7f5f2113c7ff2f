import { Counter, Gauge, type Registry } from 'prom-client';
import type { BacklogCount } from '../admission/backlog-census.js';
import type { RunClass } from '../events/schemas.js';
import { STATUS_CODE } from './lag-status.js';
import type { LagReport } from './lag-report.js';

const RETRY_DEPTH = 'sluice_retry_topic_depth_messages';
const PARTITION_LABELS = ['group', 'topic', 'partition'] as const;
const STATUS_HELP = '0 OK, 1 WARN (lag growing), 2 STALL (committed offset not moving with lag), 3 STOP (no commit for longer than the window with lag), 4 REWIND (committed offset went back)';

/**
 * The lag monitor's metrics, registered by processes that run the role. Only the active monitor
 * (the lease holder) has series for the lag and the cluster-wide gauges; every other one exports
 * `sluice_lag_monitor_active 0` and none of them, so a sum over instances counts each once.
 */
export function createLagMetrics(registry: Registry) {
  const r = [registry];
  return {
    registry,
    lagMessages: new Gauge({ name: 'sluice_consumer_lag_messages', help: 'Records written but not committed by the group (high watermark − committed offset; the low watermark where it never committed)', labelNames: PARTITION_LABELS, registers: r }),
    lagSeconds: new Gauge({ name: 'sluice_consumer_lag_seconds', help: 'Age of the record at the group\'s committed offset (its broker append time; interpolated from the window when it cannot be read); 0 without lag', labelNames: PARTITION_LABELS, registers: r }),
    partitionStatus: new Gauge({ name: 'sluice_consumer_partition_status', help: `Partition status over the lag monitor's window: ${STATUS_HELP}`, labelNames: PARTITION_LABELS, registers: r }),
    groupStatus: new Gauge({ name: 'sluice_consumer_group_status', help: `Status of the group's worst partition (severity: STOP, STALL, REWIND, WARN, OK): ${STATUS_HELP}`, labelNames: ['group'], registers: r }),
    groupMembers: new Gauge({ name: 'sluice_consumer_group_members', help: 'Consumers in the group (0 when Kafka does not know the group)', labelNames: ['group'], registers: r }),
    active: new Gauge({ name: 'sluice_lag_monitor_active', help: '1 on the lag monitor holding the lease (the one exporting lag), 0 on the others', registers: r }),
    pollSeconds: new Gauge({ name: 'sluice_lag_monitor_scrape_seconds', help: 'Duration of the active lag monitor\'s last poll of Kafka (offsets, members and record timestamps), failed or not', registers: r }),
    kafkaRequests: new Counter({ name: 'sluice_lag_monitor_kafka_requests_total', help: 'Requests the lag monitor sent to Kafka (admin and record reader)', registers: r }),
    pollFailures: new Counter({ name: 'sluice_lag_monitor_poll_failures_total', help: 'Lag monitor polls that failed, by what failed (kafka: lag series dropped; redis: backlog and waiting-run series dropped)', labelNames: ['source'], registers: r }),
    backlogRuns: new Gauge({ name: 'sluice_admission_backlog_runs', help: 'Admitted-but-unfinished runs, cluster-wide, from the admission backlog in Redis', labelNames: ['tenant', 'class'], registers: r }),
    backlogOldestAge: new Gauge({ name: 'sluice_admission_backlog_oldest_age_seconds', help: 'Age of the oldest admitted-but-unfinished run (0 when there is none)', labelNames: ['tenant', 'class'], registers: r }),
    runsWaitingDependency: new Gauge({ name: 'sluice_runs_waiting_dependency', help: 'Runs whose latest status is waiting_dependency (held in a processor or waiting in the retry topic), cluster-wide, as the status sink recorded them', labelNames: ['tenant', 'class'], registers: r }),
    retryTopicDepth: new Gauge({ name: RETRY_DEPTH, help: 'Records in the retry topic not yet forwarded (high watermark − retry forwarder committed offset, summed over partitions)', registers: r }),
  };
}

export type LagMetrics = ReturnType<typeof createLagMetrics>;

/** Replaces the lag series with a report's: partitions and groups no longer reported disappear. */
export function showLagReport(m: LagMetrics, report: LagReport, retryGroup: string): void {
  clearLagSeries(m);
  m.registry.registerMetric(m.retryTopicDepth);
  for (const g of report.groups) {
    m.groupStatus.set({ group: g.group }, STATUS_CODE[g.status]);
    m.groupMembers.set({ group: g.group }, g.members);
    for (const p of g.partitions) {
      const labels = { group: g.group, topic: p.topic, partition: String(p.partition) };
      m.lagMessages.set(labels, Number(p.lagMessages));
      m.lagSeconds.set(labels, p.lagSeconds);
      m.partitionStatus.set(labels, STATUS_CODE[p.status]);
    }
    if (g.group === retryGroup) m.retryTopicDepth.set(Number(g.lagMessages));
  }
}

/**
 * Drops every lag series. The retry-topic depth has no labels, and prom-client renders a gauge
 * without labels even when reset (as 0, which would read as fresh): it leaves the registry instead.
 */
export function clearLagSeries(m: LagMetrics): void {
  for (const g of [m.lagMessages, m.lagSeconds, m.partitionStatus, m.groupStatus, m.groupMembers, m.retryTopicDepth]) g.reset();
  if (m.registry.getSingleMetric(RETRY_DEPTH)) m.registry.removeSingleMetric(RETRY_DEPTH);
}

export function showClusterRuns(m: LagMetrics, backlog: readonly BacklogCount[], waiting: readonly { tenant: string; runClass: RunClass; runs: number }[], now: number): void {
  clearClusterSeries(m);
  for (const b of backlog) {
    const labels = { tenant: b.tenant, class: b.runClass };
    m.backlogRuns.set(labels, b.runs);
    m.backlogOldestAge.set(labels, b.oldestAdmittedAt === undefined ? 0 : Math.max(0, now - b.oldestAdmittedAt) / 1000);
  }
  for (const w of waiting) m.runsWaitingDependency.set({ tenant: w.tenant, class: w.runClass }, w.runs);
}

export function clearClusterSeries(m: LagMetrics): void {
  for (const g of [m.backlogRuns, m.backlogOldestAge, m.runsWaitingDependency]) g.reset();
}
