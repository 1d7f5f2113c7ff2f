import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { KeyDirectory, type Principal } from './auth.js';
import { noteAudit, registerAuditTrail, writeAudit } from './audit.js';
import { AuthFailureThrottle, clientBlock, type FailedAuthentications } from './auth-throttle.js';
import { PARAM_FORMATS } from './params.js';
import { PROBLEMS, problemBody, sendProblem, type FieldError, type ProblemCode } from './problem.js';
import { infrastructureFailure } from '../util/infrastructure-failure.js';
import { httpOutcome, type SubmitAnswer } from './http-outcome.js';
import type { SluiceConfig } from '../config/schema.js';
import { registerRunRoutes, type RunRouteDeps } from './routes/runs.js';
import { registerHealthRoutes, type ReadinessCheck } from './routes/health.js';
import { registerRunEventRoutes, type RunEventRouteDeps } from './routes/run-events.js';
import { registerCancelRunRoute, type CancelRunRouteDeps } from './routes/cancel-run.js';
import { registerAdminLimitsRoutes, type AdminLimitsRouteDeps } from './routes/admin-limits.js';
import { registerAdminBreakerRoutes, type AdminBreakersRouteDeps } from './routes/admin-breakers.js';
import { isConsolePath, registerConsoleRoutes, type ConsoleDeps } from './console/console-routes.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
    /** Set by the submit route when it answers with an admission decision or a replayed answer. */
    submitAnswer?: SubmitAnswer;
  }
  interface FastifyContextConfig {
    /** The route submits runs: its HTTP metrics are labelled by what it answered (see `httpOutcome`). */
    submission?: boolean;
  }
}

export interface ApiDeps extends Omit<RunRouteDeps, 'config' | 'reads'> {
  config: SluiceConfig;
  logger: Logger;
  metrics: Metrics;
  readiness: ReadinessCheck[];
  /** Per-tenant bounds on every read of a run (GET, the event stream, DELETE). */
  reads: RunEventRouteDeps['reads'];
  /** Status for callers: the progress stream and cancellation (`/v1/runs/:id/events`, `DELETE /v1/runs/:id`). */
  runStatus: Omit<RunEventRouteDeps, 'metrics' | 'now' | 'reads'> & Omit<CancelRunRouteDeps, 'reads'>;
  /** Run-time concurrency limits behind `/v1/admin/limits`. */
  limits: AdminLimitsRouteDeps['limits'];
  /** The shared breakers behind `/v1/admin/breakers`: their reports and operators' forces. */
  breakers: AdminBreakersRouteDeps['breakers'];
  /** The audit trail (`createAuditLogger`): a line per request to a route that changes something. */
  audit: Logger;
  /** Failed authentications per client address; one from `api.authFailureLimit` unless given (a test's, on its clock). */
  authFailures?: AuthFailureThrottle;
  /** The operations console at `/console`; absent when `api.console.enable` is false. */
  console?: Omit<ConsoleDeps, 'keys' | 'authFailures' | 'limits' | 'breakerAdmin'>;
}

const PUBLIC_PATHS = new Set(['/healthz', '/readyz']);
const REQUEST_ID = /^[\w.:-]{1,128}$/;

/** Retry hint when a dependency failed mid-request: long enough for a reconnect attempt (Redis, pg and kafkajs back off in about that). */
const DEPENDENCY_RETRY_AFTER_SEC = 2;

const DRAIN_MAX_BYTES = 16 * 1024 * 1024;
const DRAIN_TIMEOUT_MS = 5_000;

/**
 * Fastify refuses an oversized body from its Content-Length before reading it. Answering at once
 * and closing makes most clients fail with EPIPE while still uploading, so they never see the 413:
 * read and discard the rest first, bounded in bytes and time, as a lingering close would.
 */
export function drainRequestBody(raw: IncomingMessage, maxBytes: number, timeoutMs: number): Promise<void> {
  if (raw.complete || raw.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let seen = 0;
    const done = () => {
      clearTimeout(timer);
      raw.off('data', onData);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > maxBytes) done();
    };
    const timer = setTimeout(done, timeoutMs);
    raw.on('data', onData);
    raw.once('end', done);
    raw.once('close', done);
    raw.once('error', done);
    raw.resume();
  });
}

