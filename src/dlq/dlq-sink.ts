import type { Kafka, KafkaMessage } from 'kafkajs';
import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig } from '../config/schema.js';
import { writeIsolatingRejects, type IsolatedWriteDeps, type RejectedRow, type WritePause } from '../db/isolated-write.js';
import { EventDecodeError, type EventCodec } from '../events/codec.js';
import { SUBJECTS, type DeadLetterEnvelope, type RunRequested, type RunStatusChanged } from '../events/schemas.js';
import type { BatchConsumer } from '../kafka/batch-consumer.js';
import { createSinkConsumer, type SliceSource } from '../kafka/batch-sink.js';
import { headerRecord } from '../kafka/headers.js';
import { carriesRuns, groupId, topicNames, type TopicNames } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { deadLetteredSequence } from '../runs/status-sequence.js';
import { DLQ_HEADER, reasonLabel } from './dead-letter.js';
import type { ArchivedDeadLetter, DeadLetterStore } from './dead-letter-store.js';

export interface DlqSinkDeps {
  kafka: Kafka;
  config: SluiceConfig;
  codec: EventCodec;
  store: {
    archive: DeadLetterStore['archive'];
    purge(olderThan: Date): Promise<number>;
    countByStatus(): Promise<Partial<Record<'pending' | 'replayed' | 'discarded', number>>>;
  };
  publishStatus: (event: RunStatusChanged) => Promise<void>;
  logger: Logger;
  metrics: Metrics;
  now?: () => number;
}

const STATUS_PUBLISH_TRIES = 3;
const GAUGE_REFRESH_MS = 15_000;

/** `sluice-dlt-reason` values the sink gives the rows it writes for records it cannot archive as they are. */
export const RAW_ROW_REASON = {
  /** The record does not decode as a DeadLetter envelope. */
  undecodable: 'undecodable_dead_letter',
  /** Postgres refused the envelope's row for good (a run id that is no UUID, a time out of range). */
  unarchivable: 'unarchivable',
} as const;

/** The latest time JavaScript can represent; Postgres goes further, so anything from 1970 to it fits. */
const MAX_DATE_MS = 8.64e15;

/** When Kafka says the record was written, if that is a time Postgres can store; `now` otherwise. */
function recordTime(message: Pick<KafkaMessage, 'timestamp'>, now: number): number {
  const at = Number(message.timestamp);
  return Number.isFinite(at) && at >= 0 && at <= MAX_DATE_MS ? at : now;
}

/**
 * A DLQ record archived as itself: the DLQ topic's own coordinates and its raw bytes (the
 * envelope, with the original record inside), so nothing that failed is ever skipped. For a record
 * that does not decode, and for one whose row Postgres refused.
 */
export function rawRecordRow(topic: string, partition: number, message: KafkaMessage, consumerGroup: string, reason: string, error: Error, now: number): ArchivedDeadLetter {
  const at = recordTime(message, now);
  return {
    originalTopic: topic,
    originalPartition: partition,
    originalOffset: message.offset,
    originalKey: message.key ?? null,
    consumerGroup,
    tenantId: null,
    workflow: null,
    runId: null,
    reason,
    payload: message.value ?? Buffer.alloc(0),
    payloadJson: null,
    headers: headerRecord(message.headers),
    errorClass: error.name,
    errorMessage: error.message.slice(0, 1_000),
    errorStack: null,
    attempts: 0,
    firstFailedAt: at,
    failedAt: at,
  };
}

/**
 * A DLQ record as its envelope and, when the original bytes are a run Sluice wrote, that run. The
 * payload is decoded as a run only when it was read from a topic that carries runs (`carriesRuns`):
 * a record refused by the ingress is whatever its producer wrote, and decoding it as a run would let
 * anyone who can write the ingress topic name another tenant's run and have its status written.
 * Only bytes that can never decode count as undecodable; a schema registry that cannot answer now
 * rejects, so the sink retries the batch instead of archiving a readable dead letter as raw bytes.
 */
