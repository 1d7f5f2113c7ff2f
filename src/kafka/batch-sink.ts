import type { EachBatchPayload, KafkaMessage } from 'kafkajs';
import type { WritePause } from '../db/isolated-write.js';
import { EventDecodeError } from '../events/codec.js';
import type { Metrics } from '../obs/metrics.js';
import { createBatchConsumer, type BatchConsumer, type BatchConsumerOptions } from './batch-consumer.js';

/** What the loop uses of a kafkajs batch, so a fake partition can drive it. */
export type PartitionBatch = Pick<EachBatchPayload, 'resolveOffset' | 'heartbeat' | 'isRunning' | 'isStale'> & {
  batch: { topic: string; partition: number; messages: KafkaMessage[] };
};

/** The partition a slice comes from. */
export interface SliceSource {
  topic: string;
  partition: number;
}

/** What a sink does with its records; the loop around it is the same for every sink. */
export interface SinkSteps<T, W> {
  /** The `sink` label of `sluice_sink_write_retries_total`. */
  sink: 'status' | 'dlq';
  /** Records per write. */
  batchSize: number;
  /** A record as the row to write. An EventDecodeError makes it poison: handed to `poison` and skipped. */
  decode(message: KafkaMessage, at: SliceSource): Promise<T>;
  /** Parks a poison record; resolves once it is safe to commit past it. Absent: decode errors propagate. */
  poison?(record: SliceSource & { message: KafkaMessage }, error: EventDecodeError): Promise<void>;
  /**
   * Writes the rows, setting aside the ones Postgres refuses for good (writeIsolatingRejects) and
   * waiting out every other failure through `pause`; undefined once `pause` said to give up.
   */
  write(rows: readonly T[], pause: (p: WritePause) => Promise<boolean>, at: SliceSource): Promise<W | undefined>;
  /** What a written slice causes before its offsets are committed: refused rows handled, runs reported. */
  settle(written: W, at: SliceSource): Promise<void>;
  /** Logs why the write waits, before each pause. */
  onPause(p: WritePause): void;
}

/** A wait inside a batch: heartbeats after it so the group keeps the partition here, and resolves whether it still does. */
export async function waitInBatch(ms: number, heartbeat: () => Promise<void>, stillOwned: () => boolean): Promise<boolean> {
  await new Promise((r) => setTimeout(r, ms));
  await heartbeat();
  return stillOwned();
}

/**
 * One batch of a partition into a sink, a slice (`batchSize`) at a time: decode, park poison,
 * write, settle, then commit past the slice. A write Postgres cannot take now is retried with
 * backoff, heartbeating, for as long as the partition is still this consumer's; once it is not
 * (revoked, stopping, or the batch went stale) the loop gives up without committing, and the new
 * owner reads the slice again. So nothing is skipped, and nothing is committed before it is
 * written or set aside.
 */
export async function sinkBatch<T, W>(payload: PartitionBatch, steps: SinkSteps<T, W>, consumer: Pick<BatchConsumer, 'commitPast'>, metrics: Pick<Metrics, 'sinkWriteRetries'>): Promise<void> {
  const { batch, resolveOffset, heartbeat, isRunning, isStale } = payload;
  const { topic, partition } = batch;
  const at: SliceSource = { topic, partition };
  const stillOwned = () => isRunning() && !isStale();
  const pause = (p: WritePause) => {
    metrics.sinkWriteRetries.inc({ sink: steps.sink, cause: p.cause });
    steps.onPause(p);
    return waitInBatch(p.waitMs, heartbeat, stillOwned);
  };
  for (let start = 0; start < batch.messages.length; start += steps.batchSize) {
    if (!stillOwned()) return;
    const slice = batch.messages.slice(start, start + steps.batchSize);
    const rows: T[] = [];
    for (const message of slice) {
      try {
        rows.push(await steps.decode(message, at));
      } catch (err) {
        if (!(err instanceof EventDecodeError) || !steps.poison) throw err;
        await steps.poison({ topic, partition, message }, err);
      }
    }
    const written = await steps.write(rows, pause, at);
    if (written === undefined) return;
    await steps.settle(written, at);
    const last = slice[slice.length - 1]!.offset;
    resolveOffset(last);
    await consumer.commitPast(topic, partition, last);
    await heartbeat();
  }
}

export interface SinkConsumerOptions<T, W> extends Pick<BatchConsumerOptions, 'kafka' | 'settings' | 'groupId' | 'log'> {
  topic: string;
  steps: SinkSteps<T, W>;
  metrics: Pick<Metrics, 'sinkWriteRetries'>;
}

/** A sink's consumer: its topic through `sinkBatch`, two partitions at a time, short fetch waits. */
export function createSinkConsumer<T, W>(opts: SinkConsumerOptions<T, W>): BatchConsumer {
  const consumer = createBatchConsumer({
    kafka: opts.kafka,
    settings: opts.settings,
    groupId: opts.groupId,
    log: opts.log,
    topics: [opts.topic],
    maxWaitTimeInMs: 250,
    partitionsConsumedConcurrently: 2,
    eachBatch: (payload) => sinkBatch(payload, opts.steps, consumer, opts.metrics),
  });
  return consumer;
}
