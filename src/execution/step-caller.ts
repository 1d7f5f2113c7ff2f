import { breakerOutcomeOf } from '../breakers/breaker-outcome.js';
import { ownEntry } from '../config/lookup.js';
import type { DependencyConfig, SluiceConfig, StepConfig } from '../config/schema.js';
import { dependencyOf } from '../config/workflows.js';
import type { RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { RetryBudgets } from '../retries/retry-budget.js';
import { nextRetryDelay } from '../retries/retry-policy.js';
import { MIN_USEFUL_CALL_MS, clampTimeout } from '../runs/deadline.js';
import type { LlmRequest, LlmResult } from '../steps/llm-call.js';
import { composeUserTurn } from '../steps/prompt.js';
import { StepError } from '../steps/step-error.js';
import { callTool } from '../steps/tool-call.js';
import type { CallGuard } from './call-guard.js';
import { tokenCounts, tokenModelLabel } from './run-signals.js';
import type { TokenSettlement } from './token-settlement.js';

/** Outputs of a run's earlier steps by step id, in step order: what a later step is given. */
export type StepOutputs = Record<string, unknown>;

export interface StepCallerDeps {
  config: Pick<SluiceConfig, 'dependencies'>;
  /** One LLM call (`callLlm` with the SDK client in production); it never retries by itself. */
  llm: (req: LlmRequest) => Promise<LlmResult>;
  /** Base URL that tool paths starting with "/" are resolved against (the provider simulator). */
  simulatorUrl: string;
  guard: CallGuard;
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
  private readonly budgets: RetryBudgets;

  constructor(private readonly deps: StepCallerDeps) {
    this.budgets = new RetryBudgets(deps.now);
  }

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
        if (!this.budgets.of(depName, dep.retry).tryRetry()) {
          metrics.retryBudgetExhausted.inc({ dependency: depName });
          throw err;
        }
        metrics.stepRetries.inc({ dependency: depName });
        this.deps.logger.info({ runId: run.runId, step: step.id, attempt, delayMs: delay, err: err.message }, 'retrying a step call');
        // The dependency permit was given back with the failed call: none is held while waiting.
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  /** One call under a dependency permit, counted in the step metrics and, for an LLM, its tokens. */
  private async callOnce(run: RunRequested, step: StepConfig, dep: DependencyConfig, input: unknown, outputs: StepOutputs): Promise<unknown> {
    const { metrics, now } = this.deps;
    const depName = dependencyOf(step);
    this.budgets.of(depName, dep.retry).recordCall();
    const releasePermit = await this.deps.guard.takePermit(run, depName);
    // Measured from after the permit: waiting for capacity is not the dependency's time.
    const timeoutMs = clampTimeout(dep.timeouts.totalMs, run.deadline, now());
    const callStarted = now();
    const headers = { traceparent: run.traceparent, 'X-Sluice-Tenant': run.tenantId, 'X-Sluice-Run': run.runId, 'Idempotency-Key': `${run.runId}:${step.id}` };
    let outcome = 'ok';
    try {
      if (step.kind === 'llm' && dep.kind === 'llm') {
        const res = await this.deps.llm({
          dependency: depName,
          config: dep,
          system: step.system,
          userContent: composeUserTurn(input, outputs),
          tenantId: run.tenantId,
          timeoutMs,
          headers,
        });
        const model = tokenModelLabel(this.deps.config.dependencies, dep, res.model);
        for (const [kind, tokens] of tokenCounts(res.usage)) metrics.llmTokens.inc({ tenant: run.tenantId, workflow: run.workflow, model, kind }, tokens);
        await this.deps.tokenSettlement?.charge(run, res.usage.inputTokens + res.usage.outputTokens);
        // The output keeps the shape callers read in the result; the cache counts go to the counters only.
        return { text: res.text, model: res.model, usage: { inputTokens: res.usage.inputTokens, outputTokens: res.usage.outputTokens } };
      }
      if (step.kind === 'tool' && dep.kind === 'tool') {
        const url = new URL(dep.url.startsWith('/') ? `${this.deps.simulatorUrl}${dep.url}` : dep.url);
        const timeouts = { connectMs: Math.min(dep.timeouts.connectMs, timeoutMs), readMs: Math.min(dep.timeouts.readMs, timeoutMs), totalMs: timeoutMs };
        return await callTool({ dependency: depName, url, body: { input, steps: outputs }, headers, timeouts });
      }
      throw new StepError('bad_response', depName, `step "${step.id}" is ${step.kind} but "${depName}" is ${dep.kind}`, false);
    } catch (err) {
      outcome = err instanceof StepError ? err.kind : 'error';
      throw err;
    } finally {
      metrics.stepCalls.inc({ dependency: depName, outcome });
      metrics.stepDuration.observe({ dependency: depName, outcome }, (now() - callStarted) / 1000);
      await releasePermit();
    }
  }
}
