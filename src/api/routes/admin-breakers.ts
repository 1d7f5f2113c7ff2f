import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { BreakerForce, ForceMode } from '../../breakers/breaker-gate.js';
import { MAX_FORCE_MS, type BreakerStore } from '../../breakers/breaker-store.js';
import { ownEntry } from '../../config/lookup.js';
import type { SluiceConfig } from '../../config/schema.js';
import type { DependencyReport, DependencyReports } from '../console/dependencies.js';
import { noteAudit } from '../audit.js';
import { sendProblem } from '../problem.js';

export interface AdminBreakersRouteDeps {
  config: SluiceConfig;
  breakers: {
    store: Pick<BreakerStore, 'force' | 'clearForce'>;
    reports: Pick<DependencyReports, 'all'>;
  };
}

/** A force as asked for: its mode and how long it lasts (required: a drill must end by itself). */
export interface ForceRequest {
  mode: ForceMode;
  durationSec: number;
}

export const MAX_FORCE_SEC = MAX_FORCE_MS / 1000;

export const forceRequestSchema = {
  type: 'object',
  required: ['mode', 'durationSec'],
  additionalProperties: false,
  properties: {
    mode: { enum: ['open', 'closed'] },
    durationSec: { type: 'integer', minimum: 1, maximum: MAX_FORCE_SEC },
  },
} as const;

/** What a force or clear answers: the dependency and the force now in place (null: none). */
export interface ForceAnswer {
  dependency: string;
  forced: BreakerForce | null;
}

/** One breaker as `GET /v1/admin/breakers` answers it: the Dependencies page's breaker part, read from Redis. */
export type BreakerReport = DependencyReport['breaker'] & { dependency: string; at: number };

const unavailable = (reply: FastifyReply) => sendProblem(reply, 'dependency_unavailable', { detail: 'the breakers could not be reached in Redis; try again', retryAfterSec: 1 });

function unknownDependency(config: SluiceConfig, dependency: string, reply: FastifyReply): FastifyReply | undefined {
  return ownEntry(config.dependencies, dependency) ? undefined : sendProblem(reply, 'not_found', { detail: `no dependency "${dependency}" is configured` });
}

/** Forces one breaker (the admin API's PUT, and the console's button); undefined `change` clears the force. */
export async function answerForce(deps: AdminBreakersRouteDeps, dependency: string, change: ForceRequest | undefined, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  if (change) noteAudit(req, { mode: change.mode, durationSec: change.durationSec });
  const unknown = unknownDependency(deps.config, dependency, reply);
  if (unknown) return unknown;
  const { store } = deps.breakers;
  let answer: ForceAnswer;
  try {
    if (change) answer = { dependency, forced: await store.force(dependency, change.mode, change.durationSec * 1000) };
    else {
      // Clearing nothing is no error: the drill is over either way.
      await store.clearForce(dependency);
      answer = { dependency, forced: null };
    }
  } catch (err) {
    req.log.error({ err, dependency }, 'could not force or clear a breaker');
    noteAudit(req, { error: (err as Error).message });
    return unavailable(reply);
  }
  req.log.warn({ dependency, forced: answer.forced }, change ? 'breaker forced by an operator' : 'breaker force cleared by an operator');
  return reply.send(answer);
}

/** Every configured dependency's breaker as Redis holds it now. */
export async function answerBreakers(deps: AdminBreakersRouteDeps, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  let reports: DependencyReport[];
  try {
    reports = await deps.breakers.reports.all();
  } catch (err) {
    req.log.error({ err }, 'could not read the breakers');
    return unavailable(reply);
  }
  return reply.send({ breakers: reports.map((r): BreakerReport => ({ dependency: r.dependency, at: r.at, ...r.breaker })) });
}

async function adminOnly(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
  if (req.principal?.kind !== 'admin') return sendProblem(reply, 'forbidden', { detail: 'breakers need the admin key' });
  return undefined;
}

/**
 * `GET /v1/admin/breakers`, and `PUT` / `DELETE /v1/admin/breakers/:dependency/force`: read the
 * shared breakers, and force one open or closed for a drill (for `durationSec`, at most an hour),
 * or end the force. The force is announced as breaker transitions are, so every processor
 * re-checks the runs it holds at once; each force and clear leaves an audit line.
 */
export function registerAdminBreakerRoutes(app: FastifyInstance, deps: AdminBreakersRouteDeps): void {
  app.get('/v1/admin/breakers', { onRequest: adminOnly }, (req, reply) => answerBreakers(deps, req, reply));
  app.put<{ Params: { dependency: string }; Body: ForceRequest }>('/v1/admin/breakers/:dependency/force', { onRequest: adminOnly, schema: { body: forceRequestSchema }, config: { audit: 'breaker.force' } }, (req, reply) =>
    answerForce(deps, req.params.dependency, req.body, req, reply),
  );
  app.delete<{ Params: { dependency: string } }>('/v1/admin/breakers/:dependency/force', { onRequest: adminOnly, config: { audit: 'breaker.clear' } }, (req, reply) => answerForce(deps, req.params.dependency, undefined, req, reply));
}
