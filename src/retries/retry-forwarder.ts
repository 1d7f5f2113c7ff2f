import { Partitioners, type EachBatchPayload, type Kafka, type KafkaMessage, type Message, type Producer } from 'kafkajs';
import type { SluiceConfig } from '../config/schema.js';
import { EventDecodeError, type EventCodec } from '../events/codec.js';
import { SUBJECTS, type RunRequested } from '../events/schemas.js';
import { routePoison, type DeadLetterSink, type PoisonRoute } from '../dlq/dead-letter.js';
import { createBatchConsumer, type BatchConsumer } from '../kafka/batch-consumer.js';
import { PartitionHolds } from '../kafka/partition-holds.js';
import { groupId, topicNames, type TopicNames } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { ProduceTimeoutError } from '../producers/produce-batcher.js';
import { isIngressRetry, parseRetryClass, parseRetryDueAt } from './retry-headers.js';

export interface RetryForwarderDeps {
  kafka: Kafka;
  /** Uses `namespace`, the Kafka session settings, `kafka.partitions.retry` and `processor.produceTimeoutMs`. */
  config: SluiceConfig;
  codec: EventCodec;
  deadLetters: DeadLetterSink;
  logger: Logger;
  metrics: Metrics;
  /** Longest a partition stays paused before its head record is looked at again. Default 60 s. */
  maxHoldMs?: number;
  /** Exponential backoff after a failed forward, DLQ write or registry call. Default 200 ms doubling to 10 s. */
  backoff?: { baseMs: number; capMs: number };
}

/** Records per produce request: keeps one request well under the broker's size limit. */
const MAX_CHUNK = 100;
/** Bounds how long a resumed partition waits for the fetch loop to pick it up again. */
const MAX_WAIT_MS = 250;

type Plan = { kind: 'forward'; dueAt: number; target: string } | { kind: 'poison'; error: EventDecodeError };

/**
 * Holds run retries on `sluice.runs.retry` until they are due, then hands them back to the work
 * topic of their class, so a waiting retry never holds a work partition or a permit. Deferred
 * ingress requests wait here too, and go back to the ingress topic (`sluice-retry-destination`).
 *
 * A partition whose head record is not yet due is paused and rewound to that record; one timer
 * per paused partition resumes it when the record is due, or after `maxHoldMs` at the latest, so
 * the wait is re-checked against a fresh read. Nothing behind the head is looked at meanwhile:
 * retries of a tenant share a partition and are enqueued with similar backoffs, so a partition
 * is roughly in due order, and a record due earlier than the head waits at most the difference
 * between the two. That is the price of keeping the committed offset a plain "everything before
 * here was forwarded" mark, with no per-record index of what is still waiting.
 *
 * A record is forwarded with its value, key and headers as they were, and its offset is committed
 * only after the work topic acknowledged it (acks=all): a crash in between forwards it again
 * (at least once). Deadlines are not looked at: an expired retry is forwarded too, so that the
 * processor, the one place where runs end, records it as expired without using capacity.
 */
export class RetryForwarder {
  private readonly consumer: BatchConsumer;
  private readonly producer: Producer;
  private readonly poison: PoisonRoute;
  private readonly topics: TopicNames;
  private readonly group: string;
  private readonly log: Logger;
  private readonly holds: PartitionHolds;
  private stopping = false;

