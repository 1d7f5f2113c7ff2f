/** A run or a call waiting for permits: the scopes it waits on, and since when (ms). */
export interface PermitWaiter {
  readonly scopes: readonly string[];
  readonly since: number;
}

/** Per scope, when its longest waiter began to wait: the earliest `since` of the waiters on it. */
export function oldestPerScope(waiters: Iterable<PermitWaiter>): Map<string, number> {
  const oldest = new Map<string, number>();
  for (const w of waiters) {
    for (const scope of w.scopes) {
      const earliest = oldest.get(scope);
      if (earliest === undefined || w.since < earliest) oldest.set(scope, w.since);
    }
  }
  return oldest;
}

/**
 * Waiters that come and go in any order (calls waiting for a dependency's permit, each leaving
 * when it gets one or gives up): `enter` answers the waiter's own `leave`, which may be called
 * more than once. As many entries as calls wait at once, which `processor.maxInFlight` bounds.
 */
export class WaiterBook {
  private readonly waiting = new Set<PermitWaiter>();

  get size(): number {
    return this.waiting.size;
  }

  enter(scopes: readonly string[], since: number): () => void {
    const waiter: PermitWaiter = { scopes: [...scopes], since };
    this.waiting.add(waiter);
    return () => void this.waiting.delete(waiter);
  }

  waiters(): Iterable<PermitWaiter> {
    return this.waiting.values();
  }
}
