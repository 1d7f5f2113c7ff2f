import type Anthropic from '@anthropic-ai/sdk';
import type { DependencyConfig, SluiceConfig, StepConfig } from '../config/schema.js';
import { nextRetryDelay } from './retry-policy.js';
import { RetryBudget } from './retry-budget.js';
import { ownEntry } from '../config/lookup.js';
import type { RunError, RunRequested, RunStatus, RunStatusChanged } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { clampTimeout, isExpired } from '../runs/deadline.js';
import { stepSequence, terminalSequence } from '../runs/status-sequence.js';
import type { CancellationCheck } from './cancellation.js';
import type { StepJournal } from './step-journal.js';
import { callLlm } from './steps/llm-call.js';
import { composeUserTurn } from './steps/prompt.js';
import { StepError } from './steps/step-error.js';
import { callTool } from './steps/tool-call.js';

export interface RunExecutorDeps {
  config: SluiceConfig;
  anthropic: Anthropic;
  /** Base URL that tool paths starting with "/" are resolved against (the provider simulator). */
  simulatorUrl: string;
  publishStatus: (event: RunStatusChanged) => Promise<void>;
  cancellation: CancellationCheck;
  /** Outputs of completed steps: a redelivered run skips them instead of repeating their side effects. */
  journal: StepJournal;
  /** A permit per call at the dependency's scope; resolves to its release, or throws at the deadline. */
  dependencyPermits: { acquire(dependency: string, run: RunRequested): Promise<() => Promise<void>> };
  metrics: Metrics;
  logger: Logger;
  now?: () => number;
  /** Source for retry jitter; injectable so tests are deterministic. */
  random?: () => number;
}

/** A retry is not started unless at least this much of the deadline would be left for the call. */
const MIN_USEFUL_CALL_MS = 100;

export type RunOutcome = Extract<RunStatus, 'completed' | 'failed' | 'expired' | 'cancelled'>;

type StepOutputs = Record<string, unknown>;

const OUTCOME_PUBLISH_TRIES = 3;

/**
 * Runs one attempt of a workflow step by step, emitting a status event per transition. The
 * outcome event is published (and acknowledged) before this resolves, because the caller commits
 * the record's offset on resolution: an unrecorded outcome must lead to redelivery, not loss.
 */
export class RunExecutor {
  private readonly now: () => number;
  private readonly random: () => number;
  /** One retry budget per dependency in this process (bounded: dependencies come from config). */
  private readonly budgets = new Map<string, RetryBudget>();

  /** When each attempt in progress started; keyed by the event object, so nothing outlives the attempt. */
  private readonly attemptStarts = new WeakMap<RunRequested, number>();

  constructor(private readonly deps: RunExecutorDeps) {
    this.now = deps.now ?? Date.now;
    this.random = deps.random ?? Math.random;
  }

  async execute(run: RunRequested): Promise<RunOutcome> {
    const { metrics } = this.deps;
    const started = this.now();
    this.attemptStarts.set(run, started);
    const labels = { tenant: run.tenantId, workflow: run.workflow, class: run.class };
    metrics.runsStarted.inc(labels);
    metrics.runsInFlight.inc();
    try {
      const outcome = await this.runSteps(run);
      metrics.runsFinished.inc({ ...labels, status: outcome });
      metrics.runDuration.observe({ workflow: run.workflow, status: outcome }, (this.now() - started) / 1000);
      return outcome;
    } finally {
      metrics.runsInFlight.dec();
    }
  }

