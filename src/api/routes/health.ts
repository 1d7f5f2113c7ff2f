import type { FastifyBaseLogger, FastifyInstance, onRequestAsyncHookHandler } from 'fastify';
import type { Metrics } from '../../obs/metrics.js';
import type { RedisOutagePolicy } from '../../admission/redis-outage.js';
import type { Role } from '../../config/schema.js';
import { withTimeout } from '../../util/with-timeout.js';

/**
 * What a failing dependency means for this process: it cannot do its work (`not_ready`: take it
 * out of rotation), or it still does the part that matters and answers the rest honestly
 * (`degraded`: e.g. submissions accepted into Kafka while reads answer 503).
 */
export type ReadinessEffect = 'not_ready' | 'degraded';

/** One dependency's readiness: resolves when it answered, rejects (with the reason) when not. */
export interface ReadinessCheck {
  name: string;
  check: () => Promise<void>;
  /** Default `not_ready`. */
  whenFailing?: ReadinessEffect;
}

export type ReadinessStatus = 'ready' | ReadinessEffect;

/** What `/readyz` answers: each check by name, ok or failing. Why one failed is in the log only. */
export interface ReadinessReport {
  status: ReadinessStatus;
  checks: { name: string; ok: boolean }[];
}

/** The worst effect among the failing checks. */
export function readinessStatus(results: readonly { ok: boolean; whenFailing?: ReadinessEffect }[]): ReadinessStatus {
  const failing = results.filter((r) => !r.ok);
  if (failing.length === 0) return 'ready';
  return failing.some((r) => (r.whenFailing ?? 'not_ready') === 'not_ready') ? 'not_ready' : 'degraded';
}

export type Dependency = 'kafka' | 'redis' | 'postgres';

/**
 * Which dependencies a process checks, and what each one failing means, from its roles and the
 * submit path's Redis outage policy (the README's outage table, as readiness):
 * - Kafka: every role but the simulator lives on it.
 * - Redis: processors take permits in it; the ingress decides admission in it (it holds events
 *   rather than fail open); the API decides admission in it, unless it fails open; a lag monitor
 *   holds its lease in it (without Redis none exports lag, but nothing is refused).
 * - Postgres: the sinks write it; the API only reads it (submissions stay durable in Kafka).
 */
export function readinessPlan(roles: readonly Role[], redisPolicy: RedisOutagePolicy): { name: Dependency; whenFailing: ReadinessEffect }[] {
  const has = (r: Role) => roles.includes(r);
  const plan: { name: Dependency; whenFailing: ReadinessEffect }[] = [];
  if (roles.some((r) => r !== 'provider-sim')) plan.push({ name: 'kafka', whenFailing: 'not_ready' });
  if (has('processor') || has('ingress')) plan.push({ name: 'redis', whenFailing: 'not_ready' });
  else if (has('api')) plan.push({ name: 'redis', whenFailing: redisPolicy === 'fail-open' ? 'degraded' : 'not_ready' });
  else if (has('lag-monitor')) plan.push({ name: 'redis', whenFailing: 'degraded' });
  if (has('status-sink') || has('dlq-sink')) plan.push({ name: 'postgres', whenFailing: 'not_ready' });
  else if (has('api')) plan.push({ name: 'postgres', whenFailing: 'degraded' });
  return plan;
}

export interface ReadinessOptions {
  logger: Pick<FastifyBaseLogger, 'warn'>;
  /** How long a report is served before the checks run again. */
  cacheMs?: number;
  timeoutMs?: number;
  now?: () => number;
}

export const READINESS_CACHE_MS = 1_000;
export const READINESS_CHECK_TIMEOUT_MS = 2_000;

/**
 * Readiness as `/readyz` reports it. A probe storm (every load balancer, every pod, a retrying
 * client) must not become a storm on the dependencies: at most one round of checks runs at a time,
 * requests meanwhile share it, and its report is served for `cacheMs` after it finished. A
 * dependency's error text can name hosts, ports and users, so it goes to the log, not the answer.
 */
export class Readiness {
  private cached: { report: ReadinessReport; until: number } | undefined;
  private round: Promise<ReadinessReport> | undefined;
  private readonly cacheMs: number;
  private readonly timeoutMs: number;
  private readonly now: () => number;

  constructor(
    private readonly checks: readonly ReadinessCheck[],
    private readonly opts: ReadinessOptions,
  ) {
    this.cacheMs = opts.cacheMs ?? READINESS_CACHE_MS;
    this.timeoutMs = opts.timeoutMs ?? READINESS_CHECK_TIMEOUT_MS;
    this.now = opts.now ?? Date.now;
  }

  report(): Promise<ReadinessReport> {
    if (this.cached && this.now() < this.cached.until) return Promise.resolve(this.cached.report);
    this.round ??= this.runChecks().finally(() => {
      this.round = undefined;
    });
    return this.round;
  }

  private async runChecks(): Promise<ReadinessReport> {
    const results = await Promise.all(
      this.checks.map(async (c) => {
        try {
          await withTimeout(c.check(), this.timeoutMs, `the ${c.name} readiness check`);
          return true;
        } catch (err) {
          this.opts.logger.warn({ err, check: c.name }, 'readiness check failed');
          return false;
        }
      }),
    );
    const report: ReadinessReport = {
      status: readinessStatus(this.checks.map((c, i) => ({ ok: results[i]!, whenFailing: c.whenFailing }))),
      checks: this.checks.map((c, i) => ({ name: c.name, ok: results[i]! })),
    };
    this.cached = { report, until: this.now() + this.cacheMs };
    return report;
  }
}

/**
 * `/healthz`, `/readyz` and `/metrics`. `scrapers`, when given, decides who may read `/metrics`
 * (the API port: it shows every tenant's volumes and usage); without it (the ops port) anyone may.
 */
export function registerHealthRoutes(app: FastifyInstance, deps: { readiness: ReadinessCheck[]; metrics: Metrics; scrapers?: onRequestAsyncHookHandler }): void {
  const readiness = new Readiness(deps.readiness, { logger: app.log });

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.get('/readyz', async (_req, reply) => {
    const { status, checks } = await readiness.report();
    return reply.code(status === 'not_ready' ? 503 : 200).send({ status, checks });
  });

  app.get('/metrics', { ...(deps.scrapers && { onRequest: deps.scrapers }) }, async (req, reply) => {
    for (const { collector, err } of await deps.metrics.scrapeCollectors.collect()) req.log.warn({ err, collector }, 'a scrape-time read failed; its gauges are left out of this scrape');
    const body = await deps.metrics.registry.metrics();
    return reply.type(deps.metrics.registry.contentType).send(body);
  });
}
