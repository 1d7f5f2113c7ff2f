import type { PrepaidTurns, RunRequested } from '../events/schemas.js';


/**
 * The request turns admission reserved for runs' first attempts, as this processor spends them:
 * each call to a dependency takes one while any are left, and what the attempt did not use is
 * handed back once it ends. An attempt that ends is remembered until its run's deadline, so an
 * attempt repeated here after an infrastructure failure books its turns again instead of
 * spending reserved turns twice.
 */
export class PrepaidTurnLedger {
  private readonly open = new Map<string, Map<string, PrepaidTurns>>();
  private readonly settled = new Map<string, number>();

  /** Takes one of the run's reserved turns on the dependency: resolves to when it may go, or undefined when none is left. */
  take(run: RunRequested, dependency: string): number | undefined {
    const turns = this.ledgerOf(run)?.get(dependency);
    if (!turns || turns.calls <= 0) return undefined;
    turns.calls--;
    return turns.notBefore;
  }

  /** Puts back a turn taken for a call that was not made after all. */
  putBack(run: RunRequested, dependency: string): void {
    const turns = this.ledgerOf(run)?.get(dependency);
    if (turns) turns.calls++;
  }

  /** Ends the run's attempt here: the turns it did not use, per dependency, to be given back. */
  settle(run: RunRequested, now: number): PrepaidTurns[] {
    const ledger = this.ledgerOf(run);
    this.open.delete(run.runId);
    if (run.prepaidTurns) this.settled.set(run.runId, run.deadline);
    // Oldest first; stopping at the first still remembered keeps this constant per call.
    for (const [runId, deadline] of this.settled) {
      if (deadline >= now) break;
      this.settled.delete(runId);
    }
    return [...(ledger?.values() ?? [])].filter((t) => t.calls > 0);
  }

  private ledgerOf(run: RunRequested): Map<string, PrepaidTurns> | undefined {
    if (!run.prepaidTurns || run.attempt !== 1 || this.settled.has(run.runId)) return undefined;
    let ledger = this.open.get(run.runId);
    if (!ledger) {
      ledger = new Map(run.prepaidTurns.map((t) => [t.dependency, { ...t }]));
      this.open.set(run.runId, ledger);
    }
    return ledger;
  }
}

/** When a first attempt's reserved turns are due: the earliest of their not-before times (undefined: it reserved none). */
export function reservedTurnsDueAt(run: Pick<RunRequested, 'attempt' | 'prepaidTurns'>): number | undefined {
  if (run.attempt !== 1 || !run.prepaidTurns || run.prepaidTurns.length === 0) return undefined;
  return Math.min(...run.prepaidTurns.map((t) => t.notBefore));
}
