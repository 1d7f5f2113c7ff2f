import type { Consumer, EachBatchPayload, Kafka, KafkaMessage } from 'kafkajs';
import type { SluiceConfig } from '../config/schema.js';
import { writeIsolatingRejects, type RejectedRow, type WritePause } from '../db/isolated-write.js';
import { EventDecodeError, type EventCodec } from '../events/codec.js';
import { SUBJECTS, type RunStatusChanged } from '../events/schemas.js';
import { buildDeadLetter, deadLetterPoison, type DeadLetterSink } from '../dlq/dead-letter.js';
import { createSinkConsumer, waitInBatch } from '../kafka/client.js';
import { groupId, topicNames } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import type { RunStore } from './run-store.js';
import type { AdmissionStore } from '../admission/admission-store.js';
import { isTerminal } from './run-history.js';
import type { WaitingRuns } from './waiting-runs.js';

export interface StatusSinkDeps {
  kafka: Kafka;
  config: SluiceConfig;
  codec: EventCodec;
  store: Pick<RunStore, 'applyStatusEvents'>;
  backlog: Pick<AdmissionStore, 'release'>;
  /** The record of runs waiting for a dependency (sluice_runs_waiting_dependency). */
  waiting: Pick<WaitingRuns, 'record'>;
  deadLetters: DeadLetterSink;
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
  private readonly consumer: Consumer;
  private readonly group: string;
  private readonly log: Logger;

  constructor(private readonly deps: StatusSinkDeps) {
    this.group = groupId(deps.config.namespace, 'status-sink');
    this.log = deps.logger.child({ component: 'status-sink' });
    this.consumer = createSinkConsumer(deps.kafka, deps.config.kafka, this.group);
  }

  async start(): Promise<void> {
    await this.consumer.connect();
    await this.consumer.subscribe({ topics: [topicNames(this.deps.config.namespace).status], fromBeginning: true });
    await this.consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: 2,
      eachBatch: (payload) => this.onBatch(payload),
    });
  }

  async stop(): Promise<void> {
    await this.consumer.disconnect();
  }

  private async onBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { topic, partition } = batch;
    const max = this.deps.config.statusSink.batchSize;
    const stillOwned = () => isRunning() && !isStale();
    for (let start = 0; start < batch.messages.length; start += max) {
      const slice = batch.messages.slice(start, start + max);
      const records: StatusRecord[] = [];
      for (const message of slice) {
        try {
          records.push({ message, event: await this.deps.codec.decode<RunStatusChanged>(message.value, SUBJECTS.runStatusChanged) });
        } catch (err) {
          if (!(err instanceof EventDecodeError)) throw err;
          this.log.warn({ topic, partition, offset: message.offset, reason: err.reason }, 'undecodable status event sent to the DLQ');
          await deadLetterPoison(this.deps.deadLetters, { topic, partition, message }, this.group, err, this.deps.config.processor.produceTimeoutMs);
          this.deps.metrics.deadLettered.inc({ topic, reason: 'decode_error' });
        }
      }
      const written = await writeIsolatingRejects(records, { apply: (rows) => this.apply(rows), pause: (p) => this.pause(p, heartbeat, stillOwned) });
      if (written.outcome === 'abandoned') return;
      for (const rejected of written.rejected) await this.deadLetterRejected(topic, partition, rejected);
      const rejected = written.rejected.map((r) => r.item.event);
      await Promise.all([this.releaseFinished(written.results, true), this.releaseFinished(rejected, false), this.recordWaiting([...written.results, ...rejected])]);
      const last = slice[slice.length - 1]!.offset;
      resolveOffset(last);
      await this.consumer.commitOffsets([{ topic, partition, offset: String(Number(last) + 1) }]);
      await heartbeat();
    }
  }

  private async apply(records: readonly StatusRecord[]): Promise<RunStatusChanged[]> {
    const started = process.hrtime.bigint();
    const events = records.map((r) => r.event);
    await this.deps.store.applyStatusEvents(events);
    this.deps.metrics.statusEventsApplied.inc(events.length);
    this.deps.metrics.statusSinkBatchSeconds.observe(Number(process.hrtime.bigint() - started) / 1e9);
    return events;
  }

  private async pause(p: WritePause, heartbeat: () => Promise<void>, stillOwned: () => boolean): Promise<boolean> {
    this.deps.metrics.sinkWriteRetries.inc({ sink: 'status', cause: p.cause });
    const context = { err: p.error, attempt: p.attempt, waitMs: p.waitMs, events: p.rows };
    if (p.cause === 'systemic') this.log.error(context, 'Postgres refuses every status event of the batch, and not for their data (schema or deploy?); retrying');
    else this.log.error(context, 'could not write status events to Postgres; retrying');
    return waitInBatch(p.waitMs, heartbeat, stillOwned);
  }

  /**
   * An event Postgres will never take goes to the DLQ as it came (bytes, key, coordinates), with
   * the SQLSTATE and message, so it can be inspected and replayed into this topic once fixed.
   * Resolves only once the DLQ acknowledged it, so the offset may then be committed past it.
   */
  private async deadLetterRejected(topic: string, partition: number, { item, error }: RejectedRow<StatusRecord>): Promise<void> {
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
    await this.deps.deadLetters.publishDeadLetter(envelope, headers, this.deps.config.processor.produceTimeoutMs);
    this.deps.metrics.deadLettered.inc({ topic, reason: POSTGRES_REJECTED });
    this.deps.metrics.sinkPoison.inc({ sink: 'status', reason: POSTGRES_REJECTED });
    this.log.error({ topic, partition, offset: message.offset, runId: event.runId, sqlState: error.sqlState, err: error }, 'Postgres refused a status event for good; sent to the DLQ');
  }

  /** Best effort, like the backlog: an entry this misses lapses with its lease, one it fails to remove counts until then. */
  private async recordWaiting(events: readonly RunStatusChanged[]): Promise<void> {
    await this.deps.waiting.record(events).catch((err: unknown) => this.log.warn({ err }, 'could not record which runs wait for a dependency'));
  }

  /**
   * A terminal status frees the run's place in the admission backlog and feeds the measured
   * service rate. Best effort: if Redis is down the entry's lease (deadline + grace) frees it.
   * A terminal event Postgres refused still ends its run and frees the place, but its times are
   * suspect (a timestamp out of range is one reason to be refused), so it is not `measured`.
   */
  private async releaseFinished(events: readonly RunStatusChanged[], measured: boolean): Promise<void> {
    const finished = events.filter((e) => isTerminal(e.status));
    await Promise.all(
      finished.map((e) => {
        const executionMs = measured && e.status === 'completed' && e.attemptStartedAt !== null ? e.occurredAt - e.attemptStartedAt : undefined;
        return this.deps.backlog
          .release({ runId: e.runId, tenantId: e.tenantId, runClass: e.class }, executionMs)
          .catch((err: unknown) => this.log.warn({ err, runId: e.runId }, 'could not release a finished run from the backlog; its lease will expire'));
      }),
    );
  }
}
