import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig, StepConfig } from '../config/schema.js';
import { dependencyOf } from '../config/workflows.js';
import type { RunRequested } from '../events/schemas.js';
import type { Metrics } from '../obs/metrics.js';
import { breakerRetryAt, deferredStepRetryAt, transientRetryAt } from '../retries/run-retry.js';
import type { CancelReason } from '../runs/cancellation.js';
import { isExpired, minTimeToFinishMs, retryDeadline } from '../runs/deadline.js';
import { slotsPerStep, stepSequence } from '../runs/status-sequence.js';
import { StepError } from '../steps/step-error.js';
import type { AgentLoop, AgentOutput } from './agent-loop.js';
import type { AttemptContext, RunOutcome } from './attempt.js';
import { DependencyUnavailable } from './call-guard.js';
import { degradedCompletion, fallbackFor, keptSteps, type Unavailability } from './fallback-policy.js';
import type { OutcomePublisher } from './outcome-publisher.js';
import { OutputBoundExceeded, checkStepOutput, jsonBytes, type OutputVerdict } from './output-bounds.js';
import { runUsage } from './llm-usage.js';
import { resolveRunConfig } from './run-faults.js';
import { secondsSinceAdmission } from './run-signals.js';
import { StepRetryLater, type StepCaller, type StepOutputs } from './step-caller.js';
import type { RunProgress } from './run-progress.js';

export interface StepLoopDeps {
  config: Pick<SluiceConfig, 'tenants' | 'workflows' | 'dependencies' | 'processor' | 'pricing' | 'admission'>;
  /** Completed steps (a redelivered run skips them instead of repeating their side effects) and the cancellation. */
  progress: RunProgress;
  caller: Pick<StepCaller, 'call'>;
  /** Runs agent steps (their model turns and tool calls go through the same caller). */
  agents: Pick<AgentLoop, 'run'>;
  outcomes: OutcomePublisher;
  metrics: Metrics;
  now: () => number;
  random: () => number;
}

/** A step whose call failed: either the attempt ends with `outcome`, or the step is `gone` and its tenant's fallback decides. */
type FailedStep = { outcome: Promise<RunOutcome> } | { gone: Unavailability };

/**
 * One attempt of a run, step by step: before each step the cancellation and the deadline are
 * checked and its progress is published; a step already done is not called again; an output is
 * bounded, then recorded, which reads the cancellation for the next step in the same round trip.
 * A step that cannot be served ends the attempt (retried, failed) or is left to the tenant's
 * fallback policy.
 */
export class StepLoop {
  constructor(private readonly deps: StepLoopDeps) {}

