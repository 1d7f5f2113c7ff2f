import type { Kafka, KafkaMessage } from 'kafkajs';
import type { SluiceConfig } from '../config/schema.js';
import { writeIsolatingRejects, type RejectedRow, type WritePause, type WrittenRows } from '../db/isolated-write.js';
import type { EventCodec } from '../events/codec.js';
import { SUBJECTS, type RunStatusChanged } from '../events/schemas.js';
import { buildDeadLetter, routePoison, type DeadLetterSink } from '../dlq/dead-letter.js';
import type { BatchConsumer } from '../kafka/batch-consumer.js';
import { createSinkConsumer, type SliceSource } from '../kafka/batch-sink.js';
import { groupId, topicNames } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import type { RunStore } from './run-store.js';
import { isTerminal } from './run-history.js';
import type { WaitingRuns } from './waiting-runs.js';

export interface StatusSinkDeps {
  kafka: Kafka;
  config: Pick<SluiceConfig, 'namespace' | 'kafka' | 'statusSink'>;
  codec: EventCodec;
  store: Pick<RunStore, 'applyStatusEvents'>;
  /** The record of runs waiting for a dependency (sluice_runs_waiting_dependency). */
  waiting: Pick<WaitingRuns, 'record'>;
  deadLetters: DeadLetterSink;
  /** Bounds each DLQ produce (poison, refused events). */
  deadLetterTimeoutMs: number;
  /**
   * Told of each terminal status once settled, before its offset is committed: `stored` is false
   * for one Postgres refused for good (dead-lettered), whose times are then suspect. Must not reject.
   */
  onTerminal: (event: RunStatusChanged, stored: boolean) => Promise<void>;
  logger: Logger;
  metrics: Metrics;
}

/** The `sluice-dlt-reason` of a status event Postgres refused for good. */
export const POSTGRES_REJECTED = 'postgres_rejected';

/** A decoded status event and the record it came in, whose bytes a dead letter carries. */
interface StatusRecord {
  message: KafkaMessage;
  event: RunStatusChanged;
}

/**
 * Consumes `sluice.runs.status` into Postgres. A batch is written in one transaction and its
 * offsets are committed only after that transaction commits; while Postgres is unavailable the
 * batch is retried with backoff (heartbeating meanwhile), so no event is ever skipped. An event
 * Postgres refuses for good is found by splitting the batch (writeIsolatingRejects) and sent to
 * the DLQ with its bytes; the others are written and the partition moves on.
 */
export class StatusSink {
  private readonly consumer: BatchConsumer;
  private readonly group: string;
  private readonly log: Logger;

  constructor(private readonly deps: StatusSinkDeps) {
    const { config } = deps;
    this.group = groupId(config.namespace, 'status-sink');
    this.log = deps.logger.child({ component: 'status-sink' });
    const poison = { deadLetters: deps.deadLetters, consumerGroup: this.group, timeoutMs: deps.deadLetterTimeoutMs, metrics: deps.metrics, log: this.log, logMessage: 'undecodable status event sent to the DLQ' };
    this.consumer = createSinkConsumer<StatusRecord, WrittenRows<StatusRecord, RunStatusChanged>>({
      kafka: deps.kafka,
      settings: config.kafka,
      groupId: this.group,
      topic: topicNames(config.namespace).status,
      log: this.log,
      metrics: deps.metrics,
      steps: {
        sink: 'status',
        batchSize: config.statusSink.batchSize,
        decode: async (message) => ({ message, event: await deps.codec.decode<RunStatusChanged>(message.value, SUBJECTS.runStatusChanged) }),
        poison: (record, err) => routePoison(poison, record, err),
        write: async (records, pause) => {
          const written = await writeIsolatingRejects(records, { apply: (rows) => this.apply(rows), pause });
          return written.outcome === 'abandoned' ? undefined : written;
        },
        settle: (written, at) => this.settle(written, at),
        onPause: (p) => this.onPause(p),
      },
    });
  }

  start(): Promise<void> {
    return this.consumer.start();
  }

  stop(): Promise<void> {
    return this.consumer.stop();
  }

  private async apply(records: readonly StatusRecord[]): Promise<RunStatusChanged[]> {
    const started = process.hrtime.bigint();
    const events = records.map((r) => r.event);
    await this.deps.store.applyStatusEvents(events);
    this.deps.metrics.statusEventsApplied.inc(events.length);
    this.deps.metrics.statusSinkBatchSeconds.observe(Number(process.hrtime.bigint() - started) / 1e9);
    return events;
  }

  private onPause(p: WritePause): void {
    const context = { err: p.error, attempt: p.attempt, waitMs: p.waitMs, events: p.rows };
    if (p.cause === 'systemic') this.log.error(context, 'Postgres refuses every status event of the batch, and not for their data (schema or deploy?); retrying');
    else this.log.error(context, 'could not write status events to Postgres; retrying');
  }

  private async settle(written: WrittenRows<StatusRecord, RunStatusChanged>, at: SliceSource): Promise<void> {
    for (const rejected of written.rejected) await this.deadLetterRejected(at, rejected);
    const terminal = (event: RunStatusChanged) => isTerminal(event.status);
    const rejected = written.rejected.map((r) => r.item.event);
    await Promise.all([
      ...written.results.filter(terminal).map((event) => this.deps.onTerminal(event, true)),
      ...rejected.filter(terminal).map((event) => this.deps.onTerminal(event, false)),
      this.recordWaiting([...written.results, ...rejected]),
    ]);
  }

  /** Best effort, like the backlog: an entry this misses lapses with its lease, one it fails to remove counts until then. */
  private async recordWaiting(events: readonly RunStatusChanged[]): Promise<void> {
    await this.deps.waiting.record(events).catch((err: unknown) => this.log.warn({ err }, 'could not record which runs wait for a dependency'));
  }

  /**
   * An event Postgres will never take goes to the DLQ as it came (bytes, key, coordinates), with
   * the SQLSTATE and message, so it can be inspected and replayed into this topic once fixed.
   * Resolves only once the DLQ acknowledged it, so the offset may then be committed past it.
   */
  private async deadLetterRejected({ topic, partition }: SliceSource, { item, error }: RejectedRow<StatusRecord>): Promise<void> {
    const { message, event } = item;
    const now = Date.now();
    const { envelope, headers } = buildDeadLetter({
      topic,
      partition,
      message,
      consumerGroup: this.group,
      reason: POSTGRES_REJECTED,
      error,
      attempts: 1,
      firstFailureAt: now,
      lastFailureAt: now,
      run: { runId: event.runId, tenantId: event.tenantId, workflow: event.workflow },
    });
    await this.deps.deadLetters.publishDeadLetter(envelope, headers, this.deps.deadLetterTimeoutMs);
    this.deps.metrics.deadLettered.inc({ topic, reason: POSTGRES_REJECTED });
    this.deps.metrics.sinkPoison.inc({ sink: 'status', reason: POSTGRES_REJECTED });
    this.log.error({ topic, partition, offset: message.offset, runId: event.runId, sqlState: error.sqlState, err: error }, 'Postgres refused a status event for good; sent to the DLQ');
  }
}