/** Ajv's errors become the contract's `errors: [{path, message}]` (JSON Pointer paths). */
export function validationErrors(validation: NonNullable<FastifyError['validation']>, context: FastifyError['validationContext'] = 'body'): FieldError[] {
  // Body paths start at the body, as the contract's examples (`/input`); others say where they are.
  const prefix = context === 'querystring' ? '/query' : context === 'body' ? '' : `/${context}`;
  return validation.map((v) => {
    const params = v.params as Record<string, unknown>;
    const extra = (params.missingProperty ?? params.additionalProperty) as string | undefined;
    const path = `${prefix}${extra !== undefined ? `${v.instancePath}/${extra}` : v.instancePath}` || '/';
    const message = params.additionalProperty !== undefined ? 'is not a known field' : (v.message ?? 'is invalid');
    return { path, message };
  });
}

const CLIENT_ERRORS: Partial<Record<string, ProblemCode>> = { ERR_HTTP_REQUEST_TIMEOUT: 'request_timeout', HPE_HEADER_OVERFLOW: 'headers_too_large' };

/**
 * Node's HTTP parser refuses some requests before Fastify sees them (a header section over 16 KiB,
 * bytes that are not HTTP, a request that never finished): they get a problem+json answer too, and
 * `Connection: close`, since the socket is closed right after and a kept-alive client must not
 * send its next request into it.
 */
export function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  if (socket.writable) {
    const code = CLIENT_ERRORS[err.code ?? ''] ?? 'invalid_request';
    const body = JSON.stringify(problemBody(code, randomUUID(), undefined, { detail: 'the request could not be read as HTTP' }));
    const { status } = PROBLEMS[code];
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  }
  socket.destroy();
}

/** The API port's `/metrics` shows every tenant's volumes and usage: the admin's and the scrapers' keys only. */
async function metricsReaders(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
  const kind = req.principal?.kind;
  if (kind === 'admin' || kind === 'metrics') return undefined;
  return sendProblem(reply, 'forbidden', { detail: 'metrics need the admin key or the metrics key (api.metricsKeySha256); the ops port serves them without one' });
}

/** The throttle told of each failure; the failure that starts an address's throttle leaves an audit line. */
function failedAuthentications(throttle: AuthFailureThrottle, audit: Logger): FailedAuthentications {
  return {
    refusal: (req) => throttle.refusal(req.ip),
    failed: (req) => {
      if (throttle.failed(req.ip)) writeAudit(audit, req, 'auth.throttled', 'refused', { block: clientBlock(req.ip), retryAfterSec: throttle.refusal(req.ip)?.retryAfterSec ?? null });
    },
  };
}

