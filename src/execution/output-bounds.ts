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

/**
 * Whether a step's output of `bytes` may be kept: within its own bound, and with the outputs kept
 * before it within the result's bound (checked as outputs accrue, so a run that is bound to fail
 * stops early, and no run holds more than the result's bound in memory or sends it to later steps).
 */
export function checkStepOutput(bytes: number, keptBytes: number, limits: OutputLimits): OutputVerdict {
  if (bytes > limits.maxStepOutputBytes) {
    return { ok: false, code: 'output_too_large', message: `its output is ${bytes} bytes, over the bound of ${limits.maxStepOutputBytes} (processor.maxStepOutputBytes)` };
  }
  return resultVerdict(keptBytes + bytes, limits.maxResultBytes, 'the step outputs so far are');
}

/** Whether a run's result (JSON text) fits in its status event. */
export function checkResult(result: string, limits: OutputLimits): OutputVerdict {
  return resultVerdict(Buffer.byteLength(result, 'utf8'), limits.maxResultBytes, 'the result is');
}

function resultVerdict(bytes: number, limit: number, what: string): OutputVerdict {
  if (bytes <= limit) return { ok: true };
  return { ok: false, code: 'result_too_large', message: `${what} ${bytes} bytes, over the bound of ${limit} (processor.maxResultBytes)` };
}
