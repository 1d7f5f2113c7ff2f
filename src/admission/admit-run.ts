import type { SluiceConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import type { EventProducer } from '../producers/event-producer.js';
import { MessageTooLargeError, ProduceQueueFullError, ProduceTimeoutError, mayHaveReachedKafka } from '../producers/produce-batcher.js';
import type { RedisCancellations } from '../runs/cancellation.js';
import type { AdmissionController, AdmissionRequest } from './admission-controller.js';
import type { AdmissionDecision } from './admission-policy.js';

/** What both submit adapters (HTTP and the Kafka ingress) need to admit a run and publish it. */
export interface AdmitRunDeps {
  config: SluiceConfig;
  metrics: Metrics;
  producer: Pick<EventProducer, 'publishRunRequested'>;
  admission: Pick<AdmissionController, 'decide' | 'withdraw'>;
  /**
   * Marks a run's answer pending before its produce and settles the mark with the answer: a run
   * refused after its event may have reached Kafka is withdrawn, so it never runs.
   */
  withdrawals: Pick<RedisCancellations, 'markAnswerPending' | 'markAnswered' | 'withdraw'>;
}

/**
 * A validated request about to meet admission; nothing in it has touched shared state. `now` is
 * when admission decides, from `admittedAt` on.
 */
export interface RunSubmission extends Omit<AdmissionRequest, 'idempotencyKey'> {
  /** When the deadline started: the request's arrival (the ingress keeps it across re-offers). */
  admittedAt: number;
  /** The input as canonical JSON text, serialized once within `api.input` bounds. */
  inputJson: string;
  /** The run's own traceparent (already a child of the caller's). */
  traceparent: string;
  idempotencyKey: string | null;
}

export type AdmitOutcome =
  | { kind: 'accepted'; run: RunRequested; decision: AdmissionDecision }
  | { kind: 'refused'; decision: AdmissionDecision }
  | { kind: 'not_acknowledged'; mayHaveLanded: boolean }
  | { kind: 'too_large'; error: MessageTooLargeError };

const REFUSAL_DETAIL: Record<string, string> = {
  rate_limited: 'this tenant is sending faster than its rate; retry after the indicated time',
  token_budget_exhausted: 'this tenant\'s token budget cannot cover this run now; retry after the indicated time',
  tenant_backlog_full: 'this tenant has as many unfinished runs as it may have; retry when some finish',
  overloaded: 'Sluice has as many unfinished runs as it can hold; retry after the indicated time',
  deadline_unreachable: 'at the measured service rate, or with the provider turns its calls could get, this run could not finish before its deadline',
  dependency_unavailable: 'a dependency this workflow needs is unavailable past the run\'s deadline',
};

/** The contract's explanation of a refusal, for a problem document's `detail` or a status event's error. */
export function refusalDetail(d: Pick<AdmissionDecision, 'reason'>): string {
  return REFUSAL_DETAIL[d.reason] ?? d.reason;
}

/** The `queued` status message of an accepted run. */
export function admissionMessage(d: Pick<AdmissionDecision, 'outcome' | 'queuePosition'>): string {
  return d.outcome === 'queued' ? `queued: waiting for capacity, position ${d.queuePosition} in line` : 'queued: admitted, waiting for a processor';
}

export const isRefusal = (d: AdmissionDecision): boolean => d.outcome === 'deferred' || d.outcome === 'rejected';

/**
 * Where a request becomes an event, for both submit adapters: the admission decision (bucket,
 * token budget, backlog, deadline), then the produce, acknowledged by Kafka within
 * `kafka.produceTimeoutMs`. Whatever happens after admission — a refusal, Kafka not acknowledging,
 * a throw — the `finally` gives back what the request took, in one place: an accepted run keeps
 * its backlog entry; anything else withdraws it (and its reserved tokens), and a run whose event
 * may still land in Kafka is marked so that it never runs. Never-accepted runs settle here; the
 * caller settles its own answer (read-model row, Idempotency-Key).
 */
export async function admitRun(deps: AdmitRunDeps, s: RunSubmission, log: Pick<Logger, 'warn' | 'error'>): Promise<AdmitOutcome> {
  const { config, metrics } = deps;
  let decision: AdmissionDecision | undefined;
  let outcome: AdmitOutcome | undefined;
  let answerMarked = false;
  try {
    decision = await deps.admission.decide({
      runId: s.runId,
      tenantId: s.tenantId,
      tenant: s.tenant,
      workflowName: s.workflowName,
      workflow: s.workflow,
      runClass: s.runClass,
      deadline: s.deadline,
      now: s.now,
      idempotencyKey: s.idempotencyKey !== null,
    });
    if (isRefusal(decision)) return (outcome = { kind: 'refused', decision });
    // Before the produce: part of a produce request can be in Kafka, and its run picked up, while
    // the request is still unacknowledged and may yet be refused. A processor that finds this mark
    // waits for the answer. Without Redis (the outage policy decided) there is no mark.
    if (!decision.redisOutage) answerMarked = await markAnswerPending(deps, s, log);

    const run: RunRequested = {
      runId: s.runId,
      tenantId: s.tenantId,
      workflow: s.workflowName,
      class: s.runClass,
      admittedAt: s.admittedAt,
      deadline: s.deadline,
      attempt: 1,
      traceparent: s.traceparent,
      input: s.inputJson,
      idempotencyKey: s.idempotencyKey,
      dueAt: null,
      tokenReservation: decision.tokenReservation ?? null,
      prepaidTurns: decision.prepaidTurns ?? null,
    };
    try {
      await deps.producer.publishRunRequested(run, config.kafka.produceTimeoutMs);
    } catch (err) {
      if (err instanceof MessageTooLargeError) {
        metrics.submitFailures.inc({ reason: 'too_large' });
        return (outcome = { kind: 'too_large', error: err });
      }
      const reason = err instanceof ProduceQueueFullError ? 'queue_full' : err instanceof ProduceTimeoutError ? 'timeout' : 'error';
      metrics.submitFailures.inc({ reason });
      metrics.admissionOutageDecisions.inc({ dependency: 'kafka', policy: 'fail-closed', outcome: 'refused' });
      log.warn({ err, runId: s.runId, tenantId: s.tenantId }, 'Kafka did not acknowledge a submission');
      return (outcome = { kind: 'not_acknowledged', mayHaveLanded: mayHaveReachedKafka(err) });
    }
    metrics.runsSubmitted.inc({ tenant: s.tenantId, workflow: s.workflowName, class: s.runClass });
    return (outcome = { kind: 'accepted', run, decision });
  } finally {
    if (outcome?.kind !== 'accepted') await withdrawUnaccepted(deps, s, outcome, decision, log);
    // Failing, the run still starts once the mark expires (answerPendingMs), that much later.
    else if (answerMarked) await settleStep(deps, s, 'mark_answered', () => deps.withdrawals.markAnswered(s.runId), log);
  }
}

/**
 * Whether the answer-pending mark was written. A Redis failure here does not refuse the
 * submission (admission just reached Redis); it is counted and logged, and should Kafka then not
 * acknowledge the event in time, part of it may run although refused.
 */
async function markAnswerPending(deps: AdmitRunDeps, s: RunSubmission, log: Pick<Logger, 'error'>): Promise<boolean> {
  try {
    await deps.withdrawals.markAnswerPending(s.runId, deps.config.kafka.produceTimeoutMs);
    return true;
  } catch (err) {
    deps.metrics.submitCleanupFailures.inc({ step: 'mark_answer_pending' });
    log.error({ err, runId: s.runId, tenantId: s.tenantId }, "could not mark the submission's answer pending; should Kafka not acknowledge it, it may run although refused");
    return false;
  }
}

/** One settling step after the answer; never throws: what cannot be settled is logged, counted and left to its lease. */
async function settleStep(deps: AdmitRunDeps, s: RunSubmission, step: 'withdraw' | 'mark_not_acknowledged' | 'mark_answered', settle: () => Promise<unknown>, log: Pick<Logger, 'error'>): Promise<void> {
  try {
    await settle();
  } catch (err) {
    deps.metrics.submitCleanupFailures.inc({ step });
    log.error({ err, runId: s.runId, tenantId: s.tenantId, step }, 'could not settle a submission; its lease will');
  }
}

/**
 * Never throws: what cannot be settled is logged, counted and left to its lease (a backlog entry
 * expires after the run's deadline plus `admission.leaseGraceMs`).
 */
async function withdrawUnaccepted(deps: AdmitRunDeps, s: RunSubmission, outcome: AdmitOutcome | undefined, decision: AdmissionDecision | undefined, log: Pick<Logger, 'error'>): Promise<void> {
  const attempt = (step: 'withdraw' | 'mark_not_acknowledged', settle: () => Promise<unknown>) => settleStep(deps, s, step, settle, log);
  // An entry may be held unless the run was refused in Redis (nothing was taken) or decided by
  // the outage policy (Redis was not reachable to take one).
  const holdsEntry = !(decision && (isRefusal(decision) || decision.redisOutage));
  // The caller is told the run was not accepted, so should its event be in Kafka after all, it
  // must not run: the processor checks this mark before the run starts, having waited for it
  // while the answer-pending mark stood. Without Redis the mark cannot be written, and such a run
  // would execute (counted here, logged). An event that never left this process needs no mark;
  // its answer-pending mark expires on its own.
  const mayHaveLanded = outcome?.kind === 'not_acknowledged' && outcome.mayHaveLanded;
  await Promise.all([
    holdsEntry ? attempt('withdraw', () => deps.admission.withdraw({ runId: s.runId, tenantId: s.tenantId, runClass: s.runClass }, decision?.tokenReservation ? { tokens: decision.tokenReservation, deadline: s.deadline } : undefined, decision?.prepaidTurns)) : undefined,
    mayHaveLanded ? attempt('mark_not_acknowledged', () => deps.withdrawals.withdraw(s.runId, s.deadline)) : undefined,
  ]);
}
