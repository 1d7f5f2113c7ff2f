import type { DependencyConfig, TenantConfig, WorkflowConfig } from '../config/schema.js';
import { retryAfterSeconds, type AdmissionDecision } from './admission-policy.js';

/**
 * A tenant's token budget at the door, as plain functions: a run takes its workflow's estimated
 * input+output tokens from the tenant's budget bucket before it is admitted; the processor later
 * settles the reservation against what the run used (src/execution/token-settlement.ts).
 */

export type TokenBudget = NonNullable<TenantConfig['admission']['tokenBudget']>;

/** A workflow's measured tokens per run: the moving average and how many runs it folds in. */
export interface MeasuredTokens {
  perRun: number;
  samples: number;
}

/** A correction of a tenant's budget for one run: tokens used, and the reservation to give back (once per run). */
export interface TokenChange {
  charge: number;
  giveBack: number;
}

/** How long after a run's deadline the record that its reservation went back is kept. */
export const RESERVATION_MARKER_GRACE_MS = 3_600_000;

/** Runs measured before the moving average replaces the workflow's prior. */
export const MIN_TOKEN_SAMPLES = 5;

/** Weight of the newest completed run in the moving tokens per run. */
export const TOKEN_ESTIMATE_WEIGHT = 0.2;

/**
 * Tokens a run of the workflow is assumed to use before any run was measured: `tokenPrior`, else
 * for each LLM step twice its dependency's `maxTokens` (an input about as long as the longest answer).
 */
export function tokenPrior(workflow: WorkflowConfig, dependencies: Readonly<Record<string, DependencyConfig>>): number {
  if (workflow.tokenPrior !== undefined) return workflow.tokenPrior;
  let tokens = 0;
  for (const step of workflow.steps) {
    // An agent's turns are many and grow with the transcript: its token bound is what it may use.
    if (step.kind === 'agent') tokens += step.bounds.maxTokens;
    if (step.kind !== 'llm') continue;
    const dep = dependencies[step.dependency];
    if (dep?.kind === 'llm') tokens += 2 * dep.maxTokens;
  }
  return tokens;
}

/** The measured figure once enough runs were folded in; a few runs are noise, so the prior until then. */
export function tokenEstimate(measured: MeasuredTokens | undefined, prior: number): number {
  if (!measured || measured.samples < MIN_TOKEN_SAMPLES || !Number.isFinite(measured.perRun) || measured.perRun < 0) return prior;
  return Math.ceil(measured.perRun);
}

/** Refill of the budget bucket per second. */
export function budgetRefillPerSec(budget: TokenBudget): number {
  return budget.tokensPerMinute / 60;
}

/**
 * What admission takes for a run: its estimate, but never more than the bucket holds, so a run
 * bigger than the burst still passes when the bucket is full (it then pays the rest back through
 * settlement, by the bucket going below zero).
 */
export function budgetCost(estimate: number, budget: TokenBudget): number {
  return Math.max(0, Math.min(estimate, budget.burstTokens));
}

/** The budget bucket's answer as a decision; the wait is the real time until it covers the run. */
export function tokenBudgetRefusal(take: { allowed: boolean; waitMs: number }): AdmissionDecision | undefined {
  if (take.allowed) return undefined;
  return { outcome: 'deferred', reason: 'token_budget_exhausted', retryAfterSec: retryAfterSeconds(take.waitMs) };
}
