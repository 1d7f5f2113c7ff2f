import type { EachBatchPayload, IHeaders, Kafka, KafkaMessage } from 'kafkajs';
import type { SluiceConfig } from '../config/schema.js';
import { EventDecodeError, type EventCodec } from '../events/codec.js';
import { SUBJECTS, type RunSubmission } from '../events/schemas.js';
import { admitRun, type AdmitRunDeps } from '../admission/admit-run.js';
import type { IdempotencyStore } from '../admission/idempotency.js';
import { buildDeadLetter, type DeadLetterInput, type DeadLetterReason } from '../dlq/dead-letter.js';
import { createBatchConsumer, type BatchConsumer } from '../kafka/batch-consumer.js';
import { headerRecord, headerText } from '../kafka/headers.js';
import { PartitionHolds } from '../kafka/partition-holds.js';
import { PartitionProgress } from '../processors/partition-progress.js';
import { groupId, topicNames } from '../kafka/topics.js';
import type { Logger } from '../obs/logger.js';
import type { EventProducer } from '../producers/event-producer.js';
import { INGRESS_DESTINATION, RETRY_HEADER } from '../retries/retry-headers.js';
import { newRunId } from '../runs/run-id.js';
import { childTraceparent } from '../runs/traceparent.js';
import { KeyTurns } from '../util/key-turns.js';
import { withTimeout } from '../util/with-timeout.js';
import { answerStatus, answerStatusEvent, checkSubmission, endedDeferral, recordWrittenAt, reofferAt, staleRecord, type IngressAnswer, type IngressRequest } from './ingress-policy.js';
import { SIGNATURE_HEADER, signatureMatches } from './ingress-signature.js';

/** On a re-offered request (from the retry topic): the run id its deferral gave it. */
export const REOFFER_HEADER = 'sluice-ingress-run-id';

/** Headers the ingress sets on a re-offer; a producer's own values of them are not carried over. */
const INTERNAL_HEADERS = new Set<string>([...Object.values(RETRY_HEADER), REOFFER_HEADER]);

/** Bounds how long a resumed partition waits for the fetch loop to pick it up again. */
const MAX_WAIT_MS = 250;

/** How long a finished record waits for others to finish before its partition's position is committed, while a batch is in hand. */
const COMMIT_INTERVAL_MS = 100;

export interface IngressDeps extends AdmitRunDeps {
  kafka: Kafka;
  config: SluiceConfig;
  codec: EventCodec;
  producer: Pick<EventProducer, 'publishRunRequested' | 'publishStatus' | 'publishIngressRetry' | 'publishDeadLetter'>;
  /** Keys scoped to the ingress, apart from HTTP's Idempotency-Keys. */
  idempotency: Pick<IdempotencyStore, 'claim' | 'store' | 'forget' | 'answer'>;
  /** Each tenant's ingress secret (`readIngressSecrets`); a tenant without one cannot submit here. */
  secrets: ReadonlyMap<string, Buffer>;
  logger: Logger;
  now?: () => number;
}

export type IngressOutcome = 'admitted' | 'queued' | 'deferred' | 'rejected' | 'duplicate' | 'dead_lettered';

/** A record that cannot be handled now (a dependency failed or another claimant holds its key): read again after a backoff. */
export class IngressRetryLater extends Error {
  override readonly name = 'IngressRetryLater';
}

/** Who asked: where an answer is published (the request id) and kept (the tenant's key). */
type RequestOf = Pick<IngressRequest, 'tenantId' | 'idempotencyKey' | 'requestId'>;

/** Which decision of a request this is, under which run id and claim. */
interface Decision {
  runId: string;
  /** The claim's token: the record's coordinates for a first decision, so its own retry claims again. */
  token: string;
  admittedAt: number;
  deadline: number;
  decision: number;
  traceparent: string;
  /** A re-offer of a deferred request: its key holds the deferral, which a failure must leave in place. */
  reoffer: boolean;
}

/**
 * The ingress role: run requests that producers write to `sluice.runs.requests`, admitted under
 * the same contract as `POST /v1/runs` (`admitRun`: the same policy, Lua scripts and stores), each
 * outcome published on the status topic keyed by run id, with the producer's request id.
 *
 * A record is authenticated (its tenant, from the key, and `sluice-signature`), decoded and
 * checked, then its idempotency key claimed (a duplicate gets the first outcome again), then
 * decided: admitted or queued → the run on its work topic and `queued`; deferred → the record to
 * the retry topic until the answer could change, then back here (`reofferAt`), and `deferred`;
 * rejected → `rejected`. What fails authentication or checks is dead-lettered and never runs.
 *
 * Each partition's records are started in order, up to `ingress.maxInFlight` at once, each bounded
 * by `ingress.recordTimeoutMs`, and finish in any order; records of one idempotency key take turns.
 * Offsets are committed only up to the lowest unfinished record. A record that Redis or Kafka fails
 * is not committed: its partition is parked at it and it is read again after a backoff, until it
 * goes through.
 */
