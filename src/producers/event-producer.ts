import type { Kafka, Producer } from 'kafkajs';
import { createIdempotentProducer, needsNewProducerId } from '../kafka/client.js';
import type { Logger } from '../obs/logger.js';
import type { EventCodec } from '../events/codec.js';
import { SIGNATURE_HEADER, ingressSignature } from '../events/ingress-signature.js';
import { SUBJECTS, type DeadLetterEnvelope, type RunRequested, type RunStatusChanged, type RunSubmission } from '../events/schemas.js';
import type { TopicNames } from '../kafka/topics.js';
import { DEFAULT_MAX_BATCH_BYTES } from '../config/schema.js';
import { ProduceBatcher, type OutgoingMessage } from './produce-batcher.js';

export interface EventProducerOptions {
  /** Messages waiting for Kafka before new ones are refused at once. */
  maxPending?: number;
  maxBatch?: number;
  /** Bytes of records per produce request; a larger single message is refused with MessageTooLargeError. */
  maxBatchBytes?: number;
  lingerMs?: number;
  /** Hears of a producer replaced after the broker stopped taking its sequence numbers. */
  logger?: Pick<Logger, 'warn'>;
}

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
    const newProducer = () => createIdempotentProducer(kafka);
    const producer = newProducer();
    await producer.connect();
    return new EventProducer(producer, newProducer, codec, topics, opts);
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

  private async sendBatch(messages: OutgoingMessage[]): Promise<void> {
    const byTopic = new Map<string, OutgoingMessage[]>();
    for (const m of messages) {
      const list = byTopic.get(m.topic);
      if (list) list.push(m);
      else byTopic.set(m.topic, [m]);
    }
    try {
      await this.producer.sendBatch({
        acks: -1,
        topicMessages: [...byTopic].map(([topic, ms]) => ({ topic, messages: ms.map(({ key, value, headers }) => ({ key, value, headers })) })),
      });
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
