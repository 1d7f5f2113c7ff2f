/**
 * The provider simulator's side of a scenario run: its fault timeline applied through the admin
 * API at the scheduled times, and its call counters read once a second.
 */
import { ANTHROPIC_TARGET } from '../../sim/fault-profile.js';
import { simAdmin } from '../sim-admin.js';
import { faultAt } from './arrivals.js';
import type { FaultWindow } from './scenario.js';

/** Instants (ms from the start, scaled) at which the faults in force change, ascending. */
export function faultChangesMs(timeline: readonly FaultWindow[], timeScale: number): number[] {
  const instants = new Set<number>();
  for (const w of timeline) {
    instants.add((w.atSec * 1000) / timeScale);
    instants.add(((w.atSec + w.forSec) * 1000) / timeScale);
  }
  return [...instants].sort((a, b) => a - b);
}

/** One reading of the simulator's counters since its reset (the anthropic target's calls, every tool's deliveries). */
export interface ProviderSample {
  atMs: number;
  llmCalls: number;
  /** Injected error answers and rate-limit 429s of the LLM target. */
  llmErrors: number;
  /** The rate-limit 429s alone: the provider refusing calls over its capacity. */
  llmRateLimited: number;
  /** The LLM target's calls per tenant (its `metadata.user_id`). */
  llmCallsByTenant: Record<string, number>;
  toolSideEffects: number;
  /** Tool calls whose Idempotency-Key had already taken effect: the system repeated a completed tool step. */
  repeatedToolCalls: number;
}

const sum = (r: Record<string, number> | undefined) => Object.values(r ?? {}).reduce((a, b) => a + b, 0);

export async function readProviderSample(simulatorUrl: string, atMs: number): Promise<ProviderSample> {
  const s = (await simAdmin(simulatorUrl, 'GET', '/stats')) as {
    calls: Record<string, number>;
    callsByTenant: Record<string, Record<string, number>>;
    errors: Record<string, number>;
    rateLimited: Record<string, number>;
    sideEffects: Record<string, number>;
    duplicateDeliveries: Record<string, number>;
  };
  return {
    atMs,
    llmCalls: s.calls[ANTHROPIC_TARGET] ?? 0,
    llmErrors: (s.errors[ANTHROPIC_TARGET] ?? 0) + (s.rateLimited[ANTHROPIC_TARGET] ?? 0),
    llmRateLimited: s.rateLimited[ANTHROPIC_TARGET] ?? 0,
    llmCallsByTenant: s.callsByTenant[ANTHROPIC_TARGET] ?? {},
    toolSideEffects: sum(s.sideEffects),
    repeatedToolCalls: sum(s.duplicateDeliveries),
  };
}

/**
 * Runs the fault timeline and the sampling against the simulator until `stop` is called; every
 * target a window names is set at each change (to the patch in force, or back to its baseline).
 */
export function driveProvider(simulatorUrl: string, timeline: readonly FaultWindow[], timeScale: number, nowMs: () => number): { stop: () => Promise<ProviderSample[]> } {
  const samples: ProviderSample[] = [];
  const targets = [...new Set(timeline.map((w) => w.target))];
  const timers: NodeJS.Timeout[] = [];
  const errors: Error[] = [];
  let applying = Promise.resolve();
  for (const atMs of faultChangesMs(timeline, timeScale)) {
    timers.push(
      setTimeout(() => {
        // A hair past the instant: a window holds from its start, and the scaled instant may round below it.
        const inForce = faultAt(timeline, atMs + 0.001, timeScale);
        applying = applying
          .then(() => Promise.all(targets.map((target) => simAdmin(simulatorUrl, 'PUT', '/faults', { target, ...inForce.get(target) }))))
          .then(
            () => undefined,
            (err: Error) => void errors.push(err),
          );
      }, Math.max(0, atMs - nowMs())),
    );
  }
  let sampling = Promise.resolve();
  const sampler = setInterval(() => {
    sampling = sampling.then(() =>
      readProviderSample(simulatorUrl, nowMs()).then(
        (s) => void samples.push(s),
        (err: Error) => void errors.push(err),
      ),
    );
  }, 1_000);
  return {
    stop: async () => {
      timers.forEach(clearTimeout);
      clearInterval(sampler);
      await Promise.all([applying, sampling]);
      samples.push(await readProviderSample(simulatorUrl, nowMs()));
      if (errors.length > 0) throw new Error(`provider simulator: ${errors.map((e) => e.message).join('; ')}`);
      return samples;
    },
  };
}
