import type { Consumer, EachBatchPayload, Kafka } from 'kafkajs';
import type { SluiceConfig } from '../config/schema.js';
import { EventDecodeError, type EventCodec } from '../events/codec.js';
import { SUBJECTS, type RunRequested } from '../events/schemas.js';
import { deadLetterPoison, type DeadLetterSink } from '../dlq/dead-letter.js';
import { groupId, topicNames } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { PartitionProgress } from './partition-progress.js';

export interface RunConsumerDeps {
  kafka: Kafka;
  config: SluiceConfig;
  codec: EventCodec;
  deadLetters: DeadLetterSink;
  execute: (run: RunRequested) => Promise<unknown>;
  logger: Logger;
  metrics: Metrics;
}

interface Task {
  topic: string;
  partition: number;
  offset: number;
  run: RunRequested;
}

const COMMIT_DEBOUNCE_MS = 100;
const COMMIT_RETRY_MS = 1_000;

const tpKey = (topic: string, partition: number) => `${topic}\u0000${partition}`;

/**
 * Reads runs from Kafka and hands them to the executor without holding the consumer loop, so
 * heartbeats continue however long a run takes (kafkajs only heartbeats between batches). Each
 * partition reads ahead into a bounded buffer; a full buffer pauses the partition (Kafka-native
 * backpressure) and draining below half resumes it. Offsets are committed only up to the lowest
 * unfinished record of each partition.
 */
export class RunConsumer {
  private readonly consumer: Consumer;
  private readonly progress = new Map<string, PartitionProgress>();
  private readonly paused = new Set<string>();
  private readonly queue: Task[] = [];
  private readonly running = new Set<Promise<void>>();
  private readonly group: string;
  private readonly log: Logger;
  private commitTimer: NodeJS.Timeout | undefined;
  private stopping = false;

  constructor(private readonly deps: RunConsumerDeps) {
    const { kafka, config } = deps;
    this.group = groupId(config.namespace, 'processor');
    this.log = deps.logger.child({ component: 'run-consumer' });
    this.consumer = kafka.consumer({
      groupId: this.group,
      sessionTimeout: config.kafka.sessionTimeoutMs,
      heartbeatInterval: config.kafka.heartbeatIntervalMs,
      allowAutoTopicCreation: false,
      maxWaitTimeInMs: 500,
    });
  }

