import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { Kafka, logLevel, type Consumer } from 'kafkajs';
import { EventCodec } from '../events/codec.js';
import { FileSchemaRegistry } from '../events/file-schema-registry.js';
import { HttpSchemaRegistry } from '../events/http-schema-registry.js';
import { SUBJECTS, type RunStatusChanged } from '../events/schemas.js';
import { topicNames, type TopicNames } from '../kafka/topics.js';
import { withTimeout } from '../util/with-timeout.js';
import { EventProducer } from './event-producer.js';
import { OutcomeBook } from './outcome-book.js';
import { InvalidSubmissionError, OutcomeUnavailableError, ProducerClosedError, SubmitFailedError } from './producer-errors.js';
import { toRunSubmission, type OutcomeStage, type SubmissionOutcome, type SubmitRequest } from './submission.js';

export interface SluiceProducerOptions {
  /** Kafka bootstrap brokers (`host:port`); or `kafka`, a kafkajs client of your own. */
  brokers?: string[];
  kafka?: Kafka;
  /** The tenant this producer submits for: the record key, and what the signature covers. */
  tenantId: string;
  /** The tenant's ingress secret, as Sluice reads it (`tenants.<id>.ingress`). */
  secret: string | Buffer;
  /**
   * The schema registry Sluice uses: a Confluent-compatible one (`url`), or the embedded file
   * registry's directory (`dir`; default `$SLUICE_STATE_DIR/schema-registry`, else
   * `.sluice/schema-registry`, as Sluice defaults), which the producer must share with Sluice.
   */
  registry?: { url: string; timeoutMs?: number } | { dir: string };
  /** Sluice's `SLUICE_NAMESPACE` prefix of topics; none by default. */
  namespace?: string;
  clientId?: string;
  /** Bound on one submit: connecting, encoding, and Kafka's acknowledgement (acks=all). Default 10 s. */
  submitTimeoutMs?: number;
  /** Follow the status topic for `awaitOutcome` (default true); off, submit only produces. */
  followOutcomes?: boolean;
  /** Requests whose outcomes are kept, the oldest forgotten first. Default 10,000. */
  maxTrackedRequests?: number;
}

export interface AwaitOptions {
  /** Bound on the wait (required: every wait ends). */
  timeoutMs: number;
  /** Default `admission`: `queued` or `rejected`, past deferrals. */
  until?: OutcomeStage;
}

/** Fetching for the status follower: short waits, so an outcome is seen soon after it is written. */
const STATUS_MAX_WAIT_MS = 100;
/** Bound on deleting the follower's group at close. */
const GROUP_DELETE_TIMEOUT_MS = 5_000;

/**
 * Submits runs through Sluice's Kafka ingress (`sluice.runs.requests`), under the same admission
 * contract as `POST /v1/runs`, and follows their outcomes on `sluice.runs.status`.
 *
 * `submit` encodes a RunSubmission in the Confluent wire format (registering the schema as Sluice
 * does), signs it with the tenant's ingress secret, and resolves once Kafka acknowledged it with
 * acks=all, or rejects within `submitTimeoutMs`; submits made at once go in shared produce requests. `awaitOutcome` answers from a consumer of the
 * status topic in a group of this producer's own, started with the first submit at the topic's
 * end offsets as they were then, so every outcome of this producer's requests is seen.
 */
