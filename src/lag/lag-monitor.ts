import { randomBytes } from 'node:crypto';
import type { RedisClient } from '../redis/client.js';
import type { Admin, Kafka } from 'kafkajs';
import { readBacklog } from '../admission/backlog-census.js';
import type { SluiceConfig } from '../config/schema.js';
import { RUN_CLASSES } from '../events/schemas.js';
import { consumerGroups, groupId } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { PermitStore } from '../permits/permit-store.js';
import type { RedisKeys } from '../redis/keys.js';
import { WaitingRuns } from '../status/waiting-runs.js';
import { withTimeout } from '../util/with-timeout.js';
import { LagWindows, type LagReport } from './lag-report.js';
import { MIN_SAMPLES } from './lag-status.js';
import { clearClusterSeries, clearLagSeries, showClusterRuns, showLagReport, type LagMetrics } from './lag-metrics.js';
import { MonitorLease, monitorScope } from './monitor-lease.js';
import { OffsetsReader } from './offsets-reader.js';
import { RecordReader } from './record-reader.js';

export interface LagMonitorDeps {
  config: SluiceConfig;
  kafka: Kafka;
  redis: RedisClient;
  keys: RedisKeys;
  permits: Pick<PermitStore, 'tryAcquire' | 'renew' | 'release'>;
  metrics: LagMetrics;
  logger: Logger;
  /** Names this instance in its lease token, report and reader group. */
  instance: string;
}

/** What the active monitor leaves in Redis for `sluice lag`: its last report and who made it. */
export interface PublishedReport extends LagReport {
  instance: string;
}

/** The active monitor's last report, or why there is none (`sluice lag` and the console read it). */
export async function readPublishedReport(redis: Pick<RedisClient, 'get'>, keys: Pick<RedisKeys, 'lagReport'>): Promise<PublishedReport | string> {
  const text = await redis.get(keys.lagReport());
  if (text === null) return 'no active lag monitor';
  const report = JSON.parse(text) as PublishedReport;
  return Array.isArray(report.groups) ? report : 'the lag monitor report in Redis is not one this version reads';
}

/** A failure logged when a streak of them starts, and its end when it ends: not once per poll. */
class FailureStreak {
  private failing = false;

  constructor(
    private readonly log: Logger,
    private readonly what: string,
  ) {}

  failed(err: unknown): void {
    if (!this.failing) this.log.warn({ err }, `${this.what} failed; logged again only after it worked`);
    this.failing = true;
  }

  worked(): void {
    if (this.failing) this.log.info(`${this.what} works again`);
    this.failing = false;
  }
}

/**
 * The lag-monitor role. Every instance running it competes for one lease (MonitorLease); the
 * holder polls every `lagMonitor.intervalMs`: it reads every Sluice group's offsets and members,
 * the timestamps of the records at their committed offsets, and the cluster-wide run counts in
 * Redis, and exports them. The others only keep trying to take the lease, and export
 * `sluice_lag_monitor_active 0` and nothing else, so no series is counted twice. A poll that
 * fails drops the series it would have refreshed (never stale values shown as fresh).
 */
export class LagMonitor {
  private readonly cfg: SluiceConfig['lagMonitor'];
  private readonly log: Logger;
  private readonly lease: MonitorLease;
  private readonly admin: Admin;
  private readonly offsets: OffsetsReader;
  private readonly waiting: WaitingRuns;
  private readonly retryGroup: string;
  private windows: LagWindows;
  private reader: RecordReader | undefined;
  /** The admin client's connection, made while active only (a standby holds no Kafka connection). */
  private connected: Promise<void> | undefined;
  private active = false;
  private stopped = false;
  private leaseTimer: NodeJS.Timeout | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private polling: Promise<void> = Promise.resolve();
  private refreshing: Promise<void> = Promise.resolve();
  private readonly streaks: Record<'lease' | 'kafka' | 'redis' | 'report', FailureStreak>;

