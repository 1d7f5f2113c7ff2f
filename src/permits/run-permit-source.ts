import type { RunRequested } from '../events/schemas.js';

/** A granted set of run permits (global, class share, tenant, workflow), released exactly once. */
export interface HeldPermits {
  /** Stops renewing and gives the permits back, waking waiting processors everywhere. */
  release(): Promise<void>;
}

export type RunPermitAnswer = { granted: true; permits: HeldPermits } | { granted: false; blockedBy: 'global' | 'class' | 'tenant' | 'workflow' };

/** Where a run's permits come from: Redis in production, anything honest in tests. */
export interface RunPermitSource {
  tryAcquire(run: RunRequested): Promise<RunPermitAnswer>;
  /** Calls back when permits may have been released anywhere; returns an unsubscribe function. */
  onWake(listener: () => void): () => void;
}
