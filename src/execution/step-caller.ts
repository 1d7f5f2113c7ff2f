import { breakerOutcomeOf } from '../breakers/breaker-outcome.js';
import { ownEntry } from '../config/lookup.js';
import type { DependencyConfig, SluiceConfig, StepConfig } from '../config/schema.js';
import { dependencyOf } from '../config/workflows.js';
import type { RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { NO_TOKENS, estimateInputTokens, usedTokens } from '../pacing/pacing-policy.js';
import type { RetryBudgetSource } from '../retries/retry-budget.js';
import { nextRetryDelay } from '../retries/retry-policy.js';
import { MIN_USEFUL_CALL_MS, clampTimeout } from '../runs/deadline.js';
import type { LlmRequest, LlmResult } from '../steps/llm-call.js';
import { composeUserTurn } from '../steps/prompt.js';
import { StepError, timedOutOnDeadline } from '../steps/step-error.js';
import { callTool } from '../steps/tool-call.js';
import type { CallGuard } from './call-guard.js';
import { countLlmResponse, stepUsage } from './llm-usage.js';
import type { TokenSettlement } from './token-settlement.js';

/** Outputs of a run's earlier steps by step id, in step order: what a later step is given. */
export type StepOutputs = Record<string, unknown>;

/**
 * A step call failed and may be retried, but not by waiting here: the wait is longer than
 * `processor.maxInlineRetryWaitMs`, or the provider asked for it with `retry-after`. The attempt
 * ends and the run comes back through the retry topic at `dueAt`, holding nothing meanwhile.
 */
export class StepRetryLater extends Error {
  constructor(
    readonly failure: StepError,
    readonly dueAt: number,
  ) {
    super(failure.message);
    this.name = 'StepRetryLater';
  }
}

export interface StepCallerDeps {
  config: Pick<SluiceConfig, 'dependencies' | 'processor' | 'pricing'>;
  /** One LLM call (`callLlm` with the SDK client in production); it never retries by itself. */
  llm: (req: LlmRequest) => Promise<LlmResult>;
  /** Base URL that tool paths starting with "/" are resolved against (the provider simulator). */
  simulatorUrl: string;
  guard: CallGuard;
  /** Each dependency's retry budget: shared by every processor in production (`SharedRetryBudgets`). */
  retryBudgets: RetryBudgetSource;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
  /** Source for retry jitter; injectable so tests are deterministic. */
  random: () => number;
  /** Settles each LLM call's tokens with the tenant's token budget. */
  tokenSettlement?: Pick<TokenSettlement, 'charge'>;
}

/**
 * Calls a step's dependency through the call guard, retrying retryable failures with full-jitter
 * backoff within the dependency's policy, its retry budget and the run's deadline. This is the only
 * layer that retries: the SDK and the HTTP client never do.
 */
export class StepCaller {
  constructor(private readonly deps: StepCallerDeps) {}

  /** The step's output; throws the last `StepError` once retrying is over, or what the guard throws. */
  async call(run: RunRequested, step: StepConfig, input: unknown, outputs: StepOutputs): Promise<unknown> {
    const { guard, metrics, now } = this.deps;
    const depName = dependencyOf(step);
    const dep = ownEntry(this.deps.config.dependencies, depName);
    if (!dep) throw new StepError('bad_response', depName, `dependency "${depName}" is not configured`, false);
    for (let attempt = 1; ; attempt++) {
      const probe = await guard.admit(run, depName, `${run.runId}:${run.attempt}:${step.id}:${attempt}`);
      const started = now();
      try {
        const output = await this.callOnce(run, step, dep, input, outputs);
        await guard.record(depName, probe, 'success', now() - started);
        return output;
      } catch (err) {
        if (!(err instanceof StepError)) {
          await guard.record(depName, probe, 'released', now() - started);
          throw err;
        }
        await guard.record(depName, probe, breakerOutcomeOf(err), now() - started);
        const delay = nextRetryDelay({ error: err, attempt, policy: dep.retry, now: now(), deadline: run.deadline, minCallMs: MIN_USEFUL_CALL_MS, random: this.deps.random });
        if (delay === undefined) throw err;
        if (!(await this.deps.retryBudgets.tryRetry(depName, dep.retry))) {
          metrics.retryBudgetExhausted.inc({ dependency: depName });
          throw err;
        }
        metrics.stepRetries.inc({ dependency: depName });
        if (delay > this.deps.config.processor.maxInlineRetryWaitMs || err.retryAfterSec !== undefined) throw new StepRetryLater(err, now() + delay);
        this.deps.logger.info({ runId: run.runId, step: step.id, attempt, delayMs: delay, err: err.message }, 'retrying a step call');
        // The dependency permit was given back with the failed call; the wait is short by the check above.
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  /**
   * One call in its turn under the dependency's rate limits and under a dependency permit, counted
   * in the step metrics and, for an LLM, its tokens.
   */
  private async callOnce(run: RunRequested, step: StepConfig, dep: DependencyConfig, input: unknown, outputs: StepOutputs): Promise<unknown> {
    const { metrics, now } = this.deps;
    const depName = dependencyOf(step);
    const userContent = step.kind === 'llm' ? composeUserTurn(input, outputs) : '';
    // An LLM call books its prompt's estimated input and its whole output allowance; its usage settles the difference.
    const booked = step.kind === 'llm' && dep.kind === 'llm' ? { inputTokens: estimateInputTokens(step.system, userContent), outputTokens: dep.maxTokens } : NO_TOKENS;
    // The permit before the turn: a turn booked first and then spent waiting for a permit would
    // go late, and late turns go out together once permits free up (as when a breaker's slow
    // start raises the cap), a burst above the rate the turns were booked at.
    const releasePermit = await this.deps.guard.takePermit(run, depName);
    try {
      await this.deps.guard.pace(run, depName, booked);
    } catch (err) {
      await releasePermit();
      throw err;
    }
    this.deps.retryBudgets.recordCall(depName, dep.retry);
    // Measured from after the permit: waiting for capacity is not the dependency's time.
    const timeoutMs = clampTimeout(dep.timeouts.totalMs, run.deadline, now());
    const callStarted = now();
    const headers = { traceparent: run.traceparent, 'X-Sluice-Tenant': run.tenantId, 'X-Sluice-Run': run.runId, 'Idempotency-Key': `${run.runId}:${step.id}` };
    let outcome = 'ok';
    let failure: unknown;
    try {
      if (step.kind === 'llm' && dep.kind === 'llm') {
        const res = await this.deps.llm({
          dependency: depName,
          config: dep,
          system: step.system,
          messages: [{ role: 'user', content: userContent }],
          tenantId: run.tenantId,
          timeoutMs,
          headers,
        });
        await this.deps.guard.afterCall(depName, booked, usedTokens(res.usage), { headers: res.headers, status: 200 });
        countLlmResponse(metrics, this.deps.config, { tenant: run.tenantId, workflow: run.workflow }, dep, res);
        await this.deps.tokenSettlement?.charge(run, res.usage.inputTokens + res.usage.outputTokens);
        // The usage stays in the output: the journal keeps it for the run's usage summary (runUsage).
        return { text: res.text, model: res.model, usage: stepUsage(res.usage) };
      }
      if (step.kind === 'tool' && dep.kind === 'tool') {
        const url = new URL(dep.url.startsWith('/') ? `${this.deps.simulatorUrl}${dep.url}` : dep.url);
        const timeouts = { connectMs: Math.min(dep.timeouts.connectMs, timeoutMs), readMs: Math.min(dep.timeouts.readMs, timeoutMs), totalMs: timeoutMs };
        return await callTool({ dependency: depName, url, body: { input, steps: outputs }, headers, timeouts });
      }
      throw new StepError('bad_response', depName, `step "${step.id}" is ${step.kind} but "${depName}" is ${dep.kind}`, false);
    } catch (caught) {
      // A budget our deadline cut short ran out: the run is out of time, the dependency is not at fault.
      const err = caught instanceof StepError && timedOutOnDeadline(caught.kind, dep.timeouts, timeoutMs) ? new StepError('deadline', depName, `${depName}: the run's deadline ended the call (${caught.message})`, false) : caught;
      failure = err;
      outcome = err instanceof StepError ? err.kind : 'error';
      // A failed call keeps its booking: whether the provider counted its tokens is unknown.
      if (err instanceof StepError) await this.deps.guard.afterCall(depName, booked, undefined, { headers: err.responseHeaders, status: err.status, retryAfterSec: err.retryAfterSec });
      throw err;
    } finally {
      metrics.stepCalls.inc({ dependency: depName, outcome });
      const callMs = now() - callStarted;
      metrics.stepDuration.observe({ dependency: depName, outcome }, callMs / 1000);
      // Before the permit goes back, so the calls it wakes are already held to the new figure.
      await this.deps.guard.adapt(depName, failure, callMs);
      await releasePermit();
    }
  }
}
