import type { SluiceConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import { AgentLoop } from './agent-loop.js';
import type { AttemptContext, RunOutcome } from './attempt.js';
import { CallGuard, type CallGuardDeps } from './call-guard.js';
import { AttemptCalls } from './goodput.js';
import { OutcomePublisher, type OutcomePublisherDeps } from './outcome-publisher.js';
import type { RunFailure } from './run-faults.js';
import { StepCaller, type StepCallerDeps } from './step-caller.js';
import { StepLoop, type StepLoopDeps } from './step-loop.js';
import type { TokenSettlement } from './token-settlement.js';

/** What running an attempt needs from outside: what each part needs, with the clocks they share. */
export interface RunExecutorDeps
  extends Omit<OutcomePublisherDeps, 'config' | 'progress' | 'calls' | 'now'>,
    Omit<CallGuardDeps, 'config' | 'now'>,
    Omit<StepCallerDeps, 'config' | 'guard' | 'calls' | 'now' | 'random' | 'tokenSettlement'>,
    Omit<StepLoopDeps, 'config' | 'caller' | 'agents' | 'outcomes' | 'now' | 'random'> {
  config: SluiceConfig;
  now?: () => number;
  /** Source for retry jitter; injectable so tests are deterministic. */
  random?: () => number;
  /** Settles runs' tokens with their tenants' token budgets (absent: nothing is settled). */
  tokenSettlement?: Pick<TokenSettlement, 'charge' | 'endAttempt'>;
}

/**
 * Runs one attempt of a workflow step by step, emitting a status event per transition. The
 * outcome event is published (and acknowledged) before this resolves, because the caller commits
 * the record's offset on resolution: an unrecorded outcome must lead to redelivery, not loss.
 */
export class RunExecutor {
  private readonly now: () => number;
  private readonly outcomes: OutcomePublisher;
  private readonly steps: StepLoop;
  private readonly guard: CallGuard;

  constructor(private readonly deps: RunExecutorDeps) {
    this.now = deps.now ?? Date.now;
    const random = deps.random ?? Math.random;
    // Shared by the caller that counts an attempt's provider calls and the publisher that records them at its end.
    const calls = new AttemptCalls();
    this.outcomes = new OutcomePublisher({ ...deps, calls, now: this.now });
    const guard = (this.guard = new CallGuard({ ...deps, now: this.now }));
    const caller = new StepCaller({ ...deps, guard, calls, now: this.now, random });
    const agents = new AgentLoop({ ...deps, caller, outcomes: this.outcomes, now: this.now });
    this.steps = new StepLoop({ ...deps, caller, agents, outcomes: this.outcomes, now: this.now, random });
  }

  async execute(run: RunRequested, context: AttemptContext): Promise<RunOutcome> {
    const { metrics } = this.deps;
    const started = this.now();
    this.outcomes.startAttempt(run, started);
    const labels = { tenant: run.tenantId, workflow: run.workflow, class: run.class };
    metrics.runsStarted.inc(labels);
    metrics.runsInFlight.inc();
    let outcome: RunOutcome | undefined;
    try {
      outcome = await this.steps.run(run, context);
      metrics.runsFinished.inc({ ...labels, status: outcome });
      metrics.runDuration.observe({ workflow: run.workflow, status: outcome }, (this.now() - started) / 1000);
      return outcome;
    } finally {
      metrics.runsInFlight.dec();
      await Promise.all([this.deps.tokenSettlement?.endAttempt(run, outcome), this.guard.endAttempt(run)]);
    }
  }

  /** Tells the run's reader it waits, before starting, for a dependency whose breaker is open. */
  publishHeld(run: RunRequested, dependency: string, until: number): Promise<void> {
    return this.outcomes.held(run, dependency, until);
  }

  /** Ends a run without further attempts: archived in the DLQ topic with its context, then reported failed. */
  async deadLetter(run: RunRequested, context: AttemptContext, failure: RunFailure): Promise<RunOutcome> {
    const outcome = await this.outcomes.deadLettered(run, context, failure);
    await Promise.all([this.deps.tokenSettlement?.endAttempt(run, outcome), this.guard.endAttempt(run)]);
    return outcome;
  }
}
