import type { SluiceConfig } from '../config/schema.js';
import type { BreakerView } from '../breakers/breaker-gate.js';
import type { DeadLetterSink } from '../dlq/dead-letter.js';
import { breakerRetryAt, transientRetryAt } from '../retries/run-retry.js';
import { checkStepOutput, jsonBytes } from './output-bounds.js';
import { secondsSinceAdmission } from './run-signals.js';
import { resolveRunConfig, type RunFailure } from './run-faults.js';
import { ownEntry } from '../config/lookup.js';
import { dependencyOf } from '../config/workflows.js';
import type { RunRequested, RunStatusChanged } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { MIN_USEFUL_CALL_MS, isExpired } from '../runs/deadline.js';
import { stepSequence } from '../runs/status-sequence.js';
import type { CancellationCheck } from '../runs/cancellation.js';
import type { StepJournal } from './step-journal.js';
import type { AttemptContext, RunOutcome } from './attempt.js';
import { OutcomePublisher } from './outcome-publisher.js';
import { CallGuard, DependencyUnavailable, type DependencyPermits, type SharedBreakers } from './call-guard.js';
import { StepCaller, type StepOutputs } from './step-caller.js';
import { degradedCompletion, fallbackFor, type Unavailability } from './fallback-policy.js';
import type { LlmRequest, LlmResult } from '../steps/llm-call.js';
import { StepError } from '../steps/step-error.js';

export interface RunExecutorDeps {
  config: SluiceConfig;
  /** One LLM call (`callLlm` with the SDK client in production); it never retries by itself. */
  llm: (req: LlmRequest) => Promise<LlmResult>;
  /** Base URL that tool paths starting with "/" are resolved against (the provider simulator). */
  simulatorUrl: string;
  publishStatus: (event: RunStatusChanged) => Promise<void>;
  cancellation: CancellationCheck;
  /** Outputs of completed steps: a redelivered run skips them instead of repeating their side effects. */
  journal: StepJournal;
  dependencyPermits: DependencyPermits;
  breakers: SharedBreakers;
  /** This instance's view of the breakers, so an open one is not even asked. */
  board: { view(dependency: string): BreakerView };
  /** Puts the next attempt of a run on the retry topic; resolves once Kafka acknowledged it. */
  enqueueRetry: (run: RunRequested, headers: Record<string, string>) => Promise<void>;
  deadLetters: DeadLetterSink;
  metrics: Metrics;
  logger: Logger;
  now?: () => number;
  /** Source for retry jitter; injectable so tests are deterministic. */
  random?: () => number;
}

/**
 * Runs one attempt of a workflow step by step, emitting a status event per transition. The
 * outcome event is published (and acknowledged) before this resolves, because the caller commits
 * the record's offset on resolution: an unrecorded outcome must lead to redelivery, not loss.
 */
export class RunExecutor {
  private readonly now: () => number;
  private readonly random: () => number;

  private readonly outcomes: OutcomePublisher;
  private readonly caller: StepCaller;

  constructor(private readonly deps: RunExecutorDeps) {
    this.now = deps.now ?? Date.now;
    this.random = deps.random ?? Math.random;
    this.outcomes = new OutcomePublisher({ ...deps, now: this.now });
    this.caller = new StepCaller({ ...deps, guard: new CallGuard({ ...deps, now: this.now }), now: this.now, random: this.random });
  }

  async execute(run: RunRequested, context: AttemptContext): Promise<RunOutcome> {
    const { metrics } = this.deps;
    const started = this.now();
    this.outcomes.startAttempt(run, started);
    const labels = { tenant: run.tenantId, workflow: run.workflow, class: run.class };
    metrics.runsStarted.inc(labels);
    metrics.runsInFlight.inc();
    try {
      const outcome = await this.runSteps(run, context);
      metrics.runsFinished.inc({ ...labels, status: outcome });
      metrics.runDuration.observe({ workflow: run.workflow, status: outcome }, (this.now() - started) / 1000);
      return outcome;
    } finally {
      metrics.runsInFlight.dec();
    }
  }

  /** Tells the run's reader it waits, before starting, for a dependency whose breaker is open. */
  publishHeld(run: RunRequested, dependency: string, until: number): Promise<void> {
    return this.outcomes.held(run, dependency, until);
  }

  /** Ends a run without further attempts: archived in the DLQ topic with its context, then reported failed. */
  deadLetter(run: RunRequested, context: AttemptContext, failure: RunFailure): Promise<RunOutcome> {
    return this.outcomes.deadLettered(run, context, failure);
  }

