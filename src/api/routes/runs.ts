import type { FastifyBaseLogger, FastifyInstance, FastifyReply } from 'fastify';
import type { SluiceConfig, TenantConfig, WorkflowConfig } from '../../config/schema.js';
import { ownEntry } from '../../config/lookup.js';
import type { RunClass, RunRequested } from '../../events/schemas.js';
import type { Metrics } from '../../obs/metrics.js';
import type { EventProducer } from '../../producers/event-producer.js';
import { MessageTooLargeError, ProduceQueueFullError, ProduceTimeoutError, mayHaveReachedKafka } from '../../producers/produce-batcher.js';
import type { RedisCancellations } from '../../runs/cancellation.js';
import { resolveDeadline } from '../../runs/deadline.js';
import type { AdmissionDecision } from '../../admission/admission-policy.js';
import { newRunId } from '../../runs/run-id.js';
import { childTraceparent } from '../../runs/traceparent.js';
import type { RunStore } from '../../status/run-store.js';
import { sendProblem, type FieldError, type ProblemCode } from '../problem.js';
import { serializeRunInput } from '../run-input.js';
import { findOwnRun, tenantOf } from './own-run.js';
import type { AdmissionController } from '../../admission/admission-controller.js';
import type { ReadLimits } from '../../admission/read-limits.js';
import { requestFingerprint, type IdempotencyClaim, type IdempotencyStore, type StoredAnswer } from '../../admission/idempotency.js';
import { infrastructureFailure } from '../../util/infrastructure-failure.js';
import { withTimeout } from '../../util/with-timeout.js';

export interface RunRouteDeps {
  config: SluiceConfig;
  metrics: Metrics;
  producer: Pick<EventProducer, 'publishRunRequested'>;
  runs: Pick<RunStore, 'recordAdmission' | 'getRun'>;
  admission: Pick<AdmissionController, 'decide' | 'withdraw' | 'redisUnreachable'>;
  idempotency: Pick<IdempotencyStore, 'claim' | 'store' | 'forget'>;
  /**
   * The marks that keep a run answered 503 from running should its event be in Kafka after all:
   * pending before the produce, settled with the answer (see RedisCancellations).
   */
  withdrawals: Pick<RedisCancellations, 'markAnswerPending' | 'markAnswered' | 'withdraw'>;
  /** The tenant's read bounds, for `GET /v1/runs/:id`. */
  reads: Pick<ReadLimits, 'take'>;
  now?: () => number;
}

interface SubmitBody {
  workflow: string;
  input: unknown;
  class?: RunClass;
  deadlineMs?: number;
}

const submitSchema = {
  body: {
    type: 'object',
    required: ['workflow', 'input'],
    additionalProperties: false,
    properties: {
      workflow: { type: 'string', minLength: 1, maxLength: 63 },
      input: {},
      class: { type: 'string', enum: ['interactive', 'batch'] },
      deadlineMs: { type: 'integer', minimum: 1 },
    },
  },
} as const;

/** Printable ASCII without spaces, as the IETF Idempotency-Key draft and Stripe accept. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

const REFUSAL_DETAIL: Record<string, string> = {
  rate_limited: 'this tenant is sending faster than its rate; retry after the indicated time',
  token_budget_exhausted: 'this tenant\'s token budget cannot cover this run now; retry after the indicated time',
  tenant_backlog_full: 'this tenant has as many unfinished runs as it may have; retry when some finish',
  overloaded: 'Sluice has as many unfinished runs as it can hold; retry after the indicated time',
  deadline_unreachable: 'at the measured service rate this run could not finish before its deadline',
  dependency_unavailable: 'a dependency this workflow needs is unavailable past the run\'s deadline',
};

function refusalDetail(d: AdmissionDecision): string {
  return REFUSAL_DETAIL[d.reason] ?? d.reason;
}

function admissionMessage(d: AdmissionDecision): string {
  return d.outcome === 'queued' ? `queued: waiting for capacity, position ${d.queuePosition} in line` : 'queued: admitted, waiting for a processor';
}

function refuse(reply: FastifyReply, d: AdmissionDecision): FastifyReply {
  reply.request.submitAnswer = d.outcome;
  return sendProblem(reply, d.reason as ProblemCode, { detail: refusalDetail(d), retryAfterSec: d.retryAfterSec });
}

/** What a validated request needs to become a run event; nothing in it has touched shared state. */
interface Submission {
  runId: string;
  tenantId: string;
  tenant: TenantConfig;
  workflowName: string;
  workflow: WorkflowConfig;
  runClass: RunClass;
  admittedAt: number;
  deadline: number;
  /** The input as canonical JSON text, serialized once within `api.input` bounds. */
  inputJson: string;
  traceparent: string | undefined;
  /** The Idempotency-Key and the token of this request's claim on it. */
  claim: { key: string; token: string } | undefined;
}

