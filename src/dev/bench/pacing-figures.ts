/** The pure parts of the pacing bench (pacing-bench.ts): its seeded arrival mix and its figures. */
import type { RunClass } from '../../events/schemas.js';

export interface Arrival {
  tenantId: string;
  class: RunClass;
}

/**
 * The default configuration's tenants with the share of their runs that is interactive, as
 * config/local.yaml describes them: a support desk (interactive-heavy), analytics (batch-heavy),
 * finance (even). Tenants are drawn evenly, so half the runs are interactive on average.
 */
export const TENANT_MIX: readonly { tenantId: string; interactiveShare: number }[] = [
  { tenantId: 'tenant-a', interactiveShare: 0.75 },
  { tenantId: 'tenant-b', interactiveShare: 0.25 },
  { tenantId: 'tenant-c', interactiveShare: 0.5 },
];

/** `count` arrivals, tenant and class drawn from `TENANT_MIX` by `random`. */
export function arrivalPlan(count: number, random: () => number): Arrival[] {
  return Array.from({ length: count }, () => {
    const mix = TENANT_MIX[Math.min(TENANT_MIX.length - 1, Math.floor(random() * TENANT_MIX.length))]!;
    return { tenantId: mix.tenantId, class: random() < mix.interactiveShare ? 'interactive' : 'batch' };
  });
}

export interface RateFigures {
  /** 429s as a share of the calls the provider received (0..1; NaN without calls). */
  rateLimitedShare: number;
  /** Successful calls per second within the window, as a fraction of the provider's request limit. */
  achievedOfLimit: number;
}

/**
 * The two headline figures of a mode: how many of its calls the provider refused, and how much of
 * the provider's request allowance it turned into answers over `windowMs`.
 */
export function rateFigures(opts: { calls: number; rateLimited: number; successesAt: readonly number[]; windowStart: number; windowMs: number; requestsPerMinute: number }): RateFigures {
  const windowEnd = opts.windowStart + opts.windowMs;
  const inWindow = opts.successesAt.filter((t) => t >= opts.windowStart && t < windowEnd).length;
  const allowed = (opts.requestsPerMinute * opts.windowMs) / 60_000;
  return { rateLimitedShare: opts.calls === 0 ? NaN : opts.rateLimited / opts.calls, achievedOfLimit: inWindow / allowed };
}
