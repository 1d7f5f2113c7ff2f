import type { FastifyInstance } from 'fastify';
import type { SluiceConfig } from '../../config/schema.js';
import { ownEntry } from '../../config/lookup.js';
import type { RunClass, RunRequested } from '../../events/schemas.js';
import type { Metrics } from '../../obs/metrics.js';
import type { EventProducer } from '../../producers/event-producer.js';
import { ProduceQueueFullError, ProduceTimeoutError } from '../../producers/produce-batcher.js';
import { resolveDeadline } from '../../runs/deadline.js';
import type { AdmissionDecision } from '../../admission/admission-policy.js';
import { newRunId } from '../../runs/run-id.js';
import { childTraceparent } from '../../runs/traceparent.js';
import type { RunStore } from '../../status/run-store.js';
import { sendProblem, type ProblemCode } from '../problem.js';
import { findOwnRun, tenantOf } from './own-run.js';
import type { AdmissionController } from '../../admission/admission-controller.js';
import { requestFingerprint, type IdempotencyStore, type StoredAnswer } from '../../admission/idempotency.js';
import type { ReadLimits } from '../../admission/read-limits.js';

export interface RunRouteDeps {
  config: SluiceConfig;
  metrics: Metrics;
  producer: Pick<EventProducer, 'publishRunRequested'>;
  runs: Pick<RunStore, 'recordAdmission' | 'getRun'>;
  admission: Pick<AdmissionController, 'decide' | 'withdraw'>;
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

/** Printable ASCII without spaces, as the IETF Idempotency-Key draft and Stripe accept. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

const REFUSAL_DETAIL: Record<string, string> = {
  rate_limited: 'this tenant is sending faster than its rate; retry after the indicated time',
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


export function registerRunRoutes(app: FastifyInstance, deps: RunRouteDeps): void {
  const { config, metrics } = deps;
  const now = deps.now ?? Date.now;
  const linksFor = (runId: string) => ({ self: `/v1/runs/${runId}`, events: `/v1/runs/${runId}/events` });

  /**
   * Where a request becomes an event. Order matters: validation (no state touched), the
   * Idempotency-Key claim (duplicates wait for the first answer), admission (bucket, backlog,
   * deadline), then the produce — the 202 leaves only after Kafka acknowledged the event.
   */
  app.post<{ Body: SubmitBody }>('/v1/runs', { schema: submitSchema }, async (req, reply) => {
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
    if (!deadline.ok) return sendProblem(reply, 'invalid_request', { errors: [{ path: '/deadlineMs', message: deadline.message }] });

    let claimToken: string | undefined;
    if (idempotencyKey !== undefined) {
      const claim = await deps.idempotency.claim(tenantId, idempotencyKey, requestFingerprint(body.workflow, body));
      if (claim.kind === 'replay') {
        metrics.idempotentReplays.inc({ tenant: tenantId });
        return reply.code(claim.answer.status).headers({ ...claim.answer.headers, 'Idempotent-Replayed': 'true' }).send(claim.answer.body);
      }
      if (claim.kind === 'conflict') return sendProblem(reply, 'idempotency_key_reused', { detail: 'a key identifies one request: use a new key for a different body' });
      if (claim.kind === 'in_progress') return sendProblem(reply, 'idempotency_key_in_use', { detail: 'the first request with this key has not been answered yet', retryAfterSec: 1 });
      claimToken = claim.token;
    }

    const settle = async (answer: StoredAnswer | undefined) => {
      if (claimToken === undefined || idempotencyKey === undefined) return;
      const settled = answer ? await deps.idempotency.store(tenantId, idempotencyKey, claimToken, answer) : await deps.idempotency.forget(tenantId, idempotencyKey, claimToken);
      // The claim outlived its lease and another request took the key: a duplicate may follow.
      if (!settled) req.log.warn({ tenantId, idempotencyKey }, 'Idempotency-Key claim expired before it was settled');
    };

    try {
      const runId = newRunId(admittedAt);
      const decision = await deps.admission.decide({ runId, tenantId, tenant, workflow, runClass, deadline: deadline.deadline, now: admittedAt });
      if (decision.outcome === 'deferred' || decision.outcome === 'rejected') {
        await settle(undefined);
        return sendProblem(reply, decision.reason as ProblemCode, { detail: refusalDetail(decision), retryAfterSec: decision.retryAfterSec });
      }

      const incomingTrace = req.headers.traceparent;
      const run: RunRequested = {
        runId,
        tenantId,
        workflow: body.workflow,
        class: runClass,
        admittedAt,
        deadline: deadline.deadline,
        attempt: 1,
        traceparent: childTraceparent(typeof incomingTrace === 'string' ? incomingTrace : undefined),
        input: JSON.stringify(body.input),
        idempotencyKey: idempotencyKey ?? null,
        dueAt: null,
      };

      try {
        await deps.producer.publishRunRequested(run, config.kafka.produceTimeoutMs);
      } catch (err) {
        const reason = err instanceof ProduceQueueFullError ? 'queue_full' : err instanceof ProduceTimeoutError ? 'timeout' : 'error';
        metrics.submitFailures.inc({ reason });
        req.log.warn({ err, runId, tenantId }, 'Kafka did not acknowledge a submission');
        await deps.admission.withdraw({ runId, tenantId, runClass });
        await settle(undefined);
        return sendProblem(reply, 'overloaded', { detail: 'the event log did not acknowledge the run in time; it was not accepted', retryAfterSec: 1 });
      }
      metrics.runsSubmitted.inc({ tenant: tenantId, workflow: run.workflow, class: runClass });

      try {
        await deps.runs.recordAdmission({ ...run, message: admissionMessage(decision) });
      } catch (err) {
        // The event is durable in Kafka and will run; the status sink creates the row from the
        // first status event. Refusing now would invite a retry that duplicates the run.
        metrics.admissionRecordFailures.inc();
        req.log.error({ err, runId }, 'could not record admission in Postgres');
      }

      const answer: StoredAnswer = {
        status: 202,
        headers: { Location: `/v1/runs/${runId}` },
        body: {
          runId,
          status: 'queued',
          admission: decision.outcome,
          deadline: new Date(run.deadline).toISOString(),
          ...(decision.queuePosition !== undefined ? { queuePosition: decision.queuePosition } : {}),
          links: linksFor(runId),
        },
      };
      await settle(answer).catch((err: unknown) => req.log.error({ err, runId }, 'could not store the idempotent answer'));
      return reply.code(answer.status).headers(answer.headers).send(answer.body);
    } catch (err) {
      await settle(undefined).catch(() => undefined);
      throw err;
    }
  });

  app.get<{ Params: { id: string } }>('/v1/runs/:id', async (req, reply) => {
    const own = await findOwnRun(req, reply, deps, req.params.id);
    if (!own) return reply;
    return reply.send({ ...own.view, links: linksFor(own.view.runId) });
  });
}