  /** Resolves to the attempt's outcome once it is published. */
  async run(run: RunRequested, context: AttemptContext): Promise<RunOutcome> {
    const { outcomes, now } = this.deps;
    // The dispatcher ends such runs before they get here; this is for any other caller.
    const configured = resolveRunConfig(this.deps.config, run);
    if (!configured.ok) return outcomes.deadLettered(run, context, configured.failure);
    const { tenant, workflow } = configured;
    // Cancellation before expiry: the caller's explicit request is the more useful thing to report.
    const start = await this.deps.progress.open(run.runId);
    if (start.cancelled) return outcomes.cancelled(run, start.cancelled, 'before it started');
    if (isExpired(run.deadline, now())) return outcomes.expired(run, context, 'before it started');

    let input: unknown;
    try {
      input = JSON.parse(run.input);
    } catch {
      return outcomes.failed(run, context, { reason: 'invalid_input', message: 'failed: the run input is not JSON', error: { code: 'invalid_input', message: 'the run input is not valid JSON', retryable: false } });
    }

    /**
     * Whether the run has had its first useful output (a step answered by its dependency): in an
     * earlier attempt, or in an earlier delivery of this one (a step already done).
     * `sluice_run_first_output_seconds` is observed once per run, when this turns true by a call.
     */
    let outputSeen = context.outputSeen === true;
    const outputs: StepOutputs = {};
    /** Bytes of the outputs kept so far, bounded by `processor.maxResultBytes`. */
    let keptBytes = 0;
    const unavailable: Unavailability[] = [];
    let lastText: string | undefined;
    /** The cancellation read when the last step was recorded: then the boundary needs no check of its own. */
    let readAtRecord: { cancelled: CancelReason | undefined } | undefined;
    const steps = workflow.steps;
    const slots = slotsPerStep(steps);
    for (const [i, step] of steps.entries()) {
      const where = `step ${i + 1}/${steps.length} (${step.id})`;
      const cancelledNow = i === 0 ? undefined : readAtRecord ? readAtRecord.cancelled : await this.deps.progress.cancelReason(run.runId);
      readAtRecord = undefined;
      if (cancelledNow) return outcomes.cancelled(run, cancelledNow, `at the step boundary before ${where}`);
      if (isExpired(run.deadline, now())) return outcomes.expired(run, context, `before ${where}`);
      if (step.kind !== 'agent') outcomes.running(run, { sequence: stepSequence(run.attempt, i, { progress: 0, slots }), message: `running: ${where} calling ${dependencyOf(step)}`, step: step.id });
      const remembered = start.done.has(step.id);
      let output: unknown;
      try {
        if (remembered) output = start.done.get(step.id);
        else if (step.kind !== 'agent') output = await this.deps.caller.call(run, step, input, outputs);
        else {
          const end = await this.deps.agents.run({ run, step, stepIndex: i, slots, where, input, outputs, done: start.done, keptBytes, fallback: tenant.fallback });
          if (end.kind === 'cancelled') return outcomes.cancelled(run, end.reason, `during ${where}`);
          if (end.kind === 'stopped') {
            const partial = { ...outputs, [step.id]: end.output };
            const result = JSON.stringify({ text: null, degraded: false, stoppedBy: end.reached.bound, steps: keptSteps(steps, partial), usage: runUsage(steps, partial, this.deps.config) });
            const message = `${where} — ${end.reached.message} (agent bound ${end.reached.bound}); the transcript so far is in the result`;
            return outcomes.failed(run, context, { reason: 'non_retryable', message: `failed: ${message}`, step: step.id, error: { code: 'agent_bound_reached', message, retryable: false }, result });
          }
          output = end.output;
        }
        // From the journal too: an agent that answered without a tool is degraded on every delivery.
        if (step.kind === 'agent') unavailable.push(...((output as Partial<AgentOutput>).agent?.unavailable ?? []));
      } catch (err) {
        // An agent's turn or tool result passed a bound: as final as a step output that does.
        if (err instanceof OutputBoundExceeded) return this.overBound(run, context, step, where, err.verdict);
        if (isExpired(run.deadline, now())) return outcomes.expired(run, context, `during ${where}`);
        const failed = this.afterFailedCall(run, context, step, where, err, outputSeen, minTimeToFinishMs(steps.length - i));
        if ('outcome' in failed) return failed.outcome;
        const { gone } = failed;
        this.deps.metrics.fallbacks.inc({ tenant: run.tenantId, dependency: gone.dependency, policy: tenant.fallback });
        const fallback = fallbackFor(tenant.fallback, workflow, step);
        if (fallback.kind === 'fail') {
          return outcomes.failed(run, context, {
            reason: 'dependency_unavailable',
            message: `failed: ${where} — ${gone.dependency} is unavailable and tenant ${run.tenantId} takes no stand-in answers`,
            step: step.id,
            error: { code: 'dependency_unavailable', message: gone.reason, retryable: true },
          });
        }
        unavailable.push(gone);
        if (fallback.kind === 'answer') return outcomes.completed(run, context, degradedCompletion({ attempt: run.attempt, steps, outputs, unavailable, text: fallback.text, usage: runUsage(steps, outputs, this.deps.config) }));
        outputs[step.id] = { unavailable: true, reason: gone.reason };
        continue;
      }
      // Checked before it is recorded: an output over its bound is not stored anywhere.
      const bytes = jsonBytes(output);
      const bound = checkStepOutput(bytes, keptBytes, this.deps.config.processor);
      if (!bound.ok) return this.overBound(run, context, step, where, bound);
      keptBytes += bytes;
      if (!remembered) {
        readAtRecord = { cancelled: await this.deps.progress.record(run.runId, step.id, output, run.deadline) };
        if (!outputSeen) this.deps.metrics.runFirstOutput.observe({ class: run.class }, secondsSinceAdmission(run.admittedAt, now()));
      }
      outputSeen = true;
      outputs[step.id] = output;
      if (step.kind !== 'tool') lastText = (output as { text: string }).text;
    }
    const usage = runUsage(steps, outputs, this.deps.config);
    if (unavailable.length > 0) return outcomes.completed(run, context, degradedCompletion({ attempt: run.attempt, steps, outputs, unavailable, text: lastText ?? null, usage }));
    // A list, not a map: Postgres jsonb does not keep key order, and step order is meaningful.
    const result = JSON.stringify({ text: lastText ?? null, degraded: false, steps: steps.map((s) => ({ id: s.id, output: outputs[s.id] })), usage });
    const seconds = ((now() - run.admittedAt) / 1000).toFixed(1);
    return outcomes.completed(run, context, { message: `completed: ${steps.length} step${steps.length === 1 ? '' : 's'}, ${seconds} s after admission, attempt ${run.attempt}`, result });
  }

