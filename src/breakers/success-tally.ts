/**
 * Prompt successes of calls a closed breaker let through, counted in this instance and added to
 * the shared window in bulk (breaker-tally.lua) instead of one script call each: at a high call
 * rate they are most of a breaker's Redis traffic and none of its news. They wait at most
 * `maxDelayMs` while calls go on, and go before any other outcome this instance records, so that
 * outcome is judged with them. Successes older than the window would not count there: they are dropped.
 */
export class SuccessTally {
  private readonly pending = new Map<string, { calls: number; since: number }>();

  /** Counts one success at `now`; answers the calls to add to the window now (0: keep counting). */
  add(dependency: string, now: number, windows: TallyWindows): number {
    const kept = this.live(dependency, now, windows.windowMs);
    const entry = kept ?? { calls: 0, since: now };
    entry.calls++;
    this.pending.set(dependency, entry);
    return now - entry.since >= windows.maxDelayMs ? this.take(dependency, now, windows.windowMs) : 0;
  }

  /** The dependency's pending successes still inside the window, taken to be sent now. */
  take(dependency: string, now: number, windowMs: number): number {
    const calls = this.live(dependency, now, windowMs)?.calls ?? 0;
    this.pending.delete(dependency);
    return calls;
  }

  private live(dependency: string, now: number, windowMs: number): { calls: number; since: number } | undefined {
    const entry = this.pending.get(dependency);
    return entry && now - entry.since < windowMs ? entry : undefined;
  }
}

export interface TallyWindows {
  windowMs: number;
  maxDelayMs: number;
}

/** A tally lands at most this late: well within one bucket of the window (a tenth of it), and a second at most. */
export function tallyWindows(windowMs: number): TallyWindows {
  return { windowMs, maxDelayMs: Math.min(1_000, windowMs / 20) };
}