type SubmitOutcome =
  | { kind: 'accepted'; answer: StoredAnswer; admission: AdmissionDecision['outcome'] }
  | { kind: 'refused'; decision: AdmissionDecision }
  | { kind: 'not_acknowledged'; mayHaveLanded: boolean }
  | { kind: 'too_large'; error: MessageTooLargeError };

const isRefusal = (d: AdmissionDecision) => d.outcome === 'deferred' || d.outcome === 'rejected';

const linksFor = (runId: string) => ({ self: `/v1/runs/${runId}`, events: `/v1/runs/${runId}/events` });

/**
 * Admission, the produce and the read-model row for one submission. Whatever happens after
 * admission — a refusal, Kafka not acknowledging, a throw anywhere — the `finally` settles what
 * the request took, in one place: an accepted run keeps its backlog entry and stores its answer
 * under the Idempotency-Key; anything else withdraws the entry and frees the key.
 */
async function admitAndPublish(deps: RunRouteDeps, s: Submission, log: FastifyBaseLogger): Promise<SubmitOutcome> {
  const { config, metrics } = deps;
  let decision: AdmissionDecision | undefined;
  let outcome: SubmitOutcome | undefined;
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
      now: s.admittedAt,
      idempotencyKey: s.claim !== undefined,
    });
    if (isRefusal(decision)) return (outcome = { kind: 'refused', decision });
    // Before the produce: part of a produce request can be in Kafka, and its run picked up, while
    // the request is still unacknowledged and may yet be answered 503. A processor that finds this
    // mark waits for the answer. Without Redis (the outage policy decided) there is no mark.
    if (!decision.redisOutage) answerMarked = await markAnswerPending(deps, s, log);

    const run: RunRequested = {
      runId: s.runId,
      tenantId: s.tenantId,
      workflow: s.workflowName,
      class: s.runClass,
      admittedAt: s.admittedAt,
      deadline: s.deadline,
      attempt: 1,
      traceparent: childTraceparent(s.traceparent),
      input: s.inputJson,
      idempotencyKey: s.claim?.key ?? null,
      dueAt: null,
      tokenReservation: decision.tokenReservation ?? null,
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
    outcome = {
      kind: 'accepted',
      admission: decision.outcome,
      answer: {
        status: 202,
        headers: { Location: `/v1/runs/${s.runId}` },
        body: {
          runId: s.runId,
          status: 'queued',
          admission: decision.outcome,
          deadline: new Date(s.deadline).toISOString(),
          ...(decision.queuePosition !== undefined ? { queuePosition: decision.queuePosition } : {}),
          links: linksFor(s.runId),
        },
      },
    };
    metrics.runsSubmitted.inc({ tenant: s.tenantId, workflow: s.workflowName, class: s.runClass });

    try {
      // Bounded: the row is read-your-writes convenience, a dead Postgres must not hold every 202.
      // Written behind (api.admissionRows), this only queues the row, unless the queue is full.
      await withTimeout(deps.runs.recordAdmission({ ...run, message: admissionMessage(decision) }), config.api.recordAdmissionTimeoutMs, 'recording the admission');
    } catch (err) {
      // The event is durable in Kafka and will run; the status sink creates the row from the
      // first status event. Refusing now would invite a retry that duplicates the run.
      metrics.admissionRecordFailures.inc();
      metrics.admissionOutageDecisions.inc({ dependency: 'postgres', policy: 'fail-open', outcome: 'admitted' });
      log.error({ err, runId: s.runId }, 'could not record admission in Postgres');
    }
    return outcome;
  } finally {
    await settleSubmission(deps, s, { outcome, decision, answerMarked }, log);
  }
}

