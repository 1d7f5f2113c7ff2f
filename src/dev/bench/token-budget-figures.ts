/** The pure parts of the token budget bench (token-budget-bench.ts): its seeded arrivals and its figures. */

/** A tenant of the bench: its budget, and how many tokens its runs really use on average. */
export interface BudgetTenant {
  tenantId: string;
  tokensPerMinute: number;
  tokensPerRun: number;
}

export interface BudgetArrival {
  /** Milliseconds from the start of the arrivals. */
  atMs: number;
  tenantId: string;
  /** Tokens this run is meant to use, drawn evenly from half to one and a half times its tenant's mean. */
  tokens: number;
}

/**
 * Open-loop arrivals over `seconds`: each tenant offers `load` times its budget, in runs of its
 * mean size, evenly spaced from a seeded offset within the first gap, so the tenants interleave.
 * Sorted by time.
 */
export function budgetArrivals(tenants: readonly BudgetTenant[], load: number, seconds: number, random: () => number): BudgetArrival[] {
  const arrivals: BudgetArrival[] = [];
  for (const t of tenants) {
    const count = Math.round(((load * t.tokensPerMinute) / t.tokensPerRun) * (seconds / 60));
    if (count === 0) continue;
    const gapMs = (seconds * 1_000) / count;
    const offset = random() * gapMs;
    for (let i = 0; i < count; i++) arrivals.push({ atMs: offset + i * gapMs, tenantId: t.tenantId, tokens: Math.round(t.tokensPerRun * (0.5 + random())) });
  }
  return arrivals.sort((a, b) => a.atMs - b.atMs);
}

export interface BudgetFigures {
  /** Tokens the provider reported for the tenant's runs admitted over the window. */
  used: number;
  /** The most a bucket that starts full can hand out over the window: its burst plus the window's refill. */
  allowance: number;
  /** `used / allowance`. */
  usedOfAllowance: number;
  /** Tokens used per minute beyond the initial burst, as a share of the budget per minute (1: exactly the budget). */
  rateOfBudget: number;
}

/**
 * A tenant's use of its budget over a window of `windowMs` (from its budget's creation, full, to
 * its last admission). The tenant may spend its burst at once and then the refill: at a load above
 * the budget it uses about burst + budget × window, less what is left in the bucket at the end.
 * `rateOfBudget` takes the burst off once and compares the rest with the budget per minute;
 * settlement may leave the bucket in debt at the end, which shows as a rate above 1 (the tenant
 * pays it back afterwards). An empty window has no rate (NaN).
 */
export function budgetFigures(opts: { used: number; windowMs: number; tokensPerMinute: number; burstTokens: number }): BudgetFigures {
  const refill = (opts.tokensPerMinute * opts.windowMs) / 60_000;
  const allowance = opts.burstTokens + refill;
  return { used: opts.used, allowance, usedOfAllowance: opts.used / allowance, rateOfBudget: refill > 0 ? (opts.used - opts.burstTokens) / refill : NaN };
}
