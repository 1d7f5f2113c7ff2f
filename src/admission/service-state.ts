import type { RedisClient } from '../redis/client.js';
import type { RunClass } from '../events/schemas.js';
import { RUN_CLASSES } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { RedisKeys } from '../redis/keys.js';
import { numberField } from '../redis/number-field.js';
import { serviceRate, type ServiceEstimate } from './admission-policy.js';
import type { MeasuredTokens } from './token-budget.js';

/** Finish counts are bucketed per this many seconds by `backlog-release.lua`. */
export const SERVICE_BUCKET_SEC = 10;

/** Parses a class's service hash (`b:<bucket>` counts and `service_ms`) into an estimate. */
export function parseServiceHash(hash: Record<string, string>, nowMs: number, windowSec: number): ServiceEstimate {
  const buckets = new Map<number, number>();
  for (const [field, value] of Object.entries(hash)) {
    const m = /^b:(\d+)$/.exec(field);
    const count = numberField(value);
    if (m && count !== undefined) buckets.set(Number(m[1]), count);
  }
  return { ratePerSec: serviceRate(buckets, nowMs / 1000, SERVICE_BUCKET_SEC, windowSec), serviceTimeMs: numberField(hash.service_ms) };
}

/** Parses a workflow's token estimate hash (`per_run`, `samples`, from `token-estimate-fold.lua`). */
export function parseTokenHash(hash: Record<string, string>): MeasuredTokens | undefined {
  const perRun = numberField(hash.per_run);
  const samples = numberField(hash.samples);
  return perRun === undefined || samples === undefined ? undefined : { perRun, samples };
}

/**
 * What every API instance needs to decide without a Redis round trip per fact: measured service
 * rates per class and tokens per run per workflow, refreshed on a short interval (breaker states come from the BreakerBoard). Decisions use
 * the last snapshot; the atomic bounds are still enforced in Redis on every request.
 */
export class ServiceState {
  private services = new Map<RunClass, ServiceEstimate>();
  private tokens = new Map<string, MeasuredTokens>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys,
    private readonly opts: { refreshMs: number; rateWindowSec: number; logger: Logger; workflows: readonly string[] },
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => {
      this.refresh().catch((err: unknown) => this.opts.logger.warn({ err }, 'could not refresh service rates; using the last snapshot'));
    }, this.opts.refreshMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  service(runClass: RunClass): ServiceEstimate {
    return this.services.get(runClass) ?? { ratePerSec: undefined, serviceTimeMs: undefined };
  }

  /** A workflow's measured tokens per run, as of the last refresh. */
  tokensPerRun(workflow: string): MeasuredTokens | undefined {
    return this.tokens.get(workflow);
  }

  async refresh(): Promise<void> {
    // Finish counts are bucketed by the Redis server's clock, so they are read against it too:
    // an instance whose own clock is skewed still sees the right window.
    const pipeline = this.redis.pipeline().time();
    for (const c of RUN_CLASSES) pipeline.hgetall(this.keys.serviceStats(c));
    for (const w of this.opts.workflows) pipeline.hgetall(this.keys.tokenEstimate(w));
    const results = (await pipeline.exec()) ?? [];
    const values = results.map(([err, value]) => {
      if (err) throw err;
      return value;
    });
    const [sec, usec] = values.shift() as [string, string];
    const now = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
    const hashes = values.map((v) => (v ?? {}) as Record<string, string>);
    this.services = new Map(RUN_CLASSES.map((c, i) => [c, parseServiceHash(hashes[i]!, now, this.opts.rateWindowSec)]));
    const tokens = new Map<string, MeasuredTokens>();
    this.opts.workflows.forEach((w, i) => {
      const measured = parseTokenHash(hashes[RUN_CLASSES.length + i]!);
      if (measured) tokens.set(w, measured);
    });
    this.tokens = tokens;
  }
}
