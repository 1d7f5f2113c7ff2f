import type { Kafka, Producer, RecordMetadata } from 'kafkajs';
import { RecordingPartitioner, createIdempotentProducer, needsNewProducerId } from '../kafka/client.js';
import type { Logger } from '../obs/logger.js';
import type { EventCodec } from '../events/codec.js';
import { SIGNATURE_HEADER, ingressSignature } from '../events/ingress-signature.js';
import { SUBJECTS, type DeadLetterEnvelope, type RunRequested, type RunStatusChanged, type RunSubmission } from '../events/schemas.js';
import type { TopicNames } from '../kafka/topics.js';
import { DEFAULT_MAX_BATCH_BYTES } from '../config/schema.js';
import { PartitionsNotAcknowledgedError, partitionId, unacknowledged } from './produce-acks.js';
import { ProduceBatcher, type OutgoingMessage } from './produce-batcher.js';

export interface EventProducerOptions {
  /** Messages waiting for Kafka before new ones are refused at once. */
  maxPending?: number;
  maxBatch?: number;
  /** Bytes of records per produce request; a larger single message is refused with MessageTooLargeError. */
  maxBatchBytes?: number;
  lingerMs?: number;
  /** Hears of a producer replaced after the broker stopped taking its sequence numbers, and of records sent again. */
  logger?: Pick<Logger, 'warn'>;
}

/** A kafkajs message, kept as the object handed to the send: the partitioner knows it by identity. */
interface SentMessage {
  topic: string;
  message: { key: string; value: Buffer; headers?: Record<string, string> };
}

/** Sends of the records an answer left out, before they fail (each caller's timeout bounds them too). */
const RESEND_ROUNDS = 3;

/**
 * The typed producer library: what the submit adapter uses to turn a request into an event, and
 * what other services import to submit runs without HTTP. Every publish resolves only after
 * Kafka acknowledged it with acks=all, or rejects within its timeout.
 */
export class EventProducer {
  private readonly batcher: ProduceBatcher;

  private constructor(
    private producer: Producer,
    private readonly newProducer: () => Producer,
    private readonly partitioner: RecordingPartitioner,
    private readonly codec: EventCodec,
    readonly topics: TopicNames,
    private readonly opts: EventProducerOptions,
  ) {
    this.batcher = new ProduceBatcher((messages) => this.sendBatch(messages), {
      maxPending: opts.maxPending ?? 10_000,
      maxBatch: opts.maxBatch ?? 500,
      maxBatchBytes: opts.maxBatchBytes ?? DEFAULT_MAX_BATCH_BYTES,
      lingerMs: opts.lingerMs ?? 1,
    });
  }

  static async connect(kafka: Kafka, codec: EventCodec, topics: TopicNames, opts: EventProducerOptions = {}): Promise<EventProducer> {
    // A message still queued when its caller's timeout fires is withdrawn unsent.
    const partitioner = new RecordingPartitioner();
    const newProducer = () => createIdempotentProducer(kafka, partitioner.create);
    const producer = newProducer();
    await producer.connect();
    return new EventProducer(producer, newProducer, partitioner, codec, topics, opts);
  }

  get pending(): number {
    return this.batcher.pending;
  }

  /** Runs are keyed by tenant so one tenant's runs keep their order within a partition. */
  async publishRunRequested(run: RunRequested, timeoutMs: number, topic: string = run.class === 'batch' ? this.topics.batch : this.topics.interactive): Promise<void> {
    const value = await this.codec.encode(SUBJECTS.runRequested, run);
    await this.batcher.produce({ topic, key: run.tenantId, value, headers: { traceparent: run.traceparent } }, timeoutMs);
  }

  /** The next attempt of a run, held on the retry topic until due; the headers carry the due time and failure context. */
  async publishRetry(run: RunRequested, headers: Record<string, string>, timeoutMs: number): Promise<void> {
    const value = await this.codec.encode(SUBJECTS.runRequested, run);
    await this.batcher.produce({ topic: this.topics.retry, key: run.tenantId, value, headers: { traceparent: run.traceparent, ...headers } }, timeoutMs);
  }

  /**
   * A deferred ingress request, held on the retry topic until due: the producer's record as it
   * came (its signature still covers it), keyed by tenant, with the scheduling headers.
   */
  async publishIngressRetry(record: { tenantId: string; value: Buffer; headers: Record<string, string> }, timeoutMs: number): Promise<void> {
    await this.batcher.produce({ topic: this.topics.retry, key: record.tenantId, value: record.value, headers: record.headers }, timeoutMs);
  }

