import type { EachBatchPayload, Kafka, KafkaMessage } from 'kafkajs';
import type { SluiceConfig } from '../config/schema.js';
import { EventDecodeError, type EventCodec } from '../events/codec.js';
import { SUBJECTS, type RunClass, type RunRequested } from '../events/schemas.js';
import { routePoison, type DeadLetterSink, type PoisonRoute } from '../dlq/dead-letter.js';
import { createBatchConsumer, partitionKey, splitPartitionKey, type BatchConsumer } from '../kafka/batch-consumer.js';
import { groupId, topicNames } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { PartitionProgress } from './partition-progress.js';
import type { PermitWaiter } from '../permits/oldest-waiters.js';
import type { PausedPartition, PauseReason } from './processor-state.js';
import type { RunPermitSource } from '../permits/run-permit-source.js';
import type { DispatchBreakers, HeldCount } from './breaker-holds.js';
import { RunDispatcher, type DispatchTask } from './run-dispatcher.js';
import { RUN_CLASSES } from '../events/schemas.js';
import type { AttemptContext } from '../execution/attempt.js';
import { parseRetryFailures, parseRetryFirstFailureAt, parseRetryOutputSeen } from '../retries/retry-headers.js';
import { resolveRunConfig, type RunFailure } from '../execution/run-faults.js';

export interface RunConsumerDeps {
  kafka: Kafka;
  config: SluiceConfig;
  codec: EventCodec;
  deadLetters: DeadLetterSink;
  execute: (run: RunRequested, context: AttemptContext) => Promise<unknown>;
  /** Ends a run without further attempts (DLQ, then `failed`); resolves once both are acknowledged. */
  deadLetterRun: (run: RunRequested, context: AttemptContext, failure: RunFailure) => Promise<unknown>;
  permits: RunPermitSource;
  breakers?: DispatchBreakers;
  /** Told once when a run starts waiting for an open dependency (to publish its status). */
  onHeld?: (run: RunRequested, dependency: string, until: number) => void;
  logger: Logger;
  metrics: Metrics;
}

const COMMIT_DEBOUNCE_MS = 100;
const COMMIT_RETRY_MS = 1_000;

/** What a record says about its run's earlier attempts (headers of a run-level retry). */
function attemptContext(topic: string, partition: number, message: KafkaMessage): AttemptContext {
  const first = parseRetryFirstFailureAt(message.headers);
  return {
    priorFailures: parseRetryFailures(message.headers),
    ...(first !== undefined ? { firstFailureAt: first } : {}),
    ...(parseRetryOutputSeen(message.headers) ? { outputSeen: true } : {}),
    record: { topic, partition, message: { offset: message.offset, key: message.key, value: message.value } },
  };
}

/** How often blocked runs are retried even without a release wake-up. */
const FALLBACK_POLL_MS = 500;

/**
 * Reads runs from Kafka and hands them to the dispatcher without holding the consumer loop, so
 * heartbeats continue however long a run takes (kafkajs only heartbeats between batches). Each
 * partition reads ahead into a bounded buffer; a full buffer pauses the partition (Kafka-native
 * backpressure) and draining below half resumes it. Offsets are committed only up to the lowest
 * unfinished record of each partition.
 */
export class RunConsumer {
  private readonly consumer: BatchConsumer;
  private readonly poison: PoisonRoute;
  private readonly progress = new Map<string, PartitionProgress>();
  /** Paused partitions and why: a full read-ahead buffer, or buffered work all waiting on open breakers. */
  private readonly paused = new Map<string, PauseReason>();
  private readonly dispatcher: RunDispatcher;
  /** Labels of every held-runs series reported so far, by the dispatcher's key. */
  private readonly heldSeries = new Map<string, { dependency: string; tenant: string; class: RunClass }>();
  private readonly group: string;
  private readonly log: Logger;
  private commitTimer: NodeJS.Timeout | undefined;
  private stopping = false;