export class SluiceProducer {
  private readonly kafka: Kafka;
  private readonly secret: Buffer;
  private readonly codec: EventCodec;
  private readonly topics: TopicNames;
  private readonly submitTimeoutMs: number;
  private readonly book: OutcomeBook;
  private readonly clientId: string;
  private producer: EventProducer | undefined;
  private follower: { consumer: Consumer; groupId: string } | undefined;
  private starting: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly opts: SluiceProducerOptions) {
    if (typeof opts.tenantId !== 'string' || opts.tenantId.length === 0) throw new InvalidSubmissionError('tenantId', 'must be a non-empty string');
    this.secret = Buffer.isBuffer(opts.secret) ? opts.secret : Buffer.from(opts.secret ?? '', 'utf8');
    if (this.secret.length === 0) throw new InvalidSubmissionError('secret', "must be the tenant's ingress secret");
    this.clientId = opts.clientId ?? 'sluice-producer';
    if (opts.kafka) this.kafka = opts.kafka;
    else if (opts.brokers && opts.brokers.length > 0) this.kafka = new Kafka({ clientId: this.clientId, brokers: opts.brokers, logLevel: logLevel.ERROR });
    else throw new InvalidSubmissionError('brokers', 'give brokers or a kafka client');
    const registry = opts.registry;
    this.codec = new EventCodec(
      registry && 'url' in registry
        ? new HttpSchemaRegistry(registry.url, { timeoutMs: registry.timeoutMs })
        : new FileSchemaRegistry(registry?.dir ?? join(process.env.SLUICE_STATE_DIR ?? '.sluice', 'schema-registry')),
    );
    this.topics = topicNames(opts.namespace ?? '');
    this.submitTimeoutMs = opts.submitTimeoutMs ?? 10_000;
    this.book = new OutcomeBook(opts.tenantId, opts.maxTrackedRequests ?? 10_000);
  }

  /** Produces the request; resolves with its request id once Kafka holds it. */
  async submit(req: SubmitRequest): Promise<{ requestId: string }> {
    if (this.closed) throw new ProducerClosedError();
    const check = toRunSubmission(this.opts.tenantId, req, randomUUID);
    if (!check.ok) throw new InvalidSubmissionError(check.field, check.message);
    const { submission } = check;
    const send = async () => {
      await this.start();
      // Tracked before it is sent: its answer may come before the send resolves.
      if (this.follower) this.book.track(submission.requestId);
      await this.producer!.publishSubmission(submission, this.secret, this.submitTimeoutMs);
    };
    try {
      await withTimeout(send(), this.submitTimeoutMs, `submitting request ${submission.requestId}`);
    } catch (err) {
      throw new SubmitFailedError(submission.requestId, `request ${submission.requestId} not acknowledged: ${(err as Error).message}`, { cause: err });
    }
    return { requestId: submission.requestId };
  }

  /** The request's outcome at `until` (default `admission`), or OutcomeTimeoutError after `timeoutMs`. */
  awaitOutcome(requestId: string, opts: AwaitOptions): Promise<SubmissionOutcome> {
    if (this.opts.followOutcomes === false) return Promise.reject(new OutcomeUnavailableError('this producer was made with followOutcomes: false'));
    return this.book.wait(requestId, opts.until ?? 'admission', opts.timeoutMs);
  }

  /**
   * Stops following, deletes the follower's group and disconnects; waits still open end with
   * OutcomeUnavailableError.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.book.fail(new OutcomeUnavailableError('the producer is closed'));
    await this.starting?.catch(() => undefined);
    await Promise.allSettled([this.stopFollowing(), this.producer?.close()]);
  }

  /**
   * Every producer's group is new, so one left behind is clutter in the broker and in every tool
   * that lists groups. It commits no offsets, so the broker drops it by itself at its next cleanup
   * of groups (`offsets.retention.check.interval.ms`, 10 minutes by default) once it is empty; a
   * clean close deletes it at once. Deleting is best effort: a cluster whose ACLs refuse it leaves
   * the group to that cleanup.
   */
  private async stopFollowing(): Promise<void> {
    if (!this.follower) return;
    const { consumer, groupId } = this.follower;
    await consumer.disconnect();
    const admin = this.kafka.admin();
    const deleting = (async () => {
      await admin.connect();
      await admin.deleteGroups([groupId]);
    })();
    await withTimeout(deleting, GROUP_DELETE_TIMEOUT_MS, `deleting consumer group ${groupId}`)
      .catch(() => undefined)
      .finally(() => admin.disconnect().catch(() => undefined));
  }

  private start(): Promise<void> {
    if (!this.starting) {
      this.starting = this.connect();
      // A failed start is tried again by the next submit.
      this.starting.catch(() => (this.starting = undefined));
    }
    return this.starting;
  }

  private async connect(): Promise<void> {
    // Submits made at once share produce requests (EventProducer's batching), as Sluice's own events do.
    this.producer ??= await EventProducer.connect(this.kafka, this.codec, this.topics);
    if (this.opts.followOutcomes !== false && !this.follower) await this.follow();
  }

  /**
   * Starts reading the status topic from its end offsets as they are now, before the first request
   * is sent. The consumer's group is the producer's own (a UUID), so it reads every partition;
   * joining it takes seconds, so it is not waited for: the positions are set before its first fetch.
   */
  private async follow(): Promise<void> {
    const admin = this.kafka.admin();
    await admin.connect();
    let ends: { partition: number; offset: string }[];
    try {
      ends = await admin.fetchTopicOffsets(this.topics.status);
    } finally {
      await admin.disconnect();
    }
    const groupId = `${this.opts.namespace ?? ''}sluice-producer.${this.clientId}.${randomUUID()}`;
    const consumer = this.kafka.consumer({ groupId, maxWaitTimeInMs: STATUS_MAX_WAIT_MS });
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: [this.topics.status] });
    } catch (err) {
      await consumer.disconnect().catch(() => undefined);
      throw err;
    }
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      if (!payload.restart) this.book.fail(new OutcomeUnavailableError(`following ${this.topics.status} stopped: ${payload.error.message}`));
    });
    // Positions are set by seeking to the ends at start; a committed offset would only keep the group.
    const running = consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => {
        let event: RunStatusChanged;
        try {
          event = await this.codec.decode<RunStatusChanged>(message.value, SUBJECTS.runStatusChanged);
        } catch {
          // Not this producer's to judge: Sluice's status sink dead-letters what it cannot read.
          return;
        }
        this.book.record(event);
      },
    });
    // run() has made its consumer group by now, so these apply to its first fetch.
    for (const { partition, offset } of ends) consumer.seek({ topic: this.topics.status, partition, offset });
    running.catch((err: Error) => this.book.fail(new OutcomeUnavailableError(`could not follow ${this.topics.status}: ${err.message}`)));
    this.follower = { consumer, groupId };
  }
}
