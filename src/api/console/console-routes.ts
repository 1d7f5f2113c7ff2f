import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { RUN_STATUSES, type RunStatus } from '../../events/schemas.js';
import { DEAD_LETTER_STATUSES, type DeadLetterStatus, type DeadLetterStore } from '../../dlq/dead-letter-store.js';
import { emptyTally, type ReplayResult } from '../../dlq/replay-outcome.js';
import { DEFAULT_REPLAY_RATE } from '../../dlq/replay-pacer.js';
import type { DeadLetterReplayer, ReplayKafka } from '../../dlq/replay-runner.js';
import { outcomeLine, rowJson, summaryLine } from '../../dlq/replay-text.js';
import type { PublishedReport } from '../../lag/lag-monitor.js';
import type { Metrics } from '../../obs/metrics.js';
import type { ClusterProcessorState } from '../../processors/processor-state.js';
import type { RedisCancellations } from '../../runs/cancellation.js';
import type { RunStore } from '../../status/run-store.js';
import type { KeyDirectory } from '../auth.js';
import type { FailedAuthentications } from '../auth-throttle.js';
import { DEAD_LETTER_ID, DEAD_LETTER_ID_PARAMS, FILTER_TEXT, INSTANT, RUN_ID, RUN_ID_PARAMS } from '../params.js';
import { noteAudit } from '../audit.js';
import { sendProblem } from '../problem.js';
import { answerCancel } from '../routes/cancel-run.js';
import { answerLimitChange, answerLimits, limitChangeSchema, type AdminLimitsRouteDeps, type LimitChange } from '../routes/admin-limits.js';
import { answerForce, forceRequestSchema, type AdminBreakersRouteDeps, type ForceRequest } from '../routes/admin-breakers.js';
import { repeatEvery } from '../../util/repeat-every.js';
import type { AlertWatch } from './alerts.js';
import { backpressureGauges } from './backpressure.js';
import { ASSET_CACHE, CONSOLE_HEADERS, PAGE_CACHE, type ConsoleAssets } from './console-assets.js';
import { changesState, cookieValue, csrfMatches, CSRF_HEADER, sameOrigin, SESSION_COOKIE, sessionCookie, type ConsoleSession, type ConsoleSessions } from './console-session.js';
import { dependencySpend, pointsOf } from './overview.js';
import type { FinishedRunsSampler } from './overview-finished.js';
import type { OverviewSampler } from './overview-sampler.js';

export interface ConsoleDeps {
  keys: KeyDirectory;
  sessions: ConsoleSessions;
  sessionTtlSec: number;
  /** Failed authentications per client address, the API's: a login is refused before its key is looked at once they are spent. */
  authFailures: FailedAuthentications;
  assets: ConsoleAssets;
  /** This process's admission counts, sampled for the Overview. */
  sampler: OverviewSampler;
  /** Every processor's finished runs, from Postgres, for the Overview; never rejects. */
  finishedRuns: Pick<FinishedRunsSampler, 'current'>;
  /** The alert rules, for the banner, checked every `alertEveryMs`. */
  alerts: Pick<AlertWatch, 'check' | 'current'>;
  alertEveryMs: number;
  metrics: Pick<Metrics, 'registry' | 'scrapeCollectors'>;
  limits: AdminLimitsRouteDeps;
  /** The breakers' reports and forces, as the admin breakers API has them. */
  breakerAdmin: AdminBreakersRouteDeps;
  /** The lag monitor's last report, or why there is none. */
  lagReport: () => Promise<PublishedReport | string>;
  /** Runs waiting for a dependency, cluster-wide, by tenant and class (the status sink's record in Redis). */
  waitingForDependency: () => Promise<{ tenant: string; runClass: string; runs: number }[]>;
  /** Every processor's oldest waiters, paused partitions and held runs, merged (what they publish to Redis). */
  processorState: () => Promise<ClusterProcessorState>;
  runs: Pick<RunStore, 'findRuns' | 'listEvents'>;
  cancellations: Pick<RedisCancellations, 'request'>;
  /** The DLQ archive, replayed and discarded as `sluice dlq` does. */
  dlq: {
    store: Pick<DeadLetterStore, 'list' | 'get' | 'discard'>;
    replayer: Pick<DeadLetterReplayer, 'preview' | 'replay'>;
    /** A producer and the topics that exist, connected on first use. */
    kafka: () => Promise<ReplayKafka>;
  };
}

declare module 'fastify' {
  interface FastifyRequest {
    consoleSession?: ConsoleSession;
  }
}

/** Paths the console answers; the API's Bearer check leaves them to the console's session check. */
export function isConsolePath(path: string): boolean {
  return path === '/console' || path.startsWith('/console/');
}