  constructor(private readonly deps: RunConsumerDeps) {
    const { kafka, config } = deps;
    this.group = groupId(config.namespace, 'processor');
    this.log = deps.logger.child({ component: 'run-consumer' });
    const topics = topicNames(config.namespace);
    this.consumer = createBatchConsumer({
      kafka,
      settings: config.kafka,
      groupId: this.group,
      topics: [topics.interactive, topics.batch],
      maxWaitTimeInMs: 500,
      partitionsConsumedConcurrently: 4,
      eachBatch: (payload) => this.onBatch(payload),
      onAssignment: (owned, assignment) => this.onAssignment(owned, assignment),
      log: this.log,
    });
    this.poison = { deadLetters: deps.deadLetters, consumerGroup: this.group, timeoutMs: config.processor.produceTimeoutMs, metrics: deps.metrics, log: this.log, logMessage: 'undecodable record sent to the DLQ' };
    this.dispatcher = new RunDispatcher({
      permits: deps.permits,
      execute: (run, task) => deps.execute(run, task.context),
      ...(deps.breakers ? { breakers: deps.breakers } : {}),
      onHeld: (task, dependency, until) => deps.onHeld?.(task.run, dependency, until),
      onRound: () => this.reviewBreakerPauses(),
      onFinished: (task) => this.onTaskFinished(task),
      deadLetter: (task, failure) => deps.deadLetterRun(task.run, task.context, failure),
      unconfigured: (run) => {
        const configured = resolveRunConfig(config, run);
        return configured.ok ? undefined : configured.failure;
      },
      infraRetry: config.processor.infraRetry,
      maxInFlight: config.processor.maxInFlight,
      interactiveLifoAfterMs: config.processor.interactiveLifoAfterMs,
      fallbackPollMs: FALLBACK_POLL_MS,
      logger: this.log,
      metrics: deps.metrics,
    });
    this.gauges = setInterval(() => this.reportQueue(), 1_000);
    this.gauges.unref();
  }

  private readonly gauges: NodeJS.Timeout;

  private reportQueue(): void {
    const now = Date.now();
    for (const c of RUN_CLASSES) {
      const oldest = this.dispatcher.oldestWaiting(c);
      this.deps.metrics.queueOldestAge.set({ class: c }, oldest === undefined ? 0 : (now - oldest) / 1000);
      this.deps.metrics.queueDepth.set({ class: c }, this.dispatcher.waitingOf(c));
    }
  }

  start(): Promise<void> {
    return this.consumer.start();
  }

