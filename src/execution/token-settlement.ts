import type { TokenBudgetStore } from '../admission/token-budget-store.js';
import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { RunOutcome } from './attempt.js';

/** What one attempt has settled so far: whether its reservation is still out, and the tokens its LLM calls used. */
export interface AttemptTokens {
  reservation: number;
  settled: boolean;
  used: number;
}

/**
 * The correction one LLM call makes to the tenant's budget: the first call of an attempt gives the
 * reservation back and charges what it used; every later call charges what it used.
 */
export function callSettlement(state: AttemptTokens, tokens: number): { delta: number; next: AttemptTokens } {
  const giveBack = state.settled ? 0 : state.reservation;
  return { delta: giveBack - tokens, next: { reservation: state.reservation, settled: true, used: state.used + tokens } };
}

/** What an ending attempt gives back: its reservation if no LLM call settled it. */
export function unsettledReservation(state: AttemptTokens): number {
  return state.settled ? 0 : state.reservation;
}

/**
 * The processor's side of token budgets: corrects the reservation admission took
 * (`RunRequested.tokenReservation`) by the tokens the run's LLM calls report, and folds a completed
 * attempt's tokens into its workflow's estimate. Failures are logged, never thrown: a run is not
 * failed over its accounting, and the budget refills by itself.
 */
export class TokenSettlement {
  private readonly attempts = new Map<string, AttemptTokens>();
  private readonly anyBudget: boolean;

  constructor(
    private readonly config: Pick<SluiceConfig, 'tenants'>,
    private readonly store: Pick<TokenBudgetStore, 'settle' | 'fold'>,
    private readonly logger: Logger,
  ) {
    // Without any budget nobody reads the estimates: no Redis call per run.
    this.anyBudget = Object.values(config.tenants).some((t) => t.admission.tokenBudget !== undefined);
  }

  /** Called with the input+output tokens of each LLM call of the attempt. */
  async charge(run: RunRequested, tokens: number): Promise<void> {
    if (!this.anyBudget) return;
    const key = attemptKey(run);
    const { delta, next } = callSettlement(this.attempts.get(key) ?? initial(run), tokens);
    this.attempts.set(key, next);
    await this.settle(run, delta);
  }

  /** Called once the attempt ended (or the run was dead-lettered without one). */
  async endAttempt(run: RunRequested, outcome: RunOutcome | undefined): Promise<void> {
    if (!this.anyBudget) return;
    const key = attemptKey(run);
    const state = this.attempts.get(key) ?? initial(run);
    this.attempts.delete(key);
    await this.settle(run, unsettledReservation(state));
    if (outcome !== 'completed' || state.used <= 0) return;
    try {
      await this.store.fold(run.workflow, state.used);
    } catch (err) {
      this.logger.warn({ err, runId: run.runId, workflow: run.workflow }, 'could not fold a run’s tokens into its workflow’s estimate');
    }
  }

  private async settle(run: RunRequested, delta: number): Promise<void> {
    const budget = ownEntry(this.config.tenants, run.tenantId)?.admission.tokenBudget;
    if (!budget || delta === 0) return;
    try {
      await this.store.settle(run.tenantId, budget, delta);
    } catch (err) {
      this.logger.warn({ err, runId: run.runId, tenantId: run.tenantId, delta }, 'could not settle a run’s tokens with its token budget');
    }
  }
}

const attemptKey = (run: RunRequested) => `${run.runId}:${run.attempt}`;

const initial = (run: RunRequested): AttemptTokens => ({ reservation: run.tokenReservation ?? 0, settled: false, used: 0 });
