import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import { infrastructureFailure } from '../util/infrastructure-failure.js';
import { RetryBudgets, type RetryBudgetPolicy, type RetryBudgetSource } from './retry-budget.js';

/** Buckets per window in Redis, as in the per-process budget. */
export const RETRY_BUDGET_BUCKETS = 10;
/**
 * How often counted calls reach the shared window when no retry carries them sooner: the window
 * then trails the real call count by at most this much, against a budget window of a minute.
 */
export const RETRY_BUDGET_REPORT_MS = 1_000;

export interface SharedRetryBudgetsDeps {
  scripts: Pick<LuaScripts, 'run'>;
  keys: Pick<RedisKeys, 'retryBudget'>;
  /** How often the calls counted here are added to the shared window when no retry reports them sooner. */
  reportEveryMs: number;
  metrics: Pick<Metrics, 'retryBudgetLocalDecisions'>;
  logger: Logger;
  now?: () => number;
}

/**
 * Where a retry is allowed or not: each dependency's retry budget over the calls of every
 * processor, in Redis (`lua/retry-budget-take.lua`), so N processors share one budget rather than
 * getting N. Calls are counted here and added to the shared window in one write per interval, or
 * with the next retry request; a retry is one EVALSHA. While Redis does not answer, this process's
 * own budget decides (the one `RetryBudgets` keeps from the same calls): retries stay bounded per
 * process, and the calls not yet reported are kept for when Redis is back.
 */
export class SharedRetryBudgets implements RetryBudgetSource {
  private readonly local: RetryBudgets;
  /** Calls per dependency not yet added to the shared window, with the policy they were made under. */
  private readonly unreported = new Map<string, { calls: number; policy: RetryBudgetPolicy }>();
  private timer: NodeJS.Timeout | undefined;
  private reporting: Promise<void> | undefined;

  constructor(private readonly deps: SharedRetryBudgetsDeps) {
    this.local = new RetryBudgets(deps.now);
  }

  start(): void {
    this.timer = setInterval(() => void this.report(), this.deps.reportEveryMs);
    this.timer.unref();
  }

  /** Stops the interval and makes a last report of the calls counted since the previous one. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.report();
  }

  /** Every attempt, first or retry, counts as a call. */
  recordCall(dependency: string, policy: RetryBudgetPolicy): void {
    this.local.recordCall(dependency, policy);
    const pending = this.unreported.get(dependency);
    if (pending) pending.calls++;
    else this.unreported.set(dependency, { calls: 1, policy });
  }

  /** Takes one retry from the dependency's shared budget; false means do not retry. */
  async tryRetry(dependency: string, policy: RetryBudgetPolicy): Promise<boolean> {
    const calls = this.takeUnreported(dependency);
    try {
      return await this.take(dependency, policy, calls, true);
    } catch (err) {
      this.keepUnreported(dependency, policy, calls);
      if (!infrastructureFailure(err)) throw err;
      this.deps.metrics.retryBudgetLocalDecisions.inc({ dependency });
      this.deps.logger.warn({ err, dependency }, 'the shared retry budget is unreachable; this process\'s own budget decides');
      return this.local.tryRetry(dependency, policy);
    }
  }

  /** Adds the calls counted since the last report to the shared windows; one report at a time. */
  report(): Promise<void> {
    this.reporting ??= this.reportAll().finally(() => (this.reporting = undefined));
    return this.reporting;
  }

  private async reportAll(): Promise<void> {
    for (const dependency of [...this.unreported.keys()]) {
      const { policy } = this.unreported.get(dependency)!;
      const calls = this.takeUnreported(dependency);
      if (calls === 0) continue;
      try {
        await this.take(dependency, policy, calls, false);
      } catch (err) {
        this.keepUnreported(dependency, policy, calls);
        this.deps.logger.warn({ err, dependency, calls }, 'could not add calls to the shared retry budget; they are added with the next report');
      }
    }
  }

  private async take(dependency: string, policy: RetryBudgetPolicy, calls: number, retry: boolean): Promise<boolean> {
    const args = [calls, retry ? 1 : 0, policy.budgetRatio, policy.budgetWindowMs, RETRY_BUDGET_BUCKETS, policy.budgetMinRetries];
    const [allowed] = (await this.deps.scripts.run('retryBudgetTake', [this.deps.keys.retryBudget(dependency)], args)) as [number, number, number];
    return allowed === 1;
  }

  private takeUnreported(dependency: string): number {
    const pending = this.unreported.get(dependency);
    if (!pending) return 0;
    this.unreported.delete(dependency);
    return pending.calls;
  }

  private keepUnreported(dependency: string, policy: RetryBudgetPolicy, calls: number): void {
    const pending = this.unreported.get(dependency);
    if (pending) pending.calls += calls;
    else if (calls > 0) this.unreported.set(dependency, { calls, policy });
  }
}
