/**
 * The pure schedule of a scenario: when each stream sends (open loop: the times are fixed before
 * the run, whatever the answers) and which faults are in force at a moment.
 *
 * Time scale k (>= 1) compresses time and keeps rates: every duration and instant of the scenario
 * (durationSec, ramp overSec, spike atSec/forSec, fault atSec/forSec) is divided by k, rates per
 * second stay, so a scaled run sends 1/k of the requests at the same pressure per second.
 */
import { seededRandom } from '../../../util/seeded-random.js';
import type { FaultPatch } from '../../sim/fault-profile.js';
import type { ArrivalPattern, FaultWindow, Scenario } from './scenario.js';

/** Expected arrivals from 0 to tSec (unscaled): the integral of the pattern's rate. */
export function expectedArrivals(pattern: ArrivalPattern, tSec: number): number {
  switch (pattern.kind) {
    case 'constant':
      return pattern.rate * tSec;
    case 'ramp': {
      const rampSec = Math.min(tSec, pattern.overSec);
      const ramped = pattern.from * rampSec + ((pattern.to - pattern.from) * rampSec * rampSec) / (2 * pattern.overSec);
      return ramped + pattern.to * Math.max(0, tSec - pattern.overSec);
    }
    case 'spike': {
      const peakSec = Math.max(0, Math.min(tSec, pattern.atSec + pattern.forSec) - pattern.atSec);
      return pattern.base * (tSec - peakSec) + pattern.peak * peakSec;
    }
  }
}

/** Bisection steps: the result is within durationMs / 2^40 of the exact instant, far below 1 µs. */
const INVERSION_STEPS = 40;

/**
 * Send times in ms from the run's start, ascending, for a stream over `durationSec` scaled by
 * `timeScale`. The n-th send is where the expected count reaches n + u, u drawn from `random` in
 * [0, 1): the count is the expected one within one, and the same seed gives the same times.
 */
export function sendTimesMs(pattern: ArrivalPattern, durationSec: number, timeScale: number, random: () => number): number[] {
  if (!(timeScale >= 1)) throw new RangeError(`time scale must be at least 1, got ${timeScale}`);
  const durationMs = (durationSec * 1000) / timeScale;
  // Scaled time s runs the pattern at unscaled time s·k with the same rate, so its count is Λ(s·k)/k.
  const expectedBy = (ms: number): number => expectedArrivals(pattern, (ms * timeScale) / 1000) / timeScale;
  const total = expectedBy(durationMs);
  const times: number[] = [];
  for (let n = 0; ; n++) {
    const goal = n + random();
    if (goal >= total) return times;
    let low = times.length > 0 ? times[times.length - 1]! : 0;
    let high = durationMs;
    for (let step = 0; step < INVERSION_STEPS; step++) {
      const mid = (low + high) / 2;
      if (expectedBy(mid) < goal) low = mid;
      else high = mid;
    }
    times.push(high);
  }
}

/** One first send of the schedule: which stream sends it, and when (ms from the start, scaled). */
export interface ScheduledSend {
  stream: number;
  dueMs: number;
}

/**
 * Every stream's first sends in time order, stream i seeded by `seed + i` (so leaving a stream out
 * changes no other stream's times): the open-loop schedule the clients send, and the arrivals the
 * goodput bound is computed from.
 */
export function firstSends(scenario: Pick<Scenario, 'arrivals' | 'durationSec'>, timeScale: number, seed: number, skipStream?: (index: number) => boolean): ScheduledSend[] {
  return scenario.arrivals
    .flatMap((stream, index) => (skipStream?.(index) ? [] : sendTimesMs(stream.pattern, scenario.durationSec, timeScale, seededRandom(seed + index)).map((dueMs) => ({ stream: index, dueMs }))))
    .sort((a, b) => a.dueMs - b.dueMs);
}

/**
 * The faults in force at `tMs` (scaled by `timeScale`), per target: a window holds from atSec
 * (inclusive) to atSec + forSec (exclusive). When windows of one target overlap, their patches
 * apply in file order, a later window's fields over an earlier one's; fields no window sets come
 * from the target's baseline (applyFaultPatch). Targets without a window in force are absent.
 */
export function faultAt(timeline: readonly FaultWindow[], tMs: number, timeScale = 1): Map<string, FaultPatch> {
  const inForce = new Map<string, FaultPatch>();
  const tSec = (tMs * timeScale) / 1000;
  for (const window of timeline) {
    if (tSec < window.atSec || tSec >= window.atSec + window.forSec) continue;
    inForce.set(window.target, { ...inForce.get(window.target), ...window.fault });
  }
  return inForce;
}
