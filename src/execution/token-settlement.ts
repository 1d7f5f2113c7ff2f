import { RESERVATION_MARKER_GRACE_MS, type TokenChange } from '../admission/token-budget.js';
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
export function callSettlement(state: AttemptTokens, tokens: number): { change: TokenChange; next: AttemptTokens } {
  const giveBack = state.settled ? 0 : state.reservation;
  return { change: { charge: tokens, giveBack }, next: { reservation: state.reservation, settled: true, used: state.used + tokens } };
}

/** What an ending attempt gives back: its reservation if no LLM call settled it. */
export function endSettlement(state: AttemptTokens): TokenChange {
  return { charge: 0, giveBack: state.settled ? 0 : state.reservation };
}

/**
 * The processor's side of token budgets: corrects the reservation admission took
 * (`RunRequested.tokenReservation`) by the tokens the run's LLM calls used (as `countedUsage` counts them), and folds a completed
 * attempt's tokens into its workflow's estimate. Redis gives a run's reservation back at most once,
 * so a redelivered attempt (or one the API already withdrew) cannot return it twice. Failures are logged, never thrown: a run is not
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
    const { change, next } = callSettlement(this.attempts.get(key) ?? initial(run), tokens);
    this.attempts.set(key, next);
    await this.settle(run, change);
  }

  /** Called once the attempt ended (or the run was dead-lettered without one). */
  async endAttempt(run: RunRequested, outcome: RunOutcome | undefined): Promise<void> {
    if (!this.anyBudget) return;
    const key = attemptKey(run);
    const state = this.attempts.get(key) ?? initial(run);
    this.attempts.delete(key);
    await this.settle(run, endSettlement(state));
    if (outcome !== 'completed' || state.used <= 0) return;
    try {
      await this.store.fold(run.workflow, state.used);
    } catch (err) {
      this.logger.warn({ err, runId: run.runId, workflow: run.workflow }, 'could not fold a run’s tokens into its workflow’s estimate');
    }
  }

  private async settle(run: RunRequested, change: TokenChange): Promise<void> {
    const budget = ownEntry(this.config.tenants, run.tenantId)?.admission.tokenBudget;
    if (!budget || (change.charge <= 0 && change.giveBack <= 0)) return;
    try {
      await this.store.settle(run.tenantId, budget, { runId: run.runId, until: run.deadline + RESERVATION_MARKER_GRACE_MS }, change);
    } catch (err) {
      this.logger.warn({ err, runId: run.runId, tenantId: run.tenantId, ...change }, 'could not settle a run’s tokens with its token budget');
    }
  }
}

const attemptKey = (run: RunRequested) => `${run.runId}:${run.attempt}`;

const initial = (run: RunRequested): AttemptTokens => ({ reservation: run.tokenReservation ?? 0, settled: false, used: 0 });
