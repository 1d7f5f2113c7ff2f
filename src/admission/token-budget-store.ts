import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import { takeFromBucket } from './admission-store.js';
import type { BucketTake } from './local-token-bucket.js';
import { budgetRefillPerSec, TOKEN_ESTIMATE_WEIGHT, type MeasuredTokens, type TokenBudget, type TokenChange } from './token-budget.js';

/** A workflow's estimate is forgotten when no run of it completed for this long. */
const ESTIMATE_KEPT_MS = 7 * 86_400_000;

/** The thin Redis side of token budgets: each call is one EVALSHA of one script in `lua/`. */
export class TokenBudgetStore {
  constructor(
    private readonly scripts: LuaScripts,
    private readonly keys: RedisKeys,
  ) {}

  /** Takes `tokens` from the tenant's budget, or tells how long until it holds them. */
  take(tenant: string, budget: TokenBudget, tokens: number): Promise<BucketTake> {
    return takeFromBucket(this.scripts, this.keys.tokenBudget(tenant), budget.burstTokens, budgetRefillPerSec(budget), tokens);
  }

  /**
   * Charges the tokens a run used and gives its reservation back, the latter at most once per run
   * (remembered until `run.until`); answers the tokens left and whether the reservation went back now.
   */
  async settle(tenant: string, budget: TokenBudget, run: { runId: string; until: number }, change: TokenChange): Promise<{ tokensLeft: number; gaveBack: boolean }> {
    const [left, returned] = (await this.scripts.run(
      'tokenBucketSettle',
      [this.keys.tokenBudget(tenant), this.keys.tokenReservationReturned(tenant, run.runId)],
      [budget.burstTokens, budgetRefillPerSec(budget), change.charge, change.giveBack, run.until],
    )) as [string, number];
    return { tokensLeft: Number(left), gaveBack: returned === 1 };
  }

  /** Folds a completed run's tokens into its workflow's moving tokens per run. */
  async fold(workflow: string, tokens: number): Promise<MeasuredTokens> {
    const [perRun, samples] = (await this.scripts.run('tokenEstimateFold', [this.keys.tokenEstimate(workflow)], [tokens, TOKEN_ESTIMATE_WEIGHT, ESTIMATE_KEPT_MS])) as [string, number];
    return { perRun: Number(perRun), samples: Number(samples) };
  }
}
