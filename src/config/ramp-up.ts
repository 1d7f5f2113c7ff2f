/**
 * Slow start of a dependency after its breaker closed (`breaker.rampUp`): what share of its
 * concurrency cap it may use, as a function of the time since the close alone. Every processor
 * reads the same close time from the breaker's Redis hash, so every one derives the same share.
 */
export interface RampUp {
  initialFraction: number;
  stepFraction: number;
  intervalMs: number;
}

/** The longest a ramp may take to reach the whole cap. */
export const MAX_RAMP_UP_MS = 3_600_000;

/** Keeps 0.1 + 9 × 0.1 (= 0.9999999999999999) from falling one step short of the whole cap. */
const EPSILON = 1e-9;

/** How long after the close the whole cap is back. */
export function rampUpMs(ramp: RampUp): number {
  const steps = Math.max(0, Math.ceil((1 - ramp.initialFraction) / ramp.stepFraction - EPSILON));
  return steps * ramp.intervalMs;
}

/**
 * The share of its cap a dependency may use `sinceCloseMs` after its breaker last closed: the
 * initial fraction, one step more per whole interval since, at most 1. No ramp configured, or no
 * close known (the breaker never tripped, or its state expired long after the ramp ended): 1.
 * A negative time (this clock behind Redis's) counts as the close itself, the cautious end.
 */
export function rampUpShare(ramp: RampUp | undefined, sinceCloseMs: number | undefined): number {
  if (!ramp || sinceCloseMs === undefined) return 1;
  const steps = Math.floor(Math.max(0, sinceCloseMs) / ramp.intervalMs);
  const share = ramp.initialFraction + steps * ramp.stepFraction;
  return share >= 1 - EPSILON ? 1 : share;
}