  /** Stops fetching, lets running work finish within the grace period, commits what finished. */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    clearInterval(this.gauges);
    await this.consumer.stop(async () => {
      const unfinished = await this.dispatcher.stop(graceMs);
      if (unfinished > 0) this.log.warn({ running: unfinished }, 'grace period over: unfinished runs will be redelivered');
      clearTimeout(this.commitTimer);
      await this.commitNow();
    });
  }

  get inFlight(): number {
    return this.dispatcher.inFlight;
  }

  /** The runs in line for their run permits (see RunDispatcher.permitWaiters). */
  permitWaiters(): Iterable<PermitWaiter> {
    return this.dispatcher.permitWaiters();
  }

  /** The partitions this instance holds paused, and why: only ones it owns (revoked ones are forgotten). */
  *pausedPartitions(): IterableIterator<PausedPartition> {
    for (const [key, reason] of this.paused) {
      const [topic, partition] = splitPartitionKey(key);
      yield { topic, partition, reason };
    }
  }

  /** Runs held for open dependencies, per dependency, tenant and class. */
  heldRuns(): Iterable<HeldCount> {
    return this.dispatcher.heldCounts().values();
  }

  private async onBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { topic, partition } = batch;
    const key = partitionKey(topic, partition);
    let progress = this.progress.get(key);
    if (!progress) {
      progress = new PartitionProgress();
      this.progress.set(key, progress);
    }
    const limit = this.deps.config.processor.partitionBuffer;
    for (const message of batch.messages) {
      if (!isRunning() || isStale() || this.stopping) break;
      if (progress.inFlight >= limit) {
        this.pause(topic, partition, 'buffer_full');
        break;
      }
      const offset = Number(message.offset);
      if (!progress.seen(offset)) {
        // Tracked only once it is handled: a registry outage throws here, and kafkajs fetches the
        // record again later, which must not then look like a duplicate.
        let run: RunRequested | undefined;
        try {
          run = await this.deps.codec.decode<RunRequested>(message.value, SUBJECTS.runRequested);
        } catch (err) {
          if (!(err instanceof EventDecodeError)) throw err;
          await routePoison(this.poison, { topic, partition, message }, err);
        }
        progress.track(offset);
        if (run) this.dispatcher.submit({ run, source: key, offset, context: attemptContext(topic, partition, message) });
        else {
          progress.finish(offset);
          this.scheduleCommit();
        }
      }
      resolveOffset(message.offset);
    }
    this.deps.metrics.bufferedRecords.set({ topic, partition: String(partition) }, progress.inFlight);
    await heartbeat();
  }

  private onTaskFinished(task: DispatchTask): void {
    const progress = this.progress.get(task.source);
    if (!progress) return; // partition was revoked meanwhile; its new owner redelivers from the committed offset
    progress.finish(task.offset);
    const [topic, partition] = splitPartitionKey(task.source);
    this.deps.metrics.bufferedRecords.set({ topic, partition: String(partition) }, progress.inFlight);
    if (this.paused.get(task.source) === 'buffer_full' && progress.inFlight <= this.deps.config.processor.partitionBuffer / 2) this.resume(topic, partition);
    this.scheduleCommit();
  }

  /**
   * A partition whose buffered work all waits for open dependencies is paused: reading further
   * would only fill memory with more work that cannot run. It resumes as soon as any of that work
   * may go (a breaker half-opened or closed) or finishes (expired, fallback).
   */
  private reviewBreakerPauses(): void {
    for (const [key, progress] of this.progress) {
      const held = this.dispatcher.heldFrom(key);
      const [topic, partition] = splitPartitionKey(key);
      const reason = this.paused.get(key);
      if (held > 0 && held === progress.inFlight) {
        if (reason === undefined) this.pause(topic, partition, 'breaker_open');
      } else if (reason === 'breaker_open') this.resume(topic, partition);
    }
    this.reportHeld();
  }

  /**
   * `sluice_processor_runs_held{dependency,tenant,class}`: a series, once reported, stays and
   * reads 0 when its runs are released, so sums over instances do not jump. Bounded by config:
   * dependencies, tenants (runs of unknown tenants are never held) and the two classes.
   */
  private reportHeld(): void {
    const counts = this.dispatcher.heldCounts();
    for (const [key, { dependency, tenant, runClass }] of counts) this.heldSeries.set(key, { dependency, tenant, class: runClass });
    for (const [key, labels] of this.heldSeries) this.deps.metrics.runsHeld.set(labels, counts.get(key)?.runs ?? 0);
  }

  private reportPaused(): void {
    const counts = { buffer_full: 0, breaker_open: 0 };
    for (const reason of this.paused.values()) counts[reason]++;
    for (const [reason, n] of Object.entries(counts)) this.deps.metrics.pausedPartitions.set({ reason }, n);
  }

  private pause(topic: string, partition: number, reason: PauseReason): void {
    const key = partitionKey(topic, partition);
    if (this.paused.has(key)) return;
    this.paused.set(key, reason);
    this.consumer.pause(topic, partition);
    this.reportPaused();
    this.log.info({ topic, partition, reason, pausedAt: Date.now() }, reason === 'buffer_full' ? 'partition paused: read-ahead buffer full' : 'partition paused: all its buffered work waits for an open dependency');
  }

  private resume(topic: string, partition: number): void {
    const key = partitionKey(topic, partition);
    if (!this.paused.delete(key)) return;
    this.consumer.resume(topic, partition);
    this.reportPaused();
    this.log.info({ topic, partition }, 'partition resumed');
  }

  /** Forgets partitions this instance no longer owns (the consumer resumed the paused ones): their new owner starts at the committed offset. */
  private onAssignment(owned: ReadonlySet<string>, assignment: Record<string, number[]>): void {
    for (const key of [...this.progress.keys()]) if (!owned.has(key)) this.progress.delete(key);
    const dropped = this.dispatcher.forget((source) => !owned.has(source));
    if (dropped > 0) this.log.info({ dropped }, 'dropped waiting runs of revoked partitions; their new owner redelivers them');
    for (const key of [...this.paused.keys()]) if (!owned.has(key)) this.paused.delete(key);
    this.reportPaused();
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
      const [topic, partition] = splitPartitionKey(key);
      offsets.push({ topic, partition, offset: String(position) });
      marks.push([progress, position]);
    }
    if (offsets.length === 0) return;
    try {
      await this.consumer.commit(offsets);
      for (const [progress, position] of marks) progress.markCommitted(position);
    } catch (err) {
      this.log.warn({ err, offsets }, 'offset commit failed; will try again');
      this.scheduleCommit(COMMIT_RETRY_MS);
    }
  }
}
