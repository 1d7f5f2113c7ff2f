import { breakerOutcomeOf } from '../breakers/breaker-outcome.js';
import { ownEntry } from '../config/lookup.js';
import type { DependencyConfig, SluiceConfig, StepConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { NO_TOKENS, estimateInputTokens, usedTokens } from '../pacing/pacing-policy.js';
import type { RetryBudgetSource } from '../retries/retry-budget.js';
import { nextRetryDelay } from '../retries/retry-policy.js';
import { MIN_USEFUL_CALL_MS, clampTimeout } from '../runs/deadline.js';
import type { LlmContentBlock, LlmMessage, LlmRequest, LlmResult, LlmTool } from '../steps/llm-call.js';
import { composeUserTurn } from '../steps/prompt.js';
import { StepError, timedOutOnDeadline } from '../steps/step-error.js';
import type { ToolRequest } from '../steps/tool-call.js';
import type { CallGuard } from './call-guard.js';
import { isProviderCall, type AttemptCalls } from './goodput.js';
import { countLlmResponse, countedUsage, stepUsage } from './llm-usage.js';
import type { TokenUsage } from '../status/run-usage.js';
import type { TokenSettlement } from './token-settlement.js';

/** Outputs of a run's earlier steps by step id, in step order: what a later step is given. */
export type StepOutputs = Record<string, unknown>;

/**
 * One call to a dependency. `callId` names it within the run: the tool's Idempotency-Key is
 * `runId:callId` (a step's id; for an agent's tool call `stepId:turn-<n>:toolUseId`, agent-loop.ts).
 */
export type DependencyCall =
  | { kind: 'llm'; dependency: string; callId: string; system: string; messages: LlmMessage[]; tools?: readonly LlmTool[]; model?: string; maxTokens?: number }
  | { kind: 'tool'; dependency: string; callId: string; body: unknown };

/** What an LLM call gives: its text, model and usage; with tools offered, its content blocks and stop reason too. */
export interface LlmCallOutput {
  text: string;
  model: string;
  usage: TokenUsage;
  content?: LlmContentBlock[];
  stopReason?: string | null;
}

/** A message's text as the prompt estimate counts it: blocks (tool results, tool calls) as their JSON. */
const promptText = (message: LlmMessage): string => (typeof message.content === 'string' ? message.content : JSON.stringify(message.content));

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
  /** One tool call (`ToolConnections.call` in production, over kept-alive connections); it never retries by itself. */
  tool: (req: ToolRequest) => Promise<unknown>;
  /** Base URL that tool paths starting with "/" are resolved against (the provider simulator). */
  simulatorUrl: string;
  guard: CallGuard;
  /** Where the provider calls that go out are counted, per attempt, for the run's end to judge. */
  calls: AttemptCalls;
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
  call(run: RunRequested, step: StepConfig, input: unknown, outputs: StepOutputs): Promise<unknown> {
    if (step.kind === 'llm') return this.callDependency(run, { kind: 'llm', dependency: step.dependency, callId: step.id, system: step.system, messages: [{ role: 'user', content: composeUserTurn(input, outputs) }] });
    if (step.kind === 'tool') return this.callDependency(run, { kind: 'tool', dependency: step.tool, callId: step.id, body: { input, steps: outputs } });
    throw new StepError('bad_response', step.dependency, `step "${step.id}" is an agent, which the agent loop runs`, false);
  }

  /** One dependency call with its retries: a step's, or one of an agent's turns and tool calls. */
  async callDependency(run: RunRequested, call: DependencyCall): Promise<unknown> {
    const { guard, metrics, now } = this.deps;
    const depName = call.dependency;
    const dep = ownEntry(this.deps.config.dependencies, depName);
    if (!dep) throw new StepError('bad_response', depName, `dependency "${depName}" is not configured`, false);
    for (let attempt = 1; ; attempt++) {
      const probe = await guard.admit(run, depName, `${run.runId}:${run.attempt}:${call.callId}:${attempt}`);
      const started = now();
      try {
        const output = await this.callOnce(run, call, dep);
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
        this.deps.logger.info({ runId: run.runId, call: call.callId, attempt, delayMs: delay, err: err.message }, 'retrying a step call');
        // The dependency permit was given back with the failed call; the wait is short by the check above.
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  /**
   * One call in its turn under the dependency's rate limits and under a dependency permit, counted
   * in the step metrics and, for an LLM, its tokens.
   */
  private async callOnce(run: RunRequested, call: DependencyCall, dep: DependencyConfig): Promise<unknown> {
    const { metrics, now } = this.deps;
    const depName = call.dependency;
    const llm = call.kind === 'llm' && dep.kind === 'llm' ? { ...dep, model: call.model ?? dep.model, maxTokens: call.maxTokens ?? dep.maxTokens } : undefined;
    // An LLM call books its prompt's estimated input and its whole output allowance; its usage settles the difference.
    const booked = call.kind === 'llm' && llm ? { inputTokens: estimateInputTokens(call.system, ...call.messages.map(promptText), call.tools ? JSON.stringify(call.tools) : ''), outputTokens: llm.maxTokens } : NO_TOKENS;
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
    if (isProviderCall(dep)) this.deps.calls.add(run, depName);
    // Measured from after the permit: waiting for capacity is not the dependency's time.
    const timeoutMs = clampTimeout(dep.timeouts.totalMs, run.deadline, now());
    const callStarted = now();
    const headers = { traceparent: run.traceparent, 'X-Sluice-Tenant': run.tenantId, 'X-Sluice-Run': run.runId, 'Idempotency-Key': `${run.runId}:${call.callId}` };
    let outcome = 'ok';
    let failure: unknown;
    try {
      if (call.kind === 'llm' && llm) {
        const res = await this.deps.llm({ dependency: depName, config: llm, system: call.system, messages: call.messages, tools: call.tools, tenantId: run.tenantId, timeoutMs, headers });
        // One count for pacing, metrics, the token budget and the run's usage.
        const usage = countedUsage(res.usage, res.answerBytes);
        if (usage.outputTokens !== res.usage.outputTokens) {
          metrics.llmImplausibleUsage.inc({ dependency: depName });
          this.deps.logger.warn({ runId: run.runId, dependency: depName, reportedOutputTokens: res.usage.outputTokens, answerBytes: res.answerBytes, countedOutputTokens: usage.outputTokens }, 'the provider reported fewer output tokens than its answer’s bytes can be; counting them from the bytes');
        }
        await this.deps.guard.afterCall(depName, booked, usedTokens(usage), { headers: res.headers, status: 200 });
        countLlmResponse(metrics, this.deps.config, { tenant: run.tenantId, workflow: run.workflow }, llm, { model: res.model, usage });
        await this.deps.tokenSettlement?.charge(run, usage.inputTokens + usage.outputTokens);
        // The usage stays in the output: the journal keeps it for the run's usage summary (runUsage).
        const output: LlmCallOutput = { text: res.text, model: res.model, usage: stepUsage(usage) };
        return call.tools ? { ...output, content: res.content, stopReason: res.stopReason } : output;
      }
      if (call.kind === 'tool' && dep.kind === 'tool') {
        const url = new URL(dep.url.startsWith('/') ? `${this.deps.simulatorUrl}${dep.url}` : dep.url);
        const timeouts = { connectMs: Math.min(dep.timeouts.connectMs, timeoutMs), readMs: Math.min(dep.timeouts.readMs, timeoutMs), totalMs: timeoutMs };
        return await this.deps.tool({ dependency: depName, url, body: call.body, headers, timeouts });
      }
      throw new StepError('bad_response', depName, `a ${call.kind} call cannot go to "${depName}", a ${dep.kind} dependency`, false);
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
