import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { RunView } from '../../status/run-store.js';
import type { RedisCancellations } from '../../runs/cancellation.js';
import { isTerminal } from '../../status/run-history.js';
import { sendProblem } from '../problem.js';
import { findOwnRun, type OwnRunDeps } from './own-run.js';

export interface CancelRunRouteDeps extends OwnRunDeps {
  cancellations: Pick<RedisCancellations, 'request'>;
}

/**
 * `DELETE /v1/runs/:id` records the request; the processor holding the run acts on it before the
 * run starts or at its next step boundary, and the run's status stream shows the outcome. A call
 * in flight is not interrupted, so a run in its last step may still complete.
 */
export function registerCancelRunRoute(app: FastifyInstance, deps: CancelRunRouteDeps): void {
  app.delete<{ Params: { id: string } }>('/v1/runs/:id', async (req, reply) => {
    const own = await findOwnRun(req, reply, deps, req.params.id);
    if (!own) return reply;
    return answerCancel(deps, own.view, req, reply);
  });
}

/** Records a cancellation request for an unfinished run and answers 202 (the API's DELETE, and the console's cancel). */
export async function answerCancel(deps: Pick<CancelRunRouteDeps, 'cancellations'>, view: Pick<RunView, 'runId' | 'status' | 'deadline'>, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  if (isTerminal(view.status)) return sendProblem(reply, 'run_finished', { detail: `the run is already ${view.status}; there is nothing to cancel` });
  try {
    await deps.cancellations.request(view.runId, Date.parse(view.deadline));
  } catch (err) {
    req.log.error({ err, runId: view.runId }, 'could not record a cancellation request');
    return sendProblem(reply, 'dependency_unavailable', { detail: 'the cancellation could not be recorded; try again', retryAfterSec: 1 });
  }
  return reply.code(202).send({ runId: view.runId, status: view.status, cancelRequested: true });
}
