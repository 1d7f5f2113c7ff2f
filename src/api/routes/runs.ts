import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { SluiceConfig } from '../../config/schema.js';
import { ownEntry } from '../../config/lookup.js';
import type { RunClass, RunRequested } from '../../events/schemas.js';
import type { Metrics } from '../../obs/metrics.js';
import type { EventProducer } from '../../producers/event-producer.js';
import { ProduceQueueFullError, ProduceTimeoutError } from '../../producers/produce-batcher.js';
import { resolveDeadline } from '../../runs/deadline.js';
import { isRunId, newRunId } from '../../runs/run-id.js';
import { childTraceparent } from '../../runs/traceparent.js';
import type { RunStore } from '../../status/run-store.js';
import { sendProblem } from '../problem.js';

export interface RunRouteDeps {
  config: SluiceConfig;
  metrics: Metrics;
  producer: Pick<EventProducer, 'publishRunRequested'>;
  runs: Pick<RunStore, 'recordAdmission' | 'getRun'>;
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

function tenantOf(req: FastifyRequest, reply: FastifyReply): string | undefined {
  if (req.principal?.kind === 'tenant') return req.principal.tenantId;
  sendProblem(reply, 'forbidden', { detail: 'runs belong to tenants: use a tenant API key' });
  return undefined;
}

export function registerRunRoutes(app: FastifyInstance, deps: RunRouteDeps): void {
  const { config, metrics } = deps;
  const now = deps.now ?? Date.now;
  const linksFor = (runId: string) => ({ self: `/v1/runs/${runId}`, events: `/v1/runs/${runId}/events` });

  /** Where a request becomes an event: the 202 leaves only after Kafka acknowledged it (acks=all). */
  app.post<{ Body: SubmitBody }>('/v1/runs', { schema: submitSchema }, async (req, reply) => {
    const tenantId = tenantOf(req, reply);
    if (!tenantId) return reply;
    const body = req.body;
    const workflow = ownEntry(config.workflows, body.workflow);
    if (!workflow) return sendProblem(reply, 'unknown_workflow', { detail: `known workflows: ${Object.keys(config.workflows).join(', ')}` });

    const idempotencyHeader = req.headers['idempotency-key'];
    if (idempotencyHeader !== undefined && (typeof idempotencyHeader !== 'string' || !IDEMPOTENCY_KEY.test(idempotencyHeader))) {
      return sendProblem(reply, 'invalid_idempotency_key', { detail: 'use 1 to 255 printable ASCII characters without spaces' });
    }

    const runClass = body.class ?? workflow.defaultClass;
    const admittedAt = now();
    const deadline = resolveDeadline(body.deadlineMs, runClass, config.api.deadlineMs, admittedAt);
    if (!deadline.ok) return sendProblem(reply, 'invalid_request', { errors: [{ path: '/deadlineMs', message: deadline.message }] });

    const incomingTrace = req.headers.traceparent;
    const run: RunRequested = {
      runId: newRunId(admittedAt),
      tenantId,
      workflow: body.workflow,
      class: runClass,
      admittedAt,
      deadline: deadline.deadline,
      attempt: 1,
      traceparent: childTraceparent(typeof incomingTrace === 'string' ? incomingTrace : undefined),
      input: JSON.stringify(body.input),
      idempotencyKey: idempotencyHeader ?? null,
      dueAt: null,
    };

    try {
      await deps.producer.publishRunRequested(run, config.kafka.produceTimeoutMs);
    } catch (err) {
      const reason = err instanceof ProduceQueueFullError ? 'queue_full' : err instanceof ProduceTimeoutError ? 'timeout' : 'error';
      metrics.submitFailures.inc({ reason });
      req.log.warn({ err, runId: run.runId, tenantId }, 'Kafka did not acknowledge a submission');
      return sendProblem(reply, 'overloaded', { detail: 'the event log did not acknowledge the run in time; it was not accepted', retryAfterSec: 1 });
    }
    metrics.runsSubmitted.inc({ tenant: tenantId, workflow: run.workflow, class: runClass });

    try {
      await deps.runs.recordAdmission({ ...run, message: 'queued: accepted and waiting for a processor' });
    } catch (err) {
      // The event is durable in Kafka and will run; the status sink creates the row from the
      // first status event. Refusing now would invite a retry that duplicates the run.
      metrics.admissionRecordFailures.inc();
      req.log.error({ err, runId: run.runId }, 'could not record admission in Postgres');
    }

    const deadlineIso = new Date(run.deadline).toISOString();
    return reply
      .code(202)
      .header('Location', `/v1/runs/${run.runId}`)
      .send({ runId: run.runId, status: 'queued', admission: 'admitted', deadline: deadlineIso, links: linksFor(run.runId) });
  });

  app.get<{ Params: { id: string } }>('/v1/runs/:id', async (req, reply) => {
    const tenantId = tenantOf(req, reply);
    if (!tenantId) return reply;
    // Another tenant's run and a malformed id both read as "not found": ids reveal nothing.
    const view = isRunId(req.params.id) ? await deps.runs.getRun(req.params.id, tenantId) : undefined;
    if (!view) return sendProblem(reply, 'not_found', { detail: 'no run with this id for your tenant' });
    return reply.send({ ...view, links: linksFor(view.runId) });
  });
}