/**
 * Whether the answer-pending mark was written. A Redis failure here does not refuse the
 * submission (admission just reached Redis); it is counted and logged, and should Kafka then not
 * acknowledge the event in time, part of it may run although answered 503.
 */
async function markAnswerPending(deps: RunRouteDeps, s: Submission, log: FastifyBaseLogger): Promise<boolean> {
  try {
    await deps.withdrawals.markAnswerPending(s.runId, deps.config.kafka.produceTimeoutMs);
    return true;
  } catch (err) {
    deps.metrics.submitCleanupFailures.inc({ step: 'mark_answer_pending' });
    log.error({ err, runId: s.runId, tenantId: s.tenantId }, "could not mark the submission's answer pending; should Kafka not acknowledge it, it may run although refused");
    return false;
  }
}

/**
 * Never throws: what cannot be settled is logged, counted and left to its lease (a backlog entry
 * expires after the run's deadline plus `admission.leaseGraceMs`, a claim after
 * `admission.idempotencyPendingMs`).
 */
async function settleSubmission(
  deps: RunRouteDeps,
  s: Submission,
  { outcome, decision, answerMarked }: { outcome: SubmitOutcome | undefined; decision: AdmissionDecision | undefined; answerMarked: boolean },
  log: FastifyBaseLogger,
): Promise<void> {
  const attempt = async (step: 'withdraw' | 'store' | 'forget' | 'mark_not_acknowledged' | 'mark_answered', settle: () => Promise<boolean | void>) => {
    try {
      // The claim outlived its lease and another request took the key: a duplicate may follow.
      if ((await settle()) === false) log.warn({ tenantId: s.tenantId, idempotencyKey: s.claim?.key }, 'Idempotency-Key claim expired before it was settled');
    } catch (err) {
      deps.metrics.submitCleanupFailures.inc({ step });
      log.error({ err, runId: s.runId, tenantId: s.tenantId, step }, 'could not settle a submission; its lease will');
    }
  };
  const accepted = outcome?.kind === 'accepted' ? outcome.answer : undefined;
  // An entry may be held unless the run was accepted (it keeps it), refused in Redis (nothing was
  // taken) or decided by the outage policy (Redis was not reachable to take one).
  const holdsEntry = !accepted && !(decision && (isRefusal(decision) || decision.redisOutage));
  const { claim } = s;
  // The caller is told the run was not accepted, so should its event be in Kafka after all, it
  // must not run: the processor checks this mark before the run starts, having waited for it
  // while the answer-pending mark stood. Without Redis the mark cannot be written, and such a run
  // would execute (counted here, logged). A submission whose event never left this process needs
  // no mark; its answer-pending mark expires on its own.
  const mayHaveLanded = outcome?.kind === 'not_acknowledged' && outcome.mayHaveLanded;
  await Promise.all([
    holdsEntry ? attempt('withdraw', () => deps.admission.withdraw({ runId: s.runId, tenantId: s.tenantId, runClass: s.runClass }, decision?.tokenReservation ? { tokens: decision.tokenReservation, deadline: s.deadline } : undefined)) : undefined,
    mayHaveLanded ? attempt('mark_not_acknowledged', () => deps.withdrawals.withdraw(s.runId, s.deadline)) : undefined,
    // Failing, the run still starts once the mark expires (answerPendingMs), that much later.
    accepted && answerMarked ? attempt('mark_answered', () => deps.withdrawals.markAnswered(s.runId)) : undefined,
    claim && accepted ? attempt('store', () => deps.idempotency.store(s.tenantId, claim.key, claim.token, accepted)) : undefined,
    claim && !accepted ? attempt('forget', () => deps.idempotency.forget(s.tenantId, claim.key, claim.token)) : undefined,
  ]);
}

