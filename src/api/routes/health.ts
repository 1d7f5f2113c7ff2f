import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { Metrics } from '../../obs/metrics.js';
import { withTimeout } from '../../util/with-timeout.js';

/** One dependency's readiness: resolves when it answered, rejects (with the reason) when not. */
export interface ReadinessCheck {
  name: string;
  check: () => Promise<void>;
}

/** What `/readyz` answers: each check by name, ok or failing. Why one failed is in the log only. */
export interface ReadinessReport {
  ready: boolean;
  checks: { name: string; ok: boolean }[];
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
    const checks = await Promise.all(
      this.checks.map(async (c) => {
        try {
          await withTimeout(c.check(), this.timeoutMs, `the ${c.name} readiness check`);
          return { name: c.name, ok: true };
        } catch (err) {
          this.opts.logger.warn({ err, check: c.name }, 'readiness check failed');
          return { name: c.name, ok: false };
        }
      }),
    );
    const report = { ready: checks.every((c) => c.ok), checks };
    this.cached = { report, until: this.now() + this.cacheMs };
    return report;
  }
}

export function registerHealthRoutes(app: FastifyInstance, deps: { readiness: ReadinessCheck[]; metrics: Metrics }): void {
  const readiness = new Readiness(deps.readiness, { logger: app.log });

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.get('/readyz', async (_req, reply) => {
    const { ready, checks } = await readiness.report();
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready', checks });
  });

  app.get('/metrics', async (req, reply) => {
    for (const { collector, err } of await deps.metrics.scrapeCollectors.collect()) req.log.warn({ err, collector }, 'a scrape-time read failed; its gauges are left out of this scrape');
    const body = await deps.metrics.registry.metrics();
    return reply.type(deps.metrics.registry.contentType).send(body);
  });
}