  /** A producer's run request to the ingress topic: keyed by its tenant, signed with the tenant's ingress secret. */
  async publishSubmission(submission: RunSubmission, secret: Buffer, timeoutMs: number): Promise<void> {
    const value = await this.codec.encode(SUBJECTS.runSubmission, submission);
    const headers = { [SIGNATURE_HEADER]: ingressSignature(secret, submission.tenantId, value) };
    await this.batcher.produce({ topic: this.topics.requests, key: submission.tenantId, value, headers }, timeoutMs);
  }

  /** Status events are keyed by run so every transition of one run stays in order. */
  async publishStatus(event: RunStatusChanged, timeoutMs: number): Promise<void> {
    const value = await this.codec.encode(SUBJECTS.runStatusChanged, event);
    await this.batcher.produce({ topic: this.topics.status, key: event.runId, value, headers: { traceparent: event.traceparent } }, timeoutMs);
  }

  async publishDeadLetter(envelope: DeadLetterEnvelope, headers: Record<string, string>, timeoutMs: number): Promise<void> {
    const value = await this.codec.encode(SUBJECTS.deadLetter, envelope);
    const key = envelope.runId ?? `${envelope.originalTopic}/${envelope.originalPartition}/${envelope.originalOffset}`;
    await this.batcher.produce({ topic: this.topics.dlq, key, value, headers }, timeoutMs);
  }

  async close(): Promise<void> {
    await this.batcher.close();
    await this.producer.disconnect();
  }

  /**
   * Sends the batch and checks Kafka's answer covers every record's partition; the records it left
   * out (`unacknowledged` says how kafkajs loses them after a leader moved) are sent again at once,
   * before anything else, so a key's records keep their order. A record sent again may be in Kafka
   * twice, as at-least-once delivery allows. Still left out after RESEND_ROUNDS sends, they fail.
   */
  private async sendBatch(messages: OutgoingMessage[]): Promise<(Error | undefined)[]> {
    const records: SentMessage[] = messages.map(({ topic, key, value, headers }) => ({ topic, message: { key, value, headers } }));
    let pending = records.map((_, i) => i);
    const failing = (indices: readonly number[], err: Error) => {
      const failed = new Set(indices);
      return messages.map((_, i) => (failed.has(i) ? err : undefined));
    };
    for (let round = 1; ; round++) {
      let answers: RecordMetadata[];
      try {
        answers = await this.send(pending.map((i) => records[i]!));
      } catch (err) {
        // A resend that fails fails only its records: the others were acknowledged.
        if (round === 1) throw err;
        return failing(pending, err as Error);
      }
      const sent = pending.map((i) => ({ topic: records[i]!.topic, partition: this.partitioner.partitionOf(records[i]!.message) }));
      const missing = unacknowledged(sent, answers);
      if (missing.length === 0) return [];
      const left = missing.map((j) => pending[j]!);
      const partitions = [...new Set(missing.map((j) => partitionId(sent[j]!.topic, sent[j]!.partition ?? -1)))];
      if (round >= RESEND_ROUNDS) {
        const err = new PartitionsNotAcknowledgedError(partitions);
        this.opts.logger?.warn({ err, records: left.length }, 'Kafka answered without acknowledging some records after every resend; they fail');
        return failing(left, err);
      }
      this.opts.logger?.warn({ partitions, records: left.length, round }, 'Kafka answered without acknowledging some partitions (kafkajs skips them after a leader moved); sending their records again');
      pending = left;
    }
  }

  private async send(records: SentMessage[]): Promise<RecordMetadata[]> {
    const byTopic = new Map<string, SentMessage['message'][]>();
    for (const { topic, message } of records) {
      const list = byTopic.get(topic);
      if (list) list.push(message);
      else byTopic.set(topic, [message]);
    }
    try {
      return await this.producer.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, ms]) => ({ topic, messages: ms })) });
    } catch (err) {
      if (needsNewProducerId(err)) await this.replaceProducer(err);
      throw err;
    }
  }

  /**
   * Swaps in a producer with a new producer id before the next request (the batcher sends one at
   * a time, so none is in flight). The cost: a record of the failed send that did land (one for
   * another partition) is sent again by its caller's retry, as at-least-once delivery allows.
   * Should Kafka not take the connection now, the old producer stays, and the next failure tries again.
   */
  private async replaceProducer(cause: unknown): Promise<void> {
    const next = this.newProducer();
    try {
      await next.connect();
    } catch (err) {
      this.opts.logger?.warn({ err, cause }, 'the broker refuses the producer\'s sequence numbers and no new producer could connect; trying again after the next failure');
      await next.disconnect().catch(() => undefined);
      return;
    }
    const old = this.producer;
    this.producer = next;
    this.opts.logger?.warn({ err: cause }, 'the broker refuses the producer\'s sequence numbers (kafkajs does not recover from that); replaced it with a new producer id');
    await old.disconnect().catch(() => undefined);
  }
}