  private async runSteps(run: RunRequested): Promise<RunOutcome> {
    const workflow = ownEntry(this.deps.config.workflows, run.workflow);
    if (!workflow) {
      return this.finish(run, 'failed', `failed: workflow "${run.workflow}" is no longer configured`, null, { code: 'unknown_workflow', message: `workflow "${run.workflow}" is not configured on this processor`, retryable: false });
    }
    // Cancellation before expiry: the caller's explicit request is the more useful thing to report.
    if (await this.deps.cancellation.isCancelRequested(run.runId)) return this.cancel(run, 'before it started');
    if (isExpired(run.deadline, this.now())) return this.expire(run, 'before it started');

    let input: unknown;
    try {
      input = JSON.parse(run.input);
    } catch {
      return this.finish(run, 'failed', 'failed: the run input is not JSON', null, { code: 'invalid_input', message: 'the run input is not valid JSON', retryable: false });
    }

    const outputs: StepOutputs = {};
    let lastText: string | undefined;
    const steps = workflow.steps;
    for (const [i, step] of steps.entries()) {
      if (i > 0 && (await this.deps.cancellation.isCancelRequested(run.runId))) {
        return this.cancel(run, `at the step boundary before step ${i + 1}/${steps.length} (${step.id})`);
      }
      if (isExpired(run.deadline, this.now())) return this.expire(run, `before step ${i + 1}/${steps.length} (${step.id})`);
      const target = step.kind === 'llm' ? step.dependency : step.tool;
      await this.publishProgress(run, stepSequence(run.attempt, i), `running: step ${i + 1}/${steps.length} (${step.id}) calling ${target}`, step.id);
      try {
        const remembered = await this.deps.journal.recall(run.runId, step.id);
        const output = remembered ? remembered.output : await this.callStep(run, step, input, outputs);
        if (!remembered) await this.deps.journal.record(run.runId, step.id, output, run.deadline);
        outputs[step.id] = output;
        if (step.kind === 'llm') lastText = (output as { text: string }).text;
      } catch (err) {
        if (!(err instanceof StepError)) throw err;
        if (isExpired(run.deadline, this.now())) return this.expire(run, `during step ${i + 1}/${steps.length} (${step.id})`);
        return this.finish(run, 'failed', `failed: step ${i + 1}/${steps.length} (${step.id}) — ${err.message}`, step.id, {
          code: 'dependency_error',
          message: err.message,
          retryable: err.retryable,
        });
      }
    }
    // A list, not a map: Postgres jsonb does not keep key order, and step order is meaningful.
    const result = JSON.stringify({ text: lastText ?? null, steps: steps.map((s) => ({ id: s.id, output: outputs[s.id] })) });
    const seconds = ((this.now() - run.admittedAt) / 1000).toFixed(1);
    return this.finish(run, 'completed', `completed: ${steps.length} steps, ${seconds} s after admission, attempt ${run.attempt}`, null, null, result);
  }

