/**
 * Bounds on what a run keeps of its callers' and dependencies' data: each step output is journaled
 * in Redis, and the outputs together travel as the result in one status event, which Kafka refuses
 * beyond its message size limit. An output over a bound fails the run clearly (not retryable: the
 * same input gives the same output) instead of growing Redis or being retried forever.
 */
export interface OutputLimits {
  maxStepOutputBytes: number;
  maxResultBytes: number;
}

export type OutputVerdict = { ok: true } | { ok: false; code: 'output_too_large' | 'result_too_large'; message: string };

/** Bytes of a value as JSON in UTF-8: what the journal stores and the result carries. */
export function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value ?? null), 'utf8');
}

/** How a verdict's message names what is kept: one entry, and all of them so far. */
export interface KeptNames {
  one: string;
  all: string;
}

const STEP_OUTPUTS: KeptNames = { one: 'its output is', all: 'the step outputs so far are' };

/**
 * Whether a step's output of `bytes` may be kept: within its own bound, and with the outputs kept
 * before it within the result's bound (checked as outputs accrue, so a run that is bound to fail
 * stops early, and no run holds more than the result's bound in memory or sends it to later steps).
 * An agent's journal entries are checked the same way, under their own `names`.
 */
export function checkStepOutput(bytes: number, keptBytes: number, limits: OutputLimits, names: KeptNames = STEP_OUTPUTS): OutputVerdict {
  if (bytes > limits.maxStepOutputBytes) {
    return { ok: false, code: 'output_too_large', message: `${names.one} ${bytes} bytes, over the bound of ${limits.maxStepOutputBytes} (processor.maxStepOutputBytes)` };
  }
  return checkKept(keptBytes + bytes, limits, names.all);
}

/** Whether `bytes` kept in all (`what` names them) stay within the result's bound. */
export function checkKept(bytes: number, limits: OutputLimits, what: string): OutputVerdict {
  return resultVerdict(bytes, limits.maxResultBytes, what);
}

/** A bound an output passed: the attempt ends, and the run fails with the verdict's code (not retryable). */
export class OutputBoundExceeded extends Error {
  constructor(readonly verdict: Extract<OutputVerdict, { ok: false }>) {
    super(verdict.message);
    this.name = 'OutputBoundExceeded';
  }
}

/** Whether a run's result (JSON text) fits in its status event. */
export function checkResult(result: string, limits: OutputLimits): OutputVerdict {
  return resultVerdict(Buffer.byteLength(result, 'utf8'), limits.maxResultBytes, 'the result is');
}

function resultVerdict(bytes: number, limit: number, what: string): OutputVerdict {
  if (bytes <= limit) return { ok: true };
  return { ok: false, code: 'result_too_large', message: `${what} ${bytes} bytes, over the bound of ${limit} (processor.maxResultBytes)` };
}
