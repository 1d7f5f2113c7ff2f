import type { ReplayOutcome, ReplaySkip } from './dead-letter-store.js';
import { ReplayRefusedError, type ReplayPlan } from './replay-plan.js';

/** What happened to one row: the store's outcome, with a refusal told apart from a failure. */
export type ReplayResult = ReplayOutcome<ReplayPlan> | { id: string; result: 'refused'; error: ReplayRefusedError };

/** The store reports a refusal thrown while planning as a failed produce; it is a decision about the row. */
export function replayResult(o: ReplayOutcome<ReplayPlan>): ReplayResult {
  return o.result === 'failed' && o.error instanceof ReplayRefusedError ? { id: o.id, result: 'refused', error: o.error } : o;
}

export interface ReplayTally {
  replayed: number;
  refused: number;
  failed: number;
  skipped: Record<ReplaySkip, number>;
}

export function emptyTally(): ReplayTally {
  return { replayed: 0, refused: 0, failed: 0, skipped: { not_found: 0, replayed: 0, discarded: 0, locked: 0 } };
}

export function tallyOutcome(tally: ReplayTally, o: ReplayResult): void {
  if (o.result === 'skipped') tally.skipped[o.why]++;
  else tally[o.result]++;
}
