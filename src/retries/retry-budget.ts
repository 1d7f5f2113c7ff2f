/**
 * The SRE book's retry budget, per dependency and per process: retries may be at most `ratio` of
 * the calls made over the last `windowMs`, so when a dependency fails broadly, retries stop
 * multiplying its load (a retry storm) while isolated failures are still retried. A
 * small floor of retries per window (as Finagle's budget has) lets a low-traffic dependency retry
 * an isolated failure, which a pure ratio would forbid.
 * Counts live in fixed time buckets, so memory is bounded whatever the call rate.
 */
export class RetryBudget {
  private readonly calls: number[];
  private readonly retries: number[];
  private readonly bucketMs: number;
  private currentBucket = 0;

  constructor(
    private readonly opts: { ratio: number; windowMs: number; minRetries?: number; buckets?: number; now?: () => number },
  ) {
    const n = opts.buckets ?? 10;
    this.calls = new Array<number>(n).fill(0);
    this.retries = new Array<number>(n).fill(0);
    this.bucketMs = opts.windowMs / n;
    this.currentBucket = this.bucketOf(this.now());
  }

  /** Every attempt, first or retry, counts as a call. */
  recordCall(): void {
    this.calls[this.slot()]!++;
  }

  /** Takes one retry from the budget if the window allows it; false means do not retry. */
  tryRetry(): boolean {
    const slot = this.slot();
    const calls = sum(this.calls);
    const retries = sum(this.retries);
    if (retries + 1 > Math.max(this.opts.ratio * calls, this.opts.minRetries ?? 0)) return false;
    this.retries[slot]!++;
    return true;
  }

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }

  private bucketOf(t: number): number {
    return Math.floor(t / this.bucketMs);
  }

  /** The current bucket's index, clearing the buckets that fell out of the window since last time. */
  private slot(): number {
    const bucket = this.bucketOf(this.now());
    const n = this.calls.length;
    for (let b = Math.max(this.currentBucket + 1, bucket - n + 1); b <= bucket; b++) {
      this.calls[b % n] = 0;
      this.retries[b % n] = 0;
    }
    if (bucket > this.currentBucket) this.currentBucket = bucket;
    return this.currentBucket % n;
  }
}

function sum(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}

/** A dependency's retry budget settings (`dependencies.<name>.retry`). */
export interface RetryBudgetPolicy {
  budgetRatio: number;
  budgetWindowMs: number;
  budgetMinRetries: number;
}

/** Where a step caller counts its calls and asks for a retry: this process's budgets or the shared ones. */
export interface RetryBudgetSource {
  /** Every attempt, first or retry, counts as a call. */
  recordCall(dependency: string, policy: RetryBudgetPolicy): void;
  /** Takes one retry from the dependency's budget; false means do not retry. */
  tryRetry(dependency: string, policy: RetryBudgetPolicy): Promise<boolean>;
}

/** One retry budget per dependency in this process (bounded: dependencies come from config). */
export class RetryBudgets implements RetryBudgetSource {
  private readonly budgets = new Map<string, RetryBudget>();

  constructor(private readonly now: () => number = Date.now) {}

  /** The dependency's budget, made from its policy on first use. */
  of(dependency: string, policy: RetryBudgetPolicy): RetryBudget {
    let budget = this.budgets.get(dependency);
    if (!budget) {
      budget = new RetryBudget({ ratio: policy.budgetRatio, windowMs: policy.budgetWindowMs, minRetries: policy.budgetMinRetries, now: this.now });
      this.budgets.set(dependency, budget);
    }
    return budget;
  }

  recordCall(dependency: string, policy: RetryBudgetPolicy): void {
    this.of(dependency, policy).recordCall();
  }

  async tryRetry(dependency: string, policy: RetryBudgetPolicy): Promise<boolean> {
    return this.of(dependency, policy).tryRetry();
  }
}