  constructor(private readonly deps: LagMonitorDeps) {
    const { config, metrics } = deps;
    this.cfg = config.lagMonitor;
    this.log = deps.logger.child({ role: 'lag-monitor' });
    this.lease = new MonitorLease(deps.permits, monitorScope(deps.keys), { ttlMs: this.cfg.leaseMs, owner: `lag-monitor:${deps.instance}` });
    this.admin = deps.kafka.admin();
    this.admin.on(this.admin.events.REQUEST, () => metrics.kafkaRequests.inc());
    this.offsets = new OffsetsReader(this.admin, consumerGroups(config.namespace), this.cfg.requestTimeoutMs);
    this.waiting = new WaitingRuns(deps.redis, deps.keys, config.admission.leaseGraceMs);
    this.retryGroup = groupId(config.namespace, 'retry-forwarder');
    this.windows = this.newWindows();
    this.streaks = {
      lease: new FailureStreak(this.log, 'taking or renewing the lag monitor lease in Redis'),
      kafka: new FailureStreak(this.log, 'reading consumer lag from Kafka'),
      redis: new FailureStreak(this.log, 'reading the admission backlog and waiting runs from Redis'),
      report: new FailureStreak(this.log, 'publishing the lag report to Redis'),
    };
    metrics.active.set(0);
    clearLagSeries(metrics);
    clearClusterSeries(metrics);
  }

  async start(): Promise<void> {
    await this.refreshLease();
    this.schedulePoll(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.leaseTimer);
    clearTimeout(this.pollTimer);
    // A refresh in flight may still take the lease: it must land before the release.
    await Promise.all([this.polling, this.refreshing]);
    await this.deactivate();
    // Handing over at once rather than after the lease lapses; a failure leaves it to lapse.
    await this.lease.release().catch((err: unknown) => this.log.warn({ err }, 'could not release the lag monitor lease; it lapses on its own'));
  }

  private newWindows(): LagWindows {
    return new LagWindows({ windowMs: this.cfg.windowMs, minSamples: MIN_SAMPLES });
  }

  private refreshLease(): Promise<void> {
    this.refreshing = this.refreshLeaseOnce();
    return this.refreshing;
  }

  private async refreshLeaseOnce(): Promise<void> {
    try {
      await this.lease.refresh();
      this.streaks.lease.worked();
    } catch (err) {
      this.streaks.lease.failed(err);
    }
    if (this.stopped) return;
    if (this.lease.held && !this.active) this.activate();
    else if (!this.lease.held && this.active) await this.deactivate();
    this.leaseTimer = setTimeout(() => void this.refreshLease(), Math.max(1, Math.floor(this.cfg.leaseMs / 3)));
  }

  private activate(): void {
    this.active = true;
    this.windows = this.newWindows();
    this.deps.metrics.active.set(1);
    this.log.info({ instance: this.deps.instance }, 'this instance is the active lag monitor');
  }

  private async deactivate(): Promise<void> {
    const wasActive = this.active;
    this.active = false;
    this.deps.metrics.active.set(0);
    clearLagSeries(this.deps.metrics);
    clearClusterSeries(this.deps.metrics);
    const [reader, connected] = [this.reader, this.connected];
    this.reader = undefined;
    this.connected = undefined;
    // Bounded: leaving the reader's group waits on Kafka, and the lease loop waits on this.
    const bounded = (p: Promise<void>, what: string) => withTimeout(p, this.cfg.requestTimeoutMs, what).catch((err: unknown) => this.log.warn({ err }, `${what} failed`));
    if (reader) await bounded(reader.stop(), 'stopping the record reader');
    if (connected) await bounded(this.admin.disconnect(), 'disconnecting the lag monitor from Kafka');
    if (wasActive && !this.stopped) this.log.warn('lost the lag monitor lease; another instance exports lag now');
  }

  private schedulePoll(delayMs: number): void {
    this.pollTimer = setTimeout(() => {
      const started = Date.now();
      this.polling = this.poll().finally(() => {
        if (!this.stopped) this.schedulePoll(Math.max(0, this.cfg.intervalMs - (Date.now() - started)));
      });
    }, delayMs);
  }