const MAX_RUNS = 100;
const MAX_EVENTS = 1_000;

interface RunQuery {
  runId?: string;
  tenant?: string;
  workflow?: string;
  status?: RunStatus;
  since?: string;
  until?: string;
}

const runQuerySchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    runId: RUN_ID,
    tenant: FILTER_TEXT,
    workflow: FILTER_TEXT,
    status: { enum: [...RUN_STATUSES] },
    since: INSTANT,
    until: INSTANT,
  },
} as const;

interface DlqQuery {
  status?: DeadLetterStatus;
  tenant?: string;
  workflow?: string;
  reason?: string;
}

const dlqQuerySchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    status: { enum: [...DEAD_LETTER_STATUSES] },
    tenant: FILTER_TEXT,
    workflow: FILTER_TEXT,
    reason: FILTER_TEXT,
  },
} as const;

/** Rows one console request may replay or discard: at the CLI's rate, a replay answers within 10 s. */
const MAX_DLQ_IDS = 100;
const DLQ_IDS = { type: 'array', minItems: 1, maxItems: MAX_DLQ_IDS, uniqueItems: true, items: DEAD_LETTER_ID } as const;

/**
 * The operations console at `/console`: a page and its bundles (public: they hold no data), the
 * login that trades the admin key for a session cookie, and JSON for the pages, each behind the
 * session. Every call that changes something also needs the session's CSRF token in a header and
 * a same-origin `Origin`, and leaves an audit line (`config.audit`), refused or not.
 */