  constructor(private readonly deps: RetryForwarderDeps) {
    const { kafka, config } = deps;
    this.topics = topicNames(config.namespace);
    this.group = groupId(config.namespace, 'retry-forwarder');
    this.log = deps.logger.child({ component: 'retry-forwarder' });
    this.consumer = createBatchConsumer({
      kafka,
      settings: config.kafka,
      groupId: this.group,
      topics: [this.topics.retry],
      maxWaitTimeInMs: MAX_WAIT_MS,
      // A batch that is forwarding (awaiting acks) must not keep other partitions' batches waiting.
      partitionsConsumedConcurrently: Math.max(2, config.kafka.partitions.retry),
      eachBatch: (payload) => this.onBatch(payload),
      onAssignment: (owned, assignment) => this.onAssignment(owned, assignment),
      log: this.log,
    });
    this.holds = new PartitionHolds(this.consumer, { maxHoldMs: deps.maxHoldMs ?? 60_000, backoff: deps.backoff ?? { baseMs: 200, capMs: 10_000 } });
    const logMessage = 'undecodable retry without scheduling headers sent to the DLQ';
    this.poison = { deadLetters: deps.deadLetters, consumerGroup: this.group, timeoutMs: config.processor.produceTimeoutMs, metrics: deps.metrics, log: this.log, logMessage };
    // Not idempotent: a failed or timed-out forward is sent again from the retry topic anyway, so
    // duplicates are part of the contract, and bounded retries keep a broker outage from parking
    // a send forever. One request in flight keeps a tenant's forwards in order. The default
    // partitioner is the one the submit path uses, so a retry lands on its tenant's partition.
    this.producer = kafka.producer({
      allowAutoTopicCreation: false,
      maxInFlightRequests: 1,
      createPartitioner: Partitioners.DefaultPartitioner,
      retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2_000 },
    });
  }

  async start(): Promise<void> {
    await this.producer.connect();
    await this.consumer.start();
  }

  /** Prompt even with partitions paused: the fetch loop long-polls for at most MAX_WAIT_MS. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.holds.stop();
    // Waits for the batch in hand, which every produce and commit inside bounds.
    await this.consumer.stop();
    await this.producer.disconnect();
  }

  private async onBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { topic, partition } = batch;
    const live = () => isRunning() && !isStale() && !this.stopping;
    let chunk: { message: KafkaMessage; target: string }[] = [];

    /** Forwards the due records gathered so far; false when they must be tried again after a backoff. */
    const flush = async (): Promise<boolean> => {
      if (chunk.length === 0) return true;
      const first = chunk[0]!.message.offset;
      const last = chunk[chunk.length - 1]!.message.offset;
      try {
        await this.forward(chunk);
      } catch (err) {
        this.backOff(topic, partition, first, err);
        return false;
      }
      chunk = [];
      await this.done(topic, partition, last, resolveOffset);
      await heartbeat();
      return true;
    };

    for (const message of batch.messages) {
      // Records not resolved here are fetched again: nothing is skipped by stopping early.
      if (!live()) return;
      let plan: Plan;
      try {
        plan = await this.plan(message);
      } catch (err) {
        if (await flush()) this.backOff(topic, partition, message.offset, err);
        return;
      }
      if (plan.kind === 'poison') {
        if (!(await flush())) return;
        try {
          await routePoison(this.poison, { topic, partition, message }, plan.error);
        } catch (err) {
          this.backOff(topic, partition, message.offset, err);
          return;
        }
        await this.done(topic, partition, message.offset, resolveOffset);
        continue;
      }
      if (plan.dueAt > Date.now()) {
        if (await flush()) this.holds.hold(topic, partition, message.offset, plan.dueAt);
        return;
      }
      chunk.push({ message, target: plan.target });
      if (chunk.length >= MAX_CHUNK && !(await flush())) return;
    }
    if (live()) await flush();
  }

  /**
   * Scheduling from the headers when they are there, so most records need no registry lookup. A
   * deferred ingress request is not a RunRequested: its headers alone schedule it (without a due
   * time it is due at once), and the ingress judges it again, deadline included.
   */
  private async plan(message: KafkaMessage): Promise<Plan> {
    let dueAt = parseRetryDueAt(message.headers);
    if (isIngressRetry(message.headers)) return { kind: 'forward', dueAt: dueAt ?? 0, target: this.topics.requests };
    let runClass = parseRetryClass(message.headers);
    if (dueAt === undefined || runClass === undefined) {
      let run: RunRequested;
      try {
        run = await this.deps.codec.decode<RunRequested>(message.value, SUBJECTS.runRequested);
      } catch (err) {
        // Anything else (registry unreachable) is transient: the caller backs off and reads again.
        if (err instanceof EventDecodeError) return { kind: 'poison', error: err };
        throw err;
      }
      dueAt ??= run.dueAt ?? 0;
      runClass ??= run.class;
    }
    return { kind: 'forward', dueAt, target: runClass === 'batch' ? this.topics.batch : this.topics.interactive };
  }

  private async forward(records: readonly { message: KafkaMessage; target: string }[]): Promise<void> {
    const byTopic = new Map<string, Message[]>();
    for (const { message, target } of records) {
      const out: Message = { key: message.key, value: message.value, headers: message.headers };
      const list = byTopic.get(target);
      if (list) list.push(out);
      else byTopic.set(target, [out]);
    }
    const timeoutMs = this.deps.config.processor.produceTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.producer.sendBatch({ acks: -1, timeout: timeoutMs, topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })) }),
        // kafkajs's own retries can outlast its request timeout; this bounds the whole call.
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new ProduceTimeoutError(timeoutMs, true)), timeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Moves past a handled record. A failed commit is only logged: a later one covers it, or the next owner forwards again. */
  private async done(topic: string, partition: number, offset: string, resolveOffset: (offset: string) => void): Promise<void> {
    resolveOffset(offset);
    this.holds.succeeded(topic, partition);
    try {
      await this.consumer.commitPast(topic, partition, offset);
    } catch (err) {
      this.log.warn({ err, topic, partition, offset }, 'offset commit failed; the next commit covers it');
    }
  }

  private backOff(topic: string, partition: number, offset: string, err: unknown): void {
    const { failures, waitMs } = this.holds.backOff(topic, partition, offset);
    this.log.warn({ err, topic, partition, offset, failures, waitMs }, 'could not forward a retry; trying again after a backoff');
  }

  /** Drops the holds of revoked partitions; the consumer has resumed them already. */
  private onAssignment(owned: ReadonlySet<string>, assignment: Record<string, number[]>): void {
    this.holds.retain(owned);
    this.log.info({ assignment }, 'retry partitions assigned');
  }
}