export async function decodeDeadLetter(
  codec: Pick<EventCodec, 'decode'>,
  message: Pick<KafkaMessage, 'value'>,
  topics: TopicNames,
): Promise<{ envelope: DeadLetterEnvelope; run: RunRequested | null } | { undecodable: EventDecodeError }> {
  let envelope: DeadLetterEnvelope;
  try {
    envelope = await codec.decode<DeadLetterEnvelope>(message.value, SUBJECTS.deadLetter);
  } catch (err) {
    if (err instanceof EventDecodeError) return { undecodable: err };
    throw err;
  }
  if (!carriesRuns(envelope.originalTopic, topics)) return { envelope, run: null };
  try {
    return { envelope, run: await codec.decode<RunRequested>(envelope.payload, SUBJECTS.runRequested) };
  } catch (err) {
    // Poison: the original bytes never decoded, which is why they are here.
    if (err instanceof EventDecodeError) return { envelope, run: null };
    throw err;
  }
}

/** An envelope as an archive row; the original record is decoded when it is a run (poison is not). */
export function archiveRow(envelope: DeadLetterEnvelope, headers: Record<string, string>, run: RunRequested | null): ArchivedDeadLetter {
  return {
    originalTopic: envelope.originalTopic,
    originalPartition: envelope.originalPartition,
    originalOffset: envelope.originalOffset,
    originalKey: envelope.originalKey,
    consumerGroup: envelope.consumerGroup,
    tenantId: envelope.tenantId,
    workflow: envelope.workflow,
    runId: envelope.runId,
    reason: headers[DLQ_HEADER.reason] ?? 'unknown',
    payload: envelope.payload,
    payloadJson: run,
    headers,
    errorClass: envelope.errorClass,
    errorMessage: envelope.errorMessage,
    errorStack: envelope.errorStack,
    attempts: envelope.attempts,
    firstFailedAt: envelope.firstFailureAt,
    failedAt: envelope.lastFailureAt,
  };
}

export interface ArchiveOutcome<E> {
  /** Rows newly archived, as they are or in minimal form. */
  fresh: ArchivedDeadLetter[];
  /** Entries Postgres refused, archived in minimal form instead; with the refusal. */
  unarchivable: RejectedRow<E>[];
  /** Minimal entries Postgres refused too: not archived at all; with that refusal. */
  skipped: RejectedRow<E>[];
}

/**
 * Pure policy over `write`: archives the entries, each refused one in its minimal form instead
 * (`minimalOf`), and gives up on an entry only when even that is refused, so nothing holds the
 * partition. Undefined when the caller gave up waiting for Postgres.
 */
export async function archiveWithFallback<E>(entries: readonly E[], write: IsolatedWriteDeps<E, ArchivedDeadLetter>, minimalOf: (refused: RejectedRow<E>) => E): Promise<ArchiveOutcome<E> | undefined> {
  const full = await writeIsolatingRejects(entries, write);
  if (full.outcome === 'abandoned') return undefined;
  if (full.rejected.length === 0) return { fresh: full.results, unarchivable: [], skipped: [] };
  const fallbacks = full.rejected.map((refused) => ({ refused, minimal: minimalOf(refused) }));
  // The same statement wrote rows of this batch: a minimal row it refuses is at fault itself.
  const minimal = await writeIsolatingRejects(fallbacks.map((f) => f.minimal), write, { provenSound: full.wroteSome });
  if (minimal.outcome === 'abandoned') return undefined;
  const skipped = new Set(minimal.rejected.map((r) => r.item));
  return {
    fresh: [...full.results, ...minimal.results],
    unarchivable: fallbacks.filter((f) => !skipped.has(f.minimal)).map((f) => f.refused),
    skipped: minimal.rejected,
  };
}

/** A DLQ record and the row it is archived as. */
interface DlqEntry {
  message: KafkaMessage;
  row: ArchivedDeadLetter;
}

