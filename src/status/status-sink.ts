import type { Consumer, EachBatchPayload, Kafka } from 'kafkajs';
import type { SluiceConfig } from '../config/schema.js';
import { EventDecodeError, type EventCodec } from '../events/codec.js';
import { SUBJECTS, type RunStatusChanged } from '../events/schemas.js';
import { deadLetterPoison, type DeadLetterSink } from '../dlq/dead-letter.js';
import { createSinkConsumer } from '../kafka/client.js';
import { groupId, topicNames } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import type { RunStore } from './run-store.js';
import type { AdmissionStore } from '../admission/admission-store.js';
import { isTerminal } from './run-history.js';

export interface StatusSinkDeps {
  kafka: Kafka;
  config: SluiceConfig;
  codec: EventCodec;
  store: Pick<RunStore, 'applyStatusEvents'>;
  backlog: Pick<AdmissionStore, 'release'>;
  deadLetters: DeadLetterSink;
  logger: Logger;
  metrics: Metrics;
}

const MAX_BACKOFF_MS = 5_000;

/**
 * Consumes `sluice.runs.status` into Postgres. A batch is written in one transaction and its
 * offsets are committed only after that transaction commits; while Postgres is unavailable the
 * batch is retried with backoff (heartbeating meanwhile), so no event is ever skipped.
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
    for (let start = 0; start < batch.messages.length; start += max) {
      const slice = batch.messages.slice(start, start + max);
      const events: RunStatusChanged[] = [];
      for (const message of slice) {
        try {
          events.push(await this.deps.codec.decode<RunStatusChanged>(message.value, SUBJECTS.runStatusChanged));
        } catch (err) {
          if (!(err instanceof EventDecodeError)) throw err;
          this.log.warn({ topic, partition, offset: message.offset, reason: err.reason }, 'undecodable status event sent to the DLQ');
          await deadLetterPoison(this.deps.deadLetters, { topic, partition, message }, this.group, err, this.deps.config.processor.produceTimeoutMs);
          this.deps.metrics.deadLettered.inc({ topic, reason: 'decode_error' });
        }
      }
      const written = await this.writeWithRetry(events, heartbeat, () => isRunning() && !isStale());
      if (!written) return;
      await this.releaseFinished(events);
      const last = slice[slice.length - 1]!.offset;
      resolveOffset(last);
      await this.consumer.commitOffsets([{ topic, partition, offset: String(Number(last) + 1) }]);
      await heartbeat();
    }
  }

  /**
   * A terminal status frees the run's place in the admission backlog and feeds the measured
   * service rate. Best effort: if Redis is down the entry's lease (deadline + grace) frees it.
   */
  private async releaseFinished(events: readonly RunStatusChanged[]): Promise<void> {
    const finished = events.filter((e) => isTerminal(e.status));
    await Promise.all(
      finished.map((e) => {
        const executionMs = e.status === 'completed' && e.attemptStartedAt !== null ? e.occurredAt - e.attemptStartedAt : undefined;
        return this.deps.backlog
          .release({ runId: e.runId, tenantId: e.tenantId, runClass: e.class }, executionMs)
          .catch((err: unknown) => this.log.warn({ err, runId: e.runId }, 'could not release a finished run from the backlog; its lease will expire'));
      }),
    );
  }

  private async writeWithRetry(events: RunStatusChanged[], heartbeat: () => Promise<void>, stillOwned: () => boolean): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      const started = process.hrtime.bigint();
      try {
        await this.deps.store.applyStatusEvents(events);
        this.deps.metrics.statusEventsApplied.inc(events.length);
        this.deps.metrics.statusSinkBatchSeconds.observe(Number(process.hrtime.bigint() - started) / 1e9);
        return true;
      } catch (err) {
        const waitMs = Math.min(MAX_BACKOFF_MS, 100 * 2 ** attempt);
        this.log.error({ err, attempt, waitMs, events: events.length }, 'could not write status events to Postgres; retrying');
        await new Promise((r) => setTimeout(r, waitMs));
        await heartbeat();
        if (!stillOwned()) return false;
      }
    }
  }
}