  private async poll(): Promise<void> {
    if (!this.lease.held) {
      if (this.active) await this.deactivate();
      return;
    }
    await Promise.all([this.pollKafka(), this.pollRedis()]);
  }

  private async pollKafka(): Promise<void> {
    const { metrics } = this.deps;
    const started = performance.now();
    const deadline = Date.now() + this.cfg.requestTimeoutMs;
    try {
      await this.connectAdmin();
      const reading = await this.offsets.read();
      this.windows.record(reading);
      const timestamps = await this.recordReader().timestamps(this.windows.recordRequests(reading), Math.max(0, deadline - Date.now()));
      const report = this.windows.report(reading, timestamps);
      metrics.pollSeconds.set((performance.now() - started) / 1000);
      // The lease may have lapsed during the poll: then another instance exports, and this one must not.
      if (!this.lease.held || this.stopped) return;
      showLagReport(metrics, report, this.retryGroup);
      this.streaks.kafka.worked();
      await this.publish(report);
    } catch (err) {
      metrics.pollSeconds.set((performance.now() - started) / 1000);
      metrics.pollFailures.inc({ source: 'kafka' });
      clearLagSeries(metrics);
      this.streaks.kafka.failed(err);
    }
  }

  private connectAdmin(): Promise<void> {
    this.connected ??= withTimeout(this.admin.connect(), this.cfg.requestTimeoutMs, 'connecting the lag monitor to Kafka').catch((err: unknown) => {
      this.connected = undefined;
      throw err;
    });
    return this.connected;
  }

  /** The record reader, started on first use; until it has joined its group, time lag is interpolated. */
  private recordReader(): RecordReader {
    if (this.reader) return this.reader;
    const { config, kafka, metrics } = this.deps;
    const reader = new RecordReader({
      kafka,
      groupId: `${config.namespace}sluice.lag-monitor.reader.${this.deps.instance}.${randomBytes(4).toString('hex')}`,
      topics: [...new Set(consumerGroups(config.namespace).flatMap((g) => g.topics))],
      sessionTimeoutMs: config.kafka.sessionTimeoutMs,
      heartbeatIntervalMs: config.kafka.heartbeatIntervalMs,
      logger: this.log,
      onRequest: () => metrics.kafkaRequests.inc(),
    });
    this.reader = reader;
    reader.start().catch((err: unknown) => {
      this.log.warn({ err }, 'the record reader could not start; time lag is interpolated until it does');
      if (this.reader === reader) this.reader = undefined;
      void reader.stop().catch(() => undefined);
    });
    return reader;
  }

  private async pollRedis(): Promise<void> {
    const { config, redis, keys, metrics } = this.deps;
    const tenants = Object.keys(config.tenants);
    try {
      const now = Date.now();
      const [backlog, waiting] = await withTimeout(Promise.all([readBacklog(redis, keys, tenants, now), this.waiting.counts(tenants, RUN_CLASSES, now)]), this.cfg.requestTimeoutMs, 'reading the backlog from Redis');
      if (!this.lease.held || this.stopped) return;
      showClusterRuns(metrics, backlog, waiting, now);
      this.streaks.redis.worked();
    } catch (err) {
      metrics.pollFailures.inc({ source: 'redis' });
      clearClusterSeries(metrics);
      this.streaks.redis.failed(err);
    }
  }

  /** Leaves the report for `sluice lag`, expiring after three polls so a dead monitor's is not read as current. */
  private async publish(report: LagReport): Promise<void> {
    const published: PublishedReport = { ...report, instance: this.deps.instance };
    try {
      await this.deps.redis.set(this.deps.keys.lagReport(), JSON.stringify(published), 'PX', 3 * this.cfg.intervalMs);
      this.streaks.report.worked();
    } catch (err) {
      this.streaks.report.failed(err);
    }
  }
}
