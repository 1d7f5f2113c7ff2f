/**
 * Status events are numbered deterministically from (attempt, position in the workflow), so a
 * redelivered run re-emits the same numbers and the sink's (runId, sequence) key absorbs the
 * duplicates, while SSE clients can resume from any number. Sequence 0 is the admission.
 */
export const SLOTS_PER_ATTEMPT = 1000;
export const MAX_STEPS = SLOTS_PER_ATTEMPT - 2;

export const ADMITTED_SEQUENCE = 0;

/**
 * Numbers each step of a workflow has: one, or, in a workflow with an agent step, an equal share
 * of the attempt's, so the agent's turns are numbered between its step and the next.
 */
export function slotsPerStep(steps: readonly { kind: string }[]): number {
  return steps.some((s) => s.kind === 'agent') ? Math.floor(MAX_STEPS / Math.max(1, steps.length)) : 1;
}

/** A step's number (`progress` 0), or the number of its `progress`-th event within its `slots`. */
export function stepSequence(attempt: number, stepIndex: number, at: { progress: number; slots: number } = { progress: 0, slots: 1 }): number {
  if (!Number.isInteger(attempt) || attempt < 1) throw new RangeError(`attempt must be a positive integer, got ${attempt}`);
  const { progress, slots } = at;
  if (!Number.isInteger(slots) || slots < 1) throw new RangeError(`slots must be a positive integer, got ${slots}`);
  if (!Number.isInteger(stepIndex) || stepIndex < 0 || (stepIndex + 1) * slots > MAX_STEPS) throw new RangeError(`step index must be in [0, ${Math.floor(MAX_STEPS / slots)}), got ${stepIndex}`);
  if (!Number.isInteger(progress) || progress < 0 || progress >= slots) throw new RangeError(`progress must be in [0, ${slots}), got ${progress}`);
  return attempt * SLOTS_PER_ATTEMPT + stepIndex * slots + progress + 1;
}

export function terminalSequence(attempt: number): number {
  if (!Number.isInteger(attempt) || attempt < 1) throw new RangeError(`attempt must be a positive integer, got ${attempt}`);
  return attempt * SLOTS_PER_ATTEMPT + SLOTS_PER_ATTEMPT - 1;
}

/** Slot 0 of an attempt: the run waits, before its first step, for a dependency whose breaker is open. */
export function heldSequence(attempt: number): number {
  return terminalSequence(attempt) - SLOTS_PER_ATTEMPT + 1;
}

/**
 * After an attempt's outcome: the DLQ sink marks a failed run `dead_lettered` once archived. It
 * shares the next attempt's slot 0 (`heldSequence`): a replay is that next attempt, and should it
 * be held before starting, only that hold notice is lost as a duplicate; its step events are
 * numbered higher and still move the run on.
 */
export function deadLetteredSequence(attempt: number): number {
  return terminalSequence(attempt) + 1;
}