  /**
   * Calls a step's dependency, retrying retryable failures with full-jitter backoff within the
   * dependency's policy and the run's deadline. This is the only layer that retries: the SDK and
   * the HTTP client never do. The dependency permit is given back while waiting to retry.
   */
  private async callStep(run: RunRequested, step: StepConfig, input: unknown, outputs: StepOutputs): Promise<unknown> {
    const depName = step.kind === 'llm' ? step.dependency : step.tool;
    const dep = ownEntry(this.deps.config.dependencies, depName);
    if (!dep) throw new StepError('bad_response', depName, `dependency "${depName}" is not configured`, false);
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.callOnce(run, step, dep, input, outputs);
      } catch (err) {
        if (!(err instanceof StepError)) throw err;
        const delay = nextRetryDelay({ error: err, attempt, policy: dep.retry, now: this.now(), deadline: run.deadline, minCallMs: MIN_USEFUL_CALL_MS, random: this.random });
        if (delay === undefined) throw err;
        if (!this.budgetFor(depName, dep).tryRetry()) {
          this.deps.metrics.retryBudgetExhausted.inc({ dependency: depName });
          throw err;
        }
        this.deps.metrics.stepRetries.inc({ dependency: depName });
        this.deps.logger.info({ runId: run.runId, step: step.id, attempt, delayMs: delay, err: err.message }, 'retrying a step call');
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  private budgetFor(name: string, dep: DependencyConfig): RetryBudget {
    let budget = this.budgets.get(name);
    if (!budget) {
      budget = new RetryBudget({ ratio: dep.retry.budgetRatio, windowMs: dep.retry.budgetWindowMs, minRetries: dep.retry.budgetMinRetries, now: this.now });
      this.budgets.set(name, budget);
    }
    return budget;
  }

  private async callOnce(run: RunRequested, step: StepConfig, dep: DependencyConfig, input: unknown, outputs: StepOutputs): Promise<unknown> {
    const { metrics } = this.deps;
    const depName = step.kind === 'llm' ? step.dependency : step.tool;
    this.budgetFor(depName, dep).recordCall();
    const releasePermit = await this.deps.dependencyPermits.acquire(depName, run);
    // Measured from after the permit: waiting for capacity is not the dependency's time.
    const timeoutMs = clampTimeout(dep.timeouts.totalMs, run.deadline, this.now());
    const callStarted = this.now();
    const headers = { traceparent: run.traceparent, 'X-Sluice-Tenant': run.tenantId, 'X-Sluice-Run': run.runId, 'Idempotency-Key': `${run.runId}:${step.id}` };
    let outcome = 'ok';
    try {
      if (step.kind === 'llm' && dep.kind === 'llm') {
        const res = await callLlm(this.deps.anthropic, {
          dependency: depName,
          config: dep,
          system: step.system,
          userContent: composeUserTurn(input, outputs),
          tenantId: run.tenantId,
          timeoutMs,
          headers,
        });
        return { text: res.text, model: res.model, usage: res.usage };
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
      metrics.stepDuration.observe({ dependency: depName, outcome }, (this.now() - callStarted) / 1000);
      await releasePermit().catch((err: unknown) => this.deps.logger.warn({ err, runId: run.runId, dependency: depName }, 'could not release a dependency permit; its lease will expire'));
    }
  }

  private expire(run: RunRequested, when: string): Promise<RunOutcome> {
    return this.finish(run, 'expired', `expired: the deadline ${new Date(run.deadline).toISOString()} passed ${when}`, null, { code: 'deadline_exceeded', message: `the deadline passed ${when}`, retryable: false });
  }

  private cancel(run: RunRequested, when: string): Promise<RunOutcome> {
    return this.finish(run, 'cancelled', `cancelled: stopped at the caller's request ${when}`, null, null);
  }

  private statusEvent(run: RunRequested, sequence: number, status: RunStatus, message: string, step: string | null, error: RunError | null, result: string | null): RunStatusChanged {
    const { runId, tenantId, workflow, admittedAt, deadline, attempt, traceparent } = run;
    const attemptStartedAt = this.attemptStarts.get(run) ?? null;
    return { runId, tenantId, workflow, class: run.class, admittedAt, deadline, attempt, traceparent, sequence, status, occurredAt: this.now(), message, step, result, error, attemptStartedAt };
  }

  /** Progress events are informative: a failure to publish one is logged and the run goes on. */
  private async publishProgress(run: RunRequested, sequence: number, message: string, step: string): Promise<void> {
    try {
      await this.deps.publishStatus(this.statusEvent(run, sequence, 'running', message, step, null, null));
    } catch (err) {
      this.deps.logger.warn({ err, runId: run.runId, sequence }, 'could not publish a progress event');
    }
  }

  private async finish(run: RunRequested, status: RunOutcome, message: string, step: string | null, error: RunError | null, result: string | null = null): Promise<RunOutcome> {
    const event = this.statusEvent(run, terminalSequence(run.attempt), status, message, step, error, result);
    for (let attempt = 1; ; attempt++) {
      try {
        await this.deps.publishStatus(event);
        return status;
      } catch (err) {
        if (attempt >= OUTCOME_PUBLISH_TRIES) throw err;
        this.deps.logger.warn({ err, runId: run.runId, attempt }, 'could not publish the run outcome; trying again');
        await new Promise((r) => setTimeout(r, 500 * attempt));
      }
    }
  }
}
