import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Logger } from '../obs/logger.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** What this request's audit line says beyond who and how it ended: what was asked, what came of it. */
    auditDetails?: Record<string, unknown>;
  }
  interface FastifyContextConfig {
    /** The route changes something: every request to it leaves one audit line under this action, however it ends. */
    audit?: string;
  }
}

export type AuditOutcome = 'done' | 'refused' | 'failed';

/** A 4xx is the request refused (authentication, CSRF, validation, a rule); a 5xx the change failed. */
export function auditOutcome(status: number): AuditOutcome {
  return status < 400 ? 'done' : status < 500 ? 'refused' : 'failed';
}

/**
 * Adds to what the request's audit line will say. An `outcome` given here replaces the one the
 * status implies, for an answer whose status does not tell (a replay whose rows partly failed is a 200).
 */
export function noteAudit(req: FastifyRequest, details: Record<string, unknown>): void {
  req.auditDetails = { ...req.auditDetails, ...details };
}

/** Who made the request: the console's sessions are the admin's; a Bearer key names its principal. */
function principalOf(req: FastifyRequest): string | null {
  if (req.consoleSession) return 'admin';
  const p = req.principal;
  if (!p) return null;
  return p.kind === 'tenant' ? `tenant:${p.tenantId}` : p.kind;
}

/** Who asked, from where, and the request's id, as every audit line has them. */
function auditContext(req: FastifyRequest): Record<string, unknown> {
  return { principal: principalOf(req), session: req.consoleSession?.id ?? null, ip: req.ip, userAgent: req.headers['user-agent'] ?? null, requestId: req.id };
}

/** Writes one audit line about `req`: who asked and from where, then `details`. */
export function writeAudit(audit: Logger, req: FastifyRequest, action: string, outcome: AuditOutcome, details: Record<string, unknown>): void {
  const via = req.routeOptions.url?.startsWith('/console') ? 'console' : 'api';
  audit.info({ audit: { action, outcome, via, ...auditContext(req), ...details } }, `${via} ${action} ${outcome}`);
}

/**
 * One line per request to a route marked `config.audit`, written as its answer is sent (`onSend`
 * runs for every answer: the handler's, a hook's refusal, a validation error, the error handler's),
 * so no outcome of a change goes unrecorded, including one whose client went away meanwhile.
 */
export function registerAuditTrail(app: FastifyInstance, audit: Logger): void {
  app.addHook('onSend', async (req, reply, payload) => {
    const action = req.routeOptions.config?.audit;
    if (action === undefined) return payload;
    // Path parameters (a dependency, an id) say what was aimed at even when the handler never ran; the router bounds their length.
    const params = req.params as Record<string, string> | undefined;
    writeAudit(audit, req, action, auditOutcome(reply.statusCode), { status: reply.statusCode, ...params, ...req.auditDetails });
    return payload;
  });
}