export class IngressConsumer {
  private readonly consumer: BatchConsumer;
  private readonly holds: PartitionHolds;
  private readonly group: string;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly keyTurns = new KeyTurns();
  private stopping = false;

  constructor(private readonly deps: IngressDeps) {
    const { kafka, config } = deps;
    this.group = groupId(config.namespace, 'ingress');
    this.log = deps.logger.child({ component: 'ingress' });
    this.now = deps.now ?? Date.now;
    this.consumer = createBatchConsumer({
      kafka,
      settings: config.kafka,
      groupId: this.group,
      topics: [topicNames(config.namespace).requests],
      maxWaitTimeInMs: MAX_WAIT_MS,
      partitionsConsumedConcurrently: config.ingress.partitionsConcurrently,
      eachBatch: (payload) => this.onBatch(payload),
      onAssignment: (owned, assignment) => {
        this.holds.retain(owned);
        this.log.info({ assignment }, 'ingress partitions assigned');
      },
      log: this.log,
    });
    this.holds = new PartitionHolds(this.consumer, { maxHoldMs: config.ingress.backoff.capMs, backoff: config.ingress.backoff });
  }

  async start(): Promise<void> {
    await this.consumer.start();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.holds.stop();
    await this.consumer.stop();
  }

  /**
   * Up to `ingress.maxInFlight` records of the batch in hand at once, started in offset order.
   * Each record's outcome is produced before it counts as finished, and the partition's position
   * (where kafkajs fetches next, and the committed offset) moves only up to its lowest unfinished
   * record. A record that must be read again stops the batch: what is in flight finishes, the
   * position is committed, and the partition is parked at the lowest such record; records after
   * it that finished meanwhile are read again too, and answered from their idempotency keys.
   */
  private async onBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { topic, partition } = batch;
    const { maxInFlight, recordTimeoutMs } = this.deps.config.ingress;
    const progress = new PartitionProgress();
    const first = Number(batch.messages[0]?.offset ?? 0);
    const inFlight = new Set<Promise<void>>();
    let failure: { offset: string; err: unknown } | undefined;
    let commitTimer: NodeJS.Timeout | undefined;
    /** Commits one after another, so a later position is never overwritten by an earlier one. */
    let commits = Promise.resolve();

    const commit = async () => {
      const position = progress.committable();
      if (position === undefined) return;
      try {
        await this.consumer.commit([{ topic, partition, offset: String(position) }]);
        progress.markCommitted(position);
      } catch (err) {
        this.log.warn({ err, topic, partition, offset: position }, 'offset commit failed; the next commit covers it');
      }
    };
    /** The position as it stands COMMIT_INTERVAL_MS after a record finished: one commit for the records finished meanwhile. */
    const commitSoon = () => {
      commitTimer ??= setTimeout(() => {
        commitTimer = undefined;
        commits = commits.then(commit);
      }, COMMIT_INTERVAL_MS);
    };

    const settle = async (message: KafkaMessage): Promise<void> => {
      const readAt = this.now();
      const handling = this.handle(topic, partition, message);
      let outcome: IngressOutcome;
      try {
        outcome = await withTimeout(handling, recordTimeoutMs, 'handling an ingress record');
      } catch (err) {
        // Past its bound the record is still being handled (every step inside is bounded too): let
        // it finish before the record is read again, so no record ever has two handlers, which
        // could both claim its key with the record's token and admit two runs.
        await handling.catch(() => undefined);
        if (failure === undefined || BigInt(message.offset) < BigInt(failure.offset)) failure = { offset: message.offset, err };
        return;
      }
      this.deps.metrics.ingressEvents.inc({ outcome });
      this.deps.metrics.ingressSeconds.observe({ outcome }, (this.now() - readAt) / 1000);
      progress.finish(Number(message.offset));
      const next = progress.position();
      if (next !== undefined && next > first) resolveOffset(String(next - 1));
      commitSoon();
    };

