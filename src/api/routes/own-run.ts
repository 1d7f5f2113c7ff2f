import type { FastifyReply, FastifyRequest } from 'fastify';
import { isRunId } from '../../runs/run-id.js';
import type { RunStore, RunView } from '../../status/run-store.js';
import { sendProblem } from '../problem.js';

/** The caller's tenant, or undefined after answering 403 (an admin key is valid, but runs belong to tenants). */
export function tenantOf(req: FastifyRequest, reply: FastifyReply): string | undefined {
  if (req.principal?.kind === 'tenant') return req.principal.tenantId;
  sendProblem(reply, 'forbidden', { detail: 'runs belong to tenants: use a tenant API key' });
  return undefined;
}

/** The caller's own run, or undefined after answering the problem. */
export async function findOwnRun(req: FastifyRequest, reply: FastifyReply, runs: Pick<RunStore, 'getRun'>, runId: string): Promise<{ tenantId: string; view: RunView } | undefined> {
  const tenantId = tenantOf(req, reply);
  if (!tenantId) return undefined;
  // Another tenant's run and a malformed id both read as "not found": ids reveal nothing.
  const view = isRunId(runId) ? await runs.getRun(runId, tenantId) : undefined;
  if (!view) {
    sendProblem(reply, 'not_found', { detail: 'no run with this id for your tenant' });
    return undefined;
  }
  return { tenantId, view };
}