/**
 * Where dead letters come to rest: consumes `sluice.runs.dlq` into Postgres `dead_letter_events`,
 * a batch per statement, idempotent on the original record's coordinates. Offsets are committed
 * only after the insert commits; while Postgres is down the batch is retried with backoff
 * (heartbeating meanwhile), so nothing is skipped. Each newly archived run is then reported
 * `dead_lettered`.
 *
 * The sink cannot dead-letter to itself: a row Postgres refuses for good (found by splitting the
 * batch, writeIsolatingRejects) is archived in minimal form instead, as the DLQ record itself
 * (`rawRecordRow`, reason `unarchivable`), which stays replayable. Should even that be refused,
 * the record is skipped rather than stall the partition, never silently: it is counted
 * (`sluice_sink_poison_total{sink="dlq",reason="not_archived"}`) and logged with the coordinates
 * where its bytes remain in Kafka until retention.
 */
export class DlqSink {
  private readonly consumer: BatchConsumer;
  private readonly group: string;
  private readonly log: Logger;
  private readonly topics: TopicNames;
  private readonly now: () => number;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(private readonly deps: DlqSinkDeps) {
    const { config } = deps;
    this.group = groupId(config.namespace, 'dlq-sink');
    this.topics = topicNames(config.namespace);
    this.log = deps.logger.child({ component: 'dlq-sink' });
    this.now = deps.now ?? Date.now;
    this.consumer = createSinkConsumer<DlqEntry, ArchivedDeadLetter[]>({
      kafka: deps.kafka,
      settings: config.kafka,
      groupId: this.group,
      topic: this.topics.dlq,
      log: this.log,
      metrics: deps.metrics,
      steps: {
        sink: 'dlq',
        batchSize: config.dlqSink.batchSize,
        decode: async (message, at) => ({ message, row: await this.toRow(at, message) }),
        write: (entries, pause, at) => this.archive(at, entries, { apply: (rows) => deps.store.archive(rows.map((e) => e.row)), pause }),
        settle: async (fresh) => {
          this.count(fresh);
          await this.reportDeadLettered(fresh);
        },
        onPause: (p) => this.onPause(p),
      },
    });
  }

  async start(): Promise<void> {
    await this.consumer.start();
    const { purgeIntervalMs } = this.deps.config.dlqSink;
    this.timers.push(setInterval(() => void this.purge(), purgeIntervalMs), setInterval(() => void this.refreshGauge(), GAUGE_REFRESH_MS));
    for (const t of this.timers) t.unref();
    void this.refreshGauge();
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    await this.consumer.stop();
  }

  private async toRow({ topic, partition }: SliceSource, message: KafkaMessage): Promise<ArchivedDeadLetter> {
    const decoded = await decodeDeadLetter(this.deps.codec, message, this.topics);
    if ('undecodable' in decoded) {
      this.log.error({ err: decoded.undecodable, topic, partition, offset: message.offset }, 'undecodable DLQ record: archived as raw bytes');
      return rawRecordRow(topic, partition, message, this.group, RAW_ROW_REASON.undecodable, decoded.undecodable, this.now());
    }
    return archiveRow(decoded.envelope, headerRecord(message.headers), decoded.run);
  }

  /** Archives the entries; resolves to the rows that were new, or undefined when the partition was lost meanwhile. */
  private async archive({ topic, partition }: SliceSource, entries: readonly DlqEntry[], write: IsolatedWriteDeps<DlqEntry, ArchivedDeadLetter>): Promise<ArchivedDeadLetter[] | undefined> {
    const minimalOf = ({ item: { message }, error }: RejectedRow<DlqEntry>) => ({ message, row: rawRecordRow(topic, partition, message, this.group, RAW_ROW_REASON.unarchivable, error, this.now()) });
    const archived = await archiveWithFallback(entries, write, minimalOf);
    if (!archived) return undefined;
    for (const { item, error } of archived.unarchivable) {
      this.deps.metrics.sinkPoison.inc({ sink: 'dlq', reason: RAW_ROW_REASON.unarchivable });
      this.log.error({ topic, partition, offset: item.message.offset, sqlState: error.sqlState, err: error }, 'Postgres refused a dead letter for good; archived the DLQ record itself instead');
    }
    for (const { item, error } of archived.skipped) {
      this.deps.metrics.sinkPoison.inc({ sink: 'dlq', reason: 'not_archived' });
      this.log.error(
        { topic, partition, offset: item.message.offset, sqlState: error.sqlState, err: error },
        'a dead letter could not be archived even as its raw bytes: skipped so the partition flows; its bytes stay in Kafka at these coordinates until retention',
      );
    }
    return archived.fresh;
  }

