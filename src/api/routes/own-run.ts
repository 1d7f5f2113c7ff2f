import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ReadLimits } from '../../admission/read-limits.js';
import { isRunId } from '../../runs/run-id.js';
import type { RunStore, RunView } from '../../status/run-store.js';
import { sendProblem } from '../problem.js';

/** The caller's tenant, or undefined after answering 403 (an admin key is valid, but runs belong to tenants). */
export function tenantOf(req: FastifyRequest, reply: FastifyReply): string | undefined {
  if (req.principal?.kind === 'tenant') return req.principal.tenantId;
  sendProblem(reply, 'forbidden', { detail: 'runs belong to tenants: use a tenant API key' });
  return undefined;
}

/** A retry sooner than the pool's connect timeout (3 s) would only queue behind the last attempt. */
const RUN_STORE_RETRY_AFTER_SEC = 3;

/**
 * Answers a read whose Postgres query failed: the read model is unavailable, not the request
 * wrong, so `503 dependency_unavailable` (retryable), never a bare 500. The error stays in the log.
 */
export function runStoreUnavailable(req: FastifyRequest, reply: FastifyReply, err: unknown): FastifyReply {
  req.log.warn({ err }, 'could not read the run store');
  return sendProblem(reply, 'dependency_unavailable', { detail: 'run status cannot be read right now; retry after the indicated time', retryAfterSec: RUN_STORE_RETRY_AFTER_SEC });
}

export interface OwnRunDeps {
  runs: Pick<RunStore, 'getRun'>;
  reads: Pick<ReadLimits, 'take'>;
}

/**
 * The caller's own run, or undefined after answering the problem. Every read of a run passes
 * here: the tenant's read bucket first (nothing is read when it refuses), then the lookup.
 */
export async function findOwnRun(req: FastifyRequest, reply: FastifyReply, deps: OwnRunDeps, runId: string): Promise<{ tenantId: string; view: RunView } | undefined> {
  const tenantId = tenantOf(req, reply);
  if (!tenantId) return undefined;
  const refusal = await deps.reads.take(tenantId);
  if (refusal) {
    sendProblem(reply, 'rate_limited', refusal);
    return undefined;
  }
  let view: RunView | undefined;
  try {
    // Another tenant's run and a malformed id both read as "not found": ids reveal nothing.
    view = isRunId(runId) ? await deps.runs.getRun(runId, tenantId) : undefined;
  } catch (err) {
    runStoreUnavailable(req, reply, err);
    return undefined;
  }
  if (!view) {
    sendProblem(reply, 'not_found', { detail: 'no run with this id for your tenant' });
    return undefined;
  }
  return { tenantId, view };
}