  /** Fails the run over an output that passed a bound: not retryable, the same input gives the same output. */
  private overBound(run: RunRequested, context: AttemptContext, step: StepConfig, where: string, verdict: Extract<OutputVerdict, { ok: false }>): Promise<RunOutcome> {
    return this.deps.outcomes.failed(run, context, { reason: 'non_retryable', message: `failed: ${where} — ${verdict.message}`, step: step.id, error: { code: verdict.code, message: `${where}: ${verdict.message}`, retryable: false } });
  }

  private retryDeadline(run: RunRequested, toFinishMs: number): number {
    return retryDeadline(run, this.deps.config.admission.interactiveWaitShare, toFinishMs);
  }

  /**
   * What a step whose call failed means for the attempt. An open breaker or a rate-limit turn the run can wait for, or
   * a transient failure with run attempts and time left, puts the run on the retry topic; an answer
   * that retrying cannot change fails it; otherwise the dependency is gone for this attempt. Any
   * other error is the infrastructure's and escapes.
   */
  private afterFailedCall(run: RunRequested, context: AttemptContext, step: StepConfig, where: string, err: unknown, outputSeen: boolean, toFinishMs: number): FailedStep {
    const { outcomes } = this.deps;
    if (err instanceof DependencyUnavailable) {
      const rateLimited = err.reason === 'rate_limited';
      // A deferred turn is counted by the pacer, in sluice_pacing_deferred_total.
      if (!rateLimited) this.deps.metrics.breakerRefusals.inc({ dependency: err.dependency });
      if (err.canWait) {
        // Waiters return spread, not as one wave: over part of the breaker's open time, or of the wait for the turn.
        const spreadMs = rateLimited ? Math.max(0, err.until - this.deps.now()) : ownEntry(this.deps.config.dependencies, err.dependency)?.breaker.openMs;
        const dueAt = breakerRetryAt({ until: err.until, openMs: spreadMs, deadline: run.deadline, random: this.deps.random });
        return { outcome: outcomes.retried(run, context, { reason: err.reason, dependency: err.dependency, message: err.message, dueAt, failure: false, outputSeen }) };
      }
      const until = new Date(err.until).toISOString();
      const reason = rateLimited ? `the ${err.dependency} rate limit has no turn before ${until}, after this run's deadline` : `the ${err.dependency} breaker is open until ${until}, after this run's deadline`;
      return { gone: { dependency: err.dependency, reason } };
    }
    if (err instanceof StepRetryLater) {
      const dueAt = deferredStepRetryAt({ priorFailures: context.priorFailures, policy: this.deps.config.processor.runRetry, dueAt: err.dueAt, deadline: this.retryDeadline(run, toFinishMs), minCallMs: toFinishMs });
      if (dueAt !== undefined) return { outcome: outcomes.retried(run, context, { reason: 'transient_failure', dependency: err.failure.dependency, message: err.failure.message, dueAt, failure: true, outputSeen }) };
      return { gone: { dependency: err.failure.dependency, reason: err.failure.message } };
    }
    if (!(err instanceof StepError)) throw err;
    if (!err.retryable) {
      return { outcome: outcomes.failed(run, context, { reason: 'non_retryable', message: `failed: ${where} — ${err.message}`, step: step.id, error: { code: 'dependency_error', message: err.message, retryable: false } }) };
    }
    const dueAt = transientRetryAt({ priorFailures: context.priorFailures, policy: this.deps.config.processor.runRetry, now: this.deps.now(), deadline: this.retryDeadline(run, toFinishMs), minCallMs: toFinishMs, random: this.deps.random });
    if (dueAt !== undefined) return { outcome: outcomes.retried(run, context, { reason: 'transient_failure', dependency: err.dependency, message: err.message, dueAt, failure: true, outputSeen }) };
    return { gone: { dependency: err.dependency, reason: err.message } };
  }
}