  async start(): Promise<void> {
    const topics = topicNames(this.deps.config.namespace);
    this.consumer.on(this.consumer.events.GROUP_JOIN, (e) => this.onAssignment(e.payload.memberAssignment));
    await this.consumer.connect();
    await this.consumer.subscribe({ topics: [topics.interactive, topics.batch], fromBeginning: true });
    await this.consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: 4,
      eachBatch: (payload) => this.onBatch(payload),
    });
  }

  /** Stops fetching, lets running work finish within the grace period, commits what finished. */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    await this.consumer.stop();
    const drained = Promise.all([...this.running]);
    const timedOut = await Promise.race([drained.then(() => false), new Promise<boolean>((r) => setTimeout(() => r(true), graceMs).unref())]);
    if (timedOut) this.log.warn({ running: this.running.size }, 'grace period over: unfinished runs will be redelivered');
    await this.commitNow();
    await this.consumer.disconnect();
  }

  get inFlight(): number {
    return this.running.size;
  }

  private async onBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { topic, partition } = batch;
    const key = tpKey(topic, partition);
    let progress = this.progress.get(key);
    if (!progress) {
      progress = new PartitionProgress();
      this.progress.set(key, progress);
    }
    const limit = this.deps.config.processor.partitionBuffer;
    for (const message of batch.messages) {
      if (!isRunning() || isStale() || this.stopping) break;
      if (progress.inFlight >= limit) {
        this.pause(topic, partition);
        break;
      }
      const offset = Number(message.offset);
      if (progress.track(offset) === 'new') {
        try {
          const run = await this.deps.codec.decode<RunRequested>(message.value, SUBJECTS.runRequested);
          this.queue.push({ topic, partition, offset, run });
        } catch (err) {
          if (!(err instanceof EventDecodeError)) throw err;
          this.log.warn({ topic, partition, offset: message.offset, reason: err.reason }, 'undecodable record sent to the DLQ');
          await deadLetterPoison(this.deps.deadLetters, { topic, partition, message }, this.group, err, this.deps.config.processor.produceTimeoutMs);
          this.deps.metrics.deadLettered.inc({ topic, reason: 'decode_error' });
          progress.finish(offset);
          this.scheduleCommit();
        }
      }
      resolveOffset(message.offset);
    }
    this.deps.metrics.bufferedRecords.set({ topic, partition: String(partition) }, progress.inFlight);
    this.pump();
    await heartbeat();
  }

  private pump(): void {
    const max = this.deps.config.processor.maxInFlight;
    while (this.running.size < max && this.queue.length > 0 && !this.stopping) {
      const task = this.queue.shift()!;
      const done: Promise<void> = this.deps
        .execute(task.run)
        .then(() => this.onTaskFinished(task))
        .catch((err) => this.log.error({ err, runId: task.run.runId, offset: task.offset }, 'run outcome not recorded; the record stays uncommitted and will be redelivered'))
        .finally(() => {
          this.running.delete(done);
          this.pump();
        });
      this.running.add(done);
    }
  }

  private onTaskFinished(task: Task): void {
    const key = tpKey(task.topic, task.partition);
    const progress = this.progress.get(key);
    if (!progress) return; // partition was revoked meanwhile; its new owner redelivers from the committed offset
    progress.finish(task.offset);
    this.deps.metrics.bufferedRecords.set({ topic: task.topic, partition: String(task.partition) }, progress.inFlight);
    if (this.paused.has(key) && progress.inFlight <= this.deps.config.processor.partitionBuffer / 2) this.resume(task.topic, task.partition);
    this.scheduleCommit();
  }

  private pause(topic: string, partition: number): void {
    const key = tpKey(topic, partition);
    if (this.paused.has(key)) return;
    this.paused.add(key);
    this.consumer.pause([{ topic, partitions: [partition] }]);
    this.deps.metrics.pausedPartitions.set(this.paused.size);
    this.log.info({ topic, partition }, 'partition paused: read-ahead buffer full');
  }

  private resume(topic: string, partition: number): void {
    const key = tpKey(topic, partition);
    if (!this.paused.delete(key)) return;
    this.consumer.resume([{ topic, partitions: [partition] }]);
    this.deps.metrics.pausedPartitions.set(this.paused.size);
    this.log.info({ topic, partition }, 'partition resumed');
  }

  /** Forgets partitions this instance no longer owns: their new owner starts at the committed offset. */
  private onAssignment(assignment: Record<string, number[]>): void {
    const owned = new Set(Object.entries(assignment).flatMap(([topic, parts]) => parts.map((p) => tpKey(topic, p))));
    for (const key of [...this.progress.keys()]) if (!owned.has(key)) this.progress.delete(key);
    for (const key of [...this.paused]) if (!owned.has(key)) this.paused.delete(key);
    this.deps.metrics.pausedPartitions.set(this.paused.size);
    this.log.info({ assignment }, 'partitions assigned');
  }

  private scheduleCommit(delayMs = COMMIT_DEBOUNCE_MS): void {
    if (this.commitTimer) return;
    this.commitTimer = setTimeout(() => {
      this.commitTimer = undefined;
      void this.commitNow();
    }, delayMs);
  }

  private async commitNow(): Promise<void> {
    const offsets: { topic: string; partition: number; offset: string }[] = [];
    const marks: [PartitionProgress, number][] = [];
    for (const [key, progress] of this.progress) {
      const position = progress.committable();
      if (position === undefined) continue;
      const [topic, partition] = key.split('\u0000') as [string, string];
      offsets.push({ topic, partition: Number(partition), offset: String(position) });
      marks.push([progress, position]);
    }
    if (offsets.length === 0) return;
    try {
      await this.consumer.commitOffsets(offsets);
      for (const [progress, position] of marks) progress.markCommitted(position);
    } catch (err) {
      this.log.warn({ err, offsets }, 'offset commit failed; will try again');
      this.scheduleCommit(COMMIT_RETRY_MS);
    }
  }
}
