import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { SluiceConfig } from '../../config/schema.js';
import type { LimitsStore } from '../../permits/limits-store.js';
import { configuredLimit, LIMIT_SCOPES, limitField, type LimitScope } from '../../permits/permit-scopes.js';
import { limitAtShare } from '../../util/limit-share.js';
import { noteAudit } from '../audit.js';
import { sendProblem } from '../problem.js';

export interface AdminLimitsRouteDeps {
  config: SluiceConfig;
  limits: Pick<LimitsStore, 'overrides' | 'set'>;
}

/** One scope's cap: the one in force, the configured one, and the run-time one replacing it (if any). */
export interface LimitView {
  scope: LimitScope;
  name?: string;
  limit: number;
  default: number;
  override: number | null;
}

export interface LimitChange {
  scope: LimitScope;
  name?: string;
  limit: number;
}

/** The highest cap config accepts anywhere; more would mean "no cap" with extra steps. */
const MAX_LIMIT = 1_000_000;

export const limitChangeSchema = {
  type: 'object',
  required: ['scope', 'limit'],
  additionalProperties: false,
  properties: {
    scope: { enum: [...LIMIT_SCOPES] },
    name: { type: 'string', minLength: 1, maxLength: 200 },
    limit: { type: 'integer', minimum: 0, maximum: MAX_LIMIT },
  },
} as const;

async function adminOnly(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
  if (req.principal?.kind !== 'admin') return sendProblem(reply, 'forbidden', { detail: 'concurrency limits need the admin key' });
  return undefined;
}

function view(config: SluiceConfig, overrides: ReadonlyMap<string, number>, scope: LimitScope, name?: string): LimitView {
  const configured = configuredLimit(config, scope, name)!;
  const override = overrides.get(limitField(scope, name));
  return { scope, ...(name !== undefined ? { name } : {}), limit: override ?? configured, default: configured, override: override ?? null };
}

/** Why a change's name does not fit its scope, if it does not. */
function nameProblem(config: SluiceConfig, { scope, name }: LimitChange): string | undefined {
  if (scope === 'global') return name === undefined ? undefined : 'must be absent for the global scope';
  if (name === undefined) return `is required for the ${scope} scope`;
  return configuredLimit(config, scope, name) === undefined ? `must be a configured ${scope}; "${name}" is not` : undefined;
}

const unavailable = (reply: FastifyReply) => sendProblem(reply, 'dependency_unavailable', { detail: 'the limits could not be reached in Redis; try again', retryAfterSec: 1 });

/** Answers every scope's limit (the admin API's GET, and the console's Backpressure page). */
export async function answerLimits(deps: AdminLimitsRouteDeps, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const { config } = deps;
  let overrides: Map<string, number>;
  try {
    overrides = await deps.limits.overrides();
  } catch (err) {
    req.log.error({ err }, 'could not read concurrency limits');
    return unavailable(reply);
  }
  const named = (scope: LimitScope, names: Record<string, unknown>) => Object.keys(names).map((name) => view(config, overrides, scope, name));
  const global = view(config, overrides, 'global');
  return reply.send({
    limits: [global, ...named('tenant', config.tenants), ...named('workflow', config.workflows), ...named('dependency', config.dependencies)],
    // Derived, not settable: batch runs may hold this share of the global limit in force.
    batch: { share: config.limits.batchShare, limit: limitAtShare(global.limit, config.limits.batchShare) },
  });
}

/** Applies one validated change and answers the scope's new view (the admin API's PUT, and the console's edit). */
export async function answerLimitChange(deps: AdminLimitsRouteDeps, change: LimitChange, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const { config } = deps;
  noteAudit(req, { scope: change.scope, name: change.name ?? null, limit: change.limit });
  const problem = nameProblem(config, change);
  if (problem) return sendProblem(reply, 'invalid_request', { detail: `name ${problem}`, errors: [{ path: '/name', message: problem }] });
  const field = limitField(change.scope, change.name);
  try {
    await deps.limits.set(field, change.limit);
  } catch (err) {
    req.log.error({ err, scope: field }, 'could not change a concurrency limit');
    noteAudit(req, { error: (err as Error).message });
    return unavailable(reply);
  }
  req.log.info({ scope: field, limit: change.limit }, 'concurrency limit changed');
  return reply.send(view(config, new Map([[field, change.limit]]), change.scope, change.name));
}

/**
 * `GET` / `PUT /v1/admin/limits`: read and change concurrency caps at run time. A change is written
 * to the limits hash that every acquisition reads, so it holds on every processor at its next
 * acquisition; permits already held are kept until released (a lower cap drains, it does not evict).
 * Overrides stay until changed again, including across restarts. Each change leaves an audit line.
 */
export function registerAdminLimitsRoutes(app: FastifyInstance, deps: AdminLimitsRouteDeps): void {
  app.get('/v1/admin/limits', { onRequest: adminOnly }, (req, reply) => answerLimits(deps, req, reply));
  app.put<{ Body: LimitChange }>('/v1/admin/limits', { onRequest: adminOnly, schema: { body: limitChangeSchema }, config: { audit: 'limit.change' } }, (req, reply) => answerLimitChange(deps, req.body, req, reply));
}