export function registerConsoleRoutes(app: FastifyInstance, deps: ConsoleDeps): void {
  const { sessions } = deps;
  deps.sampler.start();
  // A failed check leaves the alerts as they were.
  const stopAlerts = repeatEvery(deps.alertEveryMs, () => deps.alerts.check());
  app.addHook('onClose', async () => (deps.sampler.stop(), stopAlerts()));

  // Every answer under /console carries the console's headers: pages, JSON, and paths no route
  // answers (a 404 or a framework refusal there is a console page all the same).
  app.addHook('onRequest', async (req, reply) => {
    if (isConsolePath(req.url.split('?')[0]!)) void reply.headers(CONSOLE_HEADERS).header('Cache-Control', PAGE_CACHE);
  });

  /** Whether the browser reached the console over https: directly, or (`api.trustProxy`) as a trusted proxy's X-Forwarded-Proto says. */
  const secure = (req: FastifyRequest) => req.protocol === 'https';

  /** The session a request's cookie opens; refuses the request without one, and a change without its CSRF token. */
  async function requireSession(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const session = await sessions.find(cookieValue(req.headers.cookie, SESSION_COOKIE));
    if (!session) {
      noteAudit(req, { why: 'no session' });
      return sendProblem(reply, 'unauthorized', { detail: 'log in to the console with the admin key' });
    }
    req.consoleSession = session;
    if (changesState(req.method) && (!sameOrigin(req.headers.origin, req.headers.host) || !csrfMatches(session, req.headers[CSRF_HEADER]))) {
      noteAudit(req, { why: 'CSRF token or origin mismatch' });
      return sendProblem(reply, 'forbidden', { detail: `send the session's CSRF token in ${CSRF_HEADER}` });
    }
    return undefined;
  }

  const page = (_req: FastifyRequest, reply: FastifyReply) => {
    if (!deps.assets.page) return reply.code(503).type('text/plain; charset=utf-8').send('the console is not built: run npm run build');
    return reply.type(deps.assets.page.type).send(deps.assets.page.body);
  };
  app.get('/console', page);
  app.get('/console/', page);
  app.get<{ Params: { name: string } }>('/console/assets/:name', (req, reply) => {
    const asset = deps.assets.asset(req.params.name);
    if (!asset) return sendProblem(reply, 'not_found', { detail: 'no such console asset' });
    return reply.header('Cache-Control', ASSET_CACHE).type(asset.type).send(asset.body);
  });

  app.post<{ Body: { key: string } }>(
    '/console/session',
    { schema: { body: { type: 'object', required: ['key'], additionalProperties: false, properties: { key: { type: 'string', minLength: 1, maxLength: 512 } } } }, config: { audit: 'login' } },
    async (req, reply) => {
      if (!sameOrigin(req.headers.origin, req.headers.host)) {
        noteAudit(req, { why: 'cross-origin' });
        return sendProblem(reply, 'forbidden', { detail: 'log in from the console page' });
      }
      const refused = deps.authFailures.refusal(req);
      if (refused) {
        noteAudit(req, { why: 'too many failed authentications from this address', retryAfterSec: refused.retryAfterSec });
        return sendProblem(reply, 'rate_limited', { detail: 'too many failed authentications from this address; try again later', retryAfterSec: refused.retryAfterSec });
      }
      const principal = deps.keys.principalOf(req.body.key);
      // Only a key that matches none is a guess. A tenant's key is its owner's, never an
      // operator's: it is refused, and said so, but not counted.
      if (!principal) deps.authFailures.failed(req);
      if (principal?.kind !== 'admin') {
        noteAudit(req, { why: principal ? 'tenant key' : 'unknown key' });
        return principal ? sendProblem(reply, 'forbidden', { detail: 'the console needs the admin key; tenant keys do not open it' }) : sendProblem(reply, 'unauthorized', { detail: 'unknown key' });
      }
      // A browser that logs in again gets a new session id, and its old session ends: a token
      // planted in the browser before the login (session fixation) opens nothing after it.
      const previous = cookieValue(req.headers.cookie, SESSION_COOKIE);
      const ended = previous ? await sessions.find(previous) : undefined;
      if (ended) noteAudit(req, { ended: ended.id });
      if (previous) await sessions.close(previous);
      const { token, session } = await sessions.open();
      req.consoleSession = session;
      return reply.header('Set-Cookie', sessionCookie(token, { maxAgeSec: deps.sessionTtlSec, secure: secure(req) })).send({ csrfToken: session.csrfToken, expiresAt: new Date(session.expiresAt).toISOString() });
    },
  );

  app.get('/console/api/session', { onRequest: requireSession }, async (req) => ({ csrfToken: req.consoleSession!.csrfToken, expiresAt: new Date(req.consoleSession!.expiresAt).toISOString() }));

  app.delete('/console/session', { onRequest: requireSession, config: { audit: 'logout' } }, async (req, reply) => {
    await sessions.close(cookieValue(req.headers.cookie, SESSION_COOKIE)!);
    return reply.header('Set-Cookie', sessionCookie('', { maxAgeSec: 0, secure: secure(req) })).code(204).send();
  });

  app.get('/console/api/overview', { onRequest: requireSession }, async () => {
    const { firing, pending } = deps.alerts.current();
    return { points: pointsOf(deps.sampler.history()), finished: await deps.finishedRuns.current(), alerts: firing, pending };
  });

  app.get('/console/api/backpressure', { onRequest: requireSession }, async (req) => {
    const failed = await deps.metrics.scrapeCollectors.collect();
    for (const { collector, err } of failed) req.log.warn({ err, collector }, 'a scrape-time read failed; the console shows without it');
    const processors = await deps.processorState().catch((err: unknown) => `Redis unreachable (${(err as Error).message})`);
    const gauges = backpressureGauges(await deps.metrics.registry.getMetricsAsJSON(), processors);
    let lag: PublishedReport | string;
    try {
      lag = await deps.lagReport();
    } catch (err) {
      lag = `Redis unreachable (${(err as Error).message})`;
    }
    const waiting = await deps.waitingForDependency().then(
      (counts) => ({ counts: counts.filter((c) => c.runs > 0), why: null }),
      (err: unknown) => ({ counts: null, why: `Redis unreachable (${(err as Error).message})` }),
    );
    return { ...gauges, waitingForDependency: waiting, lag: typeof lag === 'string' ? { report: null, why: lag } : { report: lag, why: null } };
  });

  app.get('/console/api/limits', { onRequest: requireSession }, (req, reply) => answerLimits(deps.limits, req, reply));
  app.put<{ Body: LimitChange }>('/console/api/limits', { onRequest: requireSession, schema: { body: limitChangeSchema }, config: { audit: 'limit.change' } }, (req, reply) => answerLimitChange(deps.limits, req.body, req, reply));

  app.get('/console/api/dependencies', { onRequest: requireSession }, async (req, reply) => {
    try {
      return { dependencies: await deps.breakerAdmin.breakers.reports.all(), spend: dependencySpend(deps.sampler.history()) };
    } catch (err) {
      req.log.error({ err }, 'could not read the dependencies');
      return sendProblem(reply, 'dependency_unavailable', { detail: 'the dependencies could not be read from Redis; try again', retryAfterSec: 1 });
    }
  });

  app.put<{ Params: { dependency: string }; Body: ForceRequest }>('/console/api/breakers/:dependency/force', { onRequest: requireSession, schema: { body: forceRequestSchema }, config: { audit: 'breaker.force' } }, (req, reply) =>
    answerForce(deps.breakerAdmin, req.params.dependency, req.body, req, reply),
  );

  app.delete<{ Params: { dependency: string } }>('/console/api/breakers/:dependency/force', { onRequest: requireSession, config: { audit: 'breaker.clear' } }, (req, reply) =>
    answerForce(deps.breakerAdmin, req.params.dependency, undefined, req, reply),
  );

  app.get<{ Querystring: RunQuery }>('/console/api/runs', { onRequest: requireSession, schema: { querystring: runQuerySchema } }, async (req) => {
    const q = req.query;
    const runs = await deps.runs.findRuns({
      runId: q.runId,
      tenantId: q.tenant,
      workflow: q.workflow,
      status: q.status,
      since: q.since ? Date.parse(q.since) : undefined,
      until: q.until ? Date.parse(q.until) : undefined,
      limit: MAX_RUNS,
    });
    return { runs, limit: MAX_RUNS };
  });

  app.get<{ Params: { id: string } }>('/console/api/runs/:id', { onRequest: requireSession, schema: { params: RUN_ID_PARAMS } }, async (req, reply) => {
    const [run] = await deps.runs.findRuns({ runId: req.params.id, limit: 1 });
    if (!run) return sendProblem(reply, 'not_found', { detail: 'no such run' });
    return { run, events: await deps.runs.listEvents(run.runId, run.tenantId, 0, MAX_EVENTS) };
  });

  app.post<{ Params: { id: string } }>('/console/api/runs/:id/cancel', { onRequest: requireSession, schema: { params: RUN_ID_PARAMS }, config: { audit: 'run.cancel' } }, async (req, reply) => {
    const [run] = await deps.runs.findRuns({ runId: req.params.id, limit: 1 });
    if (!run) return sendProblem(reply, 'not_found', { detail: 'no such run' });
    noteAudit(req, { runId: run.runId, tenant: run.tenantId });
    return answerCancel(deps, run, req, reply);
  });

  app.get<{ Querystring: DlqQuery }>('/console/api/dlq', { onRequest: requireSession, schema: { querystring: dlqQuerySchema } }, async (req) => {
    const rows = await deps.dlq.store.list({ ...req.query });
    return { rows };
  });

  app.get<{ Params: { id: string } }>('/console/api/dlq/:id', { onRequest: requireSession, schema: { params: DEAD_LETTER_ID_PARAMS } }, async (req, reply) => {
    const row = await deps.dlq.store.get(req.params.id);
    if (!row) return sendProblem(reply, 'not_found', { detail: 'no such dead letter' });
    return rowJson(row);
  });

  /** Recorded as replayed_by / discarded_by: the console and which session, as the CLI records its user. */
  const who = (req: FastifyRequest) => `console:${req.consoleSession!.id}`;

  app.post<{ Body: { ids: string[]; dryRun: boolean } }>(
    '/console/api/dlq/replay',
    { onRequest: requireSession, schema: { body: { type: 'object', required: ['ids', 'dryRun'], additionalProperties: false, properties: { ids: DLQ_IDS, dryRun: { type: 'boolean' } } } }, config: { audit: 'dlq.replay' } },
    async (req) => {
      const { ids, dryRun } = req.body;
      const outcomes: ReplayResult[] = [];
      let tally = emptyTally();
      let untried = 0;
      noteAudit(req, { ids, dryRun, by: who(req) });
      if (dryRun) tally = await deps.dlq.replayer.preview(ids, (o) => outcomes.push(o));
      else {
        try {
          ({ tally, untried } = await deps.dlq.replayer.replay(ids, await deps.dlq.kafka(), { by: who(req), ratePerSec: DEFAULT_REPLAY_RATE, onOutcome: (o) => outcomes.push(o) }));
        } finally {
          noteAudit(req, { done: outcomes.map((o) => `${o.id} ${o.result}`) });
        }
        noteAudit(req, { replayed: tally.replayed, refused: tally.refused, failed: tally.failed, untried, ...(tally.failed > 0 && { outcome: 'failed' }) });
      }
      return { lines: outcomes.map((o) => outcomeLine(o, dryRun)), summary: summaryLine(tally, dryRun), untried };
    },
  );

  app.post<{ Body: { ids: string[]; reason: string } }>(
    '/console/api/dlq/discard',
    { onRequest: requireSession, schema: { body: { type: 'object', required: ['ids', 'reason'], additionalProperties: false, properties: { ids: DLQ_IDS, reason: { type: 'string', minLength: 1, maxLength: 500 } } } }, config: { audit: 'dlq.discard' } },
    async (req) => {
      const { ids, reason } = req.body;
      noteAudit(req, { ids, by: who(req), reason });
      const result = await deps.dlq.store.discard(ids, who(req), reason);
      noteAudit(req, { discarded: result.discarded, notFound: result.notFound, notPending: result.notPending.map((n) => n.id) });
      return result;
    },
  );
}
