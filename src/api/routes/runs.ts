import type { FastifyBaseLogger, FastifyInstance, FastifyReply } from 'fastify';
import { ownEntry } from '../../config/lookup.js';
import type { RunClass } from '../../events/schemas.js';
import { resolveDeadline } from '../../runs/deadline.js';
import type { AdmissionDecision } from '../../admission/admission-policy.js';
import { newRunId } from '../../runs/run-id.js';
import { childTraceparent } from '../../runs/traceparent.js';
import type { RunStore } from '../../status/run-store.js';
import { sendProblem, type FieldError, type ProblemCode } from '../problem.js';
import { serializeRunInput } from '../../runs/run-input.js';
import { findOwnRun, tenantOf } from './own-run.js';
import type { AdmissionController } from '../../admission/admission-controller.js';
import type { ReadLimits } from '../../admission/read-limits.js';
import { IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_RULE, requestFingerprint, type IdempotencyClaim, type IdempotencyStore, type StoredAnswer } from '../../admission/idempotency.js';
import { admissionMessage, admitRun, refusalDetail, type AdmitOutcome, type AdmitRunDeps, type RunSubmission } from '../../admission/admit-run.js';
import { infrastructureFailure } from '../../util/infrastructure-failure.js';
import { withTimeout } from '../../util/with-timeout.js';

/** What admission needs (`AdmitRunDeps`), plus the read model, Idempotency-Key answers and read bounds. */
export interface RunRouteDeps extends AdmitRunDeps {
  runs: Pick<RunStore, 'recordAdmission' | 'getRun'>;
  admission: Pick<AdmissionController, 'decide' | 'withdraw' | 'redisUnreachable'>;
  idempotency: Pick<IdempotencyStore, 'claim' | 'store' | 'forget'>;
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

function refuse(reply: FastifyReply, d: AdmissionDecision): FastifyReply {
  reply.request.submitAnswer = d.outcome;
  return sendProblem(reply, d.reason as ProblemCode, { detail: refusalDetail(d), retryAfterSec: d.retryAfterSec });
}

/** A validated request, with the Idempotency-Key it claimed and the token of that claim. */
type Submission = Omit<RunSubmission, 'idempotencyKey'> & { claim: { key: string; token: string } | undefined };

type SubmitOutcome = Exclude<AdmitOutcome, { kind: 'accepted' }> | { kind: 'accepted'; answer: StoredAnswer; admission: AdmissionDecision['outcome'] };

const linksFor = (runId: string) => ({ self: `/v1/runs/${runId}`, events: `/v1/runs/${runId}/events` });

/**
 * The shared admission and produce (`admitRun`), then what only HTTP has: the read-model row
 * written for read-your-writes, and the answer kept under the Idempotency-Key — stored for an
 * accepted run, the key freed otherwise, in the `finally` whatever happened.
 */
async function admitAndPublish(deps: RunRouteDeps, s: Submission, log: FastifyBaseLogger): Promise<SubmitOutcome> {
  const { config, metrics } = deps;
  let outcome: SubmitOutcome | undefined;
  try {
    const admitted = await admitRun(deps, { ...s, idempotencyKey: s.claim?.key ?? null }, log);
    if (admitted.kind !== 'accepted') return (outcome = admitted);
    const { run, decision } = admitted;
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
    await settleIdempotencyKey(deps, s, outcome, log);
  }
}

/**
 * Never throws: a claim that cannot be settled is logged, counted and left to its lease
 * (`admission.idempotencyPendingMs`).
 */
async function settleIdempotencyKey(deps: RunRouteDeps, s: Submission, outcome: SubmitOutcome | undefined, log: FastifyBaseLogger): Promise<void> {
  const { claim } = s;
  if (!claim) return;
  const accepted = outcome?.kind === 'accepted' ? outcome.answer : undefined;
  const step = accepted ? 'store' : 'forget';
  try {
    const settled = accepted ? await deps.idempotency.store(s.tenantId, claim.key, claim.token, accepted) : await deps.idempotency.forget(s.tenantId, claim.key, claim.token);
    // The claim outlived its lease and another request took the key: a duplicate may follow.
    if (!settled) log.warn({ tenantId: s.tenantId, idempotencyKey: claim.key }, 'Idempotency-Key claim expired before it was settled');
  } catch (err) {
    deps.metrics.submitCleanupFailures.inc({ step });
    log.error({ err, runId: s.runId, tenantId: s.tenantId, step }, 'could not settle a submission; its lease will');
  }
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
      return sendProblem(reply, 'invalid_idempotency_key', { detail: `use ${IDEMPOTENCY_KEY_RULE}` });
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
        now: admittedAt,
        deadline: deadline.deadline,
        inputJson: input.json,
        traceparent: childTraceparent(typeof incomingTrace === 'string' ? incomingTrace : undefined),
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