    try {
      for (const message of batch.messages) {
        while (inFlight.size >= maxInFlight) {
          await Promise.race(inFlight);
          await heartbeat();
        }
        // Records not started here are fetched again: nothing is skipped by stopping early.
        if (failure !== undefined || !isRunning() || isStale() || this.stopping) break;
        progress.track(Number(message.offset));
        const task: Promise<void> = settle(message).finally(() => inFlight.delete(task));
        inFlight.add(task);
      }
      while (inFlight.size > 0) {
        await Promise.race(inFlight);
        await heartbeat();
      }
    } finally {
      // Even when a heartbeat failed (a rebalance): no record is left without its handler's end.
      await Promise.all(inFlight);
      clearTimeout(commitTimer);
      commits = commits.then(commit);
      await commits;
    }
    if (failure === undefined) {
      this.holds.succeeded(topic, partition);
      return;
    }
    const { failures, waitMs } = this.holds.backOff(topic, partition, failure.offset);
    this.log.warn({ err: failure.err, topic, partition, offset: failure.offset, failures, waitMs }, 'could not handle an ingress record now; reading it again after a backoff');
  }

  /** One record to its outcome; throws when it must be read again later. */
  private async handle(topic: string, partition: number, message: KafkaMessage): Promise<IngressOutcome> {
    const dead = (reason: DeadLetterReason, error: Error) => this.deadLetter(topic, partition, message, reason, error);
    const tenantId = message.key?.toString('utf8');
    const secret = tenantId === undefined ? undefined : this.deps.secrets.get(tenantId);
    if (tenantId === undefined || secret === undefined) return dead('unknown_tenant', new Error(`no tenant with an ingress secret is named by the record key ${JSON.stringify(tenantId ?? null)}`));
    const value = message.value ?? Buffer.alloc(0);
    if (!signatureMatches(secret, tenantId, value, headerText(message.headers, SIGNATURE_HEADER))) {
      return dead('unauthenticated', new Error(`${SIGNATURE_HEADER} is missing or is not the HMAC of this record under tenant ${tenantId}'s ingress secret`));
    }
    let submission: RunSubmission;
    try {
      submission = await this.deps.codec.decode<RunSubmission>(value, SUBJECTS.runSubmission);
    } catch (err) {
      // Anything else (the registry unreachable) is transient: read it again later.
      if (err instanceof EventDecodeError) return dead('decode_error', err);
      throw err;
    }
    const check = checkSubmission(submission, tenantId, this.deps.config);
    if (!check.ok) return this.deadRequest(topic, partition, message, { tenantId, idempotencyKey: submission.idempotencyKey, requestId: submission.requestId }, check.reason, new Error(check.message));
    const req = check.request;
    // A resend read beside its original waits for it, and gets its answer, instead of finding the key in progress.
    return this.keyTurns.run(`${req.tenantId}\u0000${req.idempotencyKey}`, () => this.claimAndDecide(topic, partition, message, req));
  }

  /** A checked request to its outcome: its key claimed, then decided, or answered as a duplicate. */
  private async claimAndDecide(topic: string, partition: number, message: KafkaMessage, req: IngressRequest): Promise<IngressOutcome> {
    // A first decision's claim is the record's: read again after a failure (even one whose reply
    // was lost, the claim made), the record claims its key again instead of waiting out the lease.
    const token = `${topic}/${partition}/${message.offset}`;
    const claim = await this.deps.idempotency.claim(req.tenantId, req.idempotencyKey, req.fingerprint, token);
    switch (claim.kind) {
      case 'replay': {
        const prev = claim.answer.body as IngressAnswer;
        // A re-offer of this very deferral is decided again; anything else with the key is a duplicate.
        // The header is the producer's to write too: at most it gets its own deferral decided sooner.
        if (prev.outcome !== 'deferred' || headerText(message.headers, REOFFER_HEADER) !== prev.runId) return this.duplicate(req, prev);
        return this.decide(req, { topic, partition, message }, { runId: prev.runId, token: prev.token, admittedAt: prev.admittedAt, deadline: prev.deadline, decision: prev.decision + 1, traceparent: prev.traceparent, reoffer: true });
      }
      case 'conflict':
        return this.deadRequest(topic, partition, message, req, 'idempotency_key_reused', new Error('the idempotency key was first used for another request (workflow, input, class or deadlineMs)'));
      case 'in_progress':
        throw new IngressRetryLater('another claimant holds the idempotency key');
      case 'claimed': {
        // A first reading; or a re-offer whose deferral Redis no longer holds: a fresh request then, under a run id of its own.
        // Either way the request arrived when its record was written, and read again after a failure it keeps that arrival.
        const admittedAt = recordWrittenAt(message.timestamp, this.now());
        return this.decide(req, { topic, partition, message }, { runId: newRunId(admittedAt), token, admittedAt, deadline: admittedAt + req.budgetMs, decision: 0, traceparent: childTraceparent(headerText(message.headers, 'traceparent')), reoffer: false });
      }
    }
  }

  /** Admission's answer for this decision of the request, carried out. */
  private async decide(req: IngressRequest, record: { topic: string; partition: number; message: KafkaMessage }, d: Decision): Promise<IngressOutcome> {
    const { config } = this.deps;
    const { message } = record;
    const now = this.now();
    const answer = (a: Pick<IngressAnswer, 'outcome' | 'reason' | 'detail' | 'retryAfterSec' | 'queuePosition' | 'reofferAt'>) =>
      this.answer(req, { ...a, runId: d.runId, token: d.token, decision: d.decision, admittedAt: d.admittedAt, deadline: d.deadline, runClass: req.runClass, workflow: req.workflowName, traceparent: d.traceparent, decidedAt: now });
    if (now >= d.deadline) return answer({ outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec: 1 });
    // Refused as a deadline the request cannot meet: the time the ingress allows for deciding it is over.
    const stale = d.decision === 0 ? staleRecord(d.admittedAt, now, config.ingress.maxRecordAgeMs) : undefined;
    if (stale !== undefined) {
      this.deps.metrics.ingressStaleRecords.inc({ tenant: req.tenantId });
      return answer({ outcome: 'rejected', reason: 'deadline_unreachable', detail: stale, retryAfterSec: 1 });
    }

    const admitted = await admitRun(
      this.deps,
      {
        runId: d.runId,
        tenantId: req.tenantId,
        tenant: req.tenant,
        workflowName: req.workflowName,
        workflow: req.workflow,
        runClass: req.runClass,
        admittedAt: d.admittedAt,
        deadline: d.deadline,
        now,
        inputJson: req.inputJson,
        traceparent: d.traceparent,
        idempotencyKey: req.idempotencyKey,
      },
      this.log,
    );
    switch (admitted.kind) {
      case 'accepted': {
        const { decision } = admitted;
        return answer({ outcome: decision.outcome, reason: decision.reason, ...(decision.queuePosition !== undefined ? { queuePosition: decision.queuePosition } : {}) });
      }
      case 'too_large':
        await this.release(req, d);
        return this.deadRequest(record.topic, record.partition, message, req, 'invalid_request', admitted.error);
      case 'not_acknowledged':
        // Marked so it never runs, should it land: this run id is spent, and a deferral's cannot change.
        if (d.reoffer && admitted.mayHaveLanded) return answer({ outcome: 'rejected', reason: 'overloaded', retryAfterSec: 1 });
        await this.release(req, d);
        throw new IngressRetryLater('Kafka did not acknowledge the run');
      case 'refused':
        break;
    }
    const { decision } = admitted;
    if (decision.redisOutage) {
      await this.release(req, d);
      throw new IngressRetryLater('Redis is unreachable: the ingress holds its records rather than decide without it');
    }
    if (decision.outcome === 'rejected') return answer({ outcome: 'rejected', reason: decision.reason, retryAfterSec: decision.retryAfterSec ?? 1 });
    const retryAfterSec = decision.retryAfterSec ?? 1;
    const next = reofferAt({ now, retryAfterSec, admittedAt: d.admittedAt, deadline: d.deadline, decision: d.decision });
    if (next.kind === 'too_late') return answer({ outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec });
    // The re-offer before the answer: once a deferral is stored, only its re-offer moves it on.
    try {
      await this.deps.producer.publishIngressRetry({ tenantId: req.tenantId, value: message.value ?? Buffer.alloc(0), headers: reofferHeaders(message.headers, d.runId, next.dueAt) }, config.kafka.produceTimeoutMs);
    } catch (err) {
      await this.release(req, d);
      throw err;
    }
    return answer({ outcome: 'deferred', reason: decision.reason, retryAfterSec, reofferAt: next.dueAt });
  }

  /**
   * Publishes the answer and keeps it under the key (a deferral until past its deadline). The
   * status must reach Kafka (else the record is read again, and the kept answer is published as a
   * duplicate's); a failed store is logged, as on the HTTP path: the key's claim then lapses.
   */
  private async answer(req: RequestOf, a: IngressAnswer): Promise<IngressOutcome> {
    const { config, metrics } = this.deps;
    const keepMs = a.deadline - a.decidedAt + config.admission.leaseGraceMs;
    const [published, stored] = await Promise.allSettled([
      this.deps.producer.publishStatus(answerStatusEvent(a, req.tenantId, req.requestId), config.kafka.produceTimeoutMs),
      this.deps.idempotency.store(req.tenantId, req.idempotencyKey, a.token, { status: answerStatus(a.outcome), body: a, headers: {} }, keepMs),
    ]);
    if (stored.status === 'rejected') {
      metrics.submitCleanupFailures.inc({ step: 'store' });
      this.log.error({ err: stored.reason, runId: a.runId, tenantId: req.tenantId }, 'could not keep an ingress answer under its idempotency key; its claim will lapse');
    } else if (!stored.value) {
      this.log.warn({ runId: a.runId, tenantId: req.tenantId, idempotencyKey: req.idempotencyKey }, 'ingress idempotency claim expired before it was settled');
    }
    if (published.status === 'rejected') throw published.reason;
    return a.outcome;
  }

  /** A key seen before: its kept answer again, for this record's request id; never a second run. */
  private async duplicate(req: IngressRequest, prev: IngressAnswer): Promise<IngressOutcome> {
    await this.deps.producer.publishStatus(answerStatusEvent(prev, req.tenantId, req.requestId), this.deps.config.kafka.produceTimeoutMs);
    this.deps.metrics.idempotentReplays.inc({ tenant: req.tenantId });
    return 'duplicate';
  }

  /** Frees a first decision's claim, so the record read again can claim its key; a re-offer keeps its deferral. */
  private async release(req: IngressRequest, d: Decision): Promise<void> {
    if (d.reoffer) return;
    try {
      await this.deps.idempotency.forget(req.tenantId, req.idempotencyKey, d.token);
    } catch (err) {
      this.deps.metrics.submitCleanupFailures.inc({ step: 'forget' });
      this.log.error({ err, runId: d.runId, tenantId: req.tenantId }, 'could not free an ingress idempotency claim; it lapses after admission.idempotencyPendingMs');
    }
  }

  /**
   * Dead-letters an authenticated request. A re-offer of the deferral kept under its key also ends
   * that deferral (`endedDeferral`): its run's `dead_lettered` status is published and kept under
   * the key before the dead letter, which then names the run.
   */
  private async deadRequest(topic: string, partition: number, message: KafkaMessage, req: RequestOf, reason: DeadLetterReason, error: Error): Promise<IngressOutcome> {
    const reofferRunId = headerText(message.headers, REOFFER_HEADER);
    const kept = reofferRunId === undefined ? undefined : await this.deps.idempotency.answer(req.tenantId, req.idempotencyKey);
    const ended = endedDeferral(kept?.body as IngressAnswer | undefined, reofferRunId, { reason, detail: error.message, at: this.now() });
    if (ended === undefined) return this.deadLetter(topic, partition, message, reason, error);
    await this.answer(req, ended);
    return this.deadLetter(topic, partition, message, reason, error, { runId: ended.runId, tenantId: req.tenantId, workflow: ended.workflow });
  }

  private async deadLetter(topic: string, partition: number, message: KafkaMessage, reason: DeadLetterReason, error: Error, run?: DeadLetterInput['run']): Promise<IngressOutcome> {
    const now = this.now();
    const { envelope, headers } = buildDeadLetter({ topic, partition, message, consumerGroup: this.group, reason, error, attempts: 1, firstFailureAt: now, lastFailureAt: now, ...(run ? { run } : {}) });
    await this.deps.producer.publishDeadLetter(envelope, headers, this.deps.config.kafka.produceTimeoutMs);
    this.deps.metrics.deadLettered.inc({ topic, reason });
    this.log.warn({ topic, partition, offset: message.offset, reason, error: error.message }, 'ingress record dead-lettered');
    return 'dead_lettered';
  }
}

/** A deferred request's record on the retry topic: the producer's headers, and when and where it goes back. */
export function reofferHeaders(original: IHeaders | undefined, runId: string, dueAt: number): Record<string, string> {
  const kept = Object.entries(headerRecord(original)).filter(([name]) => !INTERNAL_HEADERS.has(name));
  return { ...Object.fromEntries(kept), [RETRY_HEADER.dueAt]: String(dueAt), [RETRY_HEADER.destination]: INGRESS_DESTINATION, [REOFFER_HEADER]: runId };
}
