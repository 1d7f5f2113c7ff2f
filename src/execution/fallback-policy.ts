import type { StepConfig, TenantConfig, WorkflowConfig } from '../config/schema.js';
import type { RunUsage } from '../status/run-usage.js';

/** Why a step could not be served, as told to the LLM, the caller and the DLQ. */
export interface Unavailability {
  dependency: string;
  reason: string;
}

/** What a run does about a step whose dependency is unavailable: fail, go on without it, or answer with a stand-in. */
export type Fallback = { kind: 'fail' } | { kind: 'continue' } | { kind: 'answer'; text: string };

/**
 * The tenant's fallback policy for a step whose dependency is unavailable: `fail` never answers
 * with a stand-in; `degrade` tells a later LLM step a tool is unavailable (the prompts say to
 * report that, not to guess), and answers an LLM step with the workflow's declared fallback, or
 * fails when none is declared, since an invented answer is worse than none.
 */
export function fallbackFor(policy: TenantConfig['fallback'], workflow: Pick<WorkflowConfig, 'fallback'>, step: Pick<StepConfig, 'kind'>): Fallback {
  if (policy === 'fail') return { kind: 'fail' };
  if (step.kind === 'tool') return { kind: 'continue' };
  return workflow.fallback ? { kind: 'answer', text: workflow.fallback.text } : { kind: 'fail' };
}

/** The steps that have an output, in step order, as a run's result lists them. */
export function keptSteps(steps: readonly Pick<StepConfig, 'id'>[], outputs: Readonly<Record<string, unknown>>): { id: string; output: unknown }[] {
  return steps.filter((s) => s.id in outputs).map((s) => ({ id: s.id, output: outputs[s.id] }));
}

/**
 * A run that completes degraded: its message names the dependencies that were unavailable, its
 * result says why and lists, in step order, the steps that have an output (a stand-in included).
 */
export function degradedCompletion(opts: {
  attempt: number;
  steps: readonly Pick<StepConfig, 'id'>[];
  outputs: Readonly<Record<string, unknown>>;
  unavailable: readonly Unavailability[];
  text: string | null;
  usage: RunUsage;
}): { message: string; result: string; degraded: true } {
  const { steps, outputs, unavailable, text, usage } = opts;
  const names = [...new Set(unavailable.map((u) => u.dependency))].join(', ');
  const result = JSON.stringify({ text, degraded: true, unavailable, steps: keptSteps(steps, outputs), usage });
  return { message: `completed degraded: ${names} unavailable; the answer says so (attempt ${opts.attempt})`, result, degraded: true };
}

/**
 * Whether a run's result (the status event's JSON text) is marked degraded, as degradedCompletion
 * marks it: readers outside the processor (benchmarks, the scenario harness) tell a stand-in from a
 * real answer by this mark alone. Anything unreadable is not marked.
 */
export function isDegradedResult(result: string | null | undefined): boolean {
  if (result === null || result === undefined) return false;
  try {
    const parsed: unknown = JSON.parse(result);
    return typeof parsed === 'object' && parsed !== null && (parsed as { degraded?: unknown }).degraded === true;
  } catch {
    return false;
  }
}