export function registerRunRoutes(app: FastifyInstance, deps: RunRouteDeps): void {
  const { config, metrics } = deps;
  const now = deps.now ?? Date.now;

  /**
   * Where a request becomes an event. Order matters: validation and the input serialized within
   * bounds (no state touched), the Idempotency-Key claim (duplicates wait for the first answer),
   * admission (bucket, backlog, deadline), then the produce — the 202 leaves only after Kafka
   * acknowledged the event. Redis failing on the way is answered by the outage policy.
   */
  app.post<{ Body: SubmitBody }>('/v1/runs', { schema: submitSchema, config: { submission: true } }, async (req, reply) => {
    const tenantId = tenantOf(req, reply);
    if (!tenantId) return reply;
    const tenant = ownEntry(config.tenants, tenantId)!;
    const body = req.body;
    const workflow = ownEntry(config.workflows, body.workflow);
    if (!workflow) return sendProblem(reply, 'unknown_workflow', { detail: `known workflows: ${Object.keys(config.workflows).join(', ')}` });

    const idempotencyKey = req.headers['idempotency-key'];
    if (idempotencyKey !== undefined && (typeof idempotencyKey !== 'string' || !IDEMPOTENCY_KEY.test(idempotencyKey))) {
      return sendProblem(reply, 'invalid_idempotency_key', { detail: 'use 1 to 255 printable ASCII characters without spaces' });
    }

    const runClass = body.class ?? workflow.defaultClass;
    const admittedAt = now();
    const deadline = resolveDeadline(body.deadlineMs, runClass, config.api.deadlineMs, admittedAt);
    const input = serializeRunInput(body.input, config.api.input);
    if (!deadline.ok || !input.ok) {
      const errors: FieldError[] = [...(deadline.ok ? [] : [{ path: '/deadlineMs', message: deadline.message }]), ...(input.ok ? [] : [input.error])];
      return sendProblem(reply, 'invalid_request', { errors });
    }

    let claim: Submission['claim'];
    if (idempotencyKey !== undefined) {
      let keyClaim: IdempotencyClaim;
      try {
        keyClaim = await deps.idempotency.claim(tenantId, idempotencyKey, requestFingerprint(body.workflow, body, input.json));
      } catch (err) {
        if (!infrastructureFailure(err)) throw err;
        return refuse(reply, deps.admission.redisUnreachable({ tenantId, runClass, idempotencyKey: true, now: admittedAt }, err));
      }
      if (keyClaim.kind === 'replay') {
        metrics.idempotentReplays.inc({ tenant: tenantId });
        req.submitAnswer = 'replayed';
        return reply.code(keyClaim.answer.status).headers({ ...keyClaim.answer.headers, 'Idempotent-Replayed': 'true' }).send(keyClaim.answer.body);
      }
      if (keyClaim.kind === 'conflict') return sendProblem(reply, 'idempotency_key_reused', { detail: 'a key identifies one request: use a new key for a different body' });
      if (keyClaim.kind === 'in_progress') return sendProblem(reply, 'idempotency_key_in_use', { detail: 'the first request with this key has not been answered yet', retryAfterSec: 1 });
      claim = { key: idempotencyKey, token: keyClaim.token };
    }

    const incomingTrace = req.headers.traceparent;
    const outcome = await admitAndPublish(
      deps,
      {
        runId: newRunId(admittedAt),
        tenantId,
        tenant,
        workflowName: body.workflow,
        workflow,
        runClass,
        admittedAt,
        deadline: deadline.deadline,
        inputJson: input.json,
        traceparent: typeof incomingTrace === 'string' ? incomingTrace : undefined,
        claim,
      },
      req.log,
    );
    switch (outcome.kind) {
      case 'refused':
        return refuse(reply, outcome.decision);
      case 'not_acknowledged':
        req.submitAnswer = 'rejected';
        return sendProblem(reply, 'overloaded', { detail: 'the event log did not acknowledge the run in time; it was not accepted and will not run', retryAfterSec: 1 });
      case 'too_large':
        return sendProblem(reply, 'payload_too_large', { detail: `the run's event would be ${outcome.error.bytes} bytes; one Kafka request carries at most ${outcome.error.limit}` });
      case 'accepted':
        req.submitAnswer = outcome.admission;
        return reply.code(outcome.answer.status).headers(outcome.answer.headers).send(outcome.answer.body);
    }
  });

  app.get<{ Params: { id: string } }>('/v1/runs/:id', async (req, reply) => {
    const own = await findOwnRun(req, reply, deps, req.params.id);
    if (!own) return reply;
    return reply.send({ ...own.view, links: linksFor(own.view.runId) });
  });
}