export function buildApiServer(deps: ApiDeps): FastifyInstance {
  const { config, logger, metrics } = deps;
  const keys = new KeyDirectory(config);
  const authFailures = failedAuthentications(deps.authFailures ?? new AuthFailureThrottle(config.api.authFailureLimit), deps.audit);
  const app = Fastify({
    loggerInstance: logger.child({ role: 'api' }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.api.bodyLimitBytes,
    trustProxy: config.api.trustProxy,
    requestTimeout: 30_000,
    connectionTimeout: 60_000,
    keepAliveTimeout: 65_000,
    return503OnClosing: true,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    },
    ajv: { customOptions: { allErrors: true, coerceTypes: false, removeAdditional: false, useDefaults: false, formats: PARAM_FORMATS } },
    // The router's own refusals, before any hook runs, answer in the contract's shape too.
    frameworkErrors: (err, req, reply) => {
      void reply.header('X-Request-Id', req.id);
      // A path parameter over the router's length bound cannot be a run id: as unknown as any other.
      if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') return sendProblem(reply, 'not_found', { detail: 'no such resource' });
      if (err.code === 'FST_ERR_BAD_URL') return sendProblem(reply, 'invalid_request', { detail: 'the path is not valid percent-encoding', errors: [{ path: '/', message: 'the path is not valid percent-encoding' }] });
      req.log.error({ err }, 'router error');
      return sendProblem(reply, 'internal', { detail: 'see the server log for this requestId' });
    },
    clientErrorHandler: answerClientError,
  });

  // The contract is JSON only; Fastify's built-in text/plain parser would turn a wrong media type
  // into a confusing schema error instead of 415.
  app.removeContentTypeParser('text/plain');

  app.addHook('onRequest', async (req, reply) => {
    void reply.header('X-Request-Id', req.id);
    const path = req.url.split('?')[0]!;
    // The console authenticates by its own session cookie (see console-routes.ts), never by Bearer keys.
    if (PUBLIC_PATHS.has(path) || (deps.console && isConsolePath(path))) return;
    const refused = authFailures.refusal(req);
    if (refused) return sendProblem(reply, 'rate_limited', { detail: 'too many failed authentications from this address; try again later', retryAfterSec: refused.retryAfterSec });
    const principal = keys.authenticate(req.headers.authorization);
    if (!principal) {
      // A missing header guesses nothing; a key that matches none is a guess that failed.
      if (req.headers.authorization !== undefined) authFailures.failed(req);
      void reply.header('WWW-Authenticate', 'Bearer');
      return sendProblem(reply, 'unauthorized', { detail: 'send Authorization: Bearer <api key>' });
    }
    req.principal = principal;
  });

  registerAuditTrail(app, deps.audit);

  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? 'unmatched';
    const outcome = httpOutcome(req.routeOptions.config?.submission === true, req.submitAnswer);
    metrics.httpRequests.inc({ route, method: req.method, status: String(reply.statusCode), outcome });
    metrics.httpDuration.observe({ route, method: req.method, outcome }, reply.elapsedTime / 1000);
  });

  app.setErrorHandler(async (err: FastifyError, req, reply) => {
    if (err.validation) return sendProblem(reply, 'invalid_request', { detail: `the ${err.validationContext ?? 'body'} does not match the schema`, errors: validationErrors(err.validation, err.validationContext) });
    if (err.statusCode === 413) {
      await drainRequestBody(req.raw, DRAIN_MAX_BYTES, DRAIN_TIMEOUT_MS);
      return sendProblem(reply, 'payload_too_large', { detail: `the limit is ${config.api.bodyLimitBytes} bytes` });
    }
    if (err.statusCode === 415) return sendProblem(reply, 'unsupported_media_type', { detail: err.message });
    if (err.statusCode === 400) return sendProblem(reply, 'invalid_request', { detail: err.message, errors: [{ path: '/', message: err.message }] });
    // A dependency that vanished mid-request is "retry later", not a bug: only bugs answer 500.
    const failure = infrastructureFailure(err);
    noteAudit(req, { error: err.message });
    if (failure) {
      req.log.warn({ err, dependency: failure.dependency, reason: failure.reason }, 'a dependency failed during the request');
      return sendProblem(reply, 'dependency_unavailable', { detail: 'a service Sluice depends on is unavailable; retry after the indicated time', retryAfterSec: DEPENDENCY_RETRY_AFTER_SEC });
    }
    req.log.error({ err }, 'unhandled error');
    return sendProblem(reply, 'internal', { detail: 'see the server log for this requestId' });
  });

  app.setNotFoundHandler((req, reply) => sendProblem(reply, 'not_found', { detail: `no route ${req.method} ${req.url.split('?')[0]}` }));

  registerHealthRoutes(app, { readiness: deps.readiness, metrics, scrapers: metricsReaders });
  registerRunRoutes(app, { ...deps, config });
  registerRunEventRoutes(app, { ...deps.runStatus, reads: deps.reads, metrics, now: deps.now });
  registerCancelRunRoute(app, { ...deps.runStatus, reads: deps.reads });
  registerAdminLimitsRoutes(app, { config, limits: deps.limits });
  registerAdminBreakerRoutes(app, { config, breakers: deps.breakers });
  if (deps.console) registerConsoleRoutes(app, { ...deps.console, keys, authFailures, limits: { config, limits: deps.limits }, breakerAdmin: { config, breakers: deps.breakers } });
  return app;
}