  private onPause(p: WritePause): void {
    this.deps.metrics.dlqArchiveFailures.inc();
    const context = { err: p.error, attempt: p.attempt, waitMs: p.waitMs, rows: p.rows };
    if (p.cause === 'systemic') this.log.error(context, 'Postgres refuses every dead letter of the batch, and not for their data (schema or deploy?); retrying');
    else this.log.error(context, 'could not archive dead letters in Postgres; retrying');
  }

  private count(rows: readonly ArchivedDeadLetter[]): void {
    const now = this.now();
    for (const r of rows) {
      // Label values come from config, never from record data: an unknown tenant is "unknown".
      const tenant = r.tenantId !== null && ownEntry(this.deps.config.tenants, r.tenantId) ? r.tenantId : 'unknown';
      this.deps.metrics.dlqArchived.inc({ tenant, reason: reasonLabel(r.reason) });
      this.deps.metrics.dlqArchiveLag.observe(Math.max(0, now - r.failedAt) / 1000);
    }
  }

  /**
   * Informative: a run whose `dead_lettered` status is lost still reads `failed`, which is true.
   * Only rows archived with a run (`decodeDeadLetter`: read from a topic that carries runs) report one.
   */
  private async reportDeadLettered(rows: readonly ArchivedDeadLetter[]): Promise<void> {
    for (const r of rows) {
      const run = r.payloadJson as RunRequested | null;
      if (!run) continue;
      const event: RunStatusChanged = {
        runId: run.runId,
        tenantId: run.tenantId,
        workflow: run.workflow,
        class: run.class,
        admittedAt: run.admittedAt,
        deadline: run.deadline,
        attempt: run.attempt,
        traceparent: run.traceparent,
        sequence: deadLetteredSequence(run.attempt),
        status: 'dead_lettered',
        occurredAt: this.now(),
        message: `dead_lettered: archived for inspection and replay (reason ${r.reason}, after ${r.attempts} attempt(s))`,
        step: null,
        result: null,
        // The failure stays readable after archiving: the run row takes the newest event's error.
        error: { code: r.errorClass, message: r.errorMessage, retryable: r.reason !== 'non_retryable' },
        attemptStartedAt: null,
      };
      for (let attempt = 1; attempt <= STATUS_PUBLISH_TRIES; attempt++) {
        try {
          await this.deps.publishStatus(event);
          break;
        } catch (err) {
          this.log.warn({ err, runId: run.runId, attempt }, 'could not publish a dead_lettered status');
        }
      }
    }
  }

  private async purge(): Promise<void> {
    const olderThan = new Date(this.now() - this.deps.config.dlqSink.retentionDays * 86_400_000);
    try {
      const purged = await this.deps.store.purge(olderThan);
      if (purged > 0) this.log.info({ purged, olderThan }, 'purged replayed and discarded dead letters past retention');
    } catch (err) {
      this.log.warn({ err }, 'could not purge the DLQ archive; will try at the next interval');
    }
  }

  private async refreshGauge(): Promise<void> {
    try {
      const counts = await this.deps.store.countByStatus();
      for (const status of ['pending', 'replayed', 'discarded'] as const) this.deps.metrics.dlqRows.set({ status }, counts[status] ?? 0);
    } catch (err) {
      this.log.warn({ err }, 'could not count DLQ archive rows');
    }
  }
}