  private async runSteps(run: RunRequested, context: AttemptContext): Promise<RunOutcome> {
    // The dispatcher ends such runs before they get here; this is for any other caller.
    const configured = resolveRunConfig(this.deps.config, run);
    if (!configured.ok) return this.outcomes.deadLettered(run, context, configured.failure);
    const { tenant, workflow } = configured;
    // Cancellation before expiry: the caller's explicit request is the more useful thing to report.
    const cancelled = await this.deps.cancellation.cancelReason(run.runId);
    if (cancelled) return this.outcomes.cancelled(run, cancelled, 'before it started');
    if (isExpired(run.deadline, this.now())) return this.outcomes.expired(run, context, 'before it started');

    let input: unknown;
    try {
      input = JSON.parse(run.input);
    } catch {
      return this.outcomes.failed(run, context, { reason: 'invalid_input', message: 'failed: the run input is not JSON', error: { code: 'invalid_input', message: 'the run input is not valid JSON', retryable: false } });
    }

    /**
     * Whether the run has had its first useful output (a step answered by its dependency): in an
     * earlier attempt, or in an earlier delivery of this one (a step taken from the journal).
     * `sluice_run_first_output_seconds` is observed once per run, when this turns true by a call.
     */
    let outputSeen = context.outputSeen === true;
    const outputs: StepOutputs = {};
    /** Bytes of the outputs kept so far, bounded by `processor.maxResultBytes`. */
    let keptBytes = 0;
    const unavailable: Unavailability[] = [];
    let lastText: string | undefined;
    const steps = workflow.steps;
    for (const [i, step] of steps.entries()) {
      const cancelledNow = i > 0 ? await this.deps.cancellation.cancelReason(run.runId) : undefined;
      if (cancelledNow) return this.outcomes.cancelled(run, cancelledNow, `at the step boundary before step ${i + 1}/${steps.length} (${step.id})`);
      if (isExpired(run.deadline, this.now())) return this.outcomes.expired(run, context, `before step ${i + 1}/${steps.length} (${step.id})`);
      const target = dependencyOf(step);
      await this.outcomes.running(run, { sequence: stepSequence(run.attempt, i), message: `running: step ${i + 1}/${steps.length} (${step.id}) calling ${target}`, step: step.id });
      const where = `step ${i + 1}/${steps.length} (${step.id})`;
      let output: unknown;
      let remembered: { output: unknown } | undefined;
      try {
        remembered = await this.deps.journal.recall(run.runId, step.id);
        output = remembered ? remembered.output : await this.caller.call(run, step, input, outputs);
      } catch (err) {
        if (isExpired(run.deadline, this.now())) return this.outcomes.expired(run, context, `during ${where}`);
        let gone: Unavailability;
        if (err instanceof DependencyUnavailable) {
          this.deps.metrics.breakerRefusals.inc({ dependency: err.dependency });
          if (err.canWait) {
            const openMs = ownEntry(this.deps.config.dependencies, err.dependency)?.breaker.openMs;
            const dueAt = breakerRetryAt({ until: err.until, openMs, deadline: run.deadline, random: this.random });
            return this.outcomes.retried(run, context, { reason: 'breaker_open', dependency: err.dependency, message: err.message, dueAt, failure: false, outputSeen });
          }
          gone = { dependency: err.dependency, reason: `the ${err.dependency} breaker is open until ${new Date(err.until).toISOString()}, after this run's deadline` };
        } else if (err instanceof StepError) {
          if (!err.retryable) {
            return this.outcomes.failed(run, context, { reason: 'non_retryable', message: `failed: ${where} — ${err.message}`, step: step.id, error: { code: 'dependency_error', message: err.message, retryable: false } });
          }
          const dueAt = transientRetryAt({ priorFailures: context.priorFailures, policy: this.deps.config.processor.runRetry, now: this.now(), deadline: run.deadline, minCallMs: MIN_USEFUL_CALL_MS, random: this.random });
          if (dueAt !== undefined) return this.outcomes.retried(run, context, { reason: 'transient_failure', dependency: err.dependency, message: err.message, dueAt, failure: true, outputSeen });
          gone = { dependency: err.dependency, reason: err.message };
        } else throw err;
        this.deps.metrics.fallbacks.inc({ tenant: run.tenantId, dependency: gone.dependency, policy: tenant.fallback });
        const fallback = fallbackFor(tenant.fallback, workflow, step);
        if (fallback.kind === 'fail') {
          return this.outcomes.failed(run, context, {
            reason: 'dependency_unavailable',
            message: `failed: ${where} — ${gone.dependency} is unavailable and tenant ${run.tenantId} takes no stand-in answers`,
            step: step.id,
            error: { code: 'dependency_unavailable', message: gone.reason, retryable: true },
          });
        }
        unavailable.push(gone);
        if (fallback.kind === 'answer') return this.outcomes.completed(run, context, degradedCompletion({ attempt: run.attempt, steps, outputs, unavailable, text: fallback.text }));
        outputs[step.id] = { unavailable: true, reason: gone.reason };
        continue;
      }
      // Checked before the journal write: an output over its bound is not stored anywhere.
      const bytes = jsonBytes(output);
      const bound = checkStepOutput(bytes, keptBytes, this.deps.config.processor);
      if (!bound.ok) return this.outcomes.failed(run, context, { reason: 'non_retryable', message: `failed: ${where} — ${bound.message}`, step: step.id, error: { code: bound.code, message: `${where}: ${bound.message}`, retryable: false } });
      keptBytes += bytes;
      if (!remembered) {
        await this.deps.journal.record(run.runId, step.id, output, run.deadline);
        if (!outputSeen) this.deps.metrics.runFirstOutput.observe({ class: run.class }, secondsSinceAdmission(run.admittedAt, this.now()));
      }
      outputSeen = true;
      outputs[step.id] = output;
      if (step.kind === 'llm') lastText = (output as { text: string }).text;
    }
    if (unavailable.length > 0) return this.outcomes.completed(run, context, degradedCompletion({ attempt: run.attempt, steps, outputs, unavailable, text: lastText ?? null }));
    // A list, not a map: Postgres jsonb does not keep key order, and step order is meaningful.
    const result = JSON.stringify({ text: lastText ?? null, degraded: false, steps: steps.map((s) => ({ id: s.id, output: outputs[s.id] })) });
    const seconds = ((this.now() - run.admittedAt) / 1000).toFixed(1);
    return this.outcomes.completed(run, context, { message: `completed: ${steps.length} steps, ${seconds} s after admission, attempt ${run.attempt}`, result });
  }
}
